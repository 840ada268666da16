"""End-to-end benchmark: the paper's table (online vs offline dense / chunked / fused), measured here.

Each method trains the same student on the same sequences, in the same order,
with the same seed, in its own process (:func:`run_isolated`), through the
same :func:`destila.training.train_student` that users run:

- ``online``: the teacher runs on every batch; full-vocabulary loss (``--online-loss dense``);
- ``dense`` / ``chunked`` / ``fused``: from the top-K cache, with that loss implementation.

Reported per method: peak memory above the process baseline (models,
optimizer and activations included, the same way for every method), the
median step time after the warm-up steps, tokens/s, and the loss after every
step. The cache build (the teacher pass) is a one-time cost, reported apart
with the number of training runs after which caching has paid for itself.

``long_context`` runs one training step of the student alone with each
offline loss at growing sequence lengths, under a memory budget, to show
where dense and chunked stop fitting and fused goes on.
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from destila.bench.harness import step_clock, synchronize
from destila.bench.parsing import gib, int_list, name_list
from destila.io import write_atomic
from destila.models import (EMBEDDED, embedded_teacher_dir, final_hidden_states, load_causal_lm, load_config,
                            output_head)

METHODS = ("online", "dense", "chunked", "fused")
OFFLINE = ("dense", "chunked", "fused")


@dataclass
class E2EConfig:
    """One end-to-end comparison; defaults finish in about 10 minutes on 2 CPU cores.

    Each field is a flag of ``destila bench e2e`` (its metadata: help, choices, how the text is read).
    """

    teacher: str = field(default=EMBEDDED, metadata={
        "help": "teacher folder, .gguf file, or smollm2 (the embedded SmolLM2-135M)"})
    student: str | None = field(default=None, metadata={
        "help": "student folder; none: --student-layers cut from the teacher"})
    student_layers: int = field(default=6, metadata={"help": "layers of the cut student"})
    data: str = field(default="pydoc", metadata={"help": "text data, or pydoc"})
    seq_len: int = field(default=2048, metadata={"help": "tokens per sequence"})
    batch_size: int = field(default=1, metadata={"help": "sequences per step"})
    steps: int = field(default=6, metadata={"help": "training steps per method"})
    warmup_steps: int = field(default=1, metadata={"help": "first steps left out of the median step time"})
    methods: tuple[str, ...] = field(default=METHODS, metadata={
        "help": "comma-separated methods", "type": name_list})
    top_k: int = field(default=100, metadata={"help": "teacher entries cached per position"})
    learning_rate: float = field(default=1e-4, metadata={"help": "learning rate", "aliases": ["--lr"]})
    seed: int = field(default=0, metadata={"help": "training seed (hence the data order)"})
    device: str = field(default="cpu", metadata={"help": "cpu or cuda[:i]"})
    dtype: str = field(default="float32", metadata={
        "help": "bfloat16: mixed precision (on GPU)", "choices": ["float32", "bfloat16"]})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "recompute activations in backward"})
    workdir: str = field(default="bench-e2e", metadata={"help": "student, cache and runs are kept here"})
    timeout: float = field(default=3600.0, metadata={"help": "seconds before a method's process is killed"})
    threads: int | None = field(default=None, metadata={"help": "torch threads per process"})

    def __post_init__(self):
        unknown = sorted(set(self.methods) - set(METHODS))
        if unknown or not self.methods:
            raise ValueError(f"methods: expected a comma-separated subset of {', '.join(METHODS)}, found {unknown}")
        if self.steps <= self.warmup_steps:
            raise ValueError(f"steps: expected more than the {self.warmup_steps} warm-up step(s), found {self.steps}")
        if self.dtype not in ("float32", "bfloat16"):
            raise ValueError(f"dtype: expected float32 or bfloat16, found {self.dtype!r}")

    @property
    def tokens(self) -> int:
        """Tokens the run needs: one sequence per row of every step."""
        return self.steps * self.batch_size * self.seq_len


@dataclass
class LongContextConfig:
    """One training step of the student alone per (loss impl, sequence length), under a memory budget.

    ``seq_lens`` and ``memory_budget`` are flags of ``destila bench e2e --long-context``; the
    rest comes from the :class:`E2EConfig` of the same command line.
    """

    student: str
    seq_lens: tuple[int, ...] = field(default=(2048, 4096, 8192, 16384, 32768), metadata={
        "help": "--long-context lengths", "type": int_list})
    impls: tuple[str, ...] = OFFLINE
    top_k: int = 100
    memory_budget: int = field(default=8 << 30, metadata={
        "help": "--long-context: GiB a step may use above its baseline on CPU", "type": gib, "metavar": "GIB",
        "default_text": "8"})
    device: str = "cpu"
    dtype: str = "float32"
    gradient_checkpointing: bool = True
    timeout: float = 1800.0
    threads: int | None = None
    notes: list[str] = field(default_factory=list)

    @classmethod
    def for_e2e(cls, e2e: E2EConfig, **options) -> LongContextConfig:
        """The long-context sweep of ``e2e``'s student (cut from its teacher when it names none), on its
        device, dtype and threads, with its top-K."""
        teacher = str(embedded_teacher_dir()) if e2e.teacher == EMBEDDED else e2e.teacher
        return cls(student=prepare_student(e2e, teacher), top_k=e2e.top_k, device=e2e.device, dtype=e2e.dtype,
                   threads=e2e.threads, **options)


# -- workers (each runs in its own process) --------------------------------------


def cache_worker(teacher: str, data: str, output: str, seq_len: int, max_tokens: int, top_k: int,
                 device: str) -> dict:
    """Build the cache; the teacher pass's wall time and throughput."""
    # heavy: torch; this module's configs are read by `destila --help`
    from destila.cache import BuildSpec, build_cache
    from destila.targets.spec import TargetSpec

    start = time.perf_counter()
    report = build_cache(BuildSpec.from_options(teacher, data, output, seq_len=seq_len, max_tokens=max_tokens,
                                   targets=TargetSpec(top_k=top_k), batch_size=1, device=device, progress=False))
    return {"seconds": time.perf_counter() - start, "tokens": report.tokens,
            "teacher_tokens_per_second": report.tokens_per_second}


