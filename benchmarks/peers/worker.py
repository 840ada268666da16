"""The process that measures one peer loss configuration (target of :func:`~destila.eval.measure.run_isolated`).

Importing this module imports every installed peer, so that their imports
(hundreds of MB for trl and torchtune) sit in the process baseline, as
torch's do, and are not charged to the loss.
"""

from __future__ import annotations

import importlib
import importlib.util

from benchmarks.peers.loss import PEERS, make_teacher, peer_loss

for _spec in PEERS.values():
    if importlib.util.find_spec(_spec.package.replace("-", "_")) is not None:
        try:
            importlib.import_module(_spec.module)
        except ImportError:  # e.g. Liger without a GPU build of Triton: the worker reports it when called
            pass


def peer_worker(peer: str, seq_len: int, hidden: int, vocab: int, dtype: str, device: str, chunk_size: int | None,
                repeats: int, max_seconds: float, beta: float, seed: int = 0) -> dict:
    """One peer configuration, run inside :func:`~destila.eval.measure.run_isolated`.

    The student's hidden states and head are drawn as destila's rows draw
    theirs (same shapes, same distribution); the teacher input is the
    peer's own (see :mod:`benchmarks.peers.loss`). Timed like destila's rows, by :func:`destila.bench.time_against_floor`.
    ``chunk_size`` None: the rows per chunk destila's fused loss chooses for these inputs, for the peer's own
    chunking (torchtune, Liger's chunked loss) and for its floor, so that every row of an N is chunked alike.
    """
    import torch

    # Imported inside the measured call, as destila's own loss_worker imports the loss: both rows pay alike.
    from destila.bench import fused_chunk_rows, make_loss_inputs, time_against_floor

    torch_dtype = getattr(torch, dtype)
    h, w = make_loss_inputs(seq_len, hidden, vocab, 0, torch_dtype, device, seed)[:2]
    chunk_size = fused_chunk_rows(h, w, chunk_size)
    teacher = make_teacher(peer, seq_len, hidden, vocab, torch_dtype, device, seed)
    labels = torch.arange(seq_len, device=device) % vocab  # every row counts

    def run(rows: int) -> None:
        part = {k: (v[:rows] if k != "weight" else v) for k, v in teacher.items()}
        peer_loss(peer, h[:rows], w, part, labels[:rows], beta=beta, chunk_size=chunk_size).backward()

    result = time_against_floor(run, h, w, seq_len=seq_len, chunk_size=chunk_size, repeats=repeats,
                                max_seconds=max_seconds, device=device)
    return {**result, "chunk_size": chunk_size}
