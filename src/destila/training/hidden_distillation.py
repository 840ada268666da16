"""Hidden-state distillation inside the trainer: which layers, their projections, where targets come from.

Online, the teacher's layer outputs are captured during the teacher's
forward (``[B, T, H_t]``). Offline, the cache holds them already projected
to ``D`` by its recorded fixed projection (``teacher_hidden [B, T, n, D]``,
one slot per cached layer). Either way the student's chosen layers go
through learned projections (:class:`~destila.losses.hidden_state_loss.HiddenStateLoss`)
that are trained with the student and never saved with it: the trainer
keeps them beside the model, in its optimizer and in its checkpoints only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch

from destila.losses.hidden_state_loss import HIDDEN_LOSSES, HiddenStateLoss
from destila.student import evenly_spaced_layers
from destila.targets.layers import capture_layer_outputs, layer_count

PROJECTION_FILE = "hidden_projections.pt"


@dataclass
class HiddenLossOptions:
    """The hidden-state term added to the distillation loss (off unless ``hidden_loss`` is set)."""

    hidden_loss: str | None = field(default=None, metadata={
        "help": "nmse (scale-free: on the KL's scale at weight 1), mse or cosine: add a loss between student "
                "and teacher layer outputs (None: off). Measured on SmolLM2 at 32 steps, nmse at weight 1 ended "
                "worse than plain KD on held-out KL (docs/benchmarks.md)",
        "choices": list(HIDDEN_LOSSES)})
    hidden_weight: float = field(default=1.0, metadata={"help": "weight of the hidden-state loss"})
    layer_map: str = field(default="auto", metadata={
        "help": "auto (student layer j ↔ the teacher layer `student init` keeps as j; offline: the cached "
                "layers in order) or pairs such as 's0:t0,s1:t6'"})

    def __post_init__(self):
        if self.hidden_loss is not None and self.hidden_loss not in HIDDEN_LOSSES:
            raise ValueError(f"hidden_loss: expected one of {', '.join(HIDDEN_LOSSES)}, found {self.hidden_loss!r}")
        if not self.hidden_weight >= 0:
            raise ValueError(f"hidden_weight: expected a number ≥ 0, found {self.hidden_weight}")


def parse_layer_map(spec: str, student_layers: int, teacher_layers: int) -> list[tuple[int, int]]:
    """``[(student_layer, teacher_layer), ...]`` from ``"auto"`` or ``"s0:t0,s1:t6"`` (also ``"0:0,1:6"``).

    ``"auto"`` pairs student layer ``j`` of ``S`` with teacher layer
    ``evenly_spaced_layers(T, S)[j]`` (the layers ``destila student init``
    keeps, so a cut student starts close to its targets).
    """
    if spec == "auto":
        return list(enumerate(evenly_spaced_layers(teacher_layers, student_layers)))
    pairs = []
    for item in spec.split(","):
        try:
            left, right = item.strip().split(":")
            pair = (int(left.strip().removeprefix("s")), int(right.strip().removeprefix("t")))
        except ValueError:
            raise ValueError(
                f"layer_map: expected 'auto' or pairs like 's0:t0,s1:t6', found {item.strip()!r} in {spec!r}"
            ) from None
        if not (0 <= pair[0] < student_layers and 0 <= pair[1] < teacher_layers):
            raise ValueError(
                f"layer_map: pair {item.strip()!r} is out of range; the student has layers 0..{student_layers - 1} "
                f"and the teacher 0..{teacher_layers - 1}"
            )
        pairs.append(pair)
    if len({s for s, _ in pairs}) != len(pairs):
        raise ValueError(f"layer_map: a student layer appears twice in {spec!r}; give each at most one target")
    return pairs


def offline_pairs(spec: str, student_layers: int, cached_layers: Sequence[int]) -> list[tuple[int, int]]:
    """Pairs for a cache holding ``cached_layers``: ``auto`` spreads the student's layers over them in order."""
    cached = list(cached_layers)
    if spec == "auto":
        if len(cached) > student_layers:
            raise ValueError(
                f"layer_map: the cache holds {len(cached)} teacher layers ({', '.join(map(str, cached))}) but the "
                f"student has only {student_layers}; pass --layer-map with the pairs to use"
            )
        return list(zip(evenly_spaced_layers(student_layers, len(cached)), cached))
    pairs = parse_layer_map(spec, student_layers, max(cached) + 1)
    missing = sorted({t for _, t in pairs} - set(cached))
    if missing:
        raise ValueError(
            f"layer_map: teacher layer(s) {', '.join(map(str, missing))} are not in the cache, which holds "
            f"{', '.join(map(str, cached))}; rebuild it with --hidden-layers or map to cached layers"
        )
    return pairs


