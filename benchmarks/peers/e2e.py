"""End-to-end against TRL: the same student, data, sequence length, steps and seed, trained by TRL's trainer.

``python -m benchmarks.peers e2e`` runs :func:`destila.bench.e2e.run_e2e` for
destila's methods (online, offline fused by default), then each peer trainer
below in its own process (:func:`~destila.eval.measure.run_isolated`),
then measures every trained student's **full-vocabulary forward KL to the
teacher on held-out sequences** (the sequences right after the trained ones),
each in its own process.

Peers:

- ``trl-gkd``: ``trl.experimental.gkd.GKDTrainer`` with ``lmbda=0`` (no
  on-policy generation: the dataset's sequences, as destila trains) and
  ``beta=0`` (its generalized JSD at β = 0 is the forward KL, destila's
  divergence): the teacher runs on every batch, both models' full logits
  ``[B, L, V]`` feed ``generalized_jsd_loss``. TRL's stable
  ``DistillationTrainer`` (1.16) only trains on completions it generates
  (on-policy), which is not this comparison; it is reported unavailable with
  that reason, as is Liger through TRL (TRL 1.16's distillation trainers
  have no Liger path).

What is matched: the student checkpoint, the packed sequences (destila's
:func:`~destila.data.pack_documents`, the same train / held-out split), the
batch size, steps, learning rate, constant schedule, AdamW defaults, seed
(hence the data order), dtype, gradient checkpointing off (TRL's configs
default it on), and the loss (forward KL, T = 1, no hard term). Reported like
destila's rows: peak memory above the process baseline, the median step time
after the warm-up steps, the loss at every step.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from destila.bench import method_row, name_list, prepare_student, run_e2e, run_isolated, step_clock
from destila.models import EMBEDDED, embedded_teacher_dir

PEER_TRAINERS = {
    "trl-gkd": "trl: GKDTrainer(lmbda=0, beta=0), teacher online, full logits",
    "trl-distill": "trl: DistillationTrainer",
    "trl-gkd-liger": "trl + liger-kernel: GKD with Liger's fused JSD",
}
UNAVAILABLE = {
    "trl-distill": "on-policy only in trl 1.16: it trains on completions it generates, not on the given text",
    "trl-gkd-liger": "trl 1.16's distillation trainers have no Liger loss path (use_liger_kernel covers SFT only)",
}


@dataclass
class PeerTrainers:
    """Which peer trainers run beside destila's methods, and the held-out text they are scored on (flags)."""

    peers: tuple[str, ...] = field(default=tuple(PEER_TRAINERS), metadata={
        "help": f"comma-separated peer trainers: {', '.join(PEER_TRAINERS)}", "type": name_list,
        "default_text": "all"})
    heldout_tokens: int = field(default=4096, metadata={
        "help": "held-out tokens on which every trained student's full KL to the teacher is measured"})

    def __post_init__(self) -> None:
        unknown = [p for p in self.peers if p not in PEER_TRAINERS]
        if unknown or not self.peers:
            raise ValueError(f"peers: expected some of {', '.join(PEER_TRAINERS)}, found {unknown or 'none'}")


def peer_trainer_unavailable(name: str) -> str | None:
    """Why the peer trainer ``name`` cannot run here, or None."""
    if name in UNAVAILABLE:
        return UNAVAILABLE[name]
    if importlib.util.find_spec("trl") is None:
        return "trl not installed (pip install 'destila[peers]')"
    return None


def packed_rows(teacher: str, data: str, seq_len: int, tokens: int):
    """The packed source destila's online training reads for these arguments, and its tokenizer."""
    from destila.data import DataSpec, packed_source  # in the measured process: see trl_gkd_worker
    from destila.models import load_tokenizer

    tokenizer = load_tokenizer(teacher)
    return packed_source(DataSpec(data, seq_len=seq_len, max_tokens=tokens), tokenizer), tokenizer


