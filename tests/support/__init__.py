"""Test doubles and helpers shared by the test packages."""
