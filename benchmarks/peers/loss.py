"""The output-head benchmark's peer rows: the losses users would pick instead of destila's, as they ship.

``python -m benchmarks.peers loss`` adds one row per peer to the sweep of
:mod:`destila.bench.loss` (through its ``others`` rows), measured the same way (a fresh process per
configuration, peak memory above the process baseline with inputs included,
the median fwd+bwd time, the floor timed in the same process after each
run). The peers' own code is imported and called; only the student's head
projection is written here where the peer expects logits (``h Wᵀ``, as the
peer's trainer gets them from the model's forward).

A peer needs what it needs as input, and that input is built and counted in
its memory, because that is the price its users pay:

==============  ===============================================  =====================================
peer            called                                           teacher input it needs
==============  ===============================================  =====================================
torchtune       ``ForwardKLWithChunkedOutputLoss`` (chunked      full teacher logits ``[N, V]``;
                student logits, one chunk per ``chunk_size``)    student logits ``[N, V]`` in chunks
trl-gkd         ``GKDTrainer.generalized_jsd_loss``              full teacher and student logits
                                                                 ``[N, V]``
trl-chunked     ``_chunked_divergence_loss`` (the loss of        teacher hidden ``[N, H]`` and the
                TRL's ``DistillationTrainer``, tiled)            teacher head ``[V, H]``
liger-fljsd     ``LigerFusedLinearJSD`` (Triton)                 teacher hidden and head
liger-distill   ``LigerFusedLinearJSDLoss`` (Liger's fused       teacher hidden and head
                linear distillation base; Triton)
cce             ``linear_cross_entropy`` (Cut Cross-Entropy;     none: the labels' cross-entropy, the
                Triton)                                          speed reference of a fused CE kernel
==============  ===============================================  =====================================

The Triton peers run compiled on CUDA. On CPU they run only under Triton's
interpreter (``TRITON_INTERPRET=1``, as the GPU check's rehearsal runs them):
their values are real, their times mean nothing (the row's ``note`` says so).
Cut Cross-Entropy's kernels do not run in the interpreter; on CPU it is
reported unavailable with that reason.

destila's rows need only the cached top-K (ids, log-probs, tail: ``N·(6K+4)``
bytes). The teacher here has the student's hidden size.

Divergence: destila's rows are forward KL over the K+1 buckets. The TRL and
Liger peers take a generalized-JSD ``beta`` (``--peer-beta``; their ``β = 0``
is the forward KL over the full vocabulary, the default). torchtune's loss
is the cross-entropy to the teacher, ``−Σ p log q``: the forward KL plus the
teacher's entropy, the same gradient. ``tests/bench/test_peers_loss.py``
checks each value against destila's on a small case where both compute the
same quantity (K = V).

This module and its neighbours are the only code that imports trl,
torchtune or liger-kernel; the ``destila`` package never does.
"""

from __future__ import annotations

import importlib.util
import math
import warnings
from dataclasses import dataclass, field
from typing import ClassVar

from destila.bench import DTYPE_BYTES, LossBenchConfig, most_chunk_rows, name_list
from destila.losses.row_kernels import interpreting


@dataclass(frozen=True)
class LossPeer:
    """One peer loss: where it comes from, what it needs, what it computes."""

    name: str
    package: str  # the pip distribution (pinned in the ``peers`` extras)
    module: str  # imported to call it
    called: str
    inputs: str  # the teacher-side input it needs, counted in its memory
    divergence: str
    teacher: str  # "logits", "hidden", or "none" (a reference that is not a distillation loss)
    triton: bool = False  # Triton kernels: compiled on CUDA, or run by Triton's interpreter on CPU


