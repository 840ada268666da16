"""Sampled targets: S draws per position from the teacher's full distribution, as distinct ids with counts.

The empirical distribution ``count / S`` of the draws is an unbiased estimate
of the teacher's distribution ``p`` (``E[count_j / S] = p_j``), so a loss
linear in the teacher's probabilities (the forward KL's gradient,
``q − p``) gets an unbiased gradient from it; docs/loss.md has the argument.

Randomness is counter-based: draw s at position t of sequence i uses the
uniform ``u = hash(seed, i, t, s)`` (splitmix64), so the draws do not depend
on batch composition, resumes or the number of processes.
"""

from __future__ import annotations

import numpy as np
import torch

from destila.targets.spec import DEFAULT_HEAD_CHUNK_ROWS

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser, elementwise on ``uint64`` (wrapping arithmetic)."""
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def position_keys(seed: int, sequences, positions) -> np.ndarray:
    """One ``uint64`` key per (sequence, position) pair: ``sequences [N]``, ``positions [N]`` → ``[N]``."""
    with np.errstate(over="ignore"):
        key = _splitmix64(np.full(len(sequences), seed, dtype=np.uint64))
        key = _splitmix64(key ^ np.asarray(sequences, dtype=np.uint64))
        return _splitmix64(key ^ np.asarray(positions, dtype=np.uint64))


def uniforms(keys: np.ndarray, samples: int) -> np.ndarray:
    """``[N, samples]`` float64 uniforms in ``[0, 1)`` from ``keys [N]`` (53 random bits each)."""
    with np.errstate(over="ignore"):
        draw = np.arange(samples, dtype=np.uint64)[None, :] * _GOLDEN
        bits = _splitmix64(keys[:, None] ^ draw)
    return (bits >> np.uint64(11)).astype(np.float64) * 2.0**-53


def distinct_counts(draws: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``draws [N, S]`` ids → ``(ids [N, S], counts [N, S])``: each row's distinct ids ascending with
    how often each was drawn, then padding (id 0, count 0).

    Naive equivalent per row: ``ids, counts = draws[r].unique(return_counts=True)``, zero-padded to S.
    """
    ordered = draws.sort(dim=1).values
    fresh = torch.ones_like(ordered, dtype=torch.bool)
    fresh[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    slot = fresh.long().cumsum(dim=1) - 1
    ids = torch.zeros_like(ordered).scatter_(1, slot, ordered)
    counts = torch.zeros_like(ordered).scatter_add_(1, slot, torch.ones_like(ordered))
    return ids, counts


def teacher_sample(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    keys: np.ndarray,
    samples: int,
    temperature: float = 1.0,
    head_chunk_rows: int = DEFAULT_HEAD_CHUNK_ROWS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``samples`` draws per row from ``softmax((hidden @ weight.T + bias) / temperature)``.

    Shapes: ``hidden [N, H]``, ``weight [V, H]``, ``bias [V]`` or None,
    ``keys [N]`` uint64 (:func:`position_keys`). Returns ``ids [N, S]`` and
    ``counts [N, S]`` int64 as :func:`distinct_counts` gives them.

    Naive equivalent (with a per-row generator instead of the keyed uniforms)::

        p = torch.softmax((hidden.double() @ weight.double().T + bias) / temperature, -1)
        draws = torch.multinomial(p, samples, replacement=True)

    Per chunk of ``head_chunk_rows`` rows one float32 ``[C, V]`` buffer holds the
    logits, then (in place) the probabilities and their running sum; each
    draw is the first id whose running sum exceeds ``u · total`` (inverse
    CDF). The running sum is float32: an id's chance is off by at most about
    ``V · 2⁻²⁴`` of the row's mass, far below the sampling noise of S draws.
    """
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"teacher_sample: expected hidden [N, H] and weight [V, H], found "
                         f"{tuple(hidden.shape)} and {tuple(weight.shape)}")
    if len(keys) != hidden.shape[0]:
        raise ValueError(f"teacher_sample: expected one key per row ({hidden.shape[0]}), found {len(keys)}")
    rows, vocab = hidden.shape[0], weight.shape[0]
    device = hidden.device
    w32 = weight if weight.dtype == torch.float32 else weight.float()
    b32 = None if bias is None else bias.float() / temperature
    ids = torch.empty(rows, samples, dtype=torch.int64, device=device)
    counts = torch.empty(rows, samples, dtype=torch.int64, device=device)
    full = torch.empty(min(head_chunk_rows, rows), vocab, dtype=torch.float32, device=device)
    with torch.no_grad():
        for start in range(0, rows, head_chunk_rows):
            stop = min(start + head_chunk_rows, rows)
            h = hidden[start:stop].float() / temperature
            buffer = full[: stop - start]
            if b32 is None:
                torch.mm(h, w32.T, out=buffer)
            else:
                torch.addmm(b32, h, w32.T, out=buffer)
            buffer.sub_(buffer.amax(dim=1, keepdim=True)).exp_().cumsum_(dim=1)
            u = torch.from_numpy(uniforms(keys[start:stop], samples)).to(device)
            total = buffer[:, -1:]
            # u · total can round up to total itself; stay below it so the draw is an id of positive mass.
            target = torch.minimum((u * total.double()).float(), torch.nextafter(total, torch.zeros_like(total)))
            draws = torch.searchsorted(buffer, target, right=True).clamp_(max=vocab - 1)
            ids[start:stop], counts[start:stop] = distinct_counts(draws)
    return ids, counts
