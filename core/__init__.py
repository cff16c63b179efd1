"""The bottom floor: settings, the domain vocabulary, generation parameters, the one error hierarchy.

Imports nothing of the project; every other floor may import it.
"""
