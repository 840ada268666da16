"""How much each teacher layer matters, measured on calibration text.

Two measures per layer ``l`` (both: higher = more important, keep it):

- **block influence** (ShortGPT): ``1 - cos(x_l, y_l)`` between the layer's
  input and output hidden states, averaged over tokens. A layer that barely
  turns the hidden state changes little when removed.
- **skip-KL**: ``KL(p_teacher || p_without_l)`` of the next-token
  distributions when layer ``l`` alone is skipped, averaged over tokens. It
  measures what distillation cares about, the output; block influence costs
  one teacher pass instead of about half a pass per layer and is kept
  beside it.

Greedy skip-KL (the default criterion) repeats skip-KL on the shrinking
student: it drops the layer whose removal costs least, then measures the
remaining layers again without it, until the wanted count is left. Scores
of single layers do not add up (two layers that each matter little may
together matter a lot), so the greedy path finds cuts that start closer to
the teacher; it costs about ``(total + keep) / 4`` passes per layer dropped.

For a contiguous cut (Gromov et al., "The Unreasonable Ineffectiveness of the
Deeper Layers") the block of ``n`` consecutive layers to drop is the one
whose input and output hidden states are closest in angle,
``arccos(cos(x_l, x_{l+n})) / π``; the last layer is always kept.

Naive equivalent of skip-KL for layer ``l``::

    student = cut_student(teacher, indices=[i for i in range(total) if i != l])[0]
    kl = F.kl_div(log_softmax(student(ids).logits), log_softmax(teacher(ids).logits),
                  log_target=True, reduction="batchmean")

Here the teacher's hidden states are reused: the skipped forward starts from
``x_l`` and runs only layers ``l+1 …`` (families whose layer 0 reads the
embeddings directly), so scoring all layers costs about half a pass each.
"""

from __future__ import annotations

import contextlib
import math

import torch

from destila.io.progress import progress_bar
from destila.losses.divergences import kl_terms
from destila.student.calibration import Calibration
from destila.student.greedy_search import GreedySearch
from destila.student.layers import CRITERIA, SELECTIONS  # noqa: F401  (re-exported)
from destila.student.running import STARTS_FROM_EMBEDS, decoder_layers, running_layers


def _hidden_of(value) -> torch.Tensor:
    return value if isinstance(value, torch.Tensor) else value[0]


@contextlib.contextmanager
def capturing_layers(model):
    """Yields ``(inputs, outputs)`` lists filled, per decoder layer, with its hidden states ``[B, T, H]`` on the next forward."""
    inputs: dict[int, torch.Tensor] = {}
    outputs: dict[int, torch.Tensor] = {}
    handles = []
    for index, layer in enumerate(decoder_layers(model)):
        def before(_module, args, kwargs, index=index):
            inputs[index] = _hidden_of(args[0] if args else kwargs["hidden_states"])

        def after(_module, _args, output, index=index):
            outputs[index] = _hidden_of(output)

        handles.append(layer.register_forward_pre_hook(before, with_kwargs=True))
        handles.append(layer.register_forward_hook(after))
    try:
        yield inputs, outputs
    finally:
        for handle in handles:
            handle.remove()


def _cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cosine_similarity(a.float(), b.float(), dim=-1)


def _kl_sum(teacher_probs: torch.Tensor, teacher_logprobs: torch.Tensor, logits: torch.Tensor,
            mask: torch.Tensor) -> float:
    """Σ over masked positions of KL(teacher ‖ other); teacher ``[n, V]``, ``logits [B, T, V]``.

    Summed per row before the rows are added (a single float32 sum over n·V terms loses digits).
    """
    other = torch.log_softmax(logits[mask].float(), dim=-1)
    return float(kl_terms(teacher_probs, teacher_logprobs, other).sum(-1).double().sum())


def _logits_without(model, kwargs: dict, inputs: dict, kept: list[int], position: int,
                    from_embeds: bool) -> torch.Tensor:
    """Logits ``[B, T, V]`` of ``model`` running layers ``kept`` except ``kept[position]``.

    ``inputs`` holds each layer's input hidden states from a forward over ``kept``; where the
    family's first layer reads the embeddings as is, the forward starts from the skipped layer's
    input and runs only the layers after it (the ones before it would compute the same states).
    """
    layer = kept[position]
    if from_embeds:
        rest = dict(kwargs, inputs_embeds=inputs[layer])
        del rest["input_ids"]
        with running_layers(model, kept[position + 1:]):
            return model(**rest, use_cache=False).logits
    with running_layers(model, kept[:position] + kept[position + 1:]):
        return model(**kwargs, use_cache=False).logits


