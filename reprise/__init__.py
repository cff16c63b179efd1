"""Reprise: cross-cutting pieces (settings, CLI, embedded services)."""
