"""The video judge: the image judge read on every frame, and a motion head read on the frames together.

The quality of a video for a prompt (lab.motion_captions.parse) is the share of the caption's
attributes the judge reads, averaged over frames: on each frame, the frame's attributes
(MovingScene.frame_attributes: background colour and texture, shape, colour, size, place) as the
frame reader reads that frame, and the motion attributes (motion, background motion) as the motion
head reads the whole video, each attribute counted once. 1.0: every frame shows everything asked.

- The frame reader is the image judge's network (lab.judge.JudgeNet) fine-tuned from the trained
  image judge (lab/weights/judge) on frames of moving scenes, half of each batch the image world's
  stills: the image judge as trained reads frames of the moving world worse (objects between and
  beyond its three places, shifted textures; `reprise lab judge --video` prints both).
- The motion head (MotionNet) is a small CNN over the frames stacked as channels: stride-2
  convolutions see every frame at once, so a filter can follow an edge from frame to frame. Two
  heads: the object's motion (6 values) and the background's (still or pans).
Both are trained on jittered moving renders with the image judge's blur and noise (applied alike to
every frame of a video), and validated before they judge: per-frame and motion accuracy on held-out
renders (seed HELDOUT_SEED) against chance, recorded in video_judge.json. VideoJudge.load refuses a
judge without that validation or below FLOORS.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from lab.judge import JudgeNet, JudgeRefused, _augment, _targets, to_tensor
from lab.motion import FRAMES, MOTION_ATTRIBUTES, MovingScene, render_video, sample_moving_scene
from lab.motion_captions import parse
from lab.world import ATTRIBUTES, render, sample_scene

HELDOUT_SEED: Final = 778_000  # held-out moving renders: a seed no training run uses
SEED_OFFSET: Final = 40
FLOORS: Final = {"frame_accuracy": 0.95, "motion_accuracy": 0.9, "background_motion_accuracy": 0.9}
"""Validation floors (ours): the image judge's 0.95 held out for the frames, 0.9 for the motion heads."""
_LR: Final = 1e-3


class MotionNet(nn.Module):
    """FRAMES frames stacked as 3*FRAMES channels -> four stride-2 convolutions -> two heads."""

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for inputs, outputs in ((3 * FRAMES, 32), (32, 48), (48, 64), (64, 64)):
            layers += [nn.Conv2d(inputs, outputs, 3, stride=2, padding=1), nn.BatchNorm2d(outputs), nn.ReLU()]
        self.body = nn.Sequential(*layers, nn.Flatten(), nn.Linear(64 * 4 * 4, 64), nn.ReLU())
        self.heads = nn.ModuleDict(
            {name: nn.Linear(64, len(values)) for name, values in MOTION_ATTRIBUTES.items()}
        )

    def forward(self, videos: torch.Tensor) -> dict[str, torch.Tensor]:
        features: torch.Tensor = self.body(videos.flatten(1, 2))
        return {name: head(features) for name, head in self.heads.items()}


Video = npt.NDArray[np.uint8]


def video_tensor(videos: Sequence[Video]) -> torch.Tensor:
    """(F, H, W, 3) uint8 videos -> (n, F, 3, 64, 64) floats in [-1, 1]."""
    frames = to_tensor([frame for video in videos for frame in video])
    return frames.reshape(len(videos), -1, *frames.shape[1:])


