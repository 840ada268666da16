"""The held-out split of a set of sequences: the same for training (``--eval-fraction``) and eval.

An online and an offline run over the same data hold out the same
sequences, and ``destila eval --eval-fraction F`` scores exactly the part
``destila train --eval-fraction F`` never trained on.
"""

from __future__ import annotations

import torch


def split_indices(count: int, eval_fraction: float, seed: int = 0) -> tuple[list[int], list[int]]:
    """``(train, held_out)`` sequence indices: a fixed-seed shuffle, the first ``eval_fraction`` held out.

    The seed is independent of the training seed: changing the training seed
    must not move sequences between the two parts.
    """
    if eval_fraction <= 0:
        return list(range(count)), []
    held = max(1, round(count * eval_fraction))
    if held >= count:
        raise ValueError(
            f"eval_fraction: {eval_fraction} of {count} sequences leaves nothing to train on; "
            "use a smaller fraction or more data"
        )
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed)).tolist()
    return sorted(order[held:]), sorted(order[:held])
