"""Greedy skip-KL raced: the same layers as the plain loop, with a fraction of its forwards.

Each greedy round asks which kept layer's removal costs least KL to the
teacher over the calibration tokens. The plain loop
(:func:`destila.student.importance.greedy_cut` with ``impl="reference"``)
runs every candidate over every token, each time through the whole output
head. This search gives the same answer (the same layer each round, ties to
the earlier layer, and the same KL for it) while measuring most candidates
only as far as needed to rule them out:

- **Rows are raced, best-first.** KL per token is never negative, so a
  candidate's KL summed over the calibration rows measured so far is a
  lower bound of its total. The candidate with the smallest bound is
  measured further; once the one at the front has been measured exactly on
  every row, its total is at most every other candidate's bound, so it is
  the round's minimum. Rows are taken heaviest first (by the last drop's KL
  per row), so a candidate that cannot win is ruled out early.
- **Most measurements skip the output head.** With ``h`` a candidate's
  final hidden state and ``z = h Wᵀ + b`` its logits,
  ``KL(p ‖ softmax z) = Σ_v p_v log p_v − h·w̄ − p·b + log Σ_v e^{z_v}`` with
  ``w̄ = Σ_v p_v W_v`` computed once from the teacher. Summing ``e^{z_v}``
  over the teacher's likely tokens only (the union of its top
  ``BOUND_TOP_K`` per position in the row) can only lower the last term,
  so it bounds the KL from below at a small fraction of the head's cost;
  less a relative ``BOUND_SLACK`` for rounding. A row's exact KL (the full
  head) is computed only for a candidate at the front of the race, from the
  hidden state kept from its bound.
- **The teacher's side is computed once.** Per row: the teacher's
  next-token probabilities, ``w̄``, the likely tokens, and each kept layer's
  input hidden states, so skipping layer ``l`` starts from its stored input
  and runs only the layers after it (families whose first layer reads the
  embeddings as they are); after a drop only the inputs of the layers after
  it are recomputed.
- **Two candidates are measured at once on a CPU.** Each of two workers
  (threads, one torch thread each) takes the candidate at the front of the
  race whenever it falls idle: on SmolLM2's 256-token rows and 2 cores that
  took 0.82× the time of one candidate at a time on two torch threads
  (docs/student.md). A candidate at the front is declared the round's minimum
  only when nothing is in flight, so the answer is the serial race's (the
  work done may differ from run to run). Those forwards call the decoder layers
  directly with the arguments the model gave them on the teacher's pass
  (checked once to give the model's own hidden states bit for bit), so no
  thread changes the model.

The exact KL per row is ``log Σ_v p_v e^{d_v} − Σ_v p_v d_v`` with
``d = z − z_teacher``: both terms are small where the two agree, so nothing
large cancels, and identical logits give exactly 0.

Naive equivalent (``greedy_cut(impl="reference")``, the plain loop)::

    while len(kept) > keep:
        cost = {l: kl(teacher, cut_student(teacher, indices=[i for i in kept if i != l])) for l in kept}
        kept.remove(min(cost, key=lambda l: (cost[l], l)))

The work is counted in tokens through decoder layers and through the output
head (:class:`SearchCounts`), so the saving can be stated apart from the
machine's speed or load.
"""

from __future__ import annotations

import contextlib
import heapq
import queue
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field

import torch

from destila.io.progress import progress_bar
from destila.student.calibration import Calibration
from destila.student.running import STARTS_FROM_EMBEDS, decoder_layers, running_layers

UNIT_TOKENS = 256
"""Calibration rows are raced in units of about this many tokens (at least one row each)."""
BOUND_TOP_K = 512
"""The lower bound sums the candidate's probabilities over the union of the teacher's top this-many tokens of
every position of the unit. On SmolLM2 (a 49,152-token vocabulary) 512 gave bounds of 94-96% of the KL for a
sixth of the full head's cost (32: 52-69%; 2,048: 99% for a third)."""
BOUND_SLACK = 1e-5
"""Each position's bound is lowered by this fraction of the size of its terms: rounding can never make it exceed
the exact KL."""
SCREEN_MARGIN = 0.05
"""A bound from a bfloat16 forward is lowered by this fraction: bfloat16 moved a row's KL by at most 1% on
SmolLM2, so the lowered bound stays below the float32 KL; the search reports the
closest a bound came to its KL (``closest_bound``: 0.94 choosing 11 of SmolLM2's layers, docs/student.md)."""
CPU_WORKERS = 2
"""Candidates measured at once on a CPU with at least this many torch threads (the threads are split between
them). Measured on 2 cores; each further worker would also measure candidates the one-at-a-time race may rule
out before reaching them."""


