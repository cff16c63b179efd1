"""Calls started at once from threads of their own, as a worker's task threads hand their jobs in."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


def together(calls: list[Callable[[], T]]) -> list[T | BaseException]:
    """Run the calls in threads released by one barrier; each one's result, or the error it raised."""
    start = threading.Barrier(len(calls))

    def run(call: Callable[[], T]) -> T | BaseException:
        start.wait()
        try:
            return call()
        except Exception as error:
            return error

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(run, calls))
