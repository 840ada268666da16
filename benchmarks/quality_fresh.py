"""Student quality on fresh tokens: does the teacher pay per training token when text is plentiful?

The ``fresh-*`` stages of ``benchmarks/student_quality.py``. Teacher: the
embedded SmolLM2-135M-Instruct. Data: the ``stdlib`` corpus (the standard
library's source, about 2 M training tokens), so no training token is ever
seen twice: every row trains one pass over the first 409,600 tokens of the
training split (1,600 sequences of 256 tokens), the same sequences for every
row, in the order its seed gives. Scored on 16,384 tokens of the held-out
modules (``--split test``). Student: the demo's (all 30 teacher layers, pruned
in width by activation importance to 528 residual channels, 6 of 9 query
heads, 2 of 3 key/value heads and 527 of 1,536 MLP channels; 67 M
parameters), trained with the demo's settings (batch 4 × 256, learning rate
5e-4 after 5 warm-up steps, embeddings frozen, bfloat16 autocast where the
CPU has it).

Rows (:data:`ROWS`):

- ``ce``: next-token cross-entropy only, no teacher;
- ``kd+ce``: forward KL to the cached top-100 at T = 1, plus CE (1:1; the demo's loss);
- ``kd+ce-t2``: the same at T = 2 (a cache built at T = 2; the KL term carries T² = 4);
- ``rskd+ce``: KL to S = 64 sampled teacher tokens (RS-KD) plus CE;
- ``pd``: the "Pre-training Distillation" recipe as destila expresses it: a T = 2 cache read
  through top-p 0.95 then top-K 50 (the rest of the mass in the tail bucket), the KD weight α
  ramped from 0 to 0.9 over the first 10% of steps with CE weighted 1 − α, and a
  warmup-stable-decay learning rate (the last 20% of steps decay linearly to 0).

Budgets: 25,600, 102,400 and 409,600 tokens (each 4× the one before), with
51,200 and 204,800 scored too for the curves. A constant learning rate makes
a budget a prefix of one run, so every row except ``pd`` trains once per seed
and scores the checkpoint saved at each budget; ``pd``'s schedule depends on
the run's length (its ramp and decay are fractions of it), so it trains one
run per budget. Each scored checkpoint writes one line to ``OUT/results.jsonl``
as soon as it is reached; a killed run resumes from its last checkpoint
(saved every 50 steps) and skips the budgets already scored.

    python benchmarks/student_quality.py fresh-prepare OUT     # held-out cache, student, the three training caches
    python benchmarks/student_quality.py fresh-run OUT --row ce --seed 0
    python benchmarks/student_quality.py fresh-all OUT         # every row and seed not done yet, as caches finish
    python benchmarks/student_quality.py fresh-task OUT        # the 600-question task on every final student
    python benchmarks/student_quality.py table OUT
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from transformers import TrainerCallback

from benchmarks.data_efficiency import data_efficiency
from destila.io.json_lines import append_json_line, read_json_lines
from destila.io.markdown import table_lines

SEQ_LEN, BATCH, TOP_K, SAMPLES = 256, 4, 100, 64
STEP_TOKENS = SEQ_LEN * BATCH
TRAIN_TOKENS = 409_600
HELDOUT_TOKENS = 16_384
BUDGETS = (25_600, 102_400, 409_600)  # the table's budgets, each 4× the one before
CURVE_BUDGETS = (25_600, 51_200, 102_400, 204_800, 409_600)  # scored for the curves
LEARNING_RATE, WARMUP_STEPS, SAVE_EVERY = 5e-4, 5, 50
SEEDS = (0, 1)


@dataclass(frozen=True)
class Cache:
    """A cache the rows train from: its folder name and its targets."""

    name: str
    targets: dict  # TargetSpec fields


CACHES = {
    "cache-t1": Cache("cache-t1", dict(top_k=TOP_K)),
    "cache-t2": Cache("cache-t2", dict(top_k=TOP_K, temperature=2.0)),
    "cache-sampled": Cache("cache-sampled", dict(kind="sampled", samples=SAMPLES)),
}


@dataclass(frozen=True)
class Row:
    """A row of the table: the cache it trains from, its loss options, and whether its schedule depends on
    the run's length (then every budget is its own run)."""

    cache: str
    options: dict = field(default_factory=dict)  # DistillationArguments fields
    per_budget: bool = False


