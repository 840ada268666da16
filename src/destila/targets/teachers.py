"""What a teacher pass computes per batch: one teacher's or a mixture's top-K, and optionally the
teacher's chosen layer outputs through a fixed, recorded projection.

The cache writer calls :meth:`TeacherSet.positions` on each micro-batch with
its loss mask; the result holds, for the ``P`` trained positions, the rows
the shard stores:

- ``ids [P, K]``, ``logprobs [P, K]``, ``tail [P]`` (float32):
  :func:`~destila.targets.head.teacher_topk` for one teacher,
  :func:`~destila.targets.mixture.mixture_topk` for several;
- with a :class:`HiddenSpec`, ``hidden [P, n, D]`` float16: the first
  teacher's outputs of layers ``spec.layers`` (see
  :mod:`destila.targets.layers`) times the ``[H, D]`` projection.

Naive equivalent::

    states = teacher(ids, output_hidden_states=True).hidden_states
    teacher_hidden = torch.stack([states[i + 1] @ projection for i in layers], 2).half()
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from destila.losses.hidden_state_loss import fixed_projection
from destila.models import check_plain_head, decoder_of, output_head
from destila.targets.head import nonfinite_logits_error, teacher_topk
from destila.targets.layers import capture_layer_outputs, layer_count
from destila.targets.mixture import mixture_topk
from destila.targets.spec import DEFAULT_HEAD_CHUNK_ROWS

HIDDEN_DTYPE = torch.float16
PROJECTIONS = ("orthogonal", "identity")


@dataclass(frozen=True)
class HiddenSpec:
    """Which teacher layers a cache stores, and the fixed projection they are stored through."""

    layers: tuple[int, ...] = field(metadata={"help": "teacher decoder layers whose outputs are stored"})
    dim: int | None = field(default=None, metadata={
        "help": "stored width D (default: the teacher's hidden size, with the identity projection)"})
    projection: str = field(default="orthogonal", metadata={
        "help": "orthogonal (seeded random orthonormal columns) or identity (D = hidden size)",
        "choices": list(PROJECTIONS)})
    seed: int = field(default=0, metadata={"help": "seed of the orthogonal projection"})

    def __post_init__(self):
        if not self.layers:
            raise ValueError("hidden_layers: expected at least one teacher layer, e.g. 6,12")
        if len(set(self.layers)) != len(self.layers) or min(self.layers) < 0:
            raise ValueError(f"hidden_layers: expected distinct layer numbers ≥ 0, found {list(self.layers)}")
        if self.projection not in PROJECTIONS:
            raise ValueError(f"hidden_projection: expected one of {', '.join(PROJECTIONS)}, found {self.projection!r}")
        if self.dim is not None and self.dim < 1:
            raise ValueError(f"hidden_dim: expected a positive integer, found {self.dim}")

    @classmethod
    def parse(cls, layers: str, dim: int | None = None, projection: str | None = None, seed: int = 0) -> "HiddenSpec":
        """From the command line's ``--hidden-layers 6,12 --hidden-dim D``."""
        try:
            numbers = tuple(int(x) for x in layers.split(","))
        except ValueError:
            raise ValueError(f"hidden_layers: expected comma-separated layer numbers such as 6,12, found {layers!r}") from None
        if projection is None:
            projection = "orthogonal" if dim is not None else "identity"
        return cls(numbers, dim, projection, seed)

    def matrix(self, width: int) -> torch.Tensor:
        """The ``[width, D]`` projection for a teacher of hidden size ``width``."""
        return fixed_projection(width, self.dim or width, self.projection, self.seed)

    def record(self, width: int) -> dict:
        """The manifest's description: layers, D, projection kind and seed."""
        return {"layers": list(self.layers), "dim": self.dim or width, "projection": self.projection,
                "seed": self.seed}


class TeacherSet:
    """One teacher (``weights=None``) or several mixed with ``weights``, and an optional hidden-state spec."""

    def __init__(self, models: Sequence, weights: Sequence[float] | None, top_k: int, temperature: float = 1.0,
                 head_chunk_rows: int = DEFAULT_HEAD_CHUNK_ROWS, hidden: HiddenSpec | None = None):
        self.models = list(models)
        if len(self.models) > 1 and (weights is None or len(weights) != len(self.models)):
            raise ValueError(f"teacher_weights: expected one weight per teacher ({len(self.models)}), found "
                             f"{0 if weights is None else len(weights)}")
        for model in self.models:
            check_plain_head(model)
        self.weights = list(weights) if weights is not None else [1.0]
        self.top_k, self.temperature, self.head_chunk_rows = top_k, temperature, head_chunk_rows
        self.decoders = [decoder_of(m) for m in self.models]
        self.heads = [output_head(m) for m in self.models]
        self.hidden = hidden
        self.projection = None
        if hidden is not None:
            count = layer_count(self.models[0])
            if max(hidden.layers) >= count:
                raise ValueError(f"hidden_layers: the teacher has layers 0..{count - 1}, found {max(hidden.layers)}")
            self.projection = hidden.matrix(self.models[0].config.hidden_size).to(self.heads[0][0].device)

    def _forward(self, input_ids, **forward):
        """Each teacher's final hidden states ``[B·T, H_i]``, and the first teacher's captured layers."""
        batch, length = input_ids.shape
        hiddens, captured = [], {}
        for number, decoder in enumerate(self.decoders):
            layers = self.hidden.layers if self.hidden is not None and number == 0 else ()
            with capture_layer_outputs(self.models[number], layers) as caught:
                out = decoder(input_ids=input_ids, use_cache=False, **forward).last_hidden_state
            hiddens.append(out.reshape(batch * length, -1))
            captured = captured or caught
        return hiddens, captured

    def _head(self, hiddens):
        if len(hiddens) == 1:
            weight, bias = self.heads[0]
            return teacher_topk(hiddens[0], weight, bias, self.top_k, self.temperature, self.head_chunk_rows)
        return mixture_topk(hiddens, self.heads, self.weights, self.top_k, self.temperature, self.head_chunk_rows)

    def _project(self, captured, rows=None):
        """``[N, n, D]`` float16: the captured layers (rows ``rows`` of the flattened ``[B·T]``) projected."""
        states = [captured[i].reshape(-1, captured[i].shape[-1]) for i in self.hidden.layers]
        if rows is not None:
            states = [s[rows] for s in states]
        # Projected in float32, rounded to float16 once, for storage.
        return torch.stack([s.float() @ self.projection for s in states], dim=1).to(HIDDEN_DTYPE)

    @torch.no_grad()
    def positions(self, input_ids: torch.Tensor, mask: torch.Tensor, **forward) -> dict:
        """The cache writer's rows for the ``P`` positions where ``mask [B, T]`` is true, on the CPU:
        ``ids [P, K]``, ``logprobs [P, K]``, ``tail [P]`` and, with hidden states, ``hidden [P, n, D]``."""
        hiddens, captured = self._forward(input_ids, **forward)
        rows = mask.reshape(-1).to(hiddens[0].device)
        ids, logprobs, tail = self._head([h[rows] for h in hiddens])
        if not torch.isfinite(logprobs).all():
            raise nonfinite_logits_error("in this batch", next(self.models[0].parameters()).dtype)
        result = {"ids": ids.cpu(), "logprobs": logprobs.cpu(), "tail": tail.cpu()}
        if self.hidden is not None:
            result["hidden"] = self._project(captured, rows).cpu()
        return result