def trl_gkd_worker(student: str, out: str, teacher: str, data: str, seq_len: int, steps: int, batch_size: int,
                   learning_rate: float, seed: int, device: str, dtype: str, gradient_checkpointing: bool) -> dict:
    """Train ``steps`` steps with TRL's GKDTrainer (off-policy, online teacher); step times and losses."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    # Imported inside the measured call, as destila's own train_worker imports its trainer: both rows pay alike.
    import torch
    from datasets import Dataset
    from trl.experimental.gkd import GKDConfig, GKDTrainer

    from destila.data import collate, hf_labels
    from destila.models import load_causal_lm
    from destila.training.datasets import split_indices

    source, tokenizer = packed_rows(teacher, data, seq_len, steps * batch_size * seq_len)
    train, _ = split_indices(len(source), 0.0)
    rows = [source[i] for i in train]  # GKD takes a datasets.Dataset: the same rows, as columns
    dataset = Dataset.from_dict({key: [row[key].tolist() for row in rows] for key in rows[0]})
    dataset.set_format("torch")

    def gkd_collate(items: list[dict]) -> dict:
        batch = collate(items)
        # GKD's forward takes no position_ids: within a packed row its models attend across document
        # boundaries, where destila restarts positions per document.
        return {"input_ids": batch["input_ids"], "attention_mask": torch.ones_like(batch["input_ids"]),
                "labels": hf_labels(batch["labels"])}  # Hugging Face's convention: GKD shifts them itself

    args = GKDConfig(
        output_dir=out, max_steps=steps, per_device_train_batch_size=batch_size, learning_rate=learning_rate,
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, logging_steps=1, save_strategy="no",
        report_to="none", seed=seed, lmbda=0.0, beta=0.0, temperature=1.0, seq_kd=False, bf16=dtype == "bfloat16",
        fp16=False, gradient_checkpointing=gradient_checkpointing, use_cpu=device == "cpu", disable_tqdm=True,
        dataloader_num_workers=0, max_length=seq_len,
    )
    clock = step_clock(device)
    trainer = GKDTrainer(model=load_causal_lm(student), teacher_model=load_causal_lm(teacher), args=args,
                         train_dataset=dataset, data_collator=gkd_collate, processing_class=tokenizer,
                         callbacks=[clock])
    trainer.train()
    trainer.save_model(out)
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return {"step_seconds": clock.seconds, "losses": losses}


def heldout_kl_worker(model: str, teacher: str, data: str, seq_len: int, skip_tokens: int, eval_tokens: int,
                      device: str) -> dict:
    """Full-vocabulary forward KL(teacher ‖ model) per token on the ``eval_tokens`` after the first ``skip_tokens``."""
    import torch

    from destila.data import collate
    from destila.eval.quality import metrics_from_sums, quality_sums
    from destila.models import load_causal_lm

    source, _ = packed_rows(teacher, data, seq_len, skip_tokens + eval_tokens)
    held = range(skip_tokens // seq_len, len(source))
    if len(held) == 0:
        raise ValueError(f"data: no sequences left after the {skip_tokens} trained tokens for a held-out KL")
    batches = [{k: v.to(device) for k, v in collate([source[i]]).items()} for i in held]
    with torch.no_grad():
        sums = quality_sums(load_causal_lm(model, device=device), batches, load_causal_lm(teacher, device=device))
    metrics = metrics_from_sums(sums)
    return {"heldout_kl": metrics["kl_to_teacher"], "heldout_tokens": metrics["tokens"],
            "heldout_cross_entropy": metrics["cross_entropy"]}


def run_peer_trainers(cfg, teacher: str, student: str, peers: tuple[str, ...], on_row=None) -> list[dict]:
    """Each peer trainer of ``peers`` on ``cfg`` (an E2EConfig), in its own process; rows like destila's."""
    rows = []
    for name in peers:
        reason = peer_trainer_unavailable(name)
        if reason:
            row = {"method": name, "status": "unavailable", "error": reason, "peak_bytes": None,
                   "seq_len": cfg.seq_len, "batch_size": cfg.batch_size, "device": cfg.device, "dtype": cfg.dtype}
        else:
            out = Path(cfg.workdir) / f"run-{name}"
            shutil.rmtree(out, ignore_errors=True)
            run = run_isolated("benchmarks.peers.e2e:trl_gkd_worker", dict(
                student=student, out=str(out), teacher=teacher, data=cfg.data, seq_len=cfg.seq_len,
                steps=cfg.steps, batch_size=cfg.batch_size, learning_rate=cfg.learning_rate, seed=cfg.seed,
                device=cfg.device, dtype=cfg.dtype, gradient_checkpointing=cfg.gradient_checkpointing,
            ), device=cfg.device, timeout=cfg.timeout, threads=cfg.threads)
            if run["status"] == "ok":  # GKD logs no kl/ce split: its loss is the KL
                run["result"].update(kl=run["result"]["losses"], ce=[])
            row = method_row(name, run, cfg)
        row["trainer"] = PEER_TRAINERS[name]
        rows.append(row)
        if on_row:
            on_row(row)
    return rows


