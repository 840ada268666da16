"""The ``topk`` target kind: the teacher's K most likely ids, their log-probs and the exact rest mass.

Per trained position: ``ids [K]`` int, ``logprobs [K]`` (log p over the full
vocabulary, sorted descending) and ``tail`` float32, ``log(1 − Σ p_k)``
computed from the teacher's full logsumexp (``-inf`` when K = V).

Plain shard tensors: ``topk_ids [P, K]`` int32, ``topk_logprobs [P, K]`` in
the manifest's ``logprob_dtype``, ``tail_logmass [P]`` float32. Its compact block:
:func:`~destila.cache.encodings.compact_blocks.encode_topk_row`.
"""

from __future__ import annotations

import numpy as np
import torch

from destila.targets.head import nonfinite_logits_error, teacher_topk

# |log Σp| a position may show from rounding its K log-probs to the storage
# dtype: about entropy × 2^-mantissa_bits (entropy ≤ ~10 nats), with margin.
# Compact top-K and sampled targets are normalised exactly when decoded.
MASS_TOLERANCE = {"float32": 1e-3, "float16": 1e-2, "bfloat16": 1e-1, "exact": 1e-4}
_SLACK = 1e-3  # log-probs are ≤ 0 up to float rounding of "top logit − logsumexp"


class TopK:
    name = "topk"
    has_logprobs = True  # stored log-probs, whose dtype the plain encoding keeps
    supports_mixture = True  # a mixture of teachers has a top-K and an exact rest mass too
    stores_hidden_states = True  # teacher hidden states may be stored beside the targets
    ranked = True  # the entries are the K most likely tokens in order: their first K′ are the top-K′
    fields = ("top_k",)  # its TargetSpec fields: the first is the entries a position holds
    row_columns = ("topk_ids", "topk_logprobs", "tail_logmass")  # its columns as dataset rows (cache export)
    width_letter = "K"  # how the docs name the entries a position holds

    @staticmethod
    def vocab_fault(targets, vocab: int) -> str | None:
        """What a manifest's target spec contradicts in a vocabulary of ``vocab`` tokens, or None."""
        if targets.top_k > vocab:
            return f"top_k is {targets.top_k}, more than the vocabulary of {vocab}"
        return None

    @staticmethod
    def check_vocab(targets, vocab: int) -> None:
        if targets.top_k > vocab:
            raise ValueError(f"top_k: {targets.top_k} is larger than the teacher's vocabulary of {vocab}; "
                             f"pass --top-k {vocab} or less")

    @staticmethod
    def teacher_head(hidden, weight, bias, targets, sequences, mask, manifest) -> dict:
        """The targets of the trained positions ``hidden [P, H]``: ``ids``, ``logprobs [P, K]``, ``tail [P]`` (CPU)."""
        ids, logprobs, tail = teacher_topk(hidden, weight, bias, targets.top_k, targets.temperature,
                                           targets.head_chunk_rows)
        if not torch.isfinite(logprobs).all():
            raise nonfinite_logits_error(f"in the batch starting at sequence {sequences[0]}", manifest.teacher_dtype)
        return {"ids": ids.cpu(), "logprobs": logprobs.cpu(), "tail": tail.cpu()}

    # -- plain encoding ---------------------------------------------------------

    @staticmethod
    def plain_schema(manifest, positions) -> dict:
        width = manifest.top_k
        return dict(topk_ids=("int32", (positions, width)),
                    topk_logprobs=(manifest.logprob_dtype, (positions, width)),
                    tail_logmass=("float32", (positions,)))

    @staticmethod
    def plain_tensors(rows: list[dict], manifest) -> dict:
        cat = lambda key, dtype: torch.cat([r[key] for r in rows]).to(dtype)  # noqa: E731
        return dict(topk_ids=cat("ids", torch.int32),
                    topk_logprobs=cat("logprobs", getattr(torch, manifest.logprob_dtype)),
                    tail_logmass=cat("tail", torch.float32))

    @staticmethod
    def plain_stored(get, a: int, b: int) -> dict:
        lp = get("topk_logprobs")[a:b]
        return dict(ids=get("topk_ids")[a:b].numpy().astype(np.int64),
                    logprobs=lp if lp.dtype == torch.bfloat16 else lp.numpy(),  # numpy has no bfloat16
                    tail=get("tail_logmass")[a:b].numpy())

    @staticmethod
    def plain_entries(handle, manifest) -> int:
        return handle.get_slice("topk_ids").get_shape()[0] * manifest.top_k

    # -- reading, checking, summarising ----------------------------------------

    @staticmethod
    def entries(stored: dict) -> int:
        return stored["ids"].size

    @staticmethod
    def dense_targets(stored: dict, manifest) -> tuple:
        """``(ids [P, K] int64, logprobs [P, K], tail [P] float32)`` of a stored row, as torch tensors."""
        logprobs = stored["logprobs"]
        logprobs = logprobs if isinstance(logprobs, torch.Tensor) else torch.from_numpy(logprobs)
        return torch.from_numpy(stored["ids"]), logprobs, torch.from_numpy(np.asarray(stored["tail"], dtype=np.float32))

    @staticmethod
    def check_row(stored: dict, manifest, encoding, report) -> list[str]:
        """What is wrong with a stored row's targets (``report.max_mass_error`` is raised to its mass error)."""
        vocab, faults, ids = manifest.vocab_size, [], stored["ids"]
        if ids.size and (ids.min() < 0 or ids.max() >= vocab):
            faults.append(f"topk_ids outside [0, {vocab})")
        order = encoding.id_order_fault(ids)
        if order:
            faults.append(order)
        lp = stored["logprobs"]
        lp = (lp if isinstance(lp, torch.Tensor) else torch.from_numpy(lp)).float()
        tail = torch.from_numpy(np.asarray(stored["tail"]))
        if not torch.isfinite(lp).all():
            faults.append(f"{int((~torch.isfinite(lp)).sum())} non-finite top-K log-probs")
        elif lp.numel() and lp.max() > _SLACK:
            faults.append(f"top-K log-probs above 0 (max {lp.max().item():.3g})")
        elif order := encoding.logprob_order_fault(lp):
            faults.append(order)
        bad_tail = ~torch.isfinite(tail)
        if manifest.top_k == vocab:  # nothing is left out: the tail's log-mass is log 0
            bad_tail &= ~torch.isneginf(tail)
        if bad_tail.any():
            faults.append(f"{int(bad_tail.sum())} non-finite tail log-masses")
        elif tail.numel() and tail.max() > _SLACK:
            faults.append(f"tail log-mass above 0 (max {tail.max().item():.3g})")
        if not faults and lp.numel():
            mass = torch.logsumexp(torch.cat([lp, tail[:, None]], dim=-1), dim=-1).abs().max().item()
            report.max_mass_error = max(report.max_mass_error, mass)
            tolerance = MASS_TOLERANCE[encoding.stored_logprob_dtype(manifest) or "exact"]
            if mass > tolerance:
                faults.append(f"stored probabilities do not sum to 1: |log Σp| up to {mass:.3g} (> {tolerance})")
        return faults

    @staticmethod
    def describe(targets: dict, vocab: int, logprob_dtype: str | None) -> str:
        """The ``targets`` line of ``cache inspect``; ``logprob_dtype`` when the encoding keeps it."""
        dtype = f", log-probs {logprob_dtype}" if logprob_dtype else ""
        return f"top-K K={targets['top_k']} of V={vocab:,}{dtype}"


TOPK = TopK()