class HiddenDistillation:
    """The hidden-state term for one student: layer pairs, projections, and the loss of a batch."""

    def __init__(self, options: HiddenLossOptions, student, *, teacher=None, cached_layers=None,
                 cached_dim: int | None = None):
        if (teacher is None) == (cached_layers is None):
            raise ValueError("hidden loss: needs either the online teacher or a cache with hidden states")
        self.weight = options.hidden_weight
        student_layers = layer_count(student)
        if teacher is not None:
            self.pairs = parse_layer_map(options.layer_map, student_layers, layer_count(teacher))
            target_width, self.slots = teacher.config.hidden_size, None
        else:
            self.pairs = offline_pairs(options.layer_map, student_layers, cached_layers)
            target_width = cached_dim
            self.slots = [list(cached_layers).index(t) for _, t in self.pairs]
        self.module = HiddenStateLoss(self.pairs, student.config.hidden_size, target_width, options.hidden_loss)

    @property
    def student_layers(self) -> list[int]:
        return self.module.student_layers

    @property
    def teacher_layers(self) -> list[int]:
        return self.module.teacher_layers

    def parameters(self):
        return list(self.module.parameters())

    def to(self, device):
        self.module.to(device)
        return self

    def capture(self, model):
        """Context manager: the student's chosen layer outputs, filled by the forward run inside it."""
        return capture_layer_outputs(model, self.student_layers)

    def teacher_states(self, inputs: dict) -> list[torch.Tensor]:
        """One ``[B, T, D]`` target per pair, from the batch (``teacher_hidden``, offline) or the online teacher."""
        if "teacher_hidden" in inputs:
            stored = inputs["teacher_hidden"]
            return [stored[:, :, slot] for slot in self.slots]
        captured = inputs.get("teacher_layers")
        if captured is None:
            raise ValueError("batch: the hidden loss needs teacher layer outputs, found neither a cache with hidden "
                             "states nor an online teacher")
        return [captured[t] for t in self.teacher_layers]

    def loss(self, captured: dict, inputs: dict, mask: torch.Tensor, num_items=None) -> torch.Tensor:
        """``hidden_weight ×`` the mean over this batch's masked-in positions; with ``num_items`` (the
        positions of the whole accumulated batch) the sum over them divided by it, as the KD term is, so
        gradient accumulation weighs every position alike."""
        mean = self.module([captured[s] for s in self.student_layers], self.teacher_states(inputs), mask)
        if num_items is not None:
            mean = mean * mask.sum() / torch.as_tensor(num_items, device=mean.device).clamp_min(1)
        return self.weight * mean

    def save(self, folder: str | Path) -> None:
        torch.save(self.module.state_dict(), Path(folder) / PROJECTION_FILE)

    def load(self, folder: str | Path) -> bool:
        path = Path(folder) / PROJECTION_FILE
        if not path.exists():
            return False
        self.module.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        return True


def hidden_term(options: HiddenLossOptions, model, *, teacher_model=None, source=None) -> HiddenDistillation | None:
    """The hidden-state term ``options`` ask for (None when ``hidden_loss`` is off), with teacher states from
    ``teacher_model`` (online) or from ``source``, a cache built with ``--hidden-layers`` (offline)."""
    if options.hidden_loss is None:
        return None
    if teacher_model is not None:
        return HiddenDistillation(options, model, teacher=teacher_model)
    source = getattr(source, "source", source)  # a Subset of the cache
    layers = getattr(source, "hidden_layers", None)
    if not layers:
        raise ValueError(
            "hidden_loss: the targets hold no teacher hidden states; build the cache with `destila cache build "
            "--hidden-layers 6,12 --hidden-dim D`, or train online with a teacher"
        )
    return HiddenDistillation(options, model, cached_layers=layers, cached_dim=source.hidden_dim)
