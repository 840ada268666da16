"""Teacher targets compared on one corpus: top-K plain / compact, sampled S, and (stage `students`) students.

    python benchmarks/targets_compare.py caches   --out /tmp/targets --max-tokens 12288
    python benchmarks/targets_compare.py students --out /tmp/targets --steps 12
    python benchmarks/targets_compare.py plot     --out /tmp/targets --png targets.png

Stage ``caches`` builds, over the same packed sequences of ``--data``, the
caches of ``CONFIGS`` (one ``build_cache(BuildSpec(...))`` each, timed) plus a
float32 top-K reference, and records per cache: bytes per token and per
entry on disk (``destila cache inspect``), build time, reader tokens/s
(random access, ``TopKCache``), and, for top-K caches, the per-position KL
between the decoded bucket distribution (top-K + tail) and the float32 one
(mean and max). Stage ``students`` trains a student cut from the teacher
(``--layers``) from each cache and online (full vocabulary), with the same
sequences, steps and seed, and evaluates each on held-out sequences against
the teacher: full-vocabulary KL, perplexity, top-1 agreement, step time.
Stage ``plot`` draws, from the latest record of each config, every student's
held-out KL against its cache's bytes per token (online: a horizontal line).

Each record is one JSON line appended to ``OUT/results.jsonl`` with the
machine, versions and the command.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import shutil
import sys
import time
from pathlib import Path

from destila.io.json_lines import append_json_line, read_json_lines

# name: (encoding, TargetSpec fields, logprob dtype)
CONFIGS = {
    "topk100-plain-fp16": ("plain", {"top_k": 100}, "float16"),
    "topk100-compact": ("compact", {"top_k": 100}, "float16"),
    "sampled16-compact": ("compact", {"kind": "sampled", "samples": 16}, "float16"),
    "sampled64-compact": ("compact", {"kind": "sampled", "samples": 64}, "float16"),
}
REFERENCE = ("topk100-plain-fp32", ("plain", {"top_k": 100}, "float32"))


def _emit(out: Path, record: dict) -> None:
    import torch

    record = {**record, "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
              "torch": torch.__version__, "torch_threads": torch.get_num_threads(), "command": " ".join(sys.argv)}
    print(json.dumps(record), flush=True)
    append_json_line(out / "results.jsonl", record)


def _build(args, name: str, config) -> tuple[Path, float]:
    from destila.cache import BuildSpec, build_cache
    from destila.targets.spec import TargetSpec

    encoding, targets, dtype = config
    folder = Path(args.out) / name
    began = time.perf_counter()
    report = build_cache(BuildSpec.from_options(args.teacher, args.data, folder, seq_len=args.seq_len, max_tokens=args.max_tokens,
                                   targets=TargetSpec(**targets), encoding=encoding, logprob_dtype=dtype,
                                   batch_size=args.batch_size, progress=False))
    seconds = time.perf_counter() - began
    if report.nothing_to_do:
        seconds = float("nan")  # built by an earlier run: its time is not measured here
    return folder, seconds


def _reader_rate(folder: Path) -> float:
    import torch

    from destila.cache import TopKCache

    cache = TopKCache(folder)
    order = torch.randperm(len(cache), generator=torch.Generator().manual_seed(0)).tolist()
    for i in order:  # first pass: checksums and page cache
        cache[i]
    began = time.perf_counter()
    for i in order:
        cache[i]
    return len(order) * cache.seq_len / (time.perf_counter() - began)


def decode_kl(folder: Path, reference: Path) -> dict:
    """Per trained position, KL(reference ‖ cache) of the K+1-bucket distributions (top-K + tail), float64."""
    import torch

    from destila.cache import TopKCache
    from destila.losses.divergences import kl_terms

    ref, got = TopKCache(reference), TopKCache(folder)
    kls = []
    for i in range(len(ref)):
        a, b = ref[i], got[i]
        trained = a["labels"] != -100
        ids_a, ids_b = a["topk_ids"][trained], b["topk_ids"][trained]
        if not torch.equal(ids_a.sort(1).values, ids_b.sort(1).values):
            raise ValueError(f"sequence {i}: the two caches keep different top-K ids")
        # b's log-probs in a's id order: position of each of a's ids among b's ids
        where = (ids_a[:, :, None] == ids_b[:, None, :]).float().argmax(-1)
        lp_b = b["topk_logprobs"][trained].double().gather(1, where)
        bucket_a = torch.cat([a["topk_logprobs"][trained].double(), a["tail_logmass"][trained, None].double()], 1)
        bucket_b = torch.cat([lp_b, b["tail_logmass"][trained, None].double()], 1)
        kls.append(kl_terms(bucket_a.exp(), bucket_a, bucket_b).sum(1))
    kl = torch.cat(kls)
    return {"decode_kl_mean": kl.mean().item(), "decode_kl_max": kl.max().item(), "decode_kl_positions": len(kl)}


def stage_caches(args) -> None:
    from destila.cache import inspect_cache
    from destila.cache.kinds import kind_of

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    reference, ref_seconds = _build(args, *REFERENCE)
    chosen = {name: CONFIGS[name] for name in args.configs if name in CONFIGS}
    first = [] if math.isnan(ref_seconds) else [REFERENCE]  # a reference built by an earlier run was recorded then
    for name, config in [*first, *chosen.items()]:
        folder, seconds = (reference, ref_seconds) if name == REFERENCE[0] else _build(args, name, config)
        summary = inspect_cache(folder)
        record = {
            "stage": "caches", "config": name, "encoding": summary["encoding"], "targets": summary["targets"],
            "logprob_dtype": summary["logprob_dtype"], "teacher": args.teacher, "data": args.data,
            "seq_len": args.seq_len, "tokens": summary["tokens"], "stored_entries": summary["stored_entries"],
            "shard_bytes": summary["shard_bytes"], "bytes_per_token": round(summary["bytes_per_token"], 3),
            "bytes_per_entry": round(summary["bytes_per_entry"], 4), "build_seconds": round(seconds, 1),
            "reader_tokens_per_s": round(_reader_rate(folder)),
        }
        if kind_of(summary["targets"]["kind"]).ranked and name != REFERENCE[0]:  # the same ids as the reference
            record.update(decode_kl(folder, reference))
        _emit(out, record)


def stage_students(args) -> None:
    """Students from every cache (and online) with the same sequences, steps and seed; held-out metrics.

    Each student is trained and evaluated in its own process (``run_isolated``), like ``destila bench e2e``.
    """
    from destila.bench import run_isolated, train_worker
    from destila.models import EMBEDDED, embedded_teacher_dir
    from destila.student import StudentInitSpec, init_student

    out = Path(args.out)
    teacher = str(embedded_teacher_dir()) if args.teacher == EMBEDDED else args.teacher
    student = out / f"student-{args.layers}-layers"
    if not (student / "config.json").exists():
        init_student(StudentInitSpec(teacher, student, layers=args.layers))
    from destila.data import DataSpec, load_texts
    from destila.eval import EvalSpec

    held_out = load_texts(args.data)[-args.held_out_documents :]  # pydoc is sorted: the last topics, never cached
    for method in dict.fromkeys(["online", *args.configs]):  # online first; `--configs online`: it alone
        run_dir = out / f"run-{method}"
        shutil.rmtree(run_dir, ignore_errors=True)  # a rerun measures anew (its record replaces the earlier one)
        cache = None if method == "online" else str(out / method)
        trained = run_isolated(f"{train_worker.__module__}:{train_worker.__name__}", {
            "method": "online" if method == "online" else "fused", "student": str(student), "out": str(run_dir),
            "cache": cache, "teacher": teacher, "data": args.data, "seq_len": args.seq_len, "steps": args.steps,
            "batch_size": args.train_batch_size, "learning_rate": args.learning_rate, "seed": 0, "device": "cpu",
            "dtype": "float32", "gradient_checkpointing": False,
            "max_tokens": args.max_tokens,  # online: the cached sequences, no more (epochs alike)
        }, device="cpu")
        if trained["status"] != "ok":
            raise RuntimeError(f"{method}: training failed ({trained['status']}): {trained.get('error')}")
        spec = EvalSpec([str(run_dir)], data=DataSpec(held_out, seq_len=args.seq_len), teacher=teacher,
                        max_tokens=args.eval_tokens, new_tokens=1)
        evaluated = run_isolated("destila.eval.run:evaluate_in_worker",
                                 {"spec": dataclasses.asdict(spec), "model": str(run_dir)}, device="cpu")
        if evaluated["status"] != "ok":
            raise RuntimeError(f"{method}: evaluation failed ({evaluated['status']}): {evaluated.get('error')}")
        steps = sorted(trained["result"]["step_seconds"][1:])  # the first step pays one-time setup
        metrics = evaluated["result"]
        _emit(out, {
            "stage": "students", "config": method, "student_layers": args.layers, "steps": args.steps,
            "train_batch_size": args.train_batch_size, "seq_len": args.seq_len, "learning_rate": args.learning_rate,
            "train_tokens": args.max_tokens,
            "step_seconds_median": round(steps[len(steps) // 2], 3), "final_loss": trained["result"]["losses"][-1],
            "heldout_tokens": metrics["tokens"], "heldout_kl_to_teacher": metrics["kl_to_teacher"],
            "heldout_perplexity": metrics["perplexity"], "heldout_top1_agreement": metrics["top1_agreement"],
        })


def stage_plot(args) -> None:
    """``--png``: held-out KL of each student against the bytes per token of the cache it learnt from."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a server
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter

    records = read_json_lines(Path(args.out) / "results.jsonl")
    caches = {r["config"]: r for r in records if r["stage"] == "caches"}  # a rerun replaces a config's record
    students = {r["config"]: r for r in records if r["stage"] == "students"}
    if not students:
        raise SystemExit(f"{args.out}/results.jsonl has no student records: run the students stage first")
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for name, r in students.items():
        kl = r["heldout_kl_to_teacher"]
        if name == "online":
            ax.axhline(kl, color="tab:gray", linestyle="--", label=f"online, full vocabulary ({kl:.3f})")
        elif name in caches:
            ax.plot(caches[name]["bytes_per_token"], kl, "o", label=f"{name} ({kl:.3f})")
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator([10, 20, 50, 100, 200, 500, 1000, 2000]))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())  # plain numbers on the log axis, no crowded minor labels
    ax.set_xlabel("cache bytes per token (log scale)")
    ax.set_ylabel("student's held-out KL to the teacher (nats/token)")
    first = next(iter(students.values()))
    ax.set_title(f"{first['student_layers']}-layer student, {first['steps']} steps of "
                 f"{first['train_batch_size']} x {first['seq_len']} tokens", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.png, dpi=120)
    plt.close(fig)
    print(f"wrote {args.png}")


