"""How the benchmark configs' flags read their text: ``"2K,4K"`` → ``(2048, 4096)``, ``"14"`` GiB → bytes.

Each function is named in a config field's metadata (``"type"``) and called by
argparse on the flag's text; a bad text raises ``ArgumentTypeError``, which
argparse reports as one line with the command's usage (exit 2).
"""

from __future__ import annotations

import argparse


def int_list(text: str) -> tuple[int, ...]:
    """``"2048,4K,64k"`` → ``(2048, 4096, 65536)``."""
    values = []
    for part in text.split(","):
        part = part.strip().lower()
        scale = 1024 if part.endswith("k") else 1
        try:
            values.append(int(part[:-1] if scale > 1 else part) * scale)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected integers like 2048 or 4K, found {part!r}") from None
    return tuple(values)


def name_list(text: str) -> tuple[str, ...]:
    """``"fused, dense"`` → ``("fused", "dense")`` (empty parts dropped)."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


def gib(text: str) -> int:
    """``"14"`` or ``"0.5"`` (GiB) → bytes."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size in GiB such as 14 or 0.5, found {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive size in GiB, found {text!r}")
    return int(value * 2**30)
