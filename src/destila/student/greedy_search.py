"""Greedy skip-KL without repeated work: what a round's candidates share is computed once, and a candidate
stops being measured as soon as it can no longer be the one dropped.

Each greedy round asks which kept layer's removal costs least KL to the
teacher (see :func:`destila.student.importance.greedy_cut` with ``impl="reference"``, the reference
this module is checked against). Three things make it cheap without changing
its answer:

- **The teacher's side is computed once.** Per calibration row: the
  teacher's next-token probabilities ``p``, ``Σ_v p_v z_v`` and
  ``logsumexp(z)`` of its logits ``z``. A candidate's KL is then
  ``KL(p ‖ softmax(z')) = Σ_v p_v (z_v − z'_v) + logsumexp(z') − logsumexp(z)``,
  one pass over its logits ``z'`` instead of a full log-softmax and a
  product with the teacher's log-probabilities.
- **Hidden states are reused across rounds.** Each layer's input hidden
  states in the current student are stored per row; skipping layer ``l``
  starts from its stored input and runs only the layers after it (families
  whose first layer reads the embeddings as they are). After a drop only
  the inputs of the layers after the dropped one change, and only those are
  recomputed (no head: the output is not needed).
- **Candidates are raced row by row** (best-first). KL per row is never
  negative, so a candidate's partial sum over the rows measured so far is
  a lower bound of its total. The candidate with the smallest partial sum
  is measured on its next row; when the one at the front has been measured
  on every row, its total is at most every other candidate's partial sum:
  it is the round's exact minimum, ties going to the earlier layer as in
  the reference. Rows are measured heaviest first (by the previous drop's
  cost per row), so a candidate that cannot win is dropped early. The first
  round measures every candidate on every row: its scores are recorded.

Naive equivalent (``greedy_cut(impl="reference")`` runs it with the teacher's hidden states reused)::

    while len(kept) > keep:
        cost = {l: kl(teacher, cut_student(teacher, indices=[i for i in kept if i != l])) for l in kept}
        kept.remove(min(cost, key=lambda l: (cost[l], l)))

The work is counted in ``layer_rows`` (decoder-layer forwards, one row each)
and ``head_rows`` (output-head forwards), so the saving can be stated apart
from the machine's speed or load.
"""

from __future__ import annotations

import contextlib
import heapq
from dataclasses import dataclass, field

import torch

from destila.student.calibration import Calibration
from destila.student.importance import _STARTS_FROM_EMBEDS, running_layers

UNIT_TOKENS = 256
"""Calibration rows are raced in units of about this many tokens (at least one row each)."""


@dataclass
class _Unit:
    """A few calibration rows and what the teacher and the current student compute on them."""

    kwargs: dict  # forward kwargs: input_ids [B, T] (and position_ids)
    mask: torch.Tensor  # [B, T] True at the scored positions (n of them)
    logprobs: torch.Tensor  # [n, V] teacher next-token log-probabilities z - logsumexp(z), float32
    probs: torch.Tensor  # [n, V] their exponentials
    lse: torch.Tensor  # [n, 1] logsumexp of the teacher's logits z
    norm: torch.Tensor  # [n] float64: logsumexp(logprobs), 0 but for rounding
    inputs: dict = field(default_factory=dict)  # teacher layer -> its input hidden states [B, T, H] in the student


@dataclass
class SearchCounts:
    """The work done, in rows (one calibration row through one decoder layer, or through the head)."""

    layer_rows: int = 0
    head_rows: int = 0
    candidate_units: int = 0  # (candidate, unit) measurements
    candidate_units_without_racing: int = 0  # what measuring every candidate on every unit would have cost


def _unit_kl(unit: _Unit, logits: torch.Tensor) -> float:
    """Σ over the unit's scored positions of KL(teacher ‖ softmax(logits)), from the stored teacher terms.

    With ``d = z' − z`` (candidate minus teacher logits), ``KL = log Σ_v p_v e^{d_v} − Σ_v p_v d_v``: both
    terms are small where the two agree, so nothing large cancels. ``log Σ p e^d`` is
    ``logsumexp(z' − logsumexp(z))``, less the same sum over the teacher's own log-probabilities (0
    but for rounding; identical logits then give exactly 0).
    """
    shifted = logits[unit.mask].float().sub_(unit.lse)  # z' - logsumexp(z): [n, V], a copy
    log_ratio = torch.logsumexp(shifted, dim=-1).double() - unit.norm
    d = shifted.sub_(unit.logprobs)  # z' - z, in place
    mean_d = torch.einsum("nv,nv->n", unit.probs, d).double()  # a batched dot: no [n, V] product kept
    return float((log_ratio - mean_d).sum())



