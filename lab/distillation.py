"""Knowledge distillation of a small UNet from a large one: BK-SDM's objective.

BK-SDM (Kim et al., "BK-SDM: A Lightweight, Fast, and Cheap Version of Stable Diffusion", ECCV 2024,
section 3.2, eq. 1-3) trains a compressed UNet with three terms:

    L = L_task + lambda_out * L_outKD + lambda_feat * L_featKD

- L_task: the usual denoising loss, || eps - eps_S(z_t, y, t) ||^2;
- L_outKD: the output-level loss, || eps_T(z_t, y, t) - eps_S(z_t, y, t) ||^2, the teacher's noise
  prediction on the same noisy latent, caption and timestep as the target;
- L_featKD: the feature-level loss, sum over the stages l of || f_T^l - f_S^l ||^2, on the output of
  every stage of the UNet: each down block, the mid block and each up block (BK-SDM takes "the
  outputs of each stage", the blocks' last layers).

lambda_out = lambda_feat = 1, as BK-SDM (section 4, "we set lambda_out and lambda_feat to 1").

BK-SDM's student keeps the teacher's widths (it removes blocks), so its features compare as they
are. The lab's student is also narrower than its teacher, so each student feature goes through a
1x1 convolution to the teacher's width first (FitNets' regressor, Romero et al. 2015, section 2.2),
trained with the student and discarded after: the saved student is a plain UNet2DConditionModel of
the family, served like any other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import torch

LAMBDA_OUT: Final = 1.0  # BK-SDM section 4
LAMBDA_FEAT: Final = 1.0  # BK-SDM section 4


@dataclass(frozen=True, slots=True)
class Losses:
    task: torch.Tensor
    output: torch.Tensor
    features: torch.Tensor

    @property
    def total(self) -> torch.Tensor:
        return self.task + LAMBDA_OUT * self.output + LAMBDA_FEAT * self.features

    def line(self) -> str:
        return (
            f"loss {self.total.item():.4f} (task {self.task.item():.4f}, output {self.output.item():.4f},"
            f" features {self.features.item():.4f})"
        )


def stages(unet: Any) -> list[torch.nn.Module]:
    """The UNet's stages whose outputs the feature loss compares: down blocks, mid block, up blocks."""
    return [*unet.down_blocks, unet.mid_block, *unet.up_blocks]


class _Recorder:
    """Keeps the latest output of each hooked stage (a down block's output is (states, skips))."""

    def __init__(self, modules: list[torch.nn.Module]) -> None:
        self.outputs: list[torch.Tensor] = [torch.empty(0)] * len(modules)
        for index, module in enumerate(modules):
            module.register_forward_hook(self._hook(index))

    def _hook(self, index: int) -> Any:
        def keep(_module: torch.nn.Module, _inputs: Any, output: Any) -> None:
            self.outputs[index] = output[0] if isinstance(output, tuple) else output

        return keep


class Distillation:
    """BK-SDM's objective for `student` taught by the frozen `teacher` (same stages, maybe narrower)."""

    def __init__(self, student: Any, teacher: Any) -> None:
        self.student, self.teacher = student, teacher.eval().requires_grad_(False)
        self._student = _Recorder(stages(student))
        self._teacher = _Recorder(stages(teacher))
        widths = [(_width(s), _width(t)) for s, t in zip(stages(student), stages(teacher), strict=True)]
        self.projections = torch.nn.ModuleList(
            torch.nn.Identity() if mine == theirs else torch.nn.Conv2d(mine, theirs, 1)
            for mine, theirs in widths
        )

    def parameters(self) -> list[torch.nn.Parameter]:
        """What the optimizer trains besides the student: the feature projections."""
        return list(self.projections.parameters())

    def __call__(
        self, noisy: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor, noise: torch.Tensor
    ) -> Losses:
        with torch.no_grad():
            taught = self.teacher(noisy, timesteps, encoder_hidden_states=context).sample
        predicted = self.student(noisy, timesteps, encoder_hidden_states=context).sample
        mse = torch.nn.functional.mse_loss
        features = sum(
            (
                mse(projection(mine), theirs)
                for projection, mine, theirs in zip(
                    self.projections, self._student.outputs, self._teacher.outputs, strict=True
                )
            ),
            start=torch.zeros(()),
        )
        return Losses(task=mse(predicted, noise), output=mse(predicted, taught), features=features)


def _width(stage: torch.nn.Module) -> int:
    """Channels of a stage's output: its last resnet's."""
    resnets: Any = stage.resnets
    return int(resnets[-1].out_channels)