PEERS = {p.name: p for p in (
    LossPeer("torchtune", "torchtune", "torchtune.modules.loss", "ForwardKLWithChunkedOutputLoss",
             "teacher logits [N,V] + student logits [N,V] in chunks", "forward KL + teacher entropy", "logits"),
    LossPeer("trl-gkd", "trl", "trl.experimental.gkd", "GKDTrainer.generalized_jsd_loss",
             "teacher + student logits [N,V]", "generalized JSD β", "logits"),
    LossPeer("trl-chunked", "trl", "trl.trainer.distillation_trainer", "_chunked_divergence_loss",
             "teacher hidden [N,H] + head [V,H]", "generalized JSD β", "hidden"),
    LossPeer("liger-fljsd", "liger-kernel", "liger_kernel.transformers", "LigerFusedLinearJSD",
             "teacher hidden [N,H] + head [V,H]", "generalized JSD β", "hidden", triton=True),
    LossPeer("liger-distill", "liger-kernel", "liger_kernel.chunked_loss", "LigerFusedLinearJSDLoss",
             "teacher hidden [N,H] + head [V,H]", "generalized JSD β", "hidden", triton=True),
    # Not a distillation loss: the cross-entropy on the labels, the time a fused CE kernel takes on this head.
    LossPeer("cce", "cut-cross-entropy", "cut_cross_entropy", "linear_cross_entropy", "labels only",
             "cross-entropy on labels (reference)", "none", triton=True),
)}
DESTILA_INPUTS = "top-K ids, log-probs, tail [N,K]"
DESTILA_DIVERGENCE = "forward KL, K+1 buckets"
# Float32 [N, V] arrays' worth of memory at a peer's peak (H 512, V 32768, float32, CPU),
# used only to skip what cannot fit the budget (the measurement is the figure).
PEER_GRIDS = {"torchtune": 5.2, "trl-gkd": 9.5}  # measured at N = 8K: 4.9 and 9.1


def divergence_label(peer: str, beta: float) -> str:
    """The divergence a peer row computes, for the table (β = 0: forward KL; β = 1: reverse KL)."""
    spec = PEERS[peer]
    if "β" not in spec.divergence:
        return spec.divergence
    return {0.0: "forward KL (β=0)", 1.0: "reverse KL (β=1)"}.get(beta, f"JSD β={beta:g}")


def unavailable_reason(peer: str, device: str) -> str | None:
    """Why ``peer`` cannot run on ``device`` here (None if it can): not installed, or Triton kernels on a CPU
    without Triton's interpreter (or, for Cut Cross-Entropy, on a CPU at all)."""
    spec = PEERS[peer]
    if importlib.util.find_spec(spec.module.split(".")[0]) is None:
        extra = "peers-gpu" if peer == "cce" else "peers"  # Cut Cross-Entropy's wheel is for GPU machines
        return f"{spec.package} not installed (pip install 'destila[{extra}]')"
    if spec.triton and not device.startswith("cuda"):
        if peer == "cce":
            return "needs CUDA (Cut Cross-Entropy's kernels do not run in Triton's interpreter)"
        if not interpreting():
            return (f"needs CUDA, or Triton's interpreter on CPU (TRITON_INTERPRET=1: values only, "
                    f"{spec.package} is Triton kernels)")
    return None


def interpreted_note(peer: str, device: str) -> str | None:
    """The row's note when ``peer`` runs in Triton's interpreter: its time is no measure of the kernel."""
    if PEERS[peer].triton and not device.startswith("cuda"):
        return "Triton interpreter on CPU: the values are real, the time is not the kernel's"
    return None


def teacher_bytes(peer: str, n: int, hidden: int, vocab: int, elem: int) -> int:
    """Bytes of the teacher-side input ``peer`` needs for ``n`` rows."""
    if PEERS[peer].teacher == "none":
        return 0
    if PEERS[peer].teacher == "logits":
        return n * vocab * elem
    return n * hidden * elem + vocab * hidden * elem


def predicted_peer_bytes(peer: str, n: int, hidden: int, vocab: int, elem: int, chunk_rows: int) -> int:
    """A generous estimate of a peer's peak above baseline, to skip what cannot fit (``chunk_rows``: the most
    rows per chunk the run can use, :func:`destila.bench.most_chunk_rows`)."""
    student = 2 * n * hidden * elem + 2 * vocab * hidden * elem
    grids = PEER_GRIDS.get(peer)
    work = int(grids * n * vocab * 4) if grids else 4 * chunk_rows * vocab * 4
    return student + teacher_bytes(peer, n, hidden, vocab, elem) + work


def make_teacher(peer: str, n: int, hidden: int, vocab: int, dtype, device: str, seed: int) -> dict:
    """The teacher-side input ``peer`` needs, random, built in row blocks (no large temporaries kept).

    ``{"hidden": [N, H], "weight": [V, H]}`` for a peer that projects the
    teacher itself, ``{"logits": [N, V]}`` (``hidden @ weight.T``) for one
    that takes logits.
    """
    import torch

    if PEERS[peer].teacher == "none":
        return {}
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    weight = torch.randn(vocab, hidden, device=device, generator=gen, dtype=dtype) * (2.0 / math.sqrt(hidden))
    th = torch.randn(n, hidden, device=device, generator=gen, dtype=dtype)
    if PEERS[peer].teacher == "hidden":
        return {"hidden": th, "weight": weight}
    logits = torch.empty(n, vocab, dtype=dtype, device=device)
    for start in range(0, n, 4096):
        torch.mm(th[start:start + 4096], weight.t(), out=logits[start:start + 4096])
    return {"logits": logits}