ROWS = {
    "ce": Row("cache-t1", dict(soft_weight=0.0, hard_weight=1.0)),
    "kd+ce": Row("cache-t1", dict(soft_weight=1.0, hard_weight=1.0)),
    "kd+ce-t2": Row("cache-t2", dict(soft_weight=1.0, hard_weight=1.0, temperature=2.0)),
    "rskd+ce": Row("cache-sampled", dict(soft_weight=1.0, hard_weight=1.0)),
    # CE weighted 1 − α by the complement (0.1 at the peak), which --hard_weight may not contradict
    "pd": Row("cache-t2", dict(soft_weight=0.9, temperature=2.0, top_k=50, top_p=0.95,
                               soft_weight_schedule="ramp", soft_weight_warmup=0.1, hard_weight_complement=True,
                               lr_scheduler_type="warmup_stable_decay",
                               lr_scheduler_kwargs={"decay_type": "linear"}, decay_fraction=0.2),
              per_budget=True),
}


def _load() -> float:
    return os.getloadavg()[0]


def _teacher() -> str:
    from destila.models import embedded_teacher_dir

    return str(embedded_teacher_dir())


def _data(split: str, tokens: int):
    from destila.data import DataSpec

    return DataSpec("stdlib", split=split, seq_len=SEQ_LEN, max_tokens=tokens)


def _log(out: Path, record: dict) -> None:
    print(json.dumps(record), flush=True)
    append_json_line(out / "prepare.jsonl", record)


def prepare(out: Path, caches: list[str] | None = None) -> None:
    """The held-out cache, the student, then each training cache (each resumed where it stopped, skipped when
    complete; two prepares may build different caches at once). Every build logs a line to ``OUT/prepare.jsonl``
    with its time and the load."""
    from destila.cache import BuildSpec, build_cache
    from destila.targets.spec import TargetSpec

    out.mkdir(parents=True, exist_ok=True)
    teacher = _teacher()
    build = dict(seq_len=SEQ_LEN, batch_size=8, encoding="compact", progress=False)
    start, load = time.monotonic(), _load()
    if not cache_ready(out, "cache-heldout"):  # a complete cache is not opened (another prepare may hold none)
        report = build_cache(BuildSpec.from_options(teacher, _data("test", HELDOUT_TOKENS), out / "cache-heldout",
                                       max_tokens=HELDOUT_TOKENS, targets=TargetSpec(top_k=TOP_K), **build))
        _log(out, {"stage": "cache-heldout", "tokens": report.tokens, "seconds": round(time.monotonic() - start, 1),
                   "load_before": load, "load_after": _load()})
    student(out)
    for name in caches or list(CACHES):
        if cache_ready(out, name):
            continue
        start, load = time.monotonic(), _load()
        report = build_cache(BuildSpec.from_options(teacher, _data("train", TRAIN_TOKENS), out / name, max_tokens=TRAIN_TOKENS,
                                       targets=TargetSpec(**CACHES[name].targets), **build))
        _log(out, {"stage": name, "tokens": report.tokens, "seconds": round(time.monotonic() - start, 1),
                   "load_before": load, "load_after": _load()})


def student(out: Path) -> Path:
    """The demo's width-pruned student, calibrated on 1,024 tokens of the training split."""
    from destila.demo.settings import DemoSettings
    from destila.student import init_student

    folder = out / "student"
    if not (folder / "destila_student.json").exists():
        settings = DemoSettings()
        summary = init_student(_teacher(), folder, data="stdlib", calibration_tokens=settings.calibration_tokens,
                               **settings.student_width)
        _log(out, {"stage": "student", **{k: summary.get(k) for k in
                                          ("student_parameters", "start_perplexity", "teacher_perplexity")}})
    return folder


def cache_ready(out: Path, name: str) -> bool:
    from destila.cache.format import read_manifest

    try:
        return read_manifest(out / name).complete
    except (FileNotFoundError, ValueError):
        return False


