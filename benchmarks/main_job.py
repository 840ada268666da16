"""destila's main job, timed on one device: the teacher pass over real text, a student trained from its cache, eval.

    python benchmarks/main_job.py --device cuda --dtype bfloat16 --json main_job.json     # on a GPU
    python benchmarks/main_job.py --seq-len 256 --max-tokens 4096 --steps 4 --json out.json   # a small CPU run

Three stages, each timed beside the reference a user would compare it with, in one process:

1. **teacher pass**: ``build_cache`` over ``--data`` (default: Python's documentation) with ``--teacher``
   (default: the embedded SmolLM2-135M), beside the bare forward ``model(ids).logits`` of the same packed
   sequences in batches of the same size, run first in the same process (so the device is warm for both).
   ``pass_over_bare`` is the time the caching pass takes per token over the bare forward's: what the top-K
   extraction and the shard writes cost on top of the forward;
2. **student**: ``--student-layers`` cut from the teacher (``init_student``), trained ``--steps`` steps from
   the cache with ``destila train``'s fused loss (the KL alone, as ``destila bench e2e`` trains), and the same
   student trained the same steps on the same sequences with Hugging Face's own cross-entropy (a plain
   ``Trainer``, the model's loss over the full vocabulary): ``kd_over_ce`` is what a distillation step costs
   over a plain training step. Median step time after the first :data:`WARMUP_STEPS` steps;
3. **eval**: ``evaluate_model`` of the trained student on ``--eval-tokens`` tokens of the cache (perplexity,
   top-K bucket KL and agreement with the teacher), timed.

Writes one JSON object (``--json``) with the machine, the command and every figure; prints a summary.
A teacher with random weights (``benchmarks/gpu/random_teacher.py --config``, for a machine the embedded
teacher's 94 MB cannot reach) times the same, and the record says which weights ran.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

# Steps left out of the median step time: the first steps of a run pay one-time costs (allocator, kernels,
# lazily built state), two of them for the KD run on CPU.
WARMUP_STEPS = 2


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def bare_forward_seconds(model, packed, batch_size: int, device: str) -> float:
    """The teacher's plain forward (logits over the full vocabulary) over ``packed [S, T]`` in batches, timed
    after one untimed batch (the first forward of a process pays one-time setup)."""
    import torch

    with torch.inference_mode():
        model(input_ids=packed[:batch_size].to(device), use_cache=False)
        _sync(device)
        began = time.perf_counter()
        for start in range(0, packed.shape[0], batch_size):
            model(input_ids=packed[start:start + batch_size].to(device), use_cache=False).logits
        _sync(device)
    return time.perf_counter() - began


def teacher_pass(args, cache: Path) -> dict:
    """Stage 1: the bare forward, then the caching pass, of the same sequences."""
    import torch

    from destila.cache import BuildSpec, build_cache
    from destila.data import load_texts, pack_documents
    from destila.models import load_causal_lm, load_tokenizer

    model = load_causal_lm(args.teacher, device=args.device, dtype=getattr(torch, args.dtype))
    packed = pack_documents(load_texts(args.data), load_tokenizer(args.teacher), args.seq_len, args.max_tokens)
    bare = bare_forward_seconds(model, packed, args.batch_size, args.device)
    del model
    report = build_cache(BuildSpec.from_options(args.teacher, args.data, cache, seq_len=args.seq_len, max_tokens=args.max_tokens,
                                   batch_size=args.batch_size, device=args.device, dtype=args.dtype, progress=False))
    tokens = int(packed.numel())
    if report.written_tokens != tokens:
        raise RuntimeError(f"main job: the cache holds {report.written_tokens} tokens, the bare pass ran {tokens}")
    return {"tokens": tokens, "bare_seconds": bare, "bare_tokens_per_s": tokens / bare,
            "pass_seconds": report.pass_seconds, "pass_tokens_per_s": report.tokens_per_second,
            "forward_seconds": report.forward_seconds, "head_seconds": report.head_seconds,
            "write_seconds": report.write_seconds, "pass_over_bare": report.pass_seconds / bare}


def ce_step_seconds(student: str, cache: Path, out: Path, args) -> list[float]:
    """Stage 2's reference: the student trained on the cache's sequences with the model's own cross-entropy
    through a plain ``transformers.Trainer``, the same steps, batch, order and precision as the KD run."""
    import datasets
    from transformers import Trainer, TrainingArguments

    from destila import TopKCache
    from destila.bench import step_clock
    from destila.models import load_causal_lm

    cached = TopKCache(cache)
    rows = [cached[i]["input_ids"].tolist() for i in range(len(cached))]
    data = datasets.Dataset.from_dict({"input_ids": rows, "labels": rows})
    clock = step_clock(args.device)
    training = TrainingArguments(
        output_dir=str(out), max_steps=args.steps, per_device_train_batch_size=args.train_batch_size,
        learning_rate=1e-4, lr_scheduler_type="constant", logging_steps=1, save_strategy="no", report_to="none",
        seed=0, bf16=args.dtype == "bfloat16", use_cpu=args.device == "cpu", disable_tqdm=True,
        dataloader_num_workers=0)
    Trainer(model=load_causal_lm(student, device=args.device), args=training, train_dataset=data,
            callbacks=[clock]).train()
    return clock.seconds


def student_stage(args, teacher: str, cache: Path, work: Path) -> dict:
    """Stage 2: cut the student, train it from the cache (KD), then the same student with plain CE."""
    from destila.bench import train_worker
    from destila.student import StudentInitSpec, init_student

    student = work / "student"
    began = time.perf_counter()
    init_student(StudentInitSpec(teacher, student, layers=args.student_layers))
    init_seconds = time.perf_counter() - began
    kd = train_worker("fused", str(student), str(work / "kd"), str(cache), None, None, args.seq_len, args.steps,
                      args.train_batch_size, 1e-4, 0, args.device, args.dtype, False)
    ce = ce_step_seconds(str(student), cache, work / "ce", args)
    kd_step = statistics.median(kd["step_seconds"][WARMUP_STEPS:])
    ce_step = statistics.median(ce[WARMUP_STEPS:])
    return {"student_layers": args.student_layers, "init_seconds": init_seconds, "steps": args.steps,
            "kd_step_seconds": kd_step, "ce_step_seconds": ce_step, "kd_over_ce": kd_step / ce_step,
            "kd_tokens_per_s": args.train_batch_size * args.seq_len / kd_step, "kd_losses": kd["losses"],
            "kd_all_step_seconds": kd["step_seconds"], "ce_all_step_seconds": ce, "model": str(work / "kd")}


def eval_stage(args, model: str, cache: Path) -> dict:
    """Stage 3: the trained student's held-out metrics on the cache, timed."""
    from destila.eval import EvalSpec, evaluate_model

    began = time.perf_counter()
    result = evaluate_model(EvalSpec([model], cache=str(cache), max_tokens=args.eval_tokens, device=args.device))
    seconds = time.perf_counter() - began
    keep = ("tokens", "perplexity", "kl_to_teacher", "top1_agreement", "forward_tokens_per_second",
            "generate_tokens_per_second", "peak_bytes")
    return {"seconds": seconds, **{k: result.get(k) for k in keep}}


