"""Hidden-state distillation: pull chosen student layers towards chosen teacher layers.

Layer ``i`` means the output of decoder layer ``i`` (0-based, before the
final norm; see :mod:`destila.targets.layers`). Which student layer meets
which teacher layer (the layer map) is decided by the trainer
(:func:`destila.training.hidden_distillation.parse_layer_map`).

Per pair, the student's ``[B, L, H_s]`` states go through a learned linear
projection to the teacher's width ``D`` (the teacher's ``H_t``, or the
cache's recorded ``D``; no projection when the widths agree) and are compared
per position:

- ``nmse`` (the recommended choice): ``mean_d (P s − t)² / var_d(t)``, the
  squared error in units of the teacher's own per-dimension variance over
  the batch's masked-in positions, so the term is about 1 for a student
  that knows nothing and is on the KL's scale whatever the model's width or
  activation size (a raw ``mse`` on SmolLM2's layers is in the thousands);
- ``mse``: ``mean_d (P s − t)²``, in the model's own units;
- ``cosine``: ``1 − cos(P s, t)``.

The loss is the mean over masked-in positions and over pairs. The
projections are trained with the student and then dropped: they are not part
of the saved student.

Naive equivalent::

    loss = mean over (s, t) in pairs of
        ((proj[s](student_layer_output[s]) - teacher_layer_output[t]) ** 2).mean(-1)[mask].mean()
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

# Per-position distance of student states to teacher states, [..., D] × [..., D] (× mask [...]) → [...].
_DISTANCES = {
    "nmse": lambda s, t, mask: ((s - t).pow(2) / _teacher_variance(t, mask)).mean(-1),
    "mse": lambda s, t, mask: (s - t).pow(2).mean(-1),
    "cosine": lambda s, t, mask: 1.0 - F.cosine_similarity(s, t, dim=-1, eps=1e-8),
}
HIDDEN_LOSSES = tuple(_DISTANCES)
# The teacher variance floor of ``nmse``: a dimension that never moves must not blow the term up.
NMSE_VARIANCE_FLOOR = 1e-6


def hidden_state_loss(student: torch.Tensor, teacher: torch.Tensor, distance: str = "nmse",
                      mask: torch.Tensor | None = None, *, kind: str | None = None) -> torch.Tensor:
    """Mean per-position ``distance`` (one of :data:`HIDDEN_LOSSES`) of ``student [..., D]`` to
    ``teacher [..., D]`` over ``mask [...]`` (bool).

    Computed in float32 (float64 stays float64); the teacher is a constant.
    All positions masked out gives 0. ``kind``: the old name of ``distance``, still accepted.
    """
    distance = kind if kind is not None else distance
    if student.shape != teacher.shape:
        raise ValueError(f"hidden_state_loss: expected equal shapes, found {tuple(student.shape)} and "
                         f"{tuple(teacher.shape)}")
    dtype = torch.float64 if student.dtype == torch.float64 else torch.float32
    s, t = student.to(dtype), teacher.detach().to(dtype)
    if distance not in _DISTANCES:
        raise ValueError(f"hidden_loss: expected one of {', '.join(HIDDEN_LOSSES)}, found {distance!r}")
    per_position = _DISTANCES[distance](s, t, mask)
    if mask is None:
        return per_position.mean()
    mask = mask.to(torch.bool)
    return (per_position * mask).sum() / mask.sum().clamp_min(1)


def _teacher_variance(teacher: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``[D]``: the variance of each dimension of ``teacher [..., D]`` over the masked-in positions.

    Fewer than two positions have no spread; their mean square stands in (all masked out: ones, which
    the empty mask then multiplies by zero)."""
    flat = teacher.reshape(-1, teacher.shape[-1])
    if mask is not None:
        flat = flat[mask.reshape(-1).to(torch.bool)]
    if flat.shape[0] == 0:
        return torch.ones(teacher.shape[-1], dtype=teacher.dtype, device=teacher.device)
    spread = flat.var(0, unbiased=False) if flat.shape[0] > 1 else flat.pow(2).mean(0)
    return spread.clamp_min(NMSE_VARIANCE_FLOOR)


class HiddenStateLoss(nn.Module):
    """The learned projections and the loss over a layer map; see the module docstring.

    ``forward(student_states, teacher_states, mask)`` takes one ``[B, L, H_s]``
    tensor per pair from the student and one ``[B, L, D]`` per pair from the
    teacher (in the order of ``pairs``). ``distance``: one of :data:`HIDDEN_LOSSES` (``kind``: its old name,
    still accepted).
    """

    def __init__(self, pairs: Sequence[tuple[int, int]], student_width: int, target_width: int,
                 distance: str = "nmse", *, kind: str | None = None):
        super().__init__()
        distance = kind if kind is not None else distance
        if distance not in HIDDEN_LOSSES:
            raise ValueError(f"hidden_loss: expected one of {', '.join(HIDDEN_LOSSES)}, found {distance!r}")
        if not pairs:
            raise ValueError("layer_map: expected at least one (student layer, teacher layer) pair")
        self.pairs = [tuple(p) for p in pairs]
        self.distance = distance
        # Equal widths: compare directly (a projection could only add a free rotation to learn).
        self.projections = nn.ModuleList(
            nn.Identity() if student_width == target_width else nn.Linear(student_width, target_width, bias=False)
            for _ in self.pairs
        )

    @property
    def student_layers(self) -> list[int]:
        return [s for s, _ in self.pairs]

    @property
    def teacher_layers(self) -> list[int]:
        return [t for _, t in self.pairs]

    def forward(self, student_states: Sequence[torch.Tensor], teacher_states: Sequence[torch.Tensor],
                mask: torch.Tensor | None = None) -> torch.Tensor:
        if len(student_states) != len(self.pairs) or len(teacher_states) != len(self.pairs):
            raise ValueError(f"HiddenStateLoss: expected {len(self.pairs)} student and teacher states, found "
                             f"{len(student_states)} and {len(teacher_states)}")
        total = 0.0
        for projection, student, teacher in zip(self.projections, student_states, teacher_states):
            if isinstance(projection, nn.Linear):
                student = projection(student.to(projection.weight.dtype))
            total = total + hidden_state_loss(student, teacher, self.distance, mask)
        return total / len(self.pairs)


def fixed_projection(width: int, dim: int, projection: str = "orthogonal", seed: int = 0) -> torch.Tensor:
    """The recorded ``[width, dim]`` projection of teacher states stored in a cache.

    ``orthogonal``: the Q factor of a seeded Gaussian matrix (orthonormal
    columns, so distances within the kept subspace are preserved);
    ``identity``: ``dim`` must equal ``width``, states are stored as they are.
    """
    if projection not in ("orthogonal", "identity"):
        raise ValueError(f"hidden_projection: expected orthogonal or identity, found {projection!r}")
    if projection == "identity":
        if dim != width:
            raise ValueError(f"hidden_dim: the identity projection keeps the width {width}, found {dim}")
        return torch.eye(width)
    if not 1 <= dim <= width:
        raise ValueError(f"hidden_dim: expected 1 ≤ D ≤ the teacher's width {width}, found {dim}")
    generator = torch.Generator().manual_seed(seed)
    gaussian = torch.randn(width, dim, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(gaussian)
    # Fix the signs (QR is unique only up to them) so the projection depends on the seed alone.
    return (q * torch.sign(torch.diagonal(r))).float()