def train_worker(method: str, student: str, out: str, cache: str | None, teacher: str | None, data: str | None,
                 seq_len: int, steps: int, batch_size: int, learning_rate: float, seed: int, device: str,
                 dtype: str, gradient_checkpointing: bool, max_tokens: int | None = None) -> dict:
    """Train ``steps`` steps with ``method``; each step's wall time and logged loss.

    Online, the student reads the first ``max_tokens`` tokens of ``data``
    (default: ``steps × batch_size × seq_len``, one pass); pass the cache's
    token count to train on the very sequences an offline student reads.
    """
    # heavy: transformers' Trainer
    from destila.training import DistillationArguments, train_student
    from destila.training.callbacks import read_training_log

    clock = step_clock(device)
    args = DistillationArguments(
        output_dir=out, max_steps=steps, per_device_train_batch_size=batch_size, learning_rate=learning_rate,
        lr_scheduler_type="constant", logging_steps=1, save_strategy="no", report_to="none", seed=seed,
        impl="fused" if method == "online" else method, online_loss="dense", bf16=dtype == "bfloat16",
        # The KL alone, as the reference table and TRL's GKD (the peers' rows) train: `destila train`'s default
        # adds the cross-entropy, which would make the rows incomparable with theirs.
        hard_weight=0.0,
        # Mixed precision keeps float32 master weights and hands the head float32 hidden states: the fused
        # loss then runs the bf16 GEMMs autocast would run for a plain head (precision fast) on CUDA.
        precision="fast" if method == "fused" and dtype == "bfloat16" and device.startswith("cuda") else "auto",
        gradient_checkpointing=gradient_checkpointing, use_cpu=device == "cpu", disable_tqdm=True,
        dataloader_num_workers=0,
    )
    online = method == "online"
    train_student(student, out, args, cache=None if online else cache, teacher=teacher if online else None,
                  data=data if online else None, seq_len=seq_len,
                  max_tokens=max_tokens or steps * batch_size * seq_len,
                  callbacks=(clock,))
    records = read_training_log(Path(out) / "log.jsonl")
    return {"step_seconds": clock.seconds, "losses": [r["loss"] for r in records],
            "kl": [r["kl"] for r in records], "ce": [r["ce"] for r in records]}