def add_heldout_kl(rows: list[dict], cfg, teacher: str, eval_tokens: int) -> None:
    """Each trained model's held-out full KL (its own process), and the ratios to TRL's GKD row."""
    for row in rows:
        if row["status"] != "ok":
            continue
        started = time.perf_counter()
        run = run_isolated("benchmarks.peers.e2e:heldout_kl_worker", dict(
            model=str(Path(cfg.workdir) / f"run-{row['method']}"), teacher=teacher, data=cfg.data,
            seq_len=cfg.seq_len, skip_tokens=cfg.tokens, eval_tokens=eval_tokens, device=cfg.device,
        ), device=cfg.device, timeout=cfg.timeout, threads=cfg.threads)
        row["heldout_seconds"] = time.perf_counter() - started
        if run["status"] == "ok":
            row.update(run["result"])
        else:
            row["heldout_error"] = f"{run['status']}: {run['error']}"
    compare_to(rows, "trl-gkd")


def compare_to(rows: list[dict], reference: str) -> None:
    """Ratios of every row that ran to the ``reference`` row: memory, step time, relative held-out KL gap."""
    ref = next((r for r in rows if r["method"] == reference and r["status"] == "ok"), None)
    for row in rows:
        if ref is None or row["status"] != "ok":
            continue
        row[f"memory_vs_{reference}"] = row["peak_bytes"] / ref["peak_bytes"]
        row[f"time_vs_{reference}"] = row["step_seconds"] / ref["step_seconds"]
        if row.get("heldout_kl") is not None and ref.get("heldout_kl"):
            row[f"heldout_kl_vs_{reference}"] = row["heldout_kl"] / ref["heldout_kl"] - 1


def e2e_table_rows(rows: list[dict]) -> list[list[str]]:
    """Rows as strings for the terminal and the docs."""
    def num(value, fmt):
        return "–" if value is None else format(value, fmt)

    out = []
    for r in rows:
        status = r["status"] if r["status"] == "ok" else f"{r['status']} ({r['error']})"
        out.append([r.get("trainer") or f"destila {r['method']}", status,
                    num(r["peak_bytes"] and r["peak_bytes"] / 2**30, ".2f"), num(r.get("step_seconds"), ".2f"),
                    num(r.get("losses") and r["losses"][-1], ".4f"),
                    r["heldout_error"] if r.get("heldout_error") else num(r.get("heldout_kl"), ".4f"),
                    num(r.get("memory_vs_trl-gkd"), ".2f"), num(r.get("time_vs_trl-gkd"), ".2f"),
                    num(r.get("heldout_kl_vs_trl-gkd") and 100 * r["heldout_kl_vs_trl-gkd"], "+.2f")])
    return out


E2E_COLUMNS = ("trainer", "status", "peak GiB", "step s (median)", "last train loss", "held-out full KL",
               "memory × TRL", "time × TRL", "held-out KL vs TRL (%)")


def run_e2e_with_peers(cfg, peers: tuple[str, ...], heldout_tokens: int, on_row=None) -> dict:
    """destila's methods of ``cfg`` (:func:`~destila.bench.e2e.run_e2e`), then the peer trainers, then the
    held-out KL of every trained student; the payload of ``run_e2e`` with the peer rows appended."""
    result = run_e2e(cfg, on_row=on_row)
    teacher = str(embedded_teacher_dir()) if cfg.teacher == EMBEDDED else cfg.teacher
    result["rows"] += run_peer_trainers(cfg, teacher, prepare_student(cfg, teacher), peers, on_row=on_row)
    add_heldout_kl(result["rows"], cfg, teacher, heldout_tokens)
    result["heldout_tokens"] = heldout_tokens
    return result
