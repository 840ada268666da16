"""The demo's recipe: which loss and learning rate give the best student in the demo's ~24 steps?

One training of a student from a top-K cache for ``--steps`` steps (batch 4
× 256 tokens, 5 warm-up steps then a constant learning rate, embeddings
frozen: the demo's settings), then its held-out perplexity, next-token
accuracy, top-1 agreement and KL to the teacher on every token of a held-out
cache, and the number of distinct words in its greedy continuation of each of
the demo's prompts (32 new tokens, as the demo's report). One JSON line per
run is printed and appended to ``OUT/recipe.jsonl``.

    python benchmarks/student_quality.py prepare OUT
    destila student init smollm2 -o OUT/students/width --num-attention-heads 6 --num-key-value-heads 2 \\
        --intermediate-size 409 --cache OUT/cache --calibration-tokens 1024
    python benchmarks/demo_recipe.py OUT --loss kd+ce --learning-rate 5e-4 --steps 24

The demo's choice (``docs/demo.md``, "How the recipe was chosen") is the
row of this script's table with the lowest held-out perplexity for the
distilled student, with the baseline (``--loss ce``) at its own best rate.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from destila.io.json_lines import append_json_line

LOSSES = {"ce": dict(soft_weight=0.0, hard_weight=1.0), "kd": dict(soft_weight=1.0, hard_weight=0.0),
          "kd+ce": dict(soft_weight=1.0, hard_weight=1.0)}
METRICS = ("perplexity", "accuracy", "top1_agreement", "kl_to_teacher", "tokens")


def run(out: Path, student: Path, loss: str, learning_rate: float, steps: int, seed: int,
        variant: dict | None = None) -> dict:
    """One training and its scores. ``variant``: other loss options (``divergence``, ``temperature``,
    ``hard_weight``) on top of ``loss``'s weights, recorded with the run."""
    from destila.demo.samples import continuations, degenerate, distinct_words
    from destila.demo.settings import DEMO_PROMPTS, DemoSettings
    from destila.demo.stages import train_from_cache
    from destila.eval import EvalSpec, evaluate_model

    variant = variant or {}
    tag = "".join(f"-{name}{value}" for name, value in sorted(variant.items()))
    folder = out / "recipe-runs" / f"{student.name}-{loss}{tag}-lr{learning_rate:g}-seed{seed}"
    shutil.rmtree(folder, ignore_errors=True)
    start = time.monotonic()
    result = train_from_cache(str(student), folder, out / "cache", max_steps=steps, batch_size=4,
                              learning_rate=learning_rate, seed=seed, warmup_steps=5, weight_decay=0.0,
                              freeze_embeddings=True, save_steps=100000, **{**LOSSES[loss], **variant})
    seconds = time.monotonic() - start
    metrics = evaluate_model(EvalSpec([result["path"]], cache=str(out / "cache-heldout"), max_tokens=8192,
                                      new_tokens=1, batch_size=4))
    texts = [row["greedy"] for row in continuations(result["path"], list(DEMO_PROMPTS), DemoSettings.new_tokens)]
    record = {"loss": loss, **variant, "learning_rate": learning_rate, "seed": seed, "steps": result["steps"],
              "student": str(student), **{k: metrics[k] for k in METRICS}, "train_seconds": round(seconds, 1),
              "distinct_words": [distinct_words(text) for text in texts],
              "degenerate": [degenerate(text) for text in texts], "continuations": texts}
    shutil.rmtree(folder, ignore_errors=True)  # the model and its optimizer state: hundreds of MB per run
    append_json_line(out / "recipe.jsonl", record)
    return record


def build_parser() -> argparse.ArgumentParser:
    """The command line this script reads (the commands shown in the docs are parsed with it by the tests)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the folder `student_quality.py prepare` filled")
    parser.add_argument("--student", type=Path, help="the student to train (default: OUT/students/width)")
    parser.add_argument("--loss", choices=LOSSES, required=True)
    parser.add_argument("--learning-rate", type=float, default=5e-4)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--divergence", help="the soft term's divergence (default: forward_kl)")
    parser.add_argument("--temperature", type=float, help="softmax temperature of the soft term (default: 1)")
    parser.add_argument("--hard-weight", type=float, help="the cross-entropy weight instead of --loss's")
    parser.add_argument("--bf16", action="store_true", help="train in bfloat16 mixed precision (autocast)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    student = args.student or args.out / "students" / "width"
    variant = {name: value for name, value in (("divergence", args.divergence), ("temperature", args.temperature),
                                               ("hard_weight", args.hard_weight),
                                               ("bf16", args.bf16 or None)) if value is not None}
    print(json.dumps(run(args.out, student, args.loss, args.learning_rate, args.steps, args.seed, variant)))


if __name__ == "__main__":
    main()
