"""`python -m reprise` is the `reprise` command; a child of `reprise run` first ties its life to the
supervisor's (reprise.supervision.follow_supervisor)."""

from reprise.cli import app
from reprise.supervision import follow_supervisor

follow_supervisor()
app()
