"""BatchingEmbedder: callers that arrive together share one inner call, each gets its own rows, a lone caller
is served after at most max_wait_ms, an inner error reaches every caller of its batch, and nobody hangs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from core.embedders import Embeddings, TextEmbedder
from workers.runtime.embedders.batching import BatchingEmbedder

JOIN_S = 10.0  # a thread still alive after this has hung


class Recording(TextEmbedder):
    """Row i of a call is (number of the text, its length, 1): each caller can check its row is its own.
    Records every call's texts; `gate`, when set, holds every call until it opens."""

    name = "recording"

    def __init__(self, *, error: BaseException | None = None, gate: threading.Event | None = None) -> None:
        self.calls: list[list[str]] = []
        self.error = error
        self.gate = gate
        self.entered = threading.Semaphore(0)

    @property
    def dim(self) -> int:
        return 3

    def embed_text(self, texts: Sequence[str]) -> Embeddings:
        self.calls.append(list(texts))
        self.entered.release()
        if self.gate is not None:
            assert self.gate.wait(JOIN_S)
        if self.error is not None:
            raise self.error
        return np.array([[float(text), len(text), 1.0] for text in texts], dtype=np.float32)


def expected(text: str) -> list[float]:
    return [float(text), float(len(text)), 1.0]


def run_threads(count: int, body: Callable[[int], object]) -> list[object]:
    """Run body(i) on `count` threads released together; their results (or exceptions), in order."""
    results: list[object] = [None] * count
    start = threading.Barrier(count)

    def call(index: int) -> None:
        start.wait()
        try:
            results[index] = body(index)
        except BaseException as error:  # the test inspects it
            results[index] = error

    threads = [threading.Thread(target=call, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_S)
    assert not any(thread.is_alive() for thread in threads), "a caller hung"
    return results


def test_callers_arriving_together_share_one_inner_call_and_each_gets_its_own_row() -> None:
    inner = Recording()
    batcher = BatchingEmbedder(inner, max_batch=6, max_wait_ms=5000)  # closes when the sixth is in
    started = time.monotonic()
    results = run_threads(6, lambda index: batcher.embed_text([str(10 + index)]))
    assert time.monotonic() - started < 4.0, "a full batch must not wait for max_wait_ms"
    assert len(inner.calls) == 1
    assert sorted(inner.calls[0]) == [str(10 + index) for index in range(6)]
    for index, rows in enumerate(results):
        assert isinstance(rows, np.ndarray), rows
        assert rows.shape == (1, 3)
        assert rows[0].tolist() == expected(str(10 + index))
    assert batcher.stats().batches == 1
    assert batcher.stats().mean_size == 6.0


def test_a_caller_with_several_texts_gets_its_rows_in_order() -> None:
    inner = Recording()
    batcher = BatchingEmbedder(inner, max_batch=5, max_wait_ms=5000)
    texts = {0: ["1", "22", "333"], 1: ["4", "55"]}
    results = run_threads(2, lambda index: batcher.embed_text(texts[index]))
    assert len(inner.calls) == 1
    for index, rows in enumerate(results):
        assert isinstance(rows, np.ndarray), rows
        assert rows.tolist() == [expected(text) for text in texts[index]]


def test_a_lone_caller_is_served_after_at_most_max_wait() -> None:
    inner = Recording()
    batcher = BatchingEmbedder(inner, max_batch=8, max_wait_ms=50)
    started = time.monotonic()
    rows = batcher.embed_text(["7"])
    elapsed = time.monotonic() - started
    assert rows.tolist() == [expected("7")]
    assert inner.calls == [["7"]]
    assert 0.04 <= elapsed < 1.0  # it waited for company, then ran alone


def test_an_inner_error_reaches_every_caller_of_the_batch() -> None:
    inner = Recording(error=RuntimeError("the model fell over"))
    batcher = BatchingEmbedder(inner, max_batch=4, max_wait_ms=5000)
    results = run_threads(4, lambda index: batcher.embed_text([str(index)]))
    assert len(inner.calls) == 1
    assert all(isinstance(result, RuntimeError) and "fell over" in str(result) for result in results), results
    inner.error = None
    assert batcher.embed_text(["5"]).tolist() == [expected("5")]  # the next batch is served


def test_rows_of_the_wrong_count_fail_every_caller() -> None:
    class Short(Recording):
        def embed_text(self, texts: Sequence[str]) -> Embeddings:
            return super().embed_text(texts)[:-1]

    batcher = BatchingEmbedder(Short(), max_batch=2, max_wait_ms=5000)
    results = run_threads(2, lambda index: batcher.embed_text([str(index)]))
    assert all(isinstance(result, ValueError) for result in results), results


def test_a_caller_arriving_while_a_batch_runs_opens_the_next_one_without_waiting_for_it() -> None:
    gate = threading.Event()
    inner = Recording(gate=gate)
    batcher = BatchingEmbedder(inner, max_batch=1, max_wait_ms=0)
    first: list[Embeddings] = []
    running = threading.Thread(target=lambda: first.append(batcher.embed_text(["1"])))
    running.start()
    assert inner.entered.acquire(timeout=JOIN_S)  # the first batch is inside the inner call, held
    second: list[Embeddings] = []
    other = threading.Thread(target=lambda: second.append(batcher.embed_text(["2"])))
    other.start()
    assert inner.entered.acquire(timeout=JOIN_S), "the second batch waited for the first"
    gate.set()
    running.join(JOIN_S)
    other.join(JOIN_S)
    assert inner.calls == [["1"], ["2"]]
    assert first[0].tolist() == [expected("1")] and second[0].tolist() == [expected("2")]


def test_callers_beyond_max_batch_go_to_further_batches() -> None:
    inner = Recording()
    batcher = BatchingEmbedder(inner, max_batch=3, max_wait_ms=300)
    results = run_threads(7, lambda index: batcher.embed_text([str(index)]))
    assert all(len(call) <= 3 for call in inner.calls), inner.calls
    assert sorted(text for call in inner.calls for text in call) == [str(index) for index in range(7)]
    for index, rows in enumerate(results):
        assert isinstance(rows, np.ndarray) and rows.tolist() == [expected(str(index))]
    assert batcher.stats().texts == 7 and batcher.stats().batches == len(inner.calls) >= 3


def test_empty_input_and_bad_limits() -> None:
    batcher = BatchingEmbedder(Recording(), max_batch=2, max_wait_ms=10)
    assert batcher.embed_text([]).shape == (0, 3)
    assert batcher.dim == 3 and batcher.name == "recording"
    with pytest.raises(ValueError):
        BatchingEmbedder(Recording(), max_batch=0, max_wait_ms=10)
    with pytest.raises(ValueError):
        BatchingEmbedder(Recording(), max_batch=2, max_wait_ms=-1)
