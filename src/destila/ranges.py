"""Range checks for numeric options, shared by the specs and the commands (bottom layer: imports nothing of destila).

Each check raises ``ValueError`` with one line: the option, what was
expected, what was found and, where one fits, what to do. The name is the
option's field name (``max_tokens``); the command line shows the same line
under ``destila <command>: error:``. Naive equivalent::

    if not (isinstance(value, int) and value >= 1):
        raise ValueError(f"{name}: expected an integer ≥ 1, found {value!r}")

``bool`` is not taken for a number (``True`` is an ``int`` in Python), and a
NaN fails every comparison, so it is refused by every check here.
"""

from __future__ import annotations

import math


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _found(value, hint: str) -> str:
    return f"found {value!r}" + (f"; {hint}" if hint else "")


def check_int_at_least(name: str, value, minimum: int, hint: str = "") -> None:
    """``value`` is an integer ≥ ``minimum``."""
    if not (_is_int(value) and value >= minimum):
        raise ValueError(f"{name}: expected an integer ≥ {minimum}, {_found(value, hint)}")


def check_optional_int_at_least(name: str, value, minimum: int, hint: str = "") -> None:
    """``value`` is None (not given) or an integer ≥ ``minimum``."""
    if value is not None:
        check_int_at_least(name, value, minimum, hint)


def check_finite_at_least(name: str, value, minimum: float, strict: bool = False, hint: str = "") -> None:
    """``value`` is a finite number ≥ ``minimum`` (> ``minimum`` when ``strict``)."""
    ok = _is_number(value) and math.isfinite(value) and (value > minimum if strict else value >= minimum)
    if not ok:
        bound = f"> {minimum:g}" if strict else f"≥ {minimum:g}"
        raise ValueError(f"{name}: expected a finite number {bound}, {_found(value, hint)}")


def check_fraction(name: str, value, hint: str = "") -> None:
    """``value`` is a number strictly between 0 and 1."""
    if not (_is_number(value) and 0 < value < 1):
        raise ValueError(f"{name}: expected a number strictly between 0 and 1, {_found(value, hint)}")