def peer_loss(peer: str, hidden, weight, teacher: dict, labels, *, beta: float = 0.0, chunk_size: int = 2048):
    """The peer's loss (0-dim, differentiable in ``hidden [N, H]`` and ``weight [V, H]``), called as it ships.

    ``teacher`` from :func:`make_teacher`; ``labels [N]`` (``-100`` drops a row).
    """
    import torch

    n = hidden.shape[0]
    if peer == "torchtune":
        from torchtune.modules.loss import ForwardKLWithChunkedOutputLoss

        chunks = max(1, math.ceil(n / chunk_size))
        # As torchtune's TransformerDecoder.chunked_output: the head applied per chunk of positions.
        student = [torch.nn.functional.linear(c, weight)[None] for c in hidden.chunk(chunks)]
        return ForwardKLWithChunkedOutputLoss(num_output_chunks=chunks)(
            student, [c[None] for c in teacher["logits"].chunk(chunks)], labels[None])
    if peer == "trl-gkd":
        with warnings.catch_warnings():  # "trl.experimental is unstable": known, and the version is pinned
            warnings.simplefilter("ignore")
            from trl.experimental.gkd import GKDTrainer

        student = torch.nn.functional.linear(hidden, weight)  # the model's full logits, as GKD gets them
        return GKDTrainer.generalized_jsd_loss(student[None], teacher["logits"][None], labels[None], beta=beta)
    mask = labels != -100
    if peer == "trl-chunked":
        from trl.trainer.distillation_trainer import _chunked_divergence_loss

        loss, _, _ = _chunked_divergence_loss(hidden[None], teacher["hidden"][None], weight, teacher["weight"],
                                              mask[None].long(), beta)
        return loss
    if peer == "liger-fljsd":
        from liger_kernel.transformers import LigerFusedLinearJSD

        return LigerFusedLinearJSD(jsd_beta=beta)(hidden, weight, teacher["hidden"], teacher["weight"], labels)
    if peer == "liger-distill":
        from liger_kernel.chunked_loss import LigerFusedLinearJSDLoss

        loss_fn = LigerFusedLinearJSDLoss(weight_hard_loss=0.0, weight_soft_loss=1.0, beta=beta,
                                          chunk_size=chunk_size)
        return loss_fn(hidden, weight, teacher["hidden"], teacher["weight"], labels)
    if peer == "cce":
        from cut_cross_entropy import linear_cross_entropy

        return linear_cross_entropy(hidden, weight, labels)
    raise ValueError(f"peer: expected one of {', '.join(PEERS)}, found {peer!r}")