@dataclass
class _Unit:
    """A few calibration rows: what the teacher computes on them, and each kept layer's input in the student."""

    kwargs: dict  # forward kwargs: input_ids [B, T] (and position_ids)
    mask: torch.Tensor  # [B, T] True at the scored positions (n of them)
    logprobs: torch.Tensor  # [n, V] teacher next-token log-probabilities z - logsumexp(z), float32
    probs: torch.Tensor  # [n, V] their exponentials
    lse: torch.Tensor  # [n, 1] logsumexp of the teacher's logits z
    norm: torch.Tensor  # [n] float64: logsumexp(logprobs), 0 but for rounding
    negentropy: torch.Tensor  # [n] float64: Σ_v p_v log p_v
    mean_weight: torch.Tensor  # [n, H] float64: Σ_v p_v W_v
    mean_bias: torch.Tensor  # [n] float64: Σ_v p_v b_v (0 for a head without bias)
    support_weight: torch.Tensor  # [S, H]: the head's rows of the teacher's likely tokens
    support_bias: torch.Tensor | None  # [S]
    inputs: dict = field(default_factory=dict)  # teacher layer -> its input hidden states [B, T, H] in the student
    layer_kwargs: dict = field(default_factory=dict)  # teacher layer -> (positional, keyword) arguments the model
    # passed it besides the hidden states on the teacher's pass (mask, position embeddings): they depend on the
    # row, not on the layers that run


@dataclass
class SearchCounts:
    """The work done, in tokens: through one decoder layer, through the output head, through the bound."""

    layer_tokens: int = 0
    head_tokens: int = 0
    bound_tokens: int = 0
    forwards: int = 0  # (candidate, unit) forwards through the layers after the skipped one, for a bound
    exact: int = 0  # (candidate, unit) KLs computed in the model's precision through the full head
    forwards_without_racing: int = 0  # what measuring every candidate on every unit would have cost


def screen_dtype(model) -> torch.dtype | None:
    """bfloat16 where it is cheaper than the float32 model: a float32 model on a device that multiplies
    bfloat16 natively (a CUDA GPU that supports it; a CPU with AVX512-BF16 or AMX). None elsewhere: there
    bfloat16 would be emulated (slower), or the model already runs in a narrower precision."""
    parameter = next(model.parameters())
    if parameter.dtype != torch.float32:
        return None
    if parameter.device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else None
    if parameter.device.type == "cpu":
        native = getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)()  # private, but no public one
        return torch.bfloat16 if native else None
    return None


@contextlib.contextmanager
def counting_forwards(model, counts: SearchCounts | None = None):
    """Inside the block, every decoder-layer and output-head forward of ``model`` adds its tokens to the yielded
    :class:`SearchCounts` (forward hooks: it counts whichever path runs, this module's or the reference's)."""
    counts = counts if counts is not None else SearchCounts()
    lock = threading.Lock()  # the search runs forwards from several threads

    def layer_ran(_module, args, kwargs, _output):
        hidden = args[0] if args else kwargs["hidden_states"]  # whatever the layer's signature
        with lock:
            counts.layer_tokens += hidden.shape[:-1].numel()

    def head_ran(_module, args, _output):
        with lock:
            counts.head_tokens += args[0].shape[:-1].numel()

    handles = [layer.register_forward_hook(layer_ran, with_kwargs=True) for layer in decoder_layers(model)]
    head = model.get_output_embeddings()
    if head is not None:
        handles.append(head.register_forward_hook(head_ran))
    try:
        yield counts
    finally:
        for handle in handles:
            handle.remove()


