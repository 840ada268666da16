"""Which teacher layers a student keeps: a count, or an explicit list such as ``0-7,27-29``.

Written once here and used by ``destila student init --layers`` and
``destila demo --layers``.
"""

from __future__ import annotations

SELECTIONS = ("importance", "even", "contiguous")
"""How a count of layers is chosen (``--select``); see :mod:`destila.student.importance`."""
CRITERIA = ("greedy_kl", "skip_kl", "block_influence")
"""What ranks the layers for ``--select importance`` (``--criterion``)."""


def parse_layer_list(text: str) -> list[int]:
    """``"0-7,27-29"`` → ``[0, 1, ..., 7, 27, 28, 29]``; ValueError naming the expected form otherwise.

    The list is returned as written (not sorted, duplicates kept) so that
    :func:`check_layer_indices` can refuse a repeated index instead of hiding it.
    """
    kept = []
    try:
        for part in text.split(","):
            low, dash, high = part.strip().partition("-")
            if dash and int(high) < int(low):
                raise ValueError
            kept += list(range(int(low), int(high) + 1)) if dash else [int(low)]
    except ValueError:
        raise ValueError(f"--layers: expected teacher layer indices like 0-7,27-29, found {text!r}") from None
    return kept


def parse_layers(text: str) -> int | list[int]:
    """``--layers`` of ``student init``: ``"6"`` → ``6`` (a count), ``"0-7,27-29"`` or ``"3,"`` → a list of indices."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    return parse_layer_list(text.rstrip(","))


def format_layer_list(layers: list[int]) -> str:
    """``[0, 1, ..., 7, 27, 28, 29]`` → ``"0-7,27-29"`` (the inverse of :func:`parse_layer_list`)."""
    runs: list[list[int]] = []
    for layer in sorted(layers):
        if runs and layer == runs[-1][1] + 1:
            runs[-1][1] = layer
        else:
            runs.append([layer, layer])
    return ",".join(f"{low}-{high}" if high > low else str(low) for low, high in runs)


def evenly_spaced_layers(total: int, keep: int) -> list[int]:
    """Indices of ``keep`` layers spread over ``range(total)``, first and last included.

    >>> evenly_spaced_layers(30, 6)
    [0, 6, 12, 17, 23, 29]
    """
    if not 1 <= keep <= total:
        raise ValueError(f"layers: expected an integer between 1 and the teacher's {total} layers, found {keep}")
    if keep == 1:
        return [total - 1]
    return [round(i * (total - 1) / (keep - 1)) for i in range(keep)]


def check_layer_indices(indices: list[int], total: int) -> list[int]:
    """``indices`` sorted, after checking they are distinct teacher layers in ``range(total)``."""
    kept = sorted(indices)
    if not kept or len(set(kept)) != len(kept) or kept[0] < 0 or kept[-1] >= total:
        outside = [i for i in kept if not 0 <= i < total]
        why = f"{outside} out of range" if outside else "repeated or empty"
        raise ValueError(
            f"layers: expected distinct layer indices between 0 and {total - 1} (the teacher has {total} layers), "
            f"found {list(indices)} ({why})"
        )
    return kept
