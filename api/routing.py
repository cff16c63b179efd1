"""The route class of every router: a sync route's database connection goes back to the pool when its
body returns, before FastAPI serialises the response.

A sync route takes three trips through the thread pool: its dependencies, its body, and the response's
serialisation. A session that kept its connection until the request's teardown held it across the
last two; under a burst every thread could then wait for a connection that only a request waiting for
a thread could give back, until the pool's 30 s timeout answered 500. Committing at the end of the
body (routes commit what they change anyway; expire_on_commit is off, so the loaded rows stay usable)
ends the transaction in the trip that began it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from fastapi.routing import APIRoute
from sqlalchemy.orm import Session


def releasing(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """`endpoint`, ending the transaction of every session it was given once it returns."""

    @functools.wraps(endpoint)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = endpoint(*args, **kwargs)
        for value in kwargs.values():
            if isinstance(value, Session) and value.in_transaction():
                value.commit()
        return result

    return wrapper


class ReleasingRoute(APIRoute):
    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        if not inspect.iscoroutinefunction(endpoint):
            endpoint = releasing(endpoint)
        super().__init__(path, endpoint, **kwargs)
