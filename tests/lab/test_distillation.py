"""The small UNet's distillation from the large one (BK-SDM's objective, lab.distillation)."""

from __future__ import annotations

import torch

from lab.distillation import Distillation, stages
from lab.training import SMOKE, new_unet, train_unet

torch.set_num_threads(1)

STUDENT = next(unet for unet in SMOKE.unets if unet.teacher is not None)


def _teacher() -> torch.nn.Module:
    """A wider teacher than the student (as the committed pair): its features need the projections."""
    torch.manual_seed(3)
    teacher: torch.nn.Module = new_unet((64, 64), cross_attention_levels=2)
    return teacher


def _batch() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(4)
    noisy = torch.randn((8, 8, 8, 8), generator=generator)
    timesteps = torch.randint(0, 1000, (8,), generator=generator)
    context = torch.randn((8, 32, 384), generator=generator)
    return noisy, timesteps, context, torch.randn((8, 8, 8, 8), generator=generator)


def test_the_smoke_recipe_distils_its_small_unet_from_the_large_one() -> None:
    assert STUDENT.name == "unet-small" and STUDENT.teacher == "unet-large"


def test_every_stage_is_compared_and_the_three_losses_fall_while_the_student_learns() -> None:
    torch.manual_seed(5)
    student = new_unet(STUDENT.channels, STUDENT.cross_attention_levels).train()
    objective = Distillation(student, _teacher())
    assert len(objective.projections) == len(stages(student)) == 5  # 2 down, mid, 2 up
    assert all(isinstance(projection, torch.nn.Conv2d) for projection in objective.projections)
    optimizer = torch.optim.AdamW(list(student.parameters()) + objective.parameters(), lr=1e-3)
    batch = _batch()
    history = []
    for _ in range(25):
        losses = objective(*batch)
        history.append(losses)
        optimizer.zero_grad()
        losses.total.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
    first, last = history[0], history[-1]
    assert all(p.grad is None for p in objective.teacher.parameters())  # the teacher stays frozen
    assert last.output < first.output and last.features < first.features and last.task < first.task
    assert last.total < 0.8 * first.total


def test_distillation_is_deterministic() -> None:
    torch.use_deterministic_algorithms(True)
    try:
        generator = torch.Generator().manual_seed(6)
        pool = (torch.randn((32, 8, 8, 8), generator=generator), torch.randn((32, 32, 384)).half())
        runs = [
            train_unet(
                STUDENT, pool, torch.zeros(32, 384), batch=4, seed=7, log=lambda _: None, teacher=_teacher()
            )
            for _ in range(2)
        ]
    finally:
        torch.use_deterministic_algorithms(False)
    first, second = (run.state_dict() for run in runs)
    assert first.keys() == second.keys() and all(torch.equal(first[key], second[key]) for key in first)
