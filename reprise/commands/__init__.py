"""Typer sub-apps of the `reprise` CLI, one module per command group."""
