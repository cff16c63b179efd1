"""Where a batched step's time goes: operators by class, their own times summed per step, on CPU from
the CPU's clock and on CUDA from the device's."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.run.operators import CLASSES, grouped_ms, operator_class, operator_ms


@dataclass(frozen=True)
class _Event:
    key: str
    self_cpu_time_total: float
    self_device_time_total: float = 0.0


def test_operators_fall_in_their_class() -> None:
    assert operator_class("aten::mkldnn_convolution") == "convolution"
    assert operator_class("aten::_slow_conv2d_forward") == "convolution"
    assert operator_class("aten::addmm") == operator_class("aten::mm") == "linear"
    assert operator_class("aten::_scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert operator_class("aten::bmm") == operator_class("aten::_softmax") == "attention"
    assert operator_class("aten::native_group_norm") == operator_class("aten::copy_") == "other"


def test_own_times_add_up_per_class_and_step_on_the_clock_of_the_device() -> None:
    events = [
        _Event("aten::mkldnn_convolution", 3000.0, 10.0),
        _Event("aten::addmm", 1000.0, 20.0),
        _Event("aten::mm", 1000.0, 0.0),
        _Event("aten::silu", 500.0, 30.0),
    ]
    assert grouped_ms(events, device=False, steps=2) == {
        "convolution": 1.5,
        "linear": 1.0,
        "attention": 0.0,
        "other": 0.25,
    }
    assert grouped_ms(events, device=True, steps=1) == {
        "convolution": 0.01,
        "linear": 0.02,
        "attention": 0.0,
        "other": 0.03,
    }


def test_a_profiled_run_of_a_small_network_finds_its_convolution_linear_and_attention() -> None:
    convolution = torch.nn.Conv2d(4, 8, 3, padding=1)
    linear = torch.nn.Linear(8, 8)

    def run() -> int:
        with torch.inference_mode():
            for _ in range(3):
                x = convolution(torch.randn(2, 4, 8, 8)).flatten(2).transpose(1, 2)
                q = linear(x)
                torch.nn.functional.scaled_dot_product_attention(q, q, q)
        return 3

    measured = operator_ms(run, torch.device("cpu"))
    assert list(measured) == list(CLASSES)
    assert all(measured[name] > 0 for name in ("convolution", "linear", "attention"))
