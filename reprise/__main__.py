"""`python -m reprise` is the `reprise` command."""

from reprise.cli import app

app()