def layer_scores(model, calibration: Calibration, *, skip_kl: bool = True, drop_block: int = 0,
                 progress: bool = False) -> dict:
    """Per-layer importance of ``model`` on ``calibration``.

    Returns ``{"block_influence": [total], "skip_kl": [total] or None,
    "block_distance": {start: distance} (when ``drop_block`` > 0), "tokens": n}``
    where ``block_distance[l]`` is the angular distance between the input of
    layer ``l`` and the output of layer ``l + drop_block - 1``. ``progress``
    shows a bar on stderr (one step per forward).
    """
    device = next(model.parameters()).device
    total = model.config.num_hidden_layers
    influence = torch.zeros(total, dtype=torch.float64)
    kl = torch.zeros(total, dtype=torch.float64)
    starts = range(0, total - drop_block) if drop_block > 0 else range(0)  # the last layer is always kept
    distance = {start: 0.0 for start in starts}
    count = 0
    from_embeds = model.config.model_type in STARTS_FROM_EMBEDS
    batches = list(calibration.batches(1024))
    bar = progress_bar(len(batches) * (1 + (total if skip_kl else 0)), desc="measuring layers", unit="pass",
                       show=progress)
    with torch.no_grad(), bar:
        for batch in batches:
            kwargs = {k: v.to(device) for k, v in batch.forward_kwargs().items()}
            mask = batch.scored.to(device)
            with capturing_layers(model) as (inputs, outputs):
                logits = model(**kwargs, use_cache=False).logits
            bar.update()
            count += int(mask.sum())
            for layer in range(total):
                influence[layer] += float((1 - _cosine(inputs[layer], outputs[layer]))[mask].sum())
            for start in starts:  # the block's output is the input of the first layer after it
                cos = _cosine(inputs[start], inputs[start + drop_block])[mask].clamp(-1, 1)
                distance[start] += float(torch.arccos(cos).sum() / math.pi)
            if not skip_kl:
                continue
            teacher_logprobs = torch.log_softmax(logits[mask].float(), dim=-1)  # [n, V]
            teacher_probs = teacher_logprobs.exp()
            del logits
            for layer in range(total):
                skipped = _logits_without(model, kwargs, inputs, list(range(total)), layer, from_embeds)
                kl[layer] += _kl_sum(teacher_probs, teacher_logprobs, skipped, mask)
                bar.update()
    count = max(count, 1)
    return {
        "block_influence": (influence / count).tolist(),
        "skip_kl": (kl / count).tolist() if skip_kl else None,
        "block_distance": {start: value / count for start, value in distance.items()},
        "tokens": count,
    }


def most_important(scores: list[float], keep: int) -> list[int]:
    """Indices of the ``keep`` highest scores, sorted (ties: the earlier layer)."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    return sorted(order[:keep])


def contiguous_cut(block_distance: dict[int, float], total: int, keep: int) -> list[int]:
    """The layers kept when the block of ``total - keep`` layers with the smallest angular distance is dropped."""
    drop = total - keep
    if drop == 0:
        return list(range(total))
    start = min(block_distance, key=lambda s: (block_distance[s], s))
    return [i for i in range(total) if not start <= i < start + drop]


GREEDY_IMPLS = ("raced", "reference")
"""``greedy_cut`` implementations: the raced search of :mod:`destila.student.greedy_search` and the plain loop."""


def greedy_cut(model, calibration: Calibration, keep: int, progress: bool = False, impl: str = "raced") -> dict:
    """Drop layers one at a time, each the one whose removal (with those already dropped) costs least KL.

    Returns ``{"kept": [keep] teacher layer indices, "dropped": [(layer, kl)]
    in drop order (kl: nats/token to the teacher after that drop),
    "first_round": [total] skip-KL of each layer alone, "tokens": n}``;
    ``impl="raced"`` adds ``"counts"`` (the forwards it ran) and ``"rounds"``.

    Naive equivalent::

        kept = list(range(total))
        while len(kept) > keep:
            cost = {l: kl(teacher, cut_student(teacher, indices=[i for i in kept if i != l])) for l in kept}
            kept.remove(min(cost, key=lambda l: (cost[l], l)))

    ``impl="raced"`` (the default) gives the same layers and scores with
    far fewer forwards: see :mod:`destila.student.greedy_search`.
    ``impl="reference"`` measures every candidate on every token, each
    candidate's forward starting from the stored input of the layer it skips
    (families whose layer 0 reads the embeddings directly): a round over
    ``n`` layers costs about ``1 + n / 2`` passes.
    """
    if impl not in GREEDY_IMPLS:
        raise ValueError(f"impl: expected one of {', '.join(GREEDY_IMPLS)}, found {impl!r}")
    if impl == "raced":
        return GreedySearch(model, calibration).run(keep, progress=progress)
    device = next(model.parameters()).device
    total = model.config.num_hidden_layers
    if not 1 <= keep <= total:
        raise ValueError(f"layers: expected an integer between 1 and the teacher's {total} layers, found {keep}")
    from_embeds = model.config.model_type in STARTS_FROM_EMBEDS
    batches = list(calibration.batches(1024))
    rounds = range(keep + 1, total + 1)  # the student's size before each drop
    bar = progress_bar(len(batches) * (1 + sum(1 + n for n in rounds)), desc="measuring layers", unit="pass",
                       show=progress)
    kept, dropped, first_round, count = list(range(total)), [], None, 0
    with torch.no_grad(), bar:
        targets = []  # per batch: (forward kwargs, scored mask, teacher probs [n, V], teacher logprobs [n, V])
        for batch in batches:
            kwargs = {k: v.to(device) for k, v in batch.forward_kwargs().items()}
            mask = batch.scored.to(device)
            logprobs = torch.log_softmax(model(**kwargs, use_cache=False).logits[mask].float(), dim=-1)
            targets.append((kwargs, mask, logprobs.exp(), logprobs))
            count += int(mask.sum())
            bar.update()
        count = max(count, 1)
        while len(kept) > keep:
            cost = dict.fromkeys(kept, 0.0)
            for kwargs, mask, probs, logprobs in targets:
                with capturing_layers(model) as (inputs, _), running_layers(model, kept):
                    model(**kwargs, use_cache=False)
                bar.update()
                for position, layer in enumerate(kept):
                    skipped = _logits_without(model, kwargs, inputs, kept, position, from_embeds)
                    cost[layer] += _kl_sum(probs, logprobs, skipped, mask)
                    bar.update()
            if first_round is None:
                first_round = [cost[layer] / count for layer in range(total)]
            layer = min(kept, key=lambda i: (cost[i], i))
            kept.remove(layer)
            dropped.append((layer, cost[layer] / count))
    return {"kept": kept, "dropped": dropped, "first_round": first_round, "tokens": count}
