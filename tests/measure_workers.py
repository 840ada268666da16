"""Workers for the isolation tests, run in child processes (this folder is put on PYTHONPATH)."""

from __future__ import annotations

import time


def allocate(mib: int, hold: float = 0.0) -> dict:
    """Touch ``mib`` MiB of fresh memory, optionally hold it, free it."""
    import torch

    block = torch.ones(mib * 2**20 // 4)
    time.sleep(hold)
    total = float(block.sum())
    del block
    return {"mib": mib, "sum": total}


def boom(message: str) -> dict:
    raise KeyError(message)


def sleep(seconds: float) -> dict:
    time.sleep(seconds)
    return {}


def two_phases(charged_mib: int, free_mib: int) -> dict:
    """A reference phase that must not count, then the phase the worker reports."""
    from destila.eval.measure import active_meter

    allocate(free_mib)
    meter = active_meter()
    meter.restart_peak()
    allocate(charged_mib)
    return {"peak_bytes": meter.peak()}
