"""Cross-tokenizer distillation against cross-entropy alone, measured (``python benchmarks/crosstok_quality.py``).

A lab script, not part of the package: it drives destila through its commands.
The embedded teacher (SmolLM2) caches pydoc's training documents and its held-out ones (every 5th, as
``destila demo`` holds them out) with ``--spans``; a fresh small student on the 4,096-token pydoc tokenizer
(trained on the training documents only) is trained from the training cache twice per seed, KD+CE and CE
alone, on the same tokens and steps; ``destila eval`` scores each on the held-out cache in bits per byte and
in agreement / KL on the aligned one-to-one positions. One JSON object per run is appended to ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from destila.io.json_lines import append_json_line, json_lines


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def _documents() -> tuple[list[str], list[str]]:
    from destila.demo.pipeline import split_documents
    from destila.data import pydoc_texts

    return split_documents(pydoc_texts(), 5)


def _write_jsonl(path: Path, texts: list[str]) -> None:
    if not path.exists():
        path.write_text(json_lines({"text": t} for t in texts))


def _destila(*argv: str) -> float:
    """Run one ``destila`` command; its wall seconds."""
    began = time.perf_counter()
    print("$ destila " + " ".join(argv), flush=True)
    subprocess.run([sys.executable, "-m", "destila", *argv], check=True)
    return time.perf_counter() - began


def caches(args) -> dict:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    train, held = _documents()
    _write_jsonl(out / "train.jsonl", train)
    _write_jsonl(out / "heldout.jsonl", held)
    seconds = {}
    for name, tokens in (("heldout", args.heldout_tokens), ("train", args.train_tokens)):
        seconds[name] = _destila("cache", "build", args.teacher, str(out / f"{name}.jsonl"), "-o",
                                 str(out / f"cache-{name}"), "--spans", "--seq-len", str(args.seq_len),
                                 "--max-tokens", str(tokens), "--encoding", "compact", "--no-progress")
    return seconds


FRESH = ["num_hidden_layers=4", "hidden_size=256", "num_attention_heads=4", "num_key_value_heads=2",
         "intermediate_size=768"]
ARMS = {"kd+ce": ["--soft_weight", "1", "--hard_weight", "1"], "ce": ["--soft_weight", "0", "--hard_weight", "1"]}


def students(args) -> dict:
    """The student tokenizer (trained on the training documents) and one fresh student per seed."""
    out, seconds = Path(args.out), {}
    if not (out / "tok4096" / "tokenizer.json").exists():
        seconds["tokenizer"] = _destila("student", "tokenizer", "pydoc", "-o", str(out / "tok4096"), "--vocab-size",
                                        "4096", "--teacher", args.teacher, "--holdout-every", "5")
    for seed in range(args.seeds):
        folder = out / f"fresh-seed{seed}"
        if not (folder / "config.json").exists():
            seconds[f"student-seed{seed}"] = _destila("student", "init", args.teacher, "-o", str(folder), "--config",
                                                      *FRESH, "--tokenizer", str(out / "tok4096"), "--seed",
                                                      str(seed))
    return seconds


def train(args) -> dict:
    """Each arm from each seed's student on the same cached tokens; one alignment folder shared by all."""
    out, seconds = Path(args.out), {}
    for seed in range(args.seeds):
        for arm, weights in ARMS.items():
            run = out / f"run-{arm}-seed{seed}"
            if (run / "model.safetensors").exists():
                continue
            seconds[run.name] = _destila(
                "train", str(out / f"fresh-seed{seed}"), "--cache", str(out / "cache-train"), "-o", str(run),
                "--alignment-dir", str(out / "alignment"), *weights, "--seed", str(seed),
                "--num_train_epochs", str(args.epochs), "--per_device_train_batch_size", "4",
                "--learning_rate", str(args.learning_rate), "--warmup_steps", "5", "--lr_scheduler_type", "cosine",
                "--save_strategy", "no", "--logging_steps", "4", "--report_to", "none", "--disable_tqdm", "true")
    return seconds


def evaluate(args) -> dict:
    """Every trained student on the held-out cache: bits per byte, agreement and KL on one-to-one positions."""
    out = Path(args.out)
    runs = [str(out / f"run-{arm}-seed{seed}") for seed in range(args.seeds) for arm in ARMS]
    began = time.perf_counter()
    _destila("eval", *runs, "--cache", str(out / "cache-heldout"), "--max-tokens", str(args.heldout_tokens),
             "--json", str(out / "eval.json"), "--new-tokens", "4")
    return {"eval": time.perf_counter() - began}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="working folder (caches, students, runs)")
    parser.add_argument("--teacher", default="smollm2", help="the teacher (default: the embedded SmolLM2)")
    parser.add_argument("--train-tokens", type=int, default=32768)
    parser.add_argument("--heldout-tokens", type=int, default=8192)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--stages", default="caches,students,train,eval",
                        help="which stages to run (each skips what an earlier call finished)")
    parser.add_argument("--json", default=None, help="append the record to this JSON-lines file")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    stages = {"caches": caches, "students": students, "train": train, "eval": evaluate}
    record = {"stages": args.stages, "seconds": {}}
    for name in args.stages.split(","):
        record["seconds"].update(stages[name](args))
    if (Path(args.out) / "eval.json").exists():
        record["eval"] = [{k: v for k, v in r.items() if k not in ("samples", "sample", "prompt")}
                          for r in json.loads((Path(args.out) / "eval.json").read_text())]
    record.update(load_average=_load(), machine=platform.machine(), cpus=os.cpu_count(),
                  command="python " + " ".join(sys.argv), train_tokens=args.train_tokens,
                  heldout_tokens=args.heldout_tokens, epochs=args.epochs, seeds=args.seeds)
    print(json.dumps(record))
    if args.json:
        append_json_line(args.json, record)


if __name__ == "__main__":
    main()