def _augment_videos(videos: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """lab.judge's blur/noise, one choice per video for all its frames (a model's softness is the
    same across a clip)."""
    n, frames = videos.shape[:2]
    flat = videos.flatten(0, 1)
    variants = [
        flat,
        nn.functional.avg_pool2d(flat, 3, stride=1, padding=1, count_include_pad=False),
        nn.functional.avg_pool2d(flat, 5, stride=1, padding=2, count_include_pad=False),
        nn.functional.interpolate(nn.functional.avg_pool2d(flat, 2), scale_factor=2, mode="bilinear"),
        nn.functional.interpolate(nn.functional.avg_pool2d(flat, 4), scale_factor=4, mode="bilinear"),
    ]
    choice = torch.randint(0, len(variants), (n,), generator=generator).repeat_interleave(frames)
    mixed = torch.stack([variants[int(c)][row] for row, c in enumerate(choice)]).reshape(videos.shape)
    sigma = torch.rand(n, 1, 1, 1, 1, generator=generator) * 0.15
    return mixed + sigma * torch.randn(videos.shape, generator=generator)


def _frame_targets(scenes: Sequence[MovingScene]) -> dict[str, torch.Tensor]:
    """Every frame's targets in the image judge's heads (-100 where a frame does not show one)."""
    targets = {name: torch.full((len(scenes) * FRAMES,), -100, dtype=torch.long) for name in ATTRIBUTES}
    for row, scene in enumerate(scenes):
        for name, value in scene.frame_attributes().items():
            targets[name][row * FRAMES : (row + 1) * FRAMES] = ATTRIBUTES[name].index(value)
    return targets


def train_frame_reader(
    image_judge: nn.Module, steps: int, *, seed: int, batch: int = 8, log: Any = print
) -> nn.Module:
    """The image judge's network fine-tuned on `batch` moving videos' frames and as many stills a step."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    net = JudgeNet()
    net.load_state_dict(image_judge.state_dict())
    net.train()
    optimizer = torch.optim.AdamW(net.parameters(), lr=_LR)
    loss_fn = nn.CrossEntropyLoss(ignore_index=-100)
    for step in range(steps):
        scenes = [sample_moving_scene(rng) for _ in range(batch)]
        frames = video_tensor([render_video(scene, rng) for scene in scenes]).flatten(0, 1)
        stills = [sample_scene(rng) for _ in range(batch * FRAMES)]
        images = torch.cat([frames, to_tensor([render(scene, rng) for scene in stills])])
        moving, still = _frame_targets(scenes), _targets(stills)
        _, logits = net(_augment(images, generator))
        loss = sum(
            (loss_fn(logits[name], torch.cat([moving[name], still[name]])) for name in ATTRIBUTES),
            torch.zeros(()),
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 50 == 0 or step == steps - 1:
            log(f"video frame reader step {step}/{steps} loss {loss.item():.4f}")
    return net.eval()


def train_motion_head(steps: int, *, seed: int, batch: int = 32, log: Any = print) -> nn.Module:
    """MotionNet trained on jittered, blurred and noisy moving renders."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    net = MotionNet().train()
    optimizer = torch.optim.AdamW(net.parameters(), lr=2e-3)
    loss_fn = nn.CrossEntropyLoss(ignore_index=-100)
    for step in range(steps):
        scenes = [sample_moving_scene(rng) for _ in range(batch)]
        videos = _augment_videos(video_tensor([render_video(scene, rng) for scene in scenes]), generator)
        logits = net(videos)
        loss = sum(
            (loss_fn(logits[name], _motion_targets(scenes, name)) for name in MOTION_ATTRIBUTES),
            torch.zeros(()),
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 50 == 0 or step == steps - 1:
            log(f"video motion head step {step}/{steps} loss {loss.item():.4f}")
    return net.eval()


def _motion_targets(scenes: Sequence[MovingScene], name: str) -> torch.Tensor:
    values = MOTION_ATTRIBUTES[name]
    shown = [scene.motion_attributes().get(name) for scene in scenes]
    return torch.tensor([values.index(value) if value is not None else -100 for value in shown])


class VideoJudge:
    """The frame reader and the motion head (module doc): reads videos and scores them against
    prompts of the moving world (thread-unsafe, CPU)."""

    name: Final = "lab-video-judge"

    def __init__(self, frames: nn.Module, motion: nn.Module) -> None:
        self._frames, self._motion = frames.eval(), motion.eval()

    @classmethod
    def load(cls, directory: Path, *, validated: bool = True) -> VideoJudge:
        """The judge saved in `directory`; JudgeRefused when its validation is missing or below FLOORS
        (`validated=False` loads it anyway, for the validation itself)."""
        from safetensors.torch import load_file

        meta = json.loads((directory / "video_judge.json").read_text())
        if validated and (reason := refusal(meta.get("validation"))) is not None:
            raise JudgeRefused(f"the video judge in {directory} is refused: {reason}")
        frames, motion = JudgeNet(), MotionNet()
        frames.load_state_dict(load_file(str(directory / "frames.safetensors")))
        motion.load_state_dict(load_file(str(directory / "motion.safetensors")))
        return cls(frames, motion)

    def save(self, directory: Path, **meta: Any) -> None:
        from safetensors.torch import save_file

        directory.mkdir(parents=True, exist_ok=True)
        for name, net in (("frames", self._frames), ("motion", self._motion)):
            # float16 on disk (read back in float32): the lab's 20 MB weight budget
            state = {
                key: (tensor.half() if tensor.is_floating_point() else tensor).contiguous()
                for key, tensor in net.state_dict().items()
            }
            save_file(state, str(directory / f"{name}.safetensors"))
        body = {"frames": FRAMES, "motion_attributes": {k: list(v) for k, v in MOTION_ATTRIBUTES.items()}}
        (directory / "video_judge.json").write_text(json.dumps(body | meta, indent=2) + "\n")

    def read(self, videos: Sequence[Video]) -> list[tuple[list[dict[str, str]], dict[str, str]]]:
        """Per video: every frame's reading (the image judge's attributes) and the motion reading."""
        if not videos:
            return []
        tensor = video_tensor(videos)
        with torch.inference_mode():
            _, frame_logits = self._frames(tensor.flatten(0, 1))
            motion_logits = self._motion(tensor)
        chosen = {name: logit.argmax(dim=1).tolist() for name, logit in frame_logits.items()}
        moves = {name: logit.argmax(dim=1).tolist() for name, logit in motion_logits.items()}
        readings = []
        for row, video in enumerate(videos):
            frames = [
                {name: ATTRIBUTES[name][chosen[name][row * len(video) + f]] for name in ATTRIBUTES}
                for f in range(len(video))
            ]
            motion = {name: MOTION_ATTRIBUTES[name][moves[name][row]] for name in MOTION_ATTRIBUTES}
            readings.append((frames, motion))
        return readings

    def reads(self, prompt: str) -> bool:
        return parse(prompt) is not None

    def score(self, videos: Sequence[Video], prompts: Sequence[str]) -> list[float | None]:
        """Per pair, the video's quality for the prompt (module doc); None for a prompt that is not a
        moving scene of the lab's world."""
        if len(videos) != len(prompts):
            raise ValueError(f"got {len(videos)} videos and {len(prompts)} prompts; they are scored in pairs")
        scores: list[float | None] = []
        for (frames, motion), prompt in zip(self.read(videos), prompts, strict=True):
            asked = parse(prompt)
            scores.append(None if asked is None else quality(asked, frames, motion))
        return scores


def quality(asked: dict[str, str], frames: Sequence[dict[str, str]], motion: dict[str, str]) -> float:
    """The share of `asked` read, averaged over frames: frame attributes by each frame's reading,
    motion attributes by the motion reading."""
    moving = {name: value for name, value in asked.items() if name in MOTION_ATTRIBUTES}
    still = {name: value for name, value in asked.items() if name not in MOTION_ATTRIBUTES}
    moved = sum(motion[name] == value for name, value in moving.items())
    per_frame = [
        (sum(frame[name] == value for name, value in still.items()) + moved) / len(asked) for frame in frames
    ]
    return float(np.mean(per_frame))


def refusal(validation: dict[str, Any] | None) -> str | None:
    """Why a video judge with this validation must not judge (None: it may)."""
    if not validation:
        return "it has no validation: run `reprise models train --only video-judge`"
    for name, floor in FLOORS.items():
        if validation.get(name, 0.0) < floor:
            return f"{name} {validation.get(name, 0.0):.3f} is below its floor {floor}"
    return None


def validate(judge: VideoJudge, image_judge: Any, count: int, seed: int = HELDOUT_SEED) -> dict[str, Any]:
    """The judge on `count` held-out jittered moving renders, as they are and softened (a 3x3 box blur
    and noise of sigma 12/255, as the image judge's validation): frame and motion accuracy, each with
    chance (uniform over the attribute's values; the most common value's share for the motion heads),
    the image judge's own per-frame accuracy on the same frames, and the quality of true renders for
    their captions and for another scene's caption (the ceiling and chance of `reprise lab quality
    --video`)."""
    rng = np.random.default_rng(seed)
    scenes = [sample_moving_scene(rng) for _ in range(count)]
    videos = [render_video(scene, rng) for scene in scenes]
    soft = [_softened(video, rng) for video in videos]
    readings, soft_readings = judge.read(videos), judge.read(soft)
    image_frames = image_judge.read([frame for video in videos for frame in video])
    shown = [scene.frame_attributes() for scene in scenes]
    figures = {
        "videos": count,
        "frame_accuracy": _frame_accuracy(shown, [frames for frames, _ in readings]),
        "soft_frame_accuracy": _frame_accuracy(shown, [frames for frames, _ in soft_readings]),
        "image_judge_frame_accuracy": _frame_accuracy(
            shown, [image_frames[row * FRAMES : (row + 1) * FRAMES] for row in range(count)]
        ),
        "frame_chance": float(np.mean([1 / len(ATTRIBUTES[name]) for asked in shown for name in asked])),
    }
    for name, values in MOTION_ATTRIBUTES.items():
        truth = [scene.motion_attributes().get(name) for scene in scenes]
        pairs = [(value, motion[name]) for value, (_, motion) in zip(truth, readings, strict=True) if value]
        soft_pairs = [(value, m[name]) for value, (_, m) in zip(truth, soft_readings, strict=True) if value]
        present = [value for value in truth if value]
        figures |= {
            f"{name}_accuracy": float(np.mean([a == b for a, b in pairs])),
            f"soft_{name}_accuracy": float(np.mean([a == b for a, b in soft_pairs])),
            f"{name}_chance_uniform": 1 / len(values),
            f"{name}_chance_majority": max(present.count(value) for value in values) / len(present),
        }
    return figures


def _softened(video: Video, rng: np.random.Generator) -> Video:
    blurred = torch.from_numpy(video.astype(np.float32)).permute(0, 3, 1, 2)
    blurred = nn.functional.avg_pool2d(blurred, 3, stride=1, padding=1, count_include_pad=False)
    noisy = blurred.permute(0, 2, 3, 1).numpy() + rng.normal(0.0, 12.0, video.shape)
    return np.clip(np.round(noisy), 0, 255).astype(np.uint8)


def _frame_accuracy(shown: list[dict[str, str]], readings: list[list[dict[str, str]]]) -> float:
    right = total = 0
    for asked, frames in zip(shown, readings, strict=True):
        for frame in frames:
            right += sum(frame[name] == value for name, value in asked.items())
            total += len(asked)
    return right / total


TRACK_DISTANCE: Final = (
    60.0  # RGB distance within which a pixel is the asked colour (colours are >= 85 apart)
)
TRACK_MIN_PIXELS: Final = 8
TRACK_MOVE: Final = 8.0  # pixels the centre must travel to be a move (a move crosses 36)
TRACK_GROWTH: Final = 1.6  # area ratio of the last frame to the first to be growth (small to large: 2.9)


def tracked_motion(video: Video, color: str) -> str | None:
    """The object's motion read analytically: the pixels within TRACK_DISTANCE of the asked colour
    (lab.world.OBJECT_COLORS) are the object; its centre's path and its area's growth from the first
    frame to the last say which motion it is. None when some frame has no such object. An independent
    reader of generated videos, which carry no label, for the motion head's accuracy on them."""
    from lab.world import OBJECT_COLORS

    target = np.asarray(OBJECT_COLORS[color], dtype=np.float32)
    masks = np.linalg.norm(video.astype(np.float32) - target, axis=-1) < TRACK_DISTANCE
    areas = masks.sum(axis=(1, 2))
    if (areas < TRACK_MIN_PIXELS).any():
        return None
    centres = np.array([np.argwhere(mask).mean(axis=0) for mask in masks])  # (y, x) per frame
    dy, dx = centres[-1] - centres[0]
    if max(abs(dx), abs(dy)) < TRACK_MOVE:
        return "grows" if areas[-1] / areas[0] >= TRACK_GROWTH else "stays"
    if abs(dx) >= abs(dy):
        return "right" if dx > 0 else "left"
    return "down" if dy > 0 else "up"