def long_context_worker(impl: str, student: str, seq_len: int, top_k: int, device: str, dtype: str,
                        gradient_checkpointing: bool) -> dict:
    """One forward+backward of the student on one sequence of ``seq_len`` tokens with random top-K targets."""
    # heavy: torch, imported in the worker's own process
    import torch

    from destila.losses import distill_loss  # heavy: torch

    model = load_causal_lm(student, device=device)
    model.train()
    if gradient_checkpointing:
        model.gradient_checkpointing_enable()
    vocab = output_head(model)[0].shape[0]
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, vocab, (1, seq_len), generator=generator).to(device)
    scores = torch.randn(seq_len, top_k, generator=generator)
    # Distinct ids within a row, different rows: a random base shifted by the position.
    base = torch.randperm(vocab, generator=generator)[:top_k]
    topk_ids = ((base[None, :] + torch.arange(seq_len)[:, None]) % vocab).to(device)
    topk_logprobs = (torch.log_softmax(scores, -1) - 0.1).sort(-1, descending=True).values.to(device)
    tail = torch.log(-torch.expm1(topk_logprobs.float().logsumexp(-1)))
    start = time.perf_counter()
    with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
        hidden = final_hidden_states(model, input_ids)[0]  # [T, H]: one sequence
    weight, bias = output_head(model)
    loss = distill_loss(hidden, weight, topk_ids, topk_logprobs, tail, bias=bias, impl=impl)
    loss.backward()
    synchronize(device)
    return {"seconds": time.perf_counter() - start, "loss": loss.item()}


# -- the comparison ------------------------------------------------------------------


def prepare_student(cfg: E2EConfig, teacher: str) -> str:
    """The student to train: the given one, or ``student_layers`` cut from the teacher (made once)."""
    from destila.student import StudentInitSpec, init_student  # heavy: torch

    if cfg.student is not None:
        load_config(cfg.student)  # a student that cannot load is refused before the teacher pass, not as a row
        return cfg.student
    path = Path(cfg.workdir) / f"student-{cfg.student_layers}-layers"
    if not (path / "config.json").exists():
        init_student(StudentInitSpec(teacher, path, layers=cfg.student_layers))
    return str(path)


