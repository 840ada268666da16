"""Student quality: which student and which loss keep the most of the teacher per training token?

Teacher: the embedded SmolLM2-135M-Instruct. Data: Python's documentation
topics, every 5th document held out (the demo's split). Every student has
about half the teacher's parameters. Rows:

- ``ce``: the hand cut (teacher layers 0-7, 27-29) trained on the next token
  only, no teacher (the baseline);
- ``kd``: the same cut, forward KL to the cached top-K;
- ``kd+ce``: the same cut, that KL plus the next-token cross-entropy (1:1,
  the demo's loss);
- ``kd+hidden``: ``kd`` plus the hidden-state term (``--hidden_loss nmse``,
  its default weight) on the cached teacher layers the cut keeps;
- ``even``, ``contiguous``, ``importance``, ``width``: ``kd`` from other
  students of the same size (11 layers spread evenly; the 11-layer contiguous
  block of least measured change; the 11 layers greedy skip-KL keeps on
  calibration text, ``--select importance``; all 30 layers pruned in width
  by activation importance: 6 of 9 query heads, 2 of 3 key/value heads,
  409 of 1,536 MLP channels; the demo's student also narrows the residual
  stream, see docs/demo.md).

Budgets are prefixes of one run: the learning rate is constant after its
warm-up, so the checkpoint at ``B`` tokens is what a run of ``B`` tokens
would give. Each budget checkpoint is scored on every held-out token
(perplexity, next-token accuracy, top-1 agreement, KL to the teacher's
top-K); the held-out curve is scored on a few held-out sequences as
training goes.

    python benchmarks/student_quality.py prepare OUT --train-tokens 65536
    python benchmarks/student_quality.py students OUT
    python benchmarks/student_quality.py run OUT --row kd --seed 0 --budgets 2048,8192,32768
    python benchmarks/student_quality.py table OUT          # Markdown, and OUT/curves.png

``run`` appends one JSON line per budget to ``OUT/results.jsonl``; copy it
to ``benchmarks/results/student_quality.jsonl`` and run
``python benchmarks/make_docs.py`` to regenerate the docs' table.

The ``fresh-prepare``, ``fresh-run`` and ``fresh-all`` stages run the same
question on fresh tokens (the ``stdlib`` corpus, one pass, never a repeated
training token) with the demo's student and more recipes: see
``benchmarks/quality_fresh.py``. ``table`` renders either kind of results.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from transformers import TrainerCallback

from destila.io.json_lines import append_json_line, read_json_lines
from destila.io.markdown import table_lines

if __package__ in (None, ""):  # run as a script: only benchmarks/ is on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import quality_fresh as fresh  # noqa: E402
from benchmarks.data_efficiency import data_efficiency, mean_ppl_points  # noqa: E402

HAND_CUT = [*range(8), 27, 28, 29]
ROWS = ("ce", "kd", "kd+ce", "kd+hidden", "even", "contiguous", "importance", "width")
LOSS_OF_ROW = {"ce": dict(soft_weight=0.0, hard_weight=1.0), "kd+ce": dict(soft_weight=1.0, hard_weight=1.0),
               "kd+hidden": dict(soft_weight=1.0, hard_weight=0.0, hidden_loss="nmse")}  # any other row: KL only
STUDENT_OF_ROW = {"ce": "hand", "kd": "hand", "kd+ce": "hand", "kd+hidden": "hand", "even": "even",
                  "contiguous": "contiguous", "importance": "importance", "width": "width"}
SEQ_LEN, TOP_K, BATCH, HIDDEN_DIM = 256, 100, 4, 64
# All 30 layers, fewer heads and narrower MLPs: 67.2 M parameters (0.50× the teacher).
WIDTH = dict(num_attention_heads=6, num_key_value_heads=2, intermediate_size=409)


def prepare(out: Path, train_tokens: int, temperature: float = 1.0) -> None:
    """The held-out cache (the demo's 8,192 tokens), the training cache, and the same training tokens
    again with the hand cut's teacher layers stored (for ``kd+hidden``). ``temperature``: the training
    caches' softmax temperature (a student then trains at that temperature); the held-out cache stays at 1."""
    from destila.cache import BuildSpec, build_cache
    from destila.cache.extras import TeacherExtras
    from destila.data import pydoc_texts
    from destila.demo import split_documents
    from destila.models import embedded_teacher_dir
    from destila.targets.spec import TargetSpec

    train, held = split_documents(pydoc_texts(), 5)
    teacher = str(embedded_teacher_dir())
    common = dict(seq_len=SEQ_LEN, targets=TargetSpec(top_k=TOP_K), batch_size=8)
    build_cache(BuildSpec.from_options(teacher, held, out / "cache-heldout", max_tokens=8192, **common))
    hidden = TeacherExtras(hidden_layers=",".join(map(str, HAND_CUT)), hidden_dim=HIDDEN_DIM)
    for name, extra in (("cache", {}), ("cache-hidden", dict(extras=hidden))):
        start = time.monotonic()
        spec = {**common, "targets": TargetSpec(top_k=TOP_K, temperature=temperature)}
        report = build_cache(BuildSpec.from_options(teacher, train, out / name, max_tokens=train_tokens, **extra, **spec))
        print(json.dumps({"cache": name, "train_tokens": report.tokens, "seconds": round(time.monotonic() - start, 1)}))


def students(out: Path) -> None:
    """The five starting students, each with its parameters and starting perplexity on calibration text."""
    from destila.models import embedded_teacher_dir
    from destila.student import StudentInitSpec, init_student

    teacher = str(embedded_teacher_dir())
    calibration = dict(cache=str(out / "cache"), calibration_tokens=1024)
    kinds = {
        "hand": dict(layers=HAND_CUT, **calibration),
        "even": dict(layers=len(HAND_CUT), select="even", **calibration),
        "contiguous": dict(layers=len(HAND_CUT), select="contiguous", **calibration),
        "importance": dict(layers=len(HAND_CUT), select="importance", **calibration),
        "width": dict(**WIDTH, **calibration),
    }
    summaries = {}
    for name, options in kinds.items():
        folder = out / "students" / name
        if (folder / "config.json").exists():
            summaries[name] = json.loads((folder / "destila_student.json").read_text())
            continue
        summaries[name] = init_student(StudentInitSpec(teacher, folder, **options))
        print(name, json.dumps({k: summaries[name].get(k) for k in
                                ("kept_layers", "student_parameters", "start_perplexity", "teacher_perplexity")}))
    (out / "students.json").write_text(json.dumps(summaries, indent=2, default=str))


class SaveAt(TrainerCallback):
    """Saves a checkpoint at exactly these steps (the budgets), no others."""

    def __init__(self, steps: list[int]):
        self.steps = set(steps)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step in self.steps:
            control.should_save = True


def run(out: Path, row: str, seed: int, budgets: list[int], learning_rate: float) -> None:
    """Train ``row`` once up to the largest budget, keeping a checkpoint at each; score each on all held-out tokens."""
    from destila.cache import TopKCache
    from destila.demo.stages import train_from_cache
    from destila.eval import EvalSpec, evaluate_model

    step_tokens = BATCH * SEQ_LEN
    steps = [b // step_tokens for b in budgets]
    student = out / "students" / STUDENT_OF_ROW[row]
    folder = out / "runs" / f"{row}-seed{seed}"
    shutil.rmtree(folder, ignore_errors=True)
    loss = LOSS_OF_ROW.get(row, dict(soft_weight=1.0, hard_weight=0.0))
    start = time.monotonic()
    load_before = os.getloadavg()[0]
    result = train_from_cache(
        str(student), folder, out / ("cache-hidden" if row == "kd+hidden" else "cache"), max_steps=steps[-1], batch_size=BATCH, learning_rate=learning_rate,
        seed=seed, warmup_steps=5, weight_decay=0.0, freeze_embeddings=True, callbacks=(SaveAt(steps[:-1]),),
        save_strategy="no", save_total_limit=None, eval_strategy="steps", eval_steps=max(1, steps[0]),
        per_device_eval_batch_size=4, eval_cache=out / "cache-heldout", eval_sequences=4, **loss)
    seconds = time.monotonic() - start
    cache_tokens = len(TopKCache(out / "cache")) * SEQ_LEN
    for budget, step in zip([0, *budgets], [0, *steps]):  # 0: the student as cut, before any step
        checkpoint = folder / f"checkpoint-{step}"
        model = student if step == 0 else checkpoint if step != steps[-1] else Path(result["path"])
        metrics = evaluate_model(EvalSpec([str(model)], cache=str(out / "cache-heldout"), max_tokens=8192,
                                          new_tokens=1))
        if model == checkpoint:
            shutil.rmtree(checkpoint)  # its optimizer state alone is hundreds of MB
        record = {"row": row, "seed": seed, "budget_tokens": budget, "steps": step,
                  "passes": budget / cache_tokens if budget > cache_tokens else float(budget > 0),
                  **{k: metrics[k] for k in ("perplexity", "accuracy", "top1_agreement", "kl_to_teacher", "tokens",
                                             "parameters")},
                  "train_seconds": round(seconds, 1), "load_before": load_before, "load_after": os.getloadavg()[0],
                  "learning_rate": learning_rate}
        print(json.dumps(record), flush=True)
        append_json_line(out / "results.jsonl", record)
    # The held-out curve, for the plot.
    from destila.training.callbacks import read_training_log

    curve = [{"step": r["step"], "ppl": r.get("eval_ppl"), "kl": r.get("eval_kl")}
             for r in read_training_log(folder / "log.jsonl", prefix="eval")]
    (out / "curves").mkdir(exist_ok=True)
    (out / "curves" / f"{row}-seed{seed}.json").write_text(json.dumps(curve))


def table(records: list[dict]) -> str:
    """Mean (and both seeds) per row and budget, then the data-efficiency headline."""
    import statistics

    rows = []
    # The untrained student is shown once, under the first KL row that starts from it.
    untrained_shown_elsewhere = ("ce", "kd+ce", "kd+hidden")
    keys = sorted({(r["row"], r["budget_tokens"]) for r in records
                   if r["budget_tokens"] or r["row"] not in untrained_shown_elsewhere},
                  key=lambda k: (ROWS.index(k[0]), k[1]))
    for row, budget in keys:
        group = [r for r in records if r["row"] == row and r["budget_tokens"] == budget]

        def cell(key, fmt):
            values = [r[key] for r in group]
            mean = fmt(statistics.mean(values))
            return mean if len(values) == 1 else f"{mean} ({' / '.join(fmt(v) for v in values)})"

        rows.append((row, f"{budget:,}", group[0]["steps"], len(group), cell("perplexity", "{:.1f}".format),
                     cell("accuracy", lambda v: f"{100 * v:.1f}%"), cell("top1_agreement", lambda v: f"{100 * v:.1f}%"),
                     cell("kl_to_teacher", "{:.3f}".format)))
    lines = table_lines(["row", "training tokens", "steps", "seeds", "held-out ppl", "accuracy", "agreement",
                         "KL (nats/token)"], rows)
    names = {"kd": "KD", "kd+ce": "KD + CE"}
    ce = mean_ppl_points(records, "ce")
    best_tokens, best_ppl = min(ce, key=lambda point: point[1]) if ce else (None, None)
    for row in [r for r in names if any(record["row"] == r for record in records)]:
        efficiency = data_efficiency(records, row)
        if efficiency:
            bound = "at most " if efficiency["at_most"] else ""
            lines += ["", f"Data efficiency: {names[row]} reaches the CE-only baseline's final perplexity "
                          f"({efficiency['ce_ppl']:.1f} after {efficiency['ce_tokens']:,} tokens) with {bound}"
                          f"{efficiency['kd_tokens']:,} tokens, **{efficiency['fraction']:.2f}×** the baseline's."]
        else:
            lines += ["", f"Data efficiency: {names[row]} does not reach the CE-only baseline's final perplexity "
                          "within these budgets."]
        if ce and best_tokens != ce[-1][0]:  # the baseline got worse after its best budget: say so, and measure to it
            best = data_efficiency(records, row, against="best")
            reached = (f"{names[row]} reaches it with {'at most ' if best['at_most'] else ''}{best['kd_tokens']:,} "
                       f"tokens, **{best['fraction']:.2f}×** the baseline's" if best else
                       f"{names[row]} does not reach it within these budgets")
            lines += ["", f"Against the baseline's best perplexity ({best_ppl:.1f} after {best_tokens:,} tokens; "
                          f"later budgets were worse): {reached}."]
    return "\n".join(lines)


def plot(out: Path) -> Path:
    """Held-out perplexity against training tokens, one line per run."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for path in sorted((out / "curves").glob("*.json")):
        points = [(r["step"] * BATCH * SEQ_LEN, r["ppl"]) for r in json.loads(path.read_text()) if r["ppl"]]
        if points:
            ax.plot(*zip(*points), label=path.stem, marker="o", markersize=2)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training tokens")
    ax.set_ylabel("held-out perplexity (4 sequences)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=100)
    return out / "curves.png"


def build_parser() -> argparse.ArgumentParser:
    """The command line this script reads (the commands shown in the docs are parsed with it by the tests)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="stage", required=True)
    for name in ("prepare", "students", "run", "table", "fresh-prepare", "fresh-run", "fresh-all", "fresh-task"):
        stage = sub.add_parser(name)
        stage.add_argument("out", type=Path)
        if name == "fresh-prepare":
            stage.add_argument("--caches", nargs="+", choices=list(fresh.CACHES),
                               help="the training caches to build (default: all, in this order)")
        if name == "fresh-run":
            stage.add_argument("--row", choices=list(fresh.ROWS), required=True)
            stage.add_argument("--seed", type=int, default=0)
        if name == "prepare":
            stage.add_argument("--train-tokens", type=int, default=65536)
            stage.add_argument("--temperature", type=float, default=1.0,
                               help="softmax temperature of the training caches (the held-out cache stays at 1)")
        if name == "run":
            stage.add_argument("--row", choices=ROWS, required=True)
            stage.add_argument("--seed", type=int, default=0)
            stage.add_argument("--budgets", default="2048,8192,32768",
                               help="training tokens at which to score, each a multiple of 1024 tokens (one step)")
            stage.add_argument("--learning-rate", type=float, default=5e-4)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.stage == "prepare":
        prepare(args.out, args.train_tokens, args.temperature)
    elif args.stage == "students":
        students(args.out)
    elif args.stage == "fresh-prepare":
        fresh.prepare(args.out, args.caches)
    elif args.stage == "fresh-run":
        fresh.run(args.out, args.row, args.seed)
    elif args.stage == "fresh-all":
        fresh.all_runs(args.out)
    elif args.stage == "fresh-task":
        fresh.score_task(args.out)
    elif args.stage == "run":
        run(args.out, args.row, args.seed, [int(b) for b in args.budgets.split(",")], args.learning_rate)
    else:
        records = read_json_lines(args.out / "results.jsonl")
        if any(r.get("corpus") == "stdlib" for r in records):
            print(fresh.fresh_table(records))
            tasks = fresh.read_lines(args.out / "task.jsonl")
            if tasks:
                print(fresh.task_table(tasks))
            print(f"curves: {fresh.plot(records, args.out / 'curves.png')}")
            return
        print(table(records))
        print(f"curves: {plot(args.out)}")


if __name__ == "__main__":
    main()