def build_parser() -> argparse.ArgumentParser:
    """The command line this script reads (the commands shown in the docs are parsed with it by the tests)."""
    parser = argparse.ArgumentParser(prog="python benchmarks/targets_compare.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("stage", choices=["caches", "students", "plot"])
    parser.add_argument("--out", required=True, help="folder for the caches and results.jsonl")
    parser.add_argument("--teacher", default="smollm2")
    parser.add_argument("--data", default="pydoc")
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--max-tokens", type=int, default=512 * 24)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=[*CONFIGS, REFERENCE[0], "online"],
                        help=f"caches to build / train from ({REFERENCE[0]}, always built, only for students; "
                             "students: 'online' trains the online student only)")
    parser.add_argument("--layers", type=int, default=6, help="students: layers cut from the teacher")
    parser.add_argument("--steps", type=int, default=12, help="students: optimizer steps")
    parser.add_argument("--train-batch-size", type=int, default=2, help="students: sequences per step")
    parser.add_argument("--learning-rate", type=float, default=5e-4, help="students: constant learning rate")
    parser.add_argument("--held-out-documents", type=int, default=40, help="students: last pydoc topics held out")
    parser.add_argument("--eval-tokens", type=int, default=4096, help="students: held-out tokens evaluated")
    parser.add_argument("--png", default="targets.png", help="plot: the file written")
    return parser


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    {"caches": stage_caches, "students": stage_students, "plot": stage_plot}[args.stage](args)


if __name__ == "__main__":
    main()
