"""The actuator: the pool monitor's and the operator's hand on the workers, over Celery's remote control
(the broker's pidbox). It sends; the worker side that answers is workers.role_switch.

Two commands, served by every worker's main process (workers.role_switch registers them):

    reprise_role          inspect: {"role": ..., "queues": [...]}: what the worker hosts and consumes
    reprise_switch_role   control: move a large or small worker to the other pool; answers at once,
                          the worker changes its queues on its next event-loop turn and its pool
                          child the model before its next task (workers.role_switch)

The main process answers while its pool child is busy, so neither command waits on a generation.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery

from core.vocabulary import Role

log = logging.getLogger(__name__)

ROLE_COMMAND = "reprise_role"
SWITCH_COMMAND = "reprise_switch_role"
DISCOVERY_TIMEOUT_S = 2.0
"""How long to collect answers from every worker: a broadcast cannot know how many will answer."""
SWITCH_TIMEOUT_S = 5.0


class PoolActuator:
    """The monitor's and the CLI's handle on the workers (one Celery app: its broker): who is alive and
    what each hosts (`roles`), and moving one to the other pool (`switch`)."""

    def __init__(self, app: Celery, *, discovery_timeout_s: float = DISCOVERY_TIMEOUT_S) -> None:
        self.app = app
        self.discovery_timeout_s = discovery_timeout_s

    def roles(self) -> dict[str, Role]:
        """Every worker that answered, with the role it hosts now."""
        replies: list[dict[str, Any]] = (
            self.app.control.broadcast(ROLE_COMMAND, reply=True, timeout=self.discovery_timeout_s) or []
        )
        found: dict[str, Role] = {}
        for reply in replies:
            for worker, answer in reply.items():
                try:
                    found[worker] = Role(answer["role"])
                except (KeyError, TypeError, ValueError):
                    log.warning("worker %s answered %s with no known role: %r", worker, ROLE_COMMAND, answer)
        return found

    def switch(self, worker: str, role: Role) -> bool:
        """Ask `worker` to host `role`; True when it accepted (it then consumes the role's queues)."""
        replies: list[dict[str, Any]] = (
            self.app.control.broadcast(
                SWITCH_COMMAND,
                arguments={"role": role.value},
                destination=[worker],
                reply=True,
                timeout=SWITCH_TIMEOUT_S,
                limit=1,
            )
            or []
        )
        answer = next((reply[worker] for reply in replies if worker in reply), None)
        if not isinstance(answer, dict) or "ok" not in answer:
            log.warning("worker %s did not accept the move to %s: %r", worker, role.value, answer)
            return False
        return True