def row_runnable(row: str) -> str | None:
    """Why ``row`` cannot run with the code installed now, or None."""
    from destila.training import DistillationArguments

    missing = [name for name in ROWS[row].options if name not in DistillationArguments.__dataclass_fields__
               and name != "decay_fraction"]
    return f"DistillationArguments has no {', '.join(missing)}" if missing else None


def read_lines(path: Path) -> list[dict]:
    """The records of a JSON-lines file (none if it does not exist yet)."""
    return read_json_lines(path) if path.exists() else []


def read_results(out: Path) -> list[dict]:
    return read_lines(out / "results.jsonl")


def scored_budgets(out: Path, row: str, seed: int) -> set[int]:
    return {r["budget_tokens"] for r in read_results(out) if r["row"] == row and r["seed"] == seed}


def evaluate(out: Path, model: Path) -> dict:
    """Every held-out metric of ``model`` on the held-out cache (all its tokens)."""
    from destila.eval import EvalSpec, evaluate_model

    metrics = evaluate_model(EvalSpec([str(model)], cache=str(out / "cache-heldout"), max_tokens=HELDOUT_TOKENS,
                                      new_tokens=1))
    return {k: metrics.get(k) for k in ("perplexity", "bits_per_byte", "accuracy", "top1_agreement", "kl_to_teacher",
                                        "tokens", "bytes", "parameters")}


def write_record(out: Path, record: dict, name: str = "results.jsonl") -> None:
    print(json.dumps(record), flush=True)
    append_json_line(out / name, record)


def start_record(out: Path) -> None:
    """The untrained student, scored once (budget 0, row ``start``)."""
    if not scored_budgets(out, "start", 0):
        write_record(out, {"row": "start", "corpus": "stdlib", "seed": 0, "budget_tokens": 0, "steps": 0,
                           "passes": 0.0,
                           **evaluate(out, out / "student"), "load": _load()})


class ScoreBudgets(TrainerCallback):
    """Saves a checkpoint at each budget step and scores it on the held-out cache before training goes on;
    a budget already in the results file (a resumed run) is not scored again."""

    def __init__(self, out: Path, row: str, seed: int, steps: dict[int, int], cache_tokens: int, started: float):
        self.out, self.row, self.seed, self.steps = out, row, seed, steps  # steps: step -> budget tokens
        self.cache_tokens, self.started = cache_tokens, started

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step in self.steps:
            control.should_save = True

    def on_save(self, args, state, control, **kwargs):
        step = state.global_step
        budget = self.steps.get(step)
        if budget is None or budget in scored_budgets(self.out, self.row, self.seed):
            return
        checkpoint = Path(args.output_dir) / f"checkpoint-{step}"
        load = _load()
        metrics = evaluate(self.out, checkpoint)
        write_record(self.out, {
            "row": self.row, "corpus": "stdlib", "seed": self.seed, "budget_tokens": budget, "steps": step,
            "passes": max(1.0, budget / self.cache_tokens), **metrics,
            "seconds_so_far": round(time.monotonic() - self.started, 1), "load": load,
            "options": {k: v for k, v in ROWS[self.row].options.items()}, "learning_rate": LEARNING_RATE})


def run(out: Path, row: str, seed: int) -> None:
    """Train ``row`` with ``seed`` (one run, or one per budget for a length-dependent schedule), scoring each
    budget as it is reached."""
    spec = ROWS[row]
    reason = row_runnable(row)
    if reason:
        raise SystemExit(f"fresh-run: the row {row} needs a feature this destila lacks ({reason})")
    if not cache_ready(out, spec.cache):
        raise SystemExit(f"fresh-run: the cache {out / spec.cache} is not complete; run fresh-prepare first")
    handle = claim(out, row, seed)  # held for the whole (row, seed), all its budget runs
    try:
        _run(out, row, seed, spec)
    finally:
        handle.close()


