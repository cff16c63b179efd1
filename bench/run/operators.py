"""Where a batched denoising step's time goes, by operator class (`reprise bench runtime --batch`).

One batched generation of each size runs once more, untimed, under torch.profiler; each operator's own
time (children excluded, so that the classes add up to the step) is summed into its class and divided
by the steps run:
    convolution  the UNet's and its resnets' convolutions
    linear       matrix products of the linear layers (projections, feed-forward, time embedding)
    attention    the attention kernels (scaled dot product, or bmm and softmax where a processor
                 computes it by hand)
    other        the rest: norms, activations, additions, copies, the scheduler's arithmetic
On CPU the times are the CPU's; on CUDA the device's (a CPU time there is the launch, not the work).
Why a batch of n costs what it costs follows from them: a class whose time grows n-fold with n does
not batch on this device, one whose time barely grows is the per-call overhead a batch shares.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final, Protocol

import torch
from torch.profiler import ProfilerActivity, profile

CLASSES: Final = ("convolution", "linear", "attention", "other")
_LINEAR: Final = frozenset({"aten::addmm", "aten::mm", "aten::linear", "aten::matmul", "aten::mkldnn_linear"})
_ATTENTION: Final = frozenset({"aten::bmm", "aten::baddbmm", "aten::_softmax", "aten::softmax"})


class _Event(Protocol):
    """One operator's averages (torch.profiler's FunctionEventAvg), as read here."""

    @property
    def key(self) -> str: ...
    @property
    def self_cpu_time_total(self) -> float: ...
    @property
    def self_device_time_total(self) -> float: ...


def operator_class(name: str) -> str:
    """The class of an operator by its profiler name (aten::...)."""
    if "conv" in name:
        return "convolution"
    if "scaled_dot_product" in name or "attention" in name or name in _ATTENTION:
        return "attention"
    if name in _LINEAR:
        return "linear"
    return "other"


def grouped_ms(events: Iterable[_Event], *, device: bool, steps: int) -> dict[str, float]:
    """Milliseconds a step per class from profiler averages (microseconds of own time each)."""
    totals = dict.fromkeys(CLASSES, 0.0)
    for event in events:
        own_us = event.self_device_time_total if device else event.self_cpu_time_total
        totals[operator_class(event.key)] += own_us
    return {name: round(total / 1000.0 / max(1, steps), 3) for name, total in totals.items()}


def operator_ms(run: Callable[[], int], device: torch.device) -> dict[str, float]:
    """Own time per operator class, per step, of `run()`, which returns the steps it ran."""
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    with profile(activities=activities) as profiled:
        steps = run()
        if cuda:
            torch.cuda.synchronize(device)
    return grouped_ms(profiled.key_averages(), device=cuda, steps=steps)
