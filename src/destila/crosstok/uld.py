"""The optional ULD term: the teacher's unmapped probabilities against the student's own largest ones, sorted.

The bucket loss sees the teacher's mass on tokens the student does not have
only as part of the rest bucket. The Universal Logit Distillation idea
(Boizard et al. 2024) compares what no vocabulary map can: the *shapes* of
the two distributions, each sorted by probability. Here, per kept row r with
``U_r`` unmapped teacher entries::

    p = exp(uld_logprobs[r, :U_r])                                # descending (the dataset sorts them)
    q = softmax(z_r / T) with the row's mapped targets set to 0    # the student's mass the map does not pair
    term_r = Σ_{u < U_r} | p_u − sort(q, descending)[u] |

``L = weight · Σ_r term_r / n`` with ``n`` the kept rows (or ``num_items``).
Computed chunk by chunk with recomputation in backward, so it never holds more
than ``chunk_size × V`` logits; it is a separate pass over the head, paid only
when asked for.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from destila.constants import IGNORE_INDEX


def _chunk_term(hidden, weight, bias, mapped_ids, mapped, teacher, counts, temperature: float):
    dtype = torch.promote_types(hidden.dtype, torch.float32)  # float32 at least; float64 inputs stay float64
    logits = hidden.to(dtype) @ weight.to(dtype).T
    if bias is not None:
        logits = logits + bias.to(dtype)
    probs = torch.softmax(logits / temperature, dim=-1)
    hits = torch.zeros_like(probs).scatter_add(1, mapped_ids, mapped.to(probs.dtype))  # padding adds 0 at id 0
    probs = probs.masked_fill(hits > 0, 0.0)
    width = teacher.shape[1]
    top = probs.topk(min(width, probs.shape[1]), dim=-1).values
    if top.shape[1] < width:
        top = torch.nn.functional.pad(top, (0, width - top.shape[1]))
    used = torch.arange(width, device=teacher.device)[None, :] < counts[:, None]
    return torch.where(used, (teacher - top).abs(), 0.0).sum()


def uld_loss(hidden, weight, uld_logprobs, topk_ids, topk_logprobs, labels=None, *, bias=None,
             temperature: float = 1.0, num_items=None, chunk_size: int = 1024, ignore_index: int = IGNORE_INDEX):
    """The ULD term (see the module docstring) of rows ``hidden [N, H]`` (or ``[B, T, H]``) and head ``weight [V, H]``.

    ``uld_logprobs [N, U]``: the unmapped teacher log-probs per row, descending, ``-inf`` padded (the
    cross-tokenizer dataset's ``uld_logprobs``); ``topk_ids``, ``topk_logprobs [N, K]``: the row's mapped
    targets (their ids are left out of the student's side); ``labels``: rows whose label is
    ``ignore_index`` are left out. Returns the 0-dim mean over kept rows (float32, or float64 for float64 inputs).
    """
    size = hidden.shape[-1]
    hidden = hidden.reshape(-1, size)
    rows = hidden.shape[0]
    teacher = uld_logprobs.reshape(rows, -1).to(torch.promote_types(hidden.dtype, torch.float32)).exp()
    mapped_ids = topk_ids.reshape(rows, -1).long()
    mapped = topk_logprobs.reshape(rows, -1) > float("-inf")
    mapped_ids = torch.where(mapped, mapped_ids, torch.zeros_like(mapped_ids))
    keep = torch.ones(rows, dtype=torch.bool, device=hidden.device) if labels is None \
        else labels.reshape(rows) != ignore_index
    counts = torch.where(keep, (uld_logprobs.reshape(rows, -1) > float("-inf")).sum(dim=1), 0)
    n = keep.sum() if num_items is None else torch.as_tensor(num_items, device=hidden.device)
    total = teacher.new_zeros(())
    for start in range(0, rows, chunk_size):
        stop = min(start + chunk_size, rows)
        if not bool((counts[start:stop] > 0).any()):
            continue
        args = (hidden[start:stop], weight, bias, mapped_ids[start:stop], mapped[start:stop], teacher[start:stop],
                counts[start:stop], temperature)
        total = total + (checkpoint(_chunk_term, *args, use_reentrant=False) if torch.is_grad_enabled()
                         else _chunk_term(*args))
    return total / n.clamp(min=1).to(total.dtype)