def claim(out: Path, row: str, seed: int):
    """The lock that says this process runs (row, seed), so another ``fresh-all`` worker leaves it alone; the
    kernel drops it when the process ends, even when killed. One line and exit 1 when another process holds it."""
    from destila.io import exclusive_lock

    (out / "runs").mkdir(parents=True, exist_ok=True)
    try:
        return exclusive_lock(_claim_path(out, row, seed), f"fresh-run: {row} seed {seed} is being run by another "
                                                           "process; wait for it, or stop it and run this again")
    except ValueError as busy:
        raise SystemExit(str(busy)) from None


def _claim_path(out: Path, row: str, seed: int) -> Path:
    return out / "runs" / f".{row}-seed{seed}.claim"


def claimed_elsewhere(out: Path, row: str, seed: int) -> bool:
    """Whether another process runs (row, seed) now (it holds the claim's lock)."""
    from destila.io import try_lock

    # The claim, and the training lock of each of its run folders (`destila train` holds OUT/.lock while it runs).
    runs = [out / "runs" / f"{row}-seed{seed}", *(out / "runs").glob(f"{row}-seed{seed}-b*")]
    locks = [_claim_path(out, row, seed), *(folder / ".lock" for folder in runs)]
    for path in locks:
        if path.exists():
            with open(path, "a+") as handle:
                if not try_lock(handle, blocking=False):  # closing the handle releases a lock taken here
                    return True
    return False


