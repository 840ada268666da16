"""Short demo configurations, measured: how should `destila demo` spend its minutes?

Sub-commands over one folder (the teacher and the caches are built once):

    python benchmarks/demo_sweep.py prepare OUT            # train cache + the demo's held-out cache
    python benchmarks/demo_sweep.py layers OUT --keep 10   # starting perplexity of layer choices (no training)
    python benchmarks/demo_sweep.py train OUT --name NAME --layers 0-8,29 --steps 40 [--lr ...]
    python benchmarks/demo_sweep.py table OUT              # sweep.jsonl as a Markdown table

``train`` appends one JSON line per run to ``OUT/sweep.jsonl``: the configuration,
steps, training seconds and tokens/s, the 1-minute load average before and
after (the CPU is shared; wall-clock times are only comparable at equal
load), and the held-out perplexity, top-1 agreement and KL of the trained
student on the demo's held-out documents (the same 8192 tokens the demo
scores), plus its greedy continuation of the demo prompt.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from destila.demo import DEMO_PROMPTS, DemoSettings, split_documents
from destila.demo.samples import distinct_words


def parse_layers(text: str) -> list[int]:
    """``"0-8,29"`` → ``[0, 1, ..., 8, 29]``."""
    kept = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        kept += list(range(int(low), int(high or low) + 1))
    return kept


def prepare(out: Path, train_tokens: int) -> None:
    from destila.cache import BuildSpec, build_cache
    from destila.targets.spec import TargetSpec
    from destila.data import pydoc_texts
    from destila.models import embedded_teacher_dir

    s = DemoSettings()
    train, held = split_documents(pydoc_texts(), s.holdout_every)
    teacher = str(embedded_teacher_dir())
    # Small shards: an interrupted build keeps what it wrote and resumes there.
    common = dict(seq_len=s.seq_len, targets=TargetSpec(top_k=s.top_k), batch_size=s.cache_batch_size, shard_size=16)
    build_cache(BuildSpec(teacher, held, out / "cache-heldout", max_tokens=s.eval_tokens, **common))
    start = time.monotonic()
    report = build_cache(BuildSpec(teacher, train, out / "cache", max_tokens=train_tokens, **common))
    seconds = time.monotonic() - start
    print(json.dumps({"train_tokens": train_tokens, "teacher_seconds": round(seconds, 1),
                      "teacher_tokens_per_second": round(report.tokens_per_second, 1), "load": os.getloadavg()[0]}))


def layer_choices(total: int, keep: int) -> dict[str, list[int]]:
    """Named ways to keep ``keep`` of ``total`` layers: evenly spaced, and first ``a`` + last ``keep - a``."""
    from destila.student import evenly_spaced_layers

    choices = {"even": evenly_spaced_layers(total, keep)}
    for last in range(1, keep):
        choices[f"first{keep - last}+last{last}"] = list(range(keep - last)) + list(range(total - last, total))
    return choices


def layers(out: Path, keeps: list[int], sequences: int) -> None:
    """Perplexity before any training, on the first ``sequences`` TRAINING sequences (choosing
    layers on the held-out documents would leak them into the choice)."""
    from destila.eval.quality import metrics_from_sums, quality_sums
    from destila.models import embedded_teacher_dir, load_causal_lm
    from destila.student import cut_student

    from destila.data import pack_documents, pydoc_texts
    from destila.models import load_tokenizer

    path = str(embedded_teacher_dir())
    teacher = load_causal_lm(path)
    train_texts, _ = split_documents(pydoc_texts(), DemoSettings.holdout_every)
    packed = pack_documents(train_texts, load_tokenizer(path), DemoSettings.seq_len,
                            max_tokens=sequences * DemoSettings.seq_len)
    batches = [{"input_ids": packed[i:i + 4]} for i in range(0, len(packed), 4)]
    for keep in keeps:
        for name, kept in layer_choices(teacher.config.num_hidden_layers, keep).items():
            student, _ = cut_student(teacher, indices=kept)
            metrics = metrics_from_sums(quality_sums(student, batches))
            parameters = sum(p.numel() for p in student.parameters())
            print(json.dumps({"keep": keep, "choice": name, "layers": kept, "parameters": parameters,
                              "start_ppl_train_sample": round(metrics["perplexity"], 1),
                              "start_accuracy": round(metrics["accuracy"], 4)}), flush=True)


def score(model_path: Path, cache: Path) -> dict:
    """Held-out perplexity, agreement and KL over the whole held-out cache, and the greedy continuation of
    the demo's first prompt (the demo's evaluation without its speed measurements)."""
    from destila.cache import TopKCache
    from destila.eval.quality import metrics_from_sums, quality_sums
    from destila.models import load_causal_lm
    from destila.demo.samples import continuations
    from destila.training.datasets import collate

    source = TopKCache(cache)
    items = [source[i] for i in range(min(len(source), DemoSettings.eval_tokens // DemoSettings.seq_len))]
    model = load_causal_lm(str(model_path))
    metrics = metrics_from_sums(quality_sums(model, [collate(items[i:i + 4]) for i in range(0, len(items), 4)]))
    metrics["sample"] = continuations(str(model_path), [DEMO_PROMPTS[0]], 32)[0]["greedy"]
    return metrics


def train(out: Path, args) -> None:
    from destila.models import embedded_teacher_dir
    from destila.student import init_student
    from destila.training import DistillationArguments, train_student

    run = out / "runs" / args.name
    kept = parse_layers(args.layers)
    init_student(str(embedded_teacher_dir()), run / "init", layer_indices=kept)
    loss = {"soft_weight": args.soft_weight, "hard_weight": args.hard_weight}
    targs = DistillationArguments(
        output_dir=str(run / "trained"), max_steps=args.steps, per_device_train_batch_size=args.batch,
        learning_rate=args.lr, lr_scheduler_type=args.schedule, warmup_steps=args.warmup, weight_decay=0.0,
        logging_steps=5, save_strategy="no", report_to="none", seed=args.seed, dataloader_num_workers=0,
        freeze_embeddings=args.freeze, disable_tqdm=True, **loss,
    )
    load_before = os.getloadavg()[0]
    start = time.monotonic()
    result = train_student(str(run / "init"), run / "trained", targs, cache=out / "cache")
    seconds = time.monotonic() - start
    load_after = os.getloadavg()[0]
    evaluation = score(run / "trained", out / "cache-heldout")
    tokens = result["steps"] * args.batch * DemoSettings.seq_len
    record = {
        "name": args.name, "layers": kept, "steps": result["steps"], "batch": args.batch, "lr": args.lr,
        "schedule": args.schedule, "warmup": args.warmup, "freeze_embeddings": args.freeze,
        "soft_weight": args.soft_weight, "hard_weight": args.hard_weight, "seed": args.seed,
        "train_seconds": round(seconds, 1), "train_tokens_per_second": round(tokens / seconds, 1),
        "seconds_per_step": round(seconds / max(result["steps"], 1), 2),
        "load_before": load_before, "load_after": load_after,
        "heldout_tokens": evaluation["tokens"], "heldout_ppl": round(evaluation["perplexity"], 2),
        "agreement": round(evaluation["top1_agreement"], 4), "kl": round(evaluation["kl_to_teacher"], 4),
        "greedy": evaluation["sample"], "distinct_words": distinct_words(evaluation["sample"]),
    }
    with (out / "sweep.jsonl").open("a") as handle:
        handle.write(json.dumps(record) + "\n")
    print(json.dumps(record))


def table(out: Path) -> None:
    """The runs of ``OUT/sweep.jsonl`` as the Markdown table of docs/demo.md."""
    print("| run | layers kept | embedding | lr | loss | steps | held-out ppl | agreement | KL | s/step | load | "
          "greedy words |")
    print("|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for line in (out / "sweep.jsonl").read_text().splitlines():
        r = json.loads(line)
        loss = "KL" if r["hard_weight"] == 0 else ("CE" if r["soft_weight"] == 0 else "KL + CE")
        load = f"{r['load_before']:.0f}–{r['load_after']:.0f}"
        print(f"| {r['name']} | {len(r['layers'])}: {r['layers']} | {'frozen' if r['freeze_embeddings'] else 'trained'} "
              f"| {r['lr']:g} | {loss} | {r['steps']} | {r['heldout_ppl']:.1f} | {100 * r['agreement']:.1f}% "
              f"| {r['kl']:.2f} | {r['seconds_per_step']:.1f} | {load} | {r['distinct_words']} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("out", type=Path)
    p.add_argument("--train-tokens", type=int, default=DemoSettings.train_tokens)
    p = sub.add_parser("layers")
    p.add_argument("out", type=Path)
    p.add_argument("--keep", type=int, nargs="+", default=[10])
    p.add_argument("--sequences", type=int, default=8, help="training sequences scored (default: 8)")
    p = sub.add_parser("table")
    p.add_argument("out", type=Path)
    p = sub.add_parser("train")
    p.add_argument("out", type=Path)
    p.add_argument("--name", required=True)
    p.add_argument("--layers", required=True, help="teacher layers kept, e.g. 0-8,29")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--schedule", default="constant_with_warmup")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--freeze", action="store_true", help="freeze the tied embedding / output head")
    p.add_argument("--soft-weight", type=float, default=1.0)
    p.add_argument("--hard-weight", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.command == "prepare":
        prepare(args.out, args.train_tokens)
    elif args.command == "table":
        table(args.out)
    elif args.command == "layers":
        layers(args.out, args.keep, args.sequences)
    else:
        train(args.out, args)


if __name__ == "__main__":
    main()
