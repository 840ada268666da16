"""Quality of a model on held-out batches: perplexity, accuracy, and KL / agreement to its teacher."""

from __future__ import annotations

import math

import torch

from destila.eval.bytes import scored_bytes
from destila.eval.bytes import bits_per_byte
from destila.eval.cross import ONE_TO_ONE
from destila.losses import IGNORE_INDEX, distill_loss
from destila.losses.options import DEFAULT_CHUNK_SIZE
from destila.models import decoder_of, output_head
from destila.losses.divergences import full_vocab_divergence, get_divergence


@torch.no_grad()
def quality_sums(model, batches, teacher=None, chunk_size: int = DEFAULT_CHUNK_SIZE,
                 divergence: str = "forward_kl", on_batch=None, byte_lengths: torch.Tensor | None = None) -> dict:
    """Sums over the rows with a label, for collated ``batches`` of ``input_ids [B, L]`` and position-aligned
    ``labels [B, L]`` (plus the cache's top-K fields when evaluating against a cache).

    Returns ``rows``, ``nll`` (Σ −log q(label)), ``correct`` (argmax = label)
    and, against a teacher or a cache, the ``divergence``'s sum under its
    metric name (``kl`` for forward KL; over the full vocabulary when
    ``teacher`` is given, else over the cache's top-K buckets) and ``agree``
    (argmax = teacher's top-1). Naive
    equivalent: full ``[N, V]`` logits of both models; here only
    ``chunk_size × V`` at a time. ``on_batch(done, total)`` is called after each batch.
    ``byte_lengths`` (:func:`destila.eval.bytes.token_byte_lengths`) adds ``bytes``, the UTF-8 bytes the
    scored tokens spell, for bits per byte.
    """
    weight, bias = output_head(model)
    metric = get_divergence(divergence).metric
    sums = {"rows": 0.0, "nll": 0.0, "correct": 0.0}
    if teacher is not None or "topk_ids" in batches[0]:
        sums.update({metric: 0.0, "agree": 0.0})
    if "label_bytes" in batches[0] or byte_lengths is not None:  # bits per byte: from spans, else from the ids
        sums["bytes"] = 0.0
    if "align_kind" in batches[0]:  # the cache read in another tokenizer: KL and agreement on one-to-one rows
        sums["aligned_rows"] = 0.0
    for number, batch in enumerate(batches, start=1):
        input_ids = batch["input_ids"]
        labels = batch["labels"].flatten()  # next tokens (collate's labels, as they are); IGNORE_INDEX: not scored
        # Position ids restart per packed document; an attention mask marks padding.
        layout = {k: batch[k] for k in ("position_ids", "attention_mask") if k in batch}
        hidden = decoder_of(model)(input_ids=input_ids, use_cache=False, **layout).last_hidden_state.flatten(0, 1)
        if "label_bytes" in batch:  # the text's own bytes, from the cache's spans
            sums["bytes"] += float(batch["label_bytes"].flatten()[labels != IGNORE_INDEX].sum())
        elif byte_lengths is not None:
            sums["bytes"] += scored_bytes(labels, byte_lengths)
        compared = labels
        if "align_kind" in batch:
            compared = labels.masked_fill(batch["align_kind"].flatten() != ONE_TO_ONE, IGNORE_INDEX)
            sums["aligned_rows"] += float((compared != IGNORE_INDEX).sum())
        if "topk_ids" in batch and teacher is None and (compared != IGNORE_INDEX).any():
            # with the teacher at hand, its full KL replaces the top-K one
            _, stats = distill_loss(
                hidden, weight, batch["topk_ids"].flatten(0, 1), batch["topk_logprobs"].flatten(0, 1),
                batch["tail_logmass"].flatten(), compared,
                bias=bias, chunk_size=chunk_size, divergence=divergence, return_stats=True,
            )
            sums[metric] += stats["soft"].item()
            sums["agree"] += stats["agree"].item()
        if teacher is not None:
            t_weight, t_bias = output_head(teacher)
            t_hidden = decoder_of(teacher)(input_ids=input_ids, use_cache=False, **layout).last_hidden_state.flatten(0, 1)
        for start in range(0, hidden.shape[0], chunk_size):
            rows = slice(start, start + chunk_size)
            valid = labels[rows] != IGNORE_INDEX
            logits = _logits(hidden[rows], weight, bias)[valid]
            target = labels[rows][valid]
            sums["rows"] += float(valid.sum())
            sums["nll"] += torch.nn.functional.cross_entropy(logits, target, reduction="sum").item()
            sums["correct"] += float((logits.argmax(-1) == target).sum())
            if teacher is not None:
                t_logits = _logits(t_hidden[rows], t_weight, t_bias)[valid]
                sums[metric] += full_vocab_divergence(logits, t_logits, divergence).sum().item()
                sums["agree"] += float((logits.argmax(-1) == t_logits.argmax(-1)).sum())
        if on_batch is not None:
            on_batch(number, len(batches))
    return sums


def _logits(hidden, weight, bias):
    logits = hidden.float() @ weight.float().T
    return logits if bias is None else logits + bias.float()


def metrics_from_sums(sums: dict) -> dict:
    """Per-token means of :func:`quality_sums`; ``bits_per_byte`` where the bytes were counted; the divergence
    and agreement per compared row (the one-to-one rows, ``aligned_rows``, for a model on another tokenizer)."""
    rows = max(sums["rows"], 1.0)
    metrics = {"tokens": int(sums["rows"]), "perplexity": math.exp(sums["nll"] / rows),
               "cross_entropy": sums["nll"] / rows, "accuracy": sums["correct"] / rows}
    if "bytes" in sums:
        metrics.update({"bytes": int(sums["bytes"]), "bits_per_byte": bits_per_byte(sums["nll"], sums["bytes"])})
    if "agree" in sums:  # against a teacher: its divergence (``kl_to_teacher`` for forward KL) and agreement
        metric = next(k for k in sums if k not in ("rows", "nll", "correct", "agree", "bytes", "aligned_rows"))
        compared = max(sums.get("aligned_rows", sums["rows"]), 1.0)
        metrics.update({f"{metric}_to_teacher": sums[metric] / compared, "top1_agreement": sums["agree"] / compared})
    if "aligned_rows" in sums:
        metrics["aligned_rows"] = int(sums["aligned_rows"])
    return metrics