def _run(out: Path, row: str, seed: int, spec: Row) -> None:
    from destila.cache import TopKCache
    from destila.demo.budget import native_bf16
    from destila.demo.stages import train_from_cache

    start_record(out)
    cache_tokens = len(TopKCache(out / spec.cache)) * SEQ_LEN
    done = scored_budgets(out, row, seed)
    plans = ([[b] for b in CURVE_BUDGETS if b in BUDGETS] if spec.per_budget else [list(CURVE_BUDGETS)])
    for budgets in plans:
        if set(budgets) <= done:
            continue
        steps = {b // STEP_TOKENS: b for b in budgets}
        max_steps = max(steps)
        name = f"{row}-seed{seed}" + (f"-b{budgets[0]}" if spec.per_budget else "")
        options = dict(spec.options)
        fraction = options.pop("decay_fraction", None)
        if fraction is not None:
            options["lr_scheduler_kwargs"] = {**options.get("lr_scheduler_kwargs", {}),
                                              "num_decay_steps": max(1, round(fraction * max_steps))}
        started = time.monotonic()
        train_from_cache(
            str(out / "student"), out / "runs" / name, out / spec.cache, max_steps=max_steps, batch_size=BATCH,
            learning_rate=LEARNING_RATE, seed=seed, warmup_steps=WARMUP_STEPS, weight_decay=0.0,
            freeze_embeddings=True, bf16=native_bf16(), callbacks=(ScoreBudgets(out, row, seed, steps, cache_tokens,
                                                                                started),),
            save_strategy="steps", save_steps=SAVE_EVERY, save_total_limit=1, eval_strategy="steps", eval_steps=25,
            per_device_eval_batch_size=4, eval_cache=out / "cache-heldout", eval_sequences=4, **options)
        folder = out / "runs" / name
        for checkpoint in folder.glob("checkpoint-*"):
            shutil.rmtree(checkpoint)  # optimizer state: hundreds of MB; the final student stays


def all_runs(out: Path, poll_seconds: float = 120.0, tries: int = 3) -> None:
    """Every (row, seed) not complete yet, each in a fresh process (new code is picked up between runs), seed 0
    of every row first, in the order their caches are built; a row whose cache is still being built, or whose feature is
    missing, waits while others run; one that another worker runs now is left to it, so several ``fresh-all``
    processes share the rows. Stops when nothing is left or nothing can start."""
    failures: dict[tuple[str, int], int] = {}
    order = [(row, seed) for seed in SEEDS for row in ROWS]
    order.sort(key=lambda item: (item[1], list(CACHES).index(ROWS[item[0]].cache)))  # every row's seed 0 first
    while True:
        pending = [(row, seed) for row, seed in order if not _complete(out, row, seed)
                   and failures.get((row, seed), 0) < tries]
        if not pending:
            print("fresh-all: nothing left to run", flush=True)
            return
        ready = [(row, seed) for row, seed in pending if cache_ready(out, ROWS[row].cache)
                 and not claimed_elsewhere(out, row, seed) and _runnable_in_fresh_process(row)]
        if not ready:
            if all(claimed_elsewhere(out, row, seed) for row, seed in pending):
                print("fresh-all: every row left is being run by another worker", flush=True)
                return
            waiting = ", ".join(f"{row}/{seed}" for row, seed in pending)
            print(f"fresh-all: waiting for caches or features ({waiting}); next look in {poll_seconds:.0f} s",
                  flush=True)
            time.sleep(poll_seconds)
            continue
        row, seed = ready[0]
        command = [sys.executable, str(Path(__file__).with_name("student_quality.py")), "fresh-run", str(out),
                   "--row", row, "--seed", str(seed)]
        print(f"fresh-all: {' '.join(command)}", flush=True)
        if subprocess.run(command).returncode != 0:
            failures[(row, seed)] = failures.get((row, seed), 0) + 1
            time.sleep(poll_seconds)


def _complete(out: Path, row: str, seed: int) -> bool:
    wanted = set(BUDGETS) if ROWS[row].per_budget else set(CURVE_BUDGETS)
    return wanted <= scored_budgets(out, row, seed)


def _runnable_in_fresh_process(row: str) -> bool:
    """Whether ``row``'s options exist in the destila installed now (asked in a fresh process: this one keeps
    the code it started with)."""
    code = ("import sys; sys.path.insert(0, %r); from benchmarks.quality_fresh import row_runnable; "
            "sys.exit(1 if row_runnable(%r) else 0)") % (str(Path(__file__).resolve().parent.parent), row)
    return subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


# -- the big task on the final students -----------------------------------------------

TASKS = ("pydoc_next_word", "stdlib_next_word")
"""600 questions each (docs/eval.md, standard error about 2 points): next words of held-out pydoc topics, and of
the docstrings of the stdlib corpus's held-out modules (the training corpus's own held-out text)."""


def final_students(out: Path) -> list[tuple[str, int, Path]]:
    """``(row, seed, folder)`` of every run trained to the largest budget (and scored there), the untrained
    student first as row ``start``."""
    final = max(BUDGETS)
    found = [("start", 0, out / "student")] if (out / "student" / "config.json").is_file() else []
    for row, spec in ROWS.items():
        for seed in SEEDS:
            folder = out / "runs" / (f"{row}-seed{seed}" + (f"-b{final}" if spec.per_budget else ""))
            if final in scored_budgets(out, row, seed) and (folder / "config.json").is_file():
                found.append((row, seed, folder))
    return found


def score_task(out: Path) -> None:
    """Each of :data:`TASKS` for each final student not scored on it yet, one line each in ``OUT/task.jsonl``."""
    from destila.eval.task_scores import task_scores

    done = {(r["row"], r["seed"], r["task"]) for r in read_lines(out / "task.jsonl")}
    for task in TASKS:
        for row, seed, folder in final_students(out):
            if (row, seed, task) in done:
                continue
            load = _load()
            [scored] = task_scores(task, [str(folder)], batch_size=16)
            record = {"row": row, "seed": seed, "budget_tokens": 0 if row == "start" else max(BUDGETS), "task": task,
                      **{k: scored[k] for k in ("acc", "acc_stderr", "questions", "chance", "seconds")},
                      "load": load}
            write_record(out, record, "task.jsonl")


def task_table(records: list[dict]) -> str:
    """Per task (in :data:`TASKS` order): accuracy of each row's final students (each seed, ± the harness's
    standard error), then each KD row against CE: the difference of the means and whether it exceeds the
    standard error."""
    tasks = sorted({r["task"] for r in records}, key=lambda t: (TASKS.index(t) if t in TASKS else len(TASKS), t))
    return "\n\n".join(_one_task_table([r for r in records if r["task"] == task]) for task in tasks)


def _one_task_table(records: list[dict]) -> str:
    rows = []
    by_row = {row: sorted((r for r in records if r["row"] == row), key=lambda r: r["seed"])
              for row in ["start", *ROWS]}
    for row, group in by_row.items():
        if not group:
            rows.append((row, f"{max(BUDGETS):,}", f"0 of {len(SEEDS)}", "not reached"))
            continue
        cells = " / ".join(f"{r['acc']:.1%} ± {r['acc_stderr']:.1%}" for r in group)
        seeds = "–" if row == "start" else f"{len(group)} of {len(SEEDS)} ({', '.join(str(r['seed']) for r in group)})"
        name = "untrained student" if row == "start" else row
        rows.append((name, f"{group[0]['budget_tokens']:,}", seeds, cells))
    lines = table_lines(["row", "training tokens", "seeds", "accuracy (± standard error)"], rows, "lrrl")
    first = next(iter(records), None)
    if first is not None:
        lines += ["", f"Task `{first['task']}`, {first['questions']} questions, chance {first['chance']:.0%}."]
    ce = {r["seed"]: r for r in by_row["ce"]}
    for row in ROWS:
        if row == "ce":
            continue
        pairs = [(r, ce[r["seed"]]) for r in by_row[row] if r["seed"] in ce]
        if not pairs:
            continue
        gap = _mean([r["acc"] - c["acc"] for r, c in pairs])
        stderr = _mean([r["acc_stderr"] for r, _ in pairs])
        verdict = "more than" if abs(gap) > stderr else "within"
        lines.append(f"- `{row}` against `ce` (seeds {', '.join(str(r['seed']) for r, _ in pairs)}): "
                     f"{gap:+.1%}, {verdict} one standard error ({stderr:.1%}).")
    return "\n".join(lines)


# -- the table and the curves -------------------------------------------------------

NAMES = {"ce": "CE only", "kd+ce": "KD + CE (T = 1, top-100)", "kd+ce-t2": "KD + CE at T = 2",
         "rskd+ce": f"RS-KD (S = {SAMPLES} sampled) + CE", "pd": "Pre-training Distillation recipe"}
METRICS = (("perplexity", "held-out ppl", "{:.2f}"), ("bits_per_byte", "bits/byte", "{:.4f}"),
           ("accuracy", "accuracy", "{:.2%}"), ("top1_agreement", "agreement", "{:.2%}"),
           ("kl_to_teacher", "KL (nats/token)", "{:.3f}"))


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def status(records: list[dict]) -> dict[str, str]:
    """Per row: ``complete`` (every seed at every budget) or what is there so far."""
    out = {}
    for row in ROWS:
        wanted = set(BUDGETS) if ROWS[row].per_budget else set(CURVE_BUDGETS)
        seeds = {seed: {r["budget_tokens"] for r in records if r["row"] == row and r["seed"] == seed} for seed in SEEDS}
        done = [seed for seed in SEEDS if wanted <= seeds[seed]]
        if len(done) == len(SEEDS):
            out[row] = "complete"
        elif any(seeds.values()):
            out[row] = "partial: " + ", ".join(f"seed {s} to {max(b):,} tokens" for s, b in seeds.items() if b)
        else:
            out[row] = "not run yet"
    return out


def fresh_table(records: list[dict]) -> str:
    """Mean over seeds (and each seed) per row and budget (every scored budget: the curves' points), the untrained
    student first; a row not run is one line that says so, a budget no seed has reached yet says so. Then each row's data efficiency where the results can measure it, and why not elsewhere."""
    rows = []
    start = [r for r in records if r["row"] == "start"]
    if start:
        cells = [fmt.format(start[0][key]) if start[0].get(key) is not None else "–" for key, _, fmt in METRICS]
        rows.append(("untrained student", 0, "–", "–", *cells))
    dashes = ["–" for _ in METRICS[1:]]
    for row in ROWS:
        if not any(r["row"] == row for r in records):
            rows.append((row, "–", "–", f"0 of {len(SEEDS)}", "not run", *dashes))
            continue
        for budget in BUDGETS if ROWS[row].per_budget else CURVE_BUDGETS:
            group = sorted((r for r in records if r["row"] == row and r["budget_tokens"] == budget),
                           key=lambda r: r["seed"])
            if not group:
                rows.append((row, f"{budget:,}", "–", f"0 of {len(SEEDS)}", "not reached", *dashes))
                continue
            cells = []
            for key, _, fmt in METRICS:
                values = [r[key] for r in group if r.get(key) is not None]
                if not values:
                    cells.append("–")
                    continue
                mean = fmt.format(_mean(values))
                cells.append(mean if len(values) == 1 else f"{mean} ({' / '.join(fmt.format(v) for v in values)})")
            passes = max(r["passes"] for r in group)
            seeds = ", ".join(str(r["seed"]) for r in group)
            rows.append((row, f"{budget:,}", f"{passes:g}", f"{len(group)} of {len(SEEDS)} ({seeds})", *cells))
    lines = table_lines(["row", "training tokens", "passes", "seeds", *(label for _, label, _ in METRICS)], rows)
    lines += ["", "Rows: " + "; ".join(f"`{row}` {NAMES[row]} ({state})" for row, state in status(records).items())
              + "."]
    lines += ["", *(f"- {efficiency_line(records, row)}" for row in ROWS if row != "ce")]
    return "\n".join(lines)


def efficiency_line(records: list[dict], row: str) -> str:
    """``row``'s data efficiency: the fraction of CE's tokens it needs to reach CE's final held-out perplexity
    (at the largest budget), over the seeds both rows have; or why the results cannot tell yet."""
    final = max(CURVE_BUDGETS)
    label = f"Data efficiency, `{row}`:"
    if not any(r["row"] == row for r in records):
        return f"{label} not measurable, the row has not run."
    ce_final = {r["seed"] for r in records if r["row"] == "ce" and r["budget_tokens"] == final}
    # The seeds the row ran to the end when it has any (a seed still running would mix its early curve with the
    # others' late one), else those it has run so far.
    seeds = sorted(ce_final & {r["seed"] for r in records if r["row"] == row and r["budget_tokens"] == final}
                   or ce_final & {r["seed"] for r in records if r["row"] == row})
    if not seeds:
        reached = max((r["budget_tokens"] for r in records if r["row"] == "ce"), default=0)
        return (f"{label} not measurable yet: it needs CE's perplexity at {final:,} tokens (for a seed this row "
                f"has run); CE has reached {reached:,}.")
    chosen = [r for r in records if r["seed"] in seeds and r["row"] in ("ce", row)]
    efficiency = data_efficiency(chosen, row)
    which = f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"
    if efficiency:
        bound = "at most " if efficiency["at_most"] else ""
        return (f"{label} reaches CE's final held-out perplexity ({efficiency['ce_ppl']:.2f} after "
                f"{efficiency['ce_tokens']:,} tokens) with {bound}{efficiency['kd_tokens']:,} tokens, "
                f"**{efficiency['fraction']:.2f}×** CE's ({which}).")
    points = [r for r in chosen if r["row"] == row and r["budget_tokens"]]
    last = max(r["budget_tokens"] for r in points)
    target = _mean([r["perplexity"] for r in chosen if r["row"] == "ce" and r["budget_tokens"] == final])
    if last < final:
        return (f"{label} not measurable yet: CE's final perplexity is {target:.2f}, and the row, scored up to "
                f"{last:,} tokens, is not there yet ({which}).")
    return f"{label} does not reach CE's final held-out perplexity ({target:.2f}) within {final:,} tokens ({which})."


def plot(records: list[dict], png: Path) -> Path:
    """Each metric against training tokens, one line per row (mean over its seeds), log-scaled tokens."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(15, 3.6))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(METRICS))
    start = next((r for r in records if r["row"] == "start"), None)
    for ax, (key, label, _) in zip(axes, METRICS):
        for row in ROWS:
            budgets = sorted({r["budget_tokens"] for r in records if r["row"] == row})
            points = [(b, _mean([r[key] for r in records if r["row"] == row and r["budget_tokens"] == b
                                 and r.get(key) is not None] or [float("nan")])) for b in budgets]
            if points:
                ax.plot(*zip(*points), marker="o", markersize=3, label=row)
        if start is not None and start.get(key) is not None:
            ax.axhline(start[key], color="grey", linestyle=":", linewidth=1)
        ax.set_xscale("log")
        if key == "perplexity":
            ax.set_yscale("log")
        ax.set_xlabel("training tokens (fresh)")
        ax.set_title(label, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    return png