@contextlib.contextmanager
def counting_forwards(model, counts: SearchCounts | None = None):
    """Inside the block, every decoder-layer and output-head forward of ``model`` adds its rows to the yielded
    :class:`SearchCounts` (forward hooks; counts whichever path runs, this module's or the reference's)."""
    from destila.student.importance import decoder_layers

    counts = counts if counts is not None else SearchCounts()

    def layer_ran(_module, args, kwargs, _output):
        hidden = args[0] if args else kwargs["hidden_states"]  # whatever the layer's signature
        counts.layer_rows += int(hidden.shape[0])

    def head_ran(_module, args, _output):
        counts.head_rows += int(args[0].shape[0])

    handles = [layer.register_forward_hook(layer_ran, with_kwargs=True) for layer in decoder_layers(model)]
    head = model.get_output_embeddings()
    if head is not None:
        handles.append(head.register_forward_hook(head_ran))
    try:
        yield counts
    finally:
        for handle in handles:
            handle.remove()


class GreedySearch:
    """Greedy skip-KL on ``model`` over ``calibration``; :meth:`run` returns what ``greedy_cut`` returns."""

    unit_tokens = UNIT_TOKENS

    def __init__(self, model, calibration: Calibration, *, race: bool = True):
        from destila.student.importance import decoder_layers

        self.model = model
        self.device = next(model.parameters()).device
        self.total = model.config.num_hidden_layers
        self.from_embeds = model.config.model_type in _STARTS_FROM_EMBEDS
        self.race = race
        self.layers = decoder_layers(model)
        self.counts = SearchCounts()
        self.calibration = calibration

    # -- the teacher's side and the stored hidden states ------------------------------------

    def _forward_kwargs(self, batch: Calibration) -> dict:
        return {k: v.to(self.device) for k, v in batch.forward_kwargs().items()}

    def _teacher_unit(self, batch: Calibration) -> _Unit:
        kwargs = self._forward_kwargs(batch)
        mask = batch.scored.to(self.device)
        inputs: dict[int, torch.Tensor] = {}
        with _capturing(self.layers, list(range(self.total)), inputs):
            logits = self.model(**kwargs, use_cache=False).logits
        logprobs = logits[mask].float()
        del logits
        lse = torch.logsumexp(logprobs, dim=-1, keepdim=True)
        logprobs.sub_(lse)
        norm = torch.logsumexp(logprobs, dim=-1).double()
        return _Unit(kwargs, mask, logprobs, logprobs.exp(), lse, norm, inputs)

    def _refresh_inputs(self, unit: _Unit, kept: list[int], position: int) -> None:
        """After ``kept[position]`` was dropped (``kept`` is the list before): the inputs of the layers after it."""
        after = kept[position + 1:]
        if not after:
            return
        if self.from_embeds:
            rest = dict(unit.kwargs, inputs_embeds=unit.inputs[kept[position]])
            del rest["input_ids"]
            with running_layers(self.model, after), _capturing(self.layers, after, unit.inputs, after):
                self.model.base_model(**rest, use_cache=False)
        else:  # layer 0 does not read the embeddings as they are: run the whole student again
            remaining = kept[:position] + after
            with running_layers(self.model, remaining), _capturing(self.layers, remaining, unit.inputs, after):
                self.model.base_model(**unit.kwargs, use_cache=False)

    def _candidate_kl(self, unit: _Unit, kept: list[int], position: int) -> float:
        """KL summed over ``unit`` of the student ``kept`` without ``kept[position]``."""
        if self.from_embeds:
            rest = dict(unit.kwargs, inputs_embeds=unit.inputs[kept[position]])
            del rest["input_ids"]
            with running_layers(self.model, kept[position + 1:]):
                logits = self.model(**rest, use_cache=False).logits
        else:
            with running_layers(self.model, kept[:position] + kept[position + 1:]):
                logits = self.model(**unit.kwargs, use_cache=False).logits
        self.counts.candidate_units += 1
        return _unit_kl(unit, logits)

    # -- one round -----------------------------------------------------------------------------

    def _round_full(self, units: list[_Unit], kept: list[int]) -> tuple[dict, dict]:
        """Every candidate on every unit: ``({layer: total}, {layer: [per unit]})``."""
        per_unit = {layer: [self._candidate_kl(u, kept, p) for u in units] for p, layer in enumerate(kept)}
        return {layer: sum(costs) for layer, costs in per_unit.items()}, per_unit

    def _round_raced(self, units: list[_Unit], kept: list[int], order: list[int]) -> tuple[int, float, list]:
        """The cheapest candidate of ``kept`` by best-first racing over ``units`` taken in ``order``.

        Returns ``(layer, total, per-unit costs of that layer)``. The heap is ordered by
        ``(partial sum, finished, layer)``: at an equal partial sum an unfinished candidate is
        measured further before a finished one is declared, and among finished ones the earlier
        layer wins, the reference's tie rule.
        """
        heap = [(0.0, False, layer, position, []) for position, layer in enumerate(kept)]
        heapq.heapify(heap)
        while True:
            partial, finished, layer, position, costs = heapq.heappop(heap)
            if finished:
                return layer, partial, costs
            cost = self._candidate_kl(units[order[len(costs)]], kept, position)
            costs = costs + [cost]
            heapq.heappush(heap, (partial + cost, len(costs) == len(units), layer, position, costs))

    # -- the whole search -----------------------------------------------------------------------

    def run(self, keep: int, progress: bool = False) -> dict:
        from tqdm.auto import tqdm

        if not 1 <= keep <= self.total:
            raise ValueError(f"layers: expected an integer between 1 and the teacher's {self.total} layers, "
                             f"found {keep}")
        kept, dropped, first_round, rounds = list(range(self.total)), [], None, []
        with counting_forwards(self.model, self.counts), torch.no_grad(), \
                tqdm(total=self.total - keep, desc="choosing layers", unit="drop", disable=not progress) as bar:
            units = [self._teacher_unit(batch) for batch in self.calibration.batches(self.unit_tokens)]
            count = max(1, sum(int(u.mask.sum()) for u in units))
            order = list(range(len(units)))
            while len(kept) > keep:
                before = self.counts.candidate_units
                self.counts.candidate_units_without_racing += len(kept) * len(units)
                if first_round is None or not self.race:
                    totals, per_unit = self._round_full(units, kept)
                    first_round = first_round or [totals[layer] / count for layer in range(self.total)]
                    layer = min(kept, key=lambda i: (totals[i], i))
                    total, by_unit = totals[layer], per_unit[layer]
                else:
                    layer, total, costs = self._round_raced(units, kept, order)
                    by_unit = dict(zip(order, costs))
                position = kept.index(layer)
                for unit in units:
                    self._refresh_inputs(unit, kept, position)
                    del unit.inputs[layer]
                kept.remove(layer)
                dropped.append((layer, total / count))
                rounds.append({"candidates": len(kept) + 1, "measured": self.counts.candidate_units - before})
                # Heaviest units first next round: there a losing candidate's partial sum grows fastest.
                order = sorted(range(len(units)), key=lambda i: (-by_unit[i], i))
                bar.update()
                bar.set_postfix_str(f"dropped {layer}, {len(kept)} left")
        return {"kept": kept, "dropped": dropped, "first_round": first_round, "tokens": count,
                "counts": vars(self.counts).copy(), "rounds": rounds}


class _capturing:
    """Stores, into ``into[teacher layer]``, the input hidden states of each running layer (``running`` lists
    the teacher layers in the order they run); only the layers in ``wanted`` (default: all) are stored."""

    def __init__(self, layers: torch.nn.ModuleList, running: list[int], into: dict, wanted=None):
        self.layers, self.running, self.into = layers, running, into
        self.wanted = set(running if wanted is None else wanted)
        self.handles = []

    def __enter__(self):
        for teacher_layer in self.running:
            if teacher_layer not in self.wanted:
                continue

            def before(_module, args, kwargs, teacher_layer=teacher_layer):
                hidden = args[0] if args else kwargs["hidden_states"]
                self.into[teacher_layer] = hidden if isinstance(hidden, torch.Tensor) else hidden[0]

            self.handles.append(self.layers[teacher_layer].register_forward_pre_hook(before, with_kwargs=True))
        return self

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()
        return False