@dataclass
class PeerRows:
    """The peers' rows of a loss sweep (:class:`destila.bench.loss.OtherRows`); each field is a flag."""

    peers: tuple[str, ...] = field(default=tuple(PEERS), metadata={
        "help": f"comma-separated peers: {', '.join(PEERS)}", "type": name_list, "default_text": "all"})
    peer_beta: float = field(default=0.0, metadata={
        "help": "the peers' generalized-JSD beta (0: forward KL, destila's divergence here)"})
    worker: ClassVar[str] = "benchmarks.peers.worker:peer_worker"

    def __post_init__(self) -> None:
        unknown = [p for p in self.peers if p not in PEERS]
        if unknown or not self.peers:
            raise ValueError(f"peers: expected some of {', '.join(PEERS)}, found {unknown or 'none'}")
        if not 0.0 <= self.peer_beta <= 1.0:
            raise ValueError(f"peer_beta: expected a JSD β in [0, 1] (0: forward KL), found {self.peer_beta}")

    @property
    def names(self) -> tuple[str, ...]:
        return self.peers

    def columns(self, impl: str) -> dict:
        """What destila's own rows need and compute, in the peers' columns."""
        if impl == "floor":
            return {"peer": "lm_head GEMMs", "inputs": "-", "divergence": "-"}
        return {"peer": f"destila: {impl}", "inputs": DESTILA_INPUTS, "divergence": DESTILA_DIVERGENCE}

    def configure(self, peer: str, n: int, cfg: LossBenchConfig) -> tuple[dict, dict | None, str | None]:
        """``(row fields, worker kwargs or None, why not run)`` for ``peer`` at ``n`` rows of ``cfg``."""
        elem = DTYPE_BYTES[cfg.dtype]
        fields = {"inputs": PEERS[peer].inputs, "divergence": divergence_label(peer, self.peer_beta),
                  "peer": f"{PEERS[peer].package}: {PEERS[peer].called}",
                  "predicted_bytes": predicted_peer_bytes(peer, n, cfg.hidden, cfg.vocab, elem,
                                                         most_chunk_rows(n, cfg)),
                  "input_bytes": 2 * n * cfg.hidden * elem + 2 * cfg.vocab * cfg.hidden * elem
                  + teacher_bytes(peer, n, cfg.hidden, cfg.vocab, elem)}
        reason = unavailable_reason(peer, cfg.device)
        if reason:
            return fields, None, reason
        if interpreted_note(peer, cfg.device):
            fields["note"] = interpreted_note(peer, cfg.device)
        kwargs = dict(peer=peer, seq_len=n, hidden=cfg.hidden, vocab=cfg.vocab, dtype=cfg.dtype, device=cfg.device,
                      chunk_size=cfg.chunk_size, repeats=cfg.repeats, max_seconds=cfg.max_seconds,
                      beta=self.peer_beta, seed=cfg.seed)
        return fields, kwargs, None


def peer_comparison(rows: list[dict]) -> list[dict]:
    """Per N, every row beside destila's fused: memory and time as ratios to fused, measured in the same sweep.

    ``time_vs_fused`` compares medians taken in different processes;
    ``floor_ratio_vs_fused`` compares each row's time over the floor timed in
    its own process (``ratio_to_floor``), which cancels load that changed
    between processes. Rows that did not run keep their status and reason.
    """
    fused = {r["seq_len"]: r for r in rows if r["impl"] == "fused" and r["status"] == "ok"}
    table = []
    for row in rows:
        if row["impl"] == "floor":
            continue
        base = fused.get(row["seq_len"])
        entry = {k: row.get(k) for k in ("seq_len", "impl", "peer", "inputs", "divergence", "status", "error",
                                         "note", "peak_bytes", "seconds", "ratio_to_floor")}
        ok = row["status"] == "ok" and base is not None
        entry["memory_vs_fused"] = row["peak_bytes"] / base["peak_bytes"] if ok else None
        entry["time_vs_fused"] = row["seconds"] / base["seconds"] if ok else None
        both = ok and row.get("ratio_to_floor") and base.get("ratio_to_floor")
        entry["floor_ratio_vs_fused"] = row["ratio_to_floor"] / base["ratio_to_floor"] if both else None
        table.append(entry)
    return table


def peer_verdicts(table: list[dict]) -> list[str]:
    """Per N, whether fused uses less peak memory than every peer that ran, and is no slower than the fastest."""
    lines = []
    for n in sorted({e["seq_len"] for e in table}):
        ran = [e for e in table if e["seq_len"] == n and e["impl"] in PEERS and e["status"] == "ok"
               and PEERS[e["impl"]].teacher != "none"]  # a reference (CE only) is no distillation peer
        if not ran or not any(e["impl"] == "fused" and e["status"] == "ok" for e in table if e["seq_len"] == n):
            continue
        leanest = min(ran, key=lambda e: e["memory_vs_fused"])
        line = (f"N={n}: leanest peer {leanest['impl']} uses {leanest['memory_vs_fused']:.2f}× fused's peak"
                f" ({'fused leaner' if leanest['memory_vs_fused'] > 1 else 'PEER LEANER'})")
        timed = [e for e in ran if not e.get("note")]  # an interpreted kernel's time says nothing of its speed
        if timed:
            fastest = min(timed, key=lambda e: e["floor_ratio_vs_fused"] or e["time_vs_fused"])
            speed = fastest["floor_ratio_vs_fused"] or fastest["time_vs_fused"]
            line += (f"; fastest peer {fastest['impl']} takes {speed:.2f}× fused's time over the floor "
                     f"({'fused no slower' if speed >= 1 else 'PEER FASTER'})")
        lines.append(line)
    return lines