def weights_of(teacher: str) -> str:
    """"pretrained", or "random" for a teacher made by ``random_teacher.py`` (its config says so)."""
    from destila.models import load_config

    return "random" if getattr(load_config(teacher), "destila_random_weights", False) else "pretrained"


def run(args) -> dict:
    from destila.bench import machine_info
    from destila.models import EMBEDDED, embedded_teacher_dir

    work = Path(args.work)
    cache = work / "cache"
    if cache.exists():
        raise ValueError(f"--work: {work} already holds a run (cache/); pass an empty or new folder")
    teacher = str(embedded_teacher_dir()) if args.teacher == EMBEDDED else args.teacher
    record = {"teacher": args.teacher, "teacher_weights": weights_of(teacher), "data": args.data,
              "device": args.device, "dtype": args.dtype, "seq_len": args.seq_len, "batch_size": args.batch_size,
              "machine": machine_info()}
    began = time.perf_counter()
    record["teacher_pass"] = teacher_pass(argparse.Namespace(**{**vars(args), "teacher": teacher}), cache)
    record["student"] = student_stage(args, teacher, cache, work)
    record["eval"] = eval_stage(args, record["student"]["model"], cache)
    record["total_seconds"] = time.perf_counter() - began
    return record


def summary_lines(record: dict) -> list[str]:
    p, s, e = record["teacher_pass"], record["student"], record["eval"]
    return [
        f"teacher pass ({record['teacher_weights']} weights): {p['tokens']} tokens, caching "
        f"{p['pass_tokens_per_s']:.0f} tokens/s against the bare forward's {p['bare_tokens_per_s']:.0f} "
        f"({p['pass_over_bare']:.2f}× its time; forward {p['forward_seconds']:.2f} s, top-K "
        f"{p['head_seconds']:.2f} s, writes {p['write_seconds']:.2f} s)",
        f"student ({s['student_layers']} layers): KD step {s['kd_step_seconds']:.3f} s against a plain CE step "
        f"{s['ce_step_seconds']:.3f} s ({s['kd_over_ce']:.2f}×), {s['kd_tokens_per_s']:.0f} tokens/s",
        f"eval: {e['tokens']} tokens in {e['seconds']:.1f} s: perplexity {e['perplexity']:.2f}, KL to the "
        f"teacher {e['kl_to_teacher']:.3f}, top-1 agreement {e['top1_agreement']:.3f}; forward "
        f"{e['forward_tokens_per_second']:.0f} tokens/s, generation {e['generate_tokens_per_second']:.0f} tokens/s",
    ]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python benchmarks/main_job.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--teacher", default="smollm2", help="teacher folder, .gguf file, or smollm2")
    parser.add_argument("--data", default="pydoc", help="text data, or pydoc")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:i]")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                        help="the teacher's weights in the pass; bfloat16 trains in mixed precision")
    parser.add_argument("--seq-len", type=int, default=2048, help="tokens per packed sequence")
    parser.add_argument("--max-tokens", type=int, default=131072, help="tokens of the teacher pass")
    parser.add_argument("--batch-size", type=int, default=8, help="sequences per teacher forward")
    parser.add_argument("--student-layers", type=int, default=6, help="layers of the student cut from the teacher")
    parser.add_argument("--steps", type=int, default=20, help="training steps, for KD and for the CE reference")
    parser.add_argument("--train-batch-size", type=int, default=4, help="sequences per training step")
    parser.add_argument("--eval-tokens", type=int, default=16384, help="tokens the eval scores")
    parser.add_argument("--work", default="main-job", help="folder for the cache, the student and the runs")
    parser.add_argument("--json", help="write the record here")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.steps <= WARMUP_STEPS:
        parser.error(f"--steps: expected more than {WARMUP_STEPS} (the first {WARMUP_STEPS} are left out of the "
                     f"median), found {args.steps}")
    try:
        record = run(args)
    except ValueError as err:
        parser.error(str(err))
    given = argv if argv is not None else sys.argv[1:]
    record["machine"]["command"] = "python benchmarks/main_job.py " + " ".join(given)
    print("\n".join(summary_lines(record)))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
