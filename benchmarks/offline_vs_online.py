"""Offline fused distillation from a cache vs online dense distillation, same student, data, steps and seed.

SmolLM2-135M-Instruct teacher -> 6-layer student cut from it; all of pydoc packed at 512 tokens (10% of the
sequences held out); then the held-out full-vocabulary KL of both students to the teacher
(`destila eval --teacher`). Peak memory is each `destila train` process's maximum resident set (its own rusage);
step time is the median gap between consecutive per-step log records.

usage: .venv/bin/python benchmarks/offline_vs_online.py [--work DIR] [--steps N]     (after `make install`)

``--teacher``, ``--layers``, ``--seq-len`` and ``--max-tokens`` (defaults: smollm2, 6, 512, all of pydoc) let a
test run it on a tiny teacher.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from destila.io.json_lines import read_json_lines

DESTILA = [sys.executable, "-m", "destila"]


def run(command: list[str]) -> dict:
    """Run ``command``; its wall time and peak RSS (bytes), from the child's own rusage."""
    print("+ " + " ".join(command[2:] if command[:2] == DESTILA[:2] else command), flush=True)
    start = time.perf_counter()
    process = subprocess.Popen(command)
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"offline_vs_online: {' '.join(command)} failed")
    return {"wall_s": time.perf_counter() - start, "max_rss_bytes": usage.ru_maxrss * 1024}


def median_step_seconds(log: Path) -> tuple[int, float]:
    times = [r["time"] for r in read_json_lines(log) if "loss" in r]
    return len(times), statistics.median(b - a for a, b in zip(times, times[1:]))


def build_parser() -> argparse.ArgumentParser:
    """The command line this script reads (the commands shown in the docs are parsed with it by the tests)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default="bench-offline-online", help="working folder")
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps of each run")
    parser.add_argument("--teacher", default="smollm2")
    parser.add_argument("--layers", type=int, default=6, help="teacher layers the student keeps")
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--max-tokens", type=int, help="tokens of pydoc packed (default: all of it)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    budget = ["--max-tokens", str(args.max_tokens)] if args.max_tokens else []
    common = ["--max_steps", str(args.steps), "--per_device_train_batch_size", "4", "--learning_rate", "5e-4",
              "--lr_scheduler_type", "constant_with_warmup", "--warmup_steps", "5", "--eval_fraction", "0.1",
              "--logging_steps", "1", "--save_steps", "100000", "--seed", "0",
              "--hard_weight", "0"]  # the KL alone, as measured: the two paths' KL is what is compared
    if not (work / "student" / "config.json").exists():
        run([*DESTILA, "student", "init", args.teacher, "-o", str(work / "student"), "--layers", str(args.layers)])
    run([*DESTILA, "cache", "build", args.teacher, "pydoc", "-o", str(work / "cache"), "--seq-len", str(args.seq_len),
         "--top-k", "100", *budget, "--quiet"])
    runs = {
        "offline fused": ("offline-fused", run([*DESTILA, "train", str(work / "student"), "--cache",
                                                str(work / "cache"), "-o", str(work / "offline-fused"),
                                                "--impl", "fused", *common])),
        "online dense": ("online-dense", run([*DESTILA, "train", str(work / "student"), "--teacher", args.teacher,
                                              "--data", "pydoc", "--seq-len", str(args.seq_len), *budget, "-o",
                                              str(work / "online-dense"), "--online_loss", "dense", *common])),
    }
    run([*DESTILA, "eval", str(work / "offline-fused"), str(work / "online-dense"), "--cache", str(work / "cache"),
         "--eval-fraction", "0.1", "--teacher", args.teacher, "--max-tokens", "65536", "--json",
         str(work / "eval.json")])
    summary = {}
    for name, (folder, usage) in runs.items():
        steps, step = median_step_seconds(work / folder / "log.jsonl")
        summary[name] = {"steps": steps, "median_step_s": step, **usage}
        print(f"{name}: {steps} steps, median step {step:.2f} s, max RSS {usage['max_rss_bytes'] / 2**30:.2f} GiB")
    off, on = summary["offline fused"], summary["online dense"]
    print(f"offline/online: step time {off['median_step_s'] / on['median_step_s']:.2f}, "
          f"peak memory {off['max_rss_bytes'] / on['max_rss_bytes']:.2f}")
    (work / "summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