def run_e2e(cfg: E2EConfig, on_row=None) -> dict:
    """Every method of ``cfg`` in its own process; ``{"cache": ..., "rows": [...], "break_even_runs": ...}``."""
    from destila.eval.measure import run_isolated  # heavy: destila.eval imports torch

    teacher = str(embedded_teacher_dir()) if cfg.teacher == EMBEDDED else cfg.teacher
    load_config(teacher)  # a model that cannot load is refused in one line, before anything is written
    if cfg.student is not None:
        load_config(cfg.student)
    workdir = Path(cfg.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    student = prepare_student(cfg, teacher)
    cache_path = workdir / f"cache-{cfg.seq_len}-{cfg.tokens}"
    cache = run_isolated("destila.bench.e2e:cache_worker", dict(
        teacher=teacher, data=cfg.data, output=str(cache_path), seq_len=cfg.seq_len, max_tokens=cfg.tokens,
        top_k=cfg.top_k, device=cfg.device), device=cfg.device, timeout=cfg.timeout, threads=cfg.threads)
    if cache["status"] != "ok":
        raise RuntimeError(f"bench e2e: the cache build failed ({cache['status']}): {cache['error']}")
    cache_info = {**cache["result"], "peak_bytes": cache["peak_bytes"], "path": str(cache_path)}
    rows = []
    for method in cfg.methods:
        out = workdir / f"run-{method}"
        if out.exists():
            shutil.rmtree(out)  # a previous run's log would be appended to
        run = run_isolated("destila.bench.e2e:train_worker", dict(
            method=method, student=student, out=str(out), cache=str(cache_path), teacher=teacher, data=cfg.data,
            seq_len=cfg.seq_len, steps=cfg.steps, batch_size=cfg.batch_size, learning_rate=cfg.learning_rate,
            seed=cfg.seed, device=cfg.device, dtype=cfg.dtype, gradient_checkpointing=cfg.gradient_checkpointing,
        ), device=cfg.device, timeout=cfg.timeout, threads=cfg.threads)
        row = method_row(method, run, cfg)
        rows.append(row)
        if on_row:
            on_row(row)
    _compare_to_online(rows)
    return {"config": asdict(cfg), "cache": cache_info, "rows": rows,
            "break_even_runs": break_even_runs(cache_info["seconds"], rows, cfg.steps)}


def method_row(method: str, run: dict, cfg: E2EConfig) -> dict:
    row = {"method": method, "status": run["status"], "seq_len": cfg.seq_len, "batch_size": cfg.batch_size,
           "device": cfg.device, "dtype": cfg.dtype, "peak_bytes": run["peak_bytes"], "error": run["error"]}
    if run["status"] == "ok":
        result = run["result"]
        timed = result["step_seconds"][cfg.warmup_steps:]
        step = statistics.median(timed)
        row.update(step_seconds=step, tokens_per_second=cfg.batch_size * cfg.seq_len / step,
                   final_loss=result["losses"][-1], losses=result["losses"], kl=result["kl"], ce=result["ce"],
                   all_step_seconds=result["step_seconds"])
    return row


def _compare_to_online(rows: list[dict]) -> None:
    online = next((r for r in rows if r["method"] == "online" and r["status"] == "ok"), None)
    for row in rows:
        if online is None or row["status"] != "ok":
            continue
        row["memory_vs_online"] = row["peak_bytes"] / online["peak_bytes"]
        row["time_vs_online"] = row["step_seconds"] / online["step_seconds"]
        row["loss_diff_vs_online"] = row["final_loss"] - online["final_loss"]


def break_even_runs(cache_seconds: float, rows: list[dict], steps: int) -> float | None:
    """Training runs (of ``steps`` steps over the cached data) after which the cache has paid for itself.

    A run costs ``steps × step_time``; offline runs also share the one-time
    cache build. Break-even: ``cache / (steps × (online − fused))``.
    """
    by_method = {r["method"]: r for r in rows if r["status"] == "ok"}
    if "online" not in by_method or "fused" not in by_method:
        return None
    saved = steps * (by_method["online"]["step_seconds"] - by_method["fused"]["step_seconds"])
    return cache_seconds / saved if saved > 0 else None


def run_long_context(cfg: LongContextConfig, on_row=None) -> list[dict]:
    """One training step per (impl, length) in its own process; an impl stops at its first failure."""
    from destila.eval.measure import run_isolated  # heavy: destila.eval imports torch

    rows, stopped = [], set()
    for seq_len in cfg.seq_lens:
        for impl in cfg.impls:
            row = {"impl": impl, "seq_len": seq_len, "memory_budget": cfg.memory_budget, "device": cfg.device}
            if impl in stopped:
                row.update(status="skipped", peak_bytes=None, seconds=None,
                           error="did not fit at a shorter length")
            else:
                run = run_isolated("destila.bench.e2e:long_context_worker", dict(
                    impl=impl, student=cfg.student, seq_len=seq_len, top_k=cfg.top_k, device=cfg.device,
                    dtype=cfg.dtype, gradient_checkpointing=cfg.gradient_checkpointing,
                ), device=cfg.device, timeout=cfg.timeout, threads=cfg.threads,
                    memory_limit=None if cfg.device.startswith("cuda") else cfg.memory_budget)
                status, error = budget_status(run, cfg.memory_budget, cfg.device)
                row.update(status=status, peak_bytes=run["peak_bytes"], error=error,
                           seconds=(run["result"] or {}).get("seconds"))
                if status != "ok":
                    stopped.add(impl)
            rows.append(row)
            if on_row:
                on_row(row)
    return rows


def budget_status(run: dict, budget: int, device: str) -> tuple[str, str | None]:
    """``(status, error)`` of one long-context step: on CPU a step fits only if its peak is within ``budget``.

    The child's address-space cap (``memory_limit``) keeps the machine safe but
    has slack, so a step can complete a little above the budget; that is not fitting.
    """
    if run["status"] == "ok" and not device.startswith("cuda") and run["peak_bytes"] > budget:
        return "oom", f"peak {run['peak_bytes'] / 2**30:.2f} GiB above the memory limit {budget / 2**30:.2f} GiB"
    return run["status"], run["error"]


def longest_fitting(rows: list[dict]) -> dict[str, int | None]:
    """The longest sequence each impl trained at."""
    best: dict[str, int | None] = {}
    for row in rows:
        best.setdefault(row["impl"], None)
        if row["status"] == "ok":
            best[row["impl"]] = max(best[row["impl"]] or 0, row["seq_len"])
    return best


def save_json(payload, path: str | Path) -> None:
    """``payload`` as indented JSON at ``path``, written atomically (a reader sees the old file or the new one)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(payload, indent=2))