def plain_loop_work(total: int, keep: int, tokens: int, from_embeds: bool = True) -> dict:
    """The tokens the plain loop (``greedy_cut(impl="reference")``) runs through decoder layers and through the
    output head, from ``total`` layers down to ``keep`` on ``tokens`` calibration tokens, without running it.

    Its teacher pass runs every layer and the head; each round over ``n`` kept layers runs them once (to store
    each layer's input) and then, per candidate, the head and the layers after the skipped one (families
    whose layer 0 reads the embeddings as they are) or the ``n - 1`` others (the rest). Returns
    ``{"layer_tokens", "head_tokens", "passes"}``; ``passes`` counts forwards over all the tokens, as the
    loop's progress bar does per batch.
    """
    layers, heads = total, 1
    for n in range(keep + 1, total + 1):
        layers += n + (n * (n - 1) // 2 if from_embeds else n * (n - 1))
        heads += 1 + n
    return {"layer_tokens": layers * tokens, "head_tokens": heads * tokens, "passes": heads}


def _exact_kl(unit: _Unit, scored_logits: torch.Tensor) -> float:
    """Σ over the unit's scored positions of KL(teacher ‖ softmax(logits)); ``scored_logits [n, V]`` float32,
    overwritten.

    With ``d = z' − z`` (candidate minus teacher logits), ``KL = log Σ_v p_v e^{d_v} − Σ_v p_v d_v``.
    ``log Σ p e^d`` is ``logsumexp(z' − logsumexp(z))``, less the same sum over the teacher's own
    log-probabilities (0 but for rounding; identical logits then give exactly 0).
    """
    shifted = scored_logits.sub_(unit.lse)  # z' - logsumexp(z)
    log_ratio = torch.logsumexp(shifted, dim=-1).double() - unit.norm
    d = shifted.sub_(unit.logprobs)  # z' - z
    mean_d = torch.einsum("nv,nv->n", unit.probs, d).double()  # a batched dot: no [n, V] product kept
    return float((log_ratio - mean_d).sum())


@dataclass
class _Candidate:
    """One candidate of a round (the student without ``layer``) and what has been measured of it."""

    layer: int
    position: int  # its index in the round's kept list
    bounds: dict = field(default_factory=dict)  # unit index -> lower bound of its KL there
    exact: dict = field(default_factory=dict)  # unit index -> its KL there
    hidden: dict = field(default_factory=dict)  # unit index -> final hidden states [n, H] of a bound in the
    # model's precision, kept until that unit's exact KL is computed from them

    def bound(self) -> float:
        return sum(self.exact.values()) + sum(v for u, v in self.bounds.items() if u not in self.exact)


class GreedySearch:
    """Greedy skip-KL on ``model`` over ``calibration``; :meth:`run` returns what ``greedy_cut`` returns.

    ``race=False`` measures every candidate exactly on every unit (the reference's work, this module's
    arithmetic): the tests compare the two. ``workers``: candidates measured at once (None: :data:`CPU_WORKERS`
    on a CPU with that many torch threads, else 1).
    """

    unit_tokens = UNIT_TOKENS

    def __init__(self, model, calibration: Calibration, *, race: bool = True, screen: bool = True,
                 workers: int | None = None):
        self.model = model
        self.screen = screen_dtype(model) if screen and race else None
        self.device = next(model.parameters()).device
        self.total = model.config.num_hidden_layers
        self.from_embeds = model.config.model_type in STARTS_FROM_EMBEDS
        self.race = race
        self.layers = decoder_layers(model)
        self.head = model.get_output_embeddings()
        if not isinstance(self.head, torch.nn.Linear):
            raise ValueError(f"greedy search: expected the model's output head to be a Linear layer, found "
                             f"{type(self.head).__name__}; use greedy_cut(..., impl='reference')")
        # Forwards that call the decoder layers directly (no change to the model, so threads may share it):
        # families whose layer 0 reads the embeddings, ending in a final norm; checked on the first unit.
        self.norm = getattr(model.base_model, "norm", None)
        self.direct = self.from_embeds and isinstance(self.norm, torch.nn.Module)
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
            raise ValueError(f"workers: expected a positive integer or None, found {workers!r}")
        self.workers_asked = workers
        self.workers = 1  # chosen by run()
        self.pool = _Workers(1, contextlib.nullcontext)
        self.lock = threading.Lock()  # the counts and the closest bound, updated from the workers
        self.counts = SearchCounts()
        self.calibration = calibration
        self.bar = None  # the progress bar while running
        self.closest = 0.0  # the largest bound / exact KL of a unit measured both ways
        self._round_start = (0, 0)
        self._shown = 0.0  # when the progress bar's counts were last shown

    # -- the teacher's side and the stored hidden states ------------------------------------

    def _final_hidden(self, kwargs: dict, running: list[int], start: torch.Tensor | None = None,
                      capture: tuple[list[int], dict, dict | None] | None = None) -> torch.Tensor:
        """The final (normed) hidden states ``[B, T, H]`` of the student running teacher layers ``running``,
        from the embeddings or, with ``start``, from those hidden states fed to the first of ``running``."""
        if start is not None:
            kwargs = dict(kwargs, inputs_embeds=start)
            del kwargs["input_ids"]
        wanted, into, calls = capture if capture is not None else ([], {}, None)
        with running_layers(self.model, running), _capturing(self.layers, wanted, into, calls):
            return self.model.base_model(**kwargs, use_cache=False).last_hidden_state

    def _through(self, unit: _Unit, layers: list[int], hidden: torch.Tensor, store: bool = False) -> torch.Tensor:
        """``hidden [B, T, H]`` through teacher layers ``layers``, each called with the arguments the model gave
        it on the unit's teacher pass; ``store``: each layer's input is kept in ``unit.inputs``."""
        for layer in layers:
            if store:
                unit.inputs[layer] = hidden
            rest, keywords = unit.layer_kwargs[layer]
            out = self.layers[layer](hidden, *rest, **keywords)
            hidden = out[0] if isinstance(out, tuple) else out
        return hidden

    def _teacher_unit(self, batch: Calibration, check: bool) -> _Unit:
        kwargs = {k: v.to(self.device) for k, v in batch.forward_kwargs().items()}
        mask = batch.scored.to(self.device)
        inputs: dict[int, torch.Tensor] = {}
        calls: dict[int, tuple] = {}
        every = list(range(self.total))
        hidden = self._final_hidden(kwargs, every, capture=(every, inputs, calls))
        logits = self.head(hidden)
        if check and not torch.equal(logits, self.model(**kwargs, use_cache=False).logits):
            raise ValueError(f"greedy search: the {self.model.config.model_type} model's logits are not its output "
                             "head applied to its final hidden states; use greedy_cut(..., impl='reference')")
        logprobs = logits[mask].float()
        del logits
        lse = torch.logsumexp(logprobs, dim=-1, keepdim=True)
        logprobs.sub_(lse)
        probs = logprobs.exp()
        weight, bias = self.head.weight, self.head.bias
        support = torch.unique(logprobs.topk(min(BOUND_TOP_K, logprobs.shape[-1]), dim=-1).indices)
        unit = _Unit(
            kwargs, mask, logprobs, probs, lse, norm=torch.logsumexp(logprobs, dim=-1).double(),
            # Once per unit, in float64: the bound's rounding then comes from the candidate's side alone.
            negentropy=torch.einsum("nv,nv->n", probs.double(), logprobs.double()),
            mean_weight=probs.double() @ weight.double(),
            mean_bias=(probs.double() @ bias.double()) if bias is not None else torch.zeros(len(probs),
                                                                                              dtype=torch.float64),
            support_weight=weight[support], support_bias=None if bias is None else bias[support], inputs=inputs,
            layer_kwargs=calls)
        if check and self.direct:  # calling the layers directly must give the model's own hidden states
            self.direct = len(calls) == self.total and torch.equal(
                self.norm(self._through(unit, every, inputs[0])), hidden)
        return unit

    def _refresh_inputs(self, unit: _Unit, kept: list[int], position: int) -> None:
        """After ``kept[position]`` was dropped (``kept`` is the list before): the inputs of the layers after it."""
        after = kept[position + 1:]
        if not after:
            return
        if self.direct:
            self._through(unit, after, unit.inputs[kept[position]], store=True)
        elif self.from_embeds:
            self._final_hidden(unit.kwargs, after, start=unit.inputs[kept[position]],
                               capture=(after, unit.inputs, None))
        else:  # layer 0 does not read the embeddings as they are: run the whole student again
            self._final_hidden(unit.kwargs, kept[:position] + after, capture=(after, unit.inputs, None))

    # -- measuring a candidate on a unit --------------------------------------------------------

    def _forward(self, unit: _Unit, kept: list[int], position: int, screen: bool = False) -> torch.Tensor:
        """Final hidden states at the scored positions ``[n, H]`` of the student ``kept`` without ``kept[position]``;
        ``screen``: its layers in :attr:`screen`'s precision (the stored inputs and the result stay float32)."""
        precision = (torch.autocast(self.device.type, dtype=self.screen) if screen
                     else contextlib.nullcontext())
        with precision:
            if self.direct:
                hidden = self.norm(self._through(unit, kept[position + 1:], unit.inputs[kept[position]]))
            elif self.from_embeds:
                hidden = self._final_hidden(unit.kwargs, kept[position + 1:], start=unit.inputs[kept[position]])
            else:
                hidden = self._final_hidden(unit.kwargs, kept[:position] + kept[position + 1:])
        return hidden[unit.mask].float()

    def _lower_bound(self, unit: _Unit, hidden: torch.Tensor) -> float:
        """A lower bound of the unit's summed KL from the final hidden states ``[n, H]``, without the full head.

        ``Σ p log p − p·z + logsumexp(z over the likely tokens)`` per position, less the rounding slack,
        at least 0.
        """
        p_dot_z = (hidden.double() * unit.mean_weight).sum(-1) + unit.mean_bias
        likely = torch.nn.functional.linear(hidden, unit.support_weight, unit.support_bias)
        lse = torch.logsumexp(likely.float(), dim=-1).double()
        slack = BOUND_SLACK * (1 + unit.negentropy.abs() + p_dot_z.abs() + lse.abs())
        with self.lock:
            self.counts.bound_tokens += len(hidden)
        return float((unit.negentropy - p_dot_z + lse - slack).clamp(min=0).sum())

    def _exact(self, unit: _Unit, hidden: torch.Tensor) -> float:
        with self.lock:
            self.counts.exact += 1
        return _exact_kl(unit, self.head(hidden).float())

    def _bound_step(self, unit: _Unit, kept: list[int], position: int) -> tuple[float, torch.Tensor | None]:
        """A candidate's bound on a unit, and the hidden states its exact KL can reuse (None after screening:
        the exact KL then needs a float32 forward). Screened bounds are lowered by :data:`SCREEN_MARGIN`."""
        if self.screen is None:
            hidden = self._forward(unit, kept, position)
            return self._lower_bound(unit, hidden), hidden
        return (1 - SCREEN_MARGIN) * self._lower_bound(unit, self._forward(unit, kept, position, screen=True)), None

    def _exact_step(self, unit: _Unit, kept: list[int], position: int, hidden: torch.Tensor | None) -> float:
        """A candidate's exact KL on a unit, from the hidden states of its bound where they were kept."""
        return self._exact(unit, hidden if hidden is not None else self._forward(unit, kept, position))

    def _show(self, kept: list[int]) -> None:
        if self.bar is not None and time.monotonic() - self._shown >= 1.0:  # a line a second in a log, not a step
            self._shown = time.monotonic()
            forwards, exact = self.counts.forwards - self._round_start[0], self.counts.exact - self._round_start[1]
            self.bar.set_postfix_str(f"{len(kept)} kept: {forwards} forwards, {exact} exact this round")

    # -- one round -----------------------------------------------------------------------------

    def _round_full(self, units: list[_Unit], kept: list[int]) -> tuple[int, dict, dict]:
        """Every candidate exactly on every unit: ``(cheapest layer, {unit: its KL}, {layer: total})``."""
        per_unit = {}
        for position, layer in enumerate(kept):
            self.counts.forwards += len(units)
            costs = self.pool.map([lambda unit=unit: self._exact_step(unit, kept, position, None) for unit in units])
            per_unit[layer] = dict(enumerate(costs))
            self._show(kept)
        totals = {layer: sum(costs.values()) for layer, costs in per_unit.items()}
        layer = min(kept, key=lambda i: (totals[i], i))
        return layer, per_unit[layer], totals

    def _round_raced(self, units: list[_Unit], kept: list[int], order: list[int]) -> tuple[int, dict]:
        """The cheapest candidate of ``kept`` by best-first racing over ``units`` taken in ``order``.

        The heap holds ``(bound, finished, layer)``; at an equal bound an unfinished candidate is measured
        further before a finished one is declared, and among finished ones the earlier layer wins, the
        reference's tie rule. A candidate at the front gets its next unit's bound (a forward through the
        layers after the skipped one), or, once bounded on every unit, its next unit's exact KL. With several
        workers, each worker that falls idle takes the candidate then at the front; a finished candidate is
        declared only when it is at the front with nothing in flight, so the answer is the serial race's.
        """
        candidates = {layer: _Candidate(layer, position) for position, layer in enumerate(kept)}
        heap = [(0.0, False, layer) for layer in kept]
        heapq.heapify(heap)
        in_flight: dict[Future, tuple[_Candidate, int]] = {}
        while True:
            # Every idle worker takes the unfinished candidate at the front; behind a finished front nothing can
            # win (an unfinished candidate of an equal bound sorts before a finished one).
            while len(in_flight) < self.workers and heap and not heap[0][1]:
                candidate = candidates[heapq.heappop(heap)[2]]
                if len(candidate.bounds) < len(units):
                    u = order[len(candidate.bounds)]
                    self.counts.forwards += 1
                    future = self.pool.submit(lambda u=u, c=candidate: self._bound_step(units[u], kept, c.position))
                else:
                    u = next(u for u in order if u not in candidate.exact)
                    future = self.pool.submit(lambda u=u, c=candidate, hidden=candidate.hidden.pop(u, None):
                                              self._exact_step(units[u], kept, c.position, hidden))
                in_flight[future] = (candidate, u)
            if not in_flight:  # a finished candidate at the front, nothing measured elsewhere: the minimum
                layer = heap[0][2]
                return layer, candidates[layer].exact
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            for future in done:
                candidate, u = in_flight.pop(future)
                outcome = future.result()
                if u not in candidate.bounds:
                    candidate.bounds[u], hidden = outcome
                    if hidden is not None:
                        candidate.hidden[u] = hidden
                else:
                    candidate.exact[u] = outcome
                    if outcome > 0:  # how close a bound came to its KL: below 1 is what racing relies on
                        self.closest = max(self.closest, candidate.bounds[u] / outcome)
                heapq.heappush(heap, (candidate.bound(), len(candidate.exact) == len(units), candidate.layer))
            self._show(kept)

    # -- the whole search -----------------------------------------------------------------------

    @contextlib.contextmanager
    def _precision(self):
        """No gradients and, with a screening precision, one autocast region held open with autocast off inside:
        autocast keeps its casts of the weights until a thread's outermost region ends, so they are made once
        per thread; only the screening forwards turn it on."""
        with torch.no_grad():
            if self.screen is None:
                yield
                return
            with torch.autocast(self.device.type, dtype=self.screen), \
                    torch.autocast(self.device.type, enabled=False):
                yield

    def _choose_workers(self, threads: int) -> int:
        if not self.direct:  # the forwards change the model (running_layers): one at a time
            if self.workers_asked not in (None, 1):
                raise ValueError(f"workers: the {self.model.config.model_type} model's forwards run through the "
                                 "model itself, one at a time; pass workers=1")
            return 1
        if self.workers_asked is not None:
            return self.workers_asked
        return CPU_WORKERS if self.device.type == "cpu" and threads >= CPU_WORKERS else 1

    def run(self, keep: int, progress: bool = False) -> dict:
        """``{"kept", "dropped": [(layer, KL per token)], "first_round", "tokens", "counts", "rounds", "screen",
        "closest_bound", "workers"}``: ``screen`` names the bounds' precision when it was not the model's,
        ``closest_bound`` is the largest ratio of a unit's bound to its exact KL (below 1: no bound overtook its
        KL), ``workers`` the candidates measured at once.

        ``first_round`` (every layer's KL when it alone is skipped) is measured only with ``race=False``
        (None otherwise: racing measures most layers only far enough to rule them out).
        """
        if not 1 <= keep <= self.total:
            raise ValueError(f"layers: expected an integer between 1 and the teacher's {self.total} layers, "
                             f"found {keep}")
        kept, dropped, first_round, rounds = list(range(self.total)), [], None, []
        screening = self.screen is not None
        description = "choosing layers" + (f" (screened in {str(self.screen).removeprefix('torch.')})"
                                           if screening else "")
        threads = torch.get_num_threads()
        with counting_forwards(self.model, self.counts), self._precision(), \
                progress_bar(self.total - keep, desc=description, unit="drop", show=progress, mininterval=1.0) as bar:
            self.bar = bar if progress else None
            units = [self._teacher_unit(batch, check=i == 0)
                     for i, batch in enumerate(self.calibration.batches(self.unit_tokens))]
            self.workers = self._choose_workers(threads)
            if self.workers > 1:  # which way it runs, on the bar
                bar.set_description(f"{description}, {self.workers} candidates at once", refresh=False)
            # The threads are split between the workers (a worker's forwards are small: see CPU_WORKERS).
            torch.set_num_threads(max(1, threads // self.workers))
            self.pool = _Workers(self.workers, self._precision)
            try:
                count = max(1, sum(int(u.mask.sum()) for u in units))
                order = list(range(len(units)))
                while len(kept) > keep:
                    self._round_start = (self.counts.forwards, self.counts.exact)
                    self.counts.forwards_without_racing += len(kept) * len(units)
                    if self.race:
                        layer, by_unit = self._round_raced(units, kept, order)
                    else:
                        layer, by_unit, totals = self._round_full(units, kept)
                        first_round = first_round or [totals[i] / count for i in range(self.total)]
                    position = kept.index(layer)
                    # One unit per worker (a single worker, as without direct calls, runs them here in turn).
                    self.pool.map([lambda unit=unit: self._refresh_inputs(unit, kept, position) for unit in units])
                    for unit in units:
                        del unit.inputs[layer]
                    rounds.append({"candidates": len(kept), "forwards": self.counts.forwards - self._round_start[0],
                                   "exact": self.counts.exact - self._round_start[1]})
                    kept.remove(layer)
                    dropped.append((layer, sum(by_unit.values()) / count))
                    # Heaviest units first next round: there a losing candidate's bound grows fastest.
                    order = sorted(range(len(units)), key=lambda u: (-by_unit[u], u))
                    bar.update()
            finally:
                self.pool.close()
                self.pool = _Workers(1, contextlib.nullcontext)
                torch.set_num_threads(threads)
        self.bar = None
        return {"kept": kept, "dropped": dropped, "first_round": first_round, "tokens": count,
                "counts": vars(self.counts).copy(), "rounds": rounds,
                "screen": str(self.screen).removeprefix("torch.") if screening else None,
                "closest_bound": self.closest, "workers": self.workers}


def _settle(call, future: Future) -> None:
    """``future`` gets ``call()``'s result, or the exception it raised (the caller raises it)."""
    try:
        future.set_result(call())
    except BaseException as error:
        future.set_exception(error)


class _Workers:
    """Runs calls on ``count`` threads, each inside its own ``context()`` entered once for the thread's life (so
    autocast's casts of the weights are made once per thread); ``count`` 1 runs them in the caller's thread.

    Naive equivalent of :meth:`map`: ``[call() for call in calls]``.
    """

    def __init__(self, count: int, context):
        self.tasks: queue.SimpleQueue = queue.SimpleQueue()
        self.threads = [] if count == 1 else [threading.Thread(target=self._serve, args=(context,), daemon=True)
                                              for _ in range(count)]
        for thread in self.threads:
            thread.start()

    def _serve(self, context) -> None:
        with context():
            while (task := self.tasks.get()) is not None:
                _settle(*task)

    def submit(self, call) -> Future:
        """``call()``'s future; run at once in the caller's thread with one worker."""
        future = Future()
        if self.threads:
            self.tasks.put((call, future))
        else:
            _settle(call, future)
        return future

    def map(self, calls: list) -> list:
        return [future.result() for future in [self.submit(call) for call in calls]]

    def close(self) -> None:
        for _ in self.threads:
            self.tasks.put(None)
        for thread in self.threads:
            thread.join()


class _capturing:
    """Stores into ``into[teacher layer]`` the input hidden states of each layer of ``layers`` in ``wanted``
    (teacher indices) on the forwards run inside the block, and into ``calls[teacher layer]`` (unless None) the
    rest of its arguments ``(positional, keyword)``."""

    def __init__(self, layers: torch.nn.ModuleList, wanted: list[int], into: dict, calls: dict | None = None):
        self.layers, self.wanted, self.into, self.calls = layers, wanted, into, calls
        self.handles = []

    def __enter__(self):
        for teacher_layer in self.wanted:
            def before(_module, args, kwargs, teacher_layer=teacher_layer):
                if args:
                    hidden, rest, keywords = args[0], args[1:], kwargs
                else:  # the hidden states passed by name: called the same way, by position
                    hidden, rest = kwargs["hidden_states"], ()
                    keywords = {k: v for k, v in kwargs.items() if k != "hidden_states"}
                self.into[teacher_layer] = hidden if isinstance(hidden, torch.Tensor) else hidden[0]
                if self.calls is not None:
                    self.calls[teacher_layer] = (rest, keywords)

            self.handles.append(self.layers[teacher_layer].register_forward_pre_hook(before, with_kwargs=True))
        return self

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()
        return False
