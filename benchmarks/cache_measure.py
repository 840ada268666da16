"""Measurements behind the cache's figures (``python benchmarks/cache_measure.py VERB …``).

A lab script, not part of the package: it drives destila only through its
public API (``build_cache(BuildSpec(...))``, ``TopKCache``, ``teacher_topk``).

- ``pass``: the teacher pass with caching (``build_cache``: forward, chunked
  head, top-K, shard writes) against the bare forward ``model(ids).logits``
  over the same sequences and batch size, whole passes alternated in one
  process; plus bytes per token of the cache.
- ``pass-interleaved``: the same comparison batch by batch, robust to other
  jobs sharing the machine (shard writes excluded).
- ``memory``: peak RSS of loading the teacher and running one pass, each
  configuration in a fresh process, minus the process's RSS before it, for
  the caching pass (``build_cache``) and the bare forward at several sequence
  lengths; both include the same model load, so their difference is the
  passes' difference.
- ``reader``: tokens/s of ``TopKCache`` random access and of a shuffled
  ``DataLoader``, against the training throughput (forward + backward, plain
  cross-entropy) of a student with the teacher's config cut to a few layers.

Each prints one JSON object per configuration (and appends it to ``--json``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from destila.io.json_lines import append_json_line


def _status_mib(key: str) -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {key}")


def _reset_peak() -> None:
    """Reset the kernel's peak-RSS mark (VmHWM) of this process (Linux ≥ 4.0)."""
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


def _bare_pass(model, packed, batch_size: int) -> float:
    import torch

    began = time.perf_counter()
    with torch.inference_mode():
        for start in range(0, packed.shape[0], batch_size):
            logits = model(input_ids=packed[start : start + batch_size], use_cache=False).logits
            del logits
    return time.perf_counter() - began


def _spec(args, output, max_tokens=None, **overrides):
    from destila.cache import BuildSpec
    from destila.targets.spec import TargetSpec

    return BuildSpec.from_options(args.teacher, args.data, output, seq_len=args.seq_len, max_tokens=max_tokens,
                     targets=TargetSpec(top_k=args.top_k, head_chunk_rows=args.head_chunk_rows),
                     encoding=args.encoding, batch_size=args.batch_size, progress=False, **overrides)


def _warm_up(model, batch, top_k: int, chunk_size: int) -> None:
    """One untimed batch through both paths: the first forward of a process pays one-time setup."""
    import torch

    from destila.targets.head import teacher_topk
    from destila.models import decoder_of, output_head

    weight, bias = output_head(model)
    with torch.inference_mode():
        model(input_ids=batch, use_cache=False)
        hidden = decoder_of(model)(input_ids=batch, use_cache=False).last_hidden_state
        teacher_topk(hidden.reshape(-1, hidden.shape[-1]), weight, bias, top_k, 1.0, chunk_size)


def _emit(record: dict, json_path: str | None) -> None:
    import platform

    import torch

    record = {**record, "torch_threads": torch.get_num_threads(), "cpus": os.cpu_count(), "machine": platform.processor()
              or platform.machine(), "command": " ".join(sys.argv)}
    print(json.dumps(record), flush=True)
    if json_path:
        append_json_line(json_path, record)


def measure_pass(args) -> None:
    """Caching pass vs bare forward, alternated ``rounds`` times, same sequences and batch size."""
    from destila.cache import build_cache, inspect_cache
    from destila.data import load_texts, pack_documents
    from destila.models import load_causal_lm, load_tokenizer

    model = load_causal_lm(args.teacher)
    packed = pack_documents(load_texts(args.data), load_tokenizer(args.teacher), args.seq_len, args.max_tokens)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="destila-measure-"))
    _warm_up(model, packed[: args.batch_size], args.top_k, args.head_chunk_rows)
    for number in range(args.rounds):
        out = workdir / f"cache-round{number}"
        if number % 2:  # alternate the order, so a change of machine load hits both sides
            report = build_cache(_spec(args, out, args.max_tokens))
            bare = _bare_pass(model, packed, args.batch_size)
        else:
            bare = _bare_pass(model, packed, args.batch_size)
            report = build_cache(_spec(args, out, args.max_tokens))
        if report.nothing_to_do:
            raise ValueError(f"{out} already holds a complete cache; pass an empty --workdir")
        summary = inspect_cache(out)
        _emit({
            "measure": "pass", "round": number, "teacher": args.teacher, "data": args.data, "seq_len": args.seq_len,
            "top_k": args.top_k, "encoding": args.encoding, "batch_size": args.batch_size,
            "head_chunk_rows": args.head_chunk_rows, "tokens": report.written_tokens, "bare_seconds": round(bare, 3),
            "bare_tokens_per_s": round(report.written_tokens / bare, 1),
            "cache_seconds": round(report.pass_seconds, 3), "cache_tokens_per_s": round(report.tokens_per_second, 1),
            "cache_forward_s": round(report.forward_seconds, 3), "cache_head_s": round(report.head_seconds, 3),
            "cache_write_s": round(report.write_seconds, 3),
            "throughput_ratio": round(bare / report.pass_seconds, 4),
            "bytes_per_token": round(summary["bytes_per_token"], 2),
            "bytes_per_entry": round(summary["bytes_per_entry"], 3), "cache": str(out),
        }, args.json)


def measure_interleaved(args) -> None:
    """Bare forward and caching forward (decoder + chunked top-K + storage dtypes) on each batch in turn.

    Alternating batch by batch (and which goes first) makes the ratio robust
    to other jobs on the machine, which whole-pass timings are not. Shard
    writing is left out here; ``pass`` shows it costs well under 1%.
    """
    import torch

    from destila.targets.head import teacher_topk
    from destila.data import load_texts, pack_documents
    from destila.models import decoder_of, load_causal_lm, load_tokenizer, output_head

    model = load_causal_lm(args.teacher)
    decoder, (weight, bias) = decoder_of(model), output_head(model)
    packed = pack_documents(load_texts(args.data), load_tokenizer(args.teacher), args.seq_len, args.max_tokens)
    _warm_up(model, packed[: args.batch_size], args.top_k, args.head_chunk_rows)

    def bare(ids):
        model(input_ids=ids, use_cache=False).logits

    def caching(ids):
        hidden = decoder(input_ids=ids, use_cache=False).last_hidden_state
        top_ids, top_lp, tail = teacher_topk(hidden.reshape(-1, hidden.shape[-1]), weight, bias, args.top_k, 1.0,
                                             args.head_chunk_rows)
        _ = top_ids.to(torch.int32), top_lp.to(torch.float16), tail.cpu()  # the conversions a shard needs

    spent = {"bare": 0.0, "cache": 0.0}
    with torch.inference_mode():
        for number, start in enumerate(range(0, packed.shape[0], args.batch_size)):
            ids = packed[start : start + args.batch_size]
            order = (("bare", bare), ("cache", caching)) if number % 2 == 0 else (("cache", caching), ("bare", bare))
            for name, run in order:
                began = time.perf_counter()
                run(ids)
                spent[name] += time.perf_counter() - began
    tokens = packed.numel()
    _emit({
        "measure": "pass-interleaved", "teacher": args.teacher, "data": args.data, "seq_len": args.seq_len,
        "top_k": args.top_k, "batch_size": args.batch_size, "head_chunk_rows": args.head_chunk_rows, "tokens": tokens,
        "bare_tokens_per_s": round(tokens / spent["bare"], 1), "cache_tokens_per_s": round(tokens / spent["cache"], 1),
        "throughput_ratio": round(spent["bare"] / spent["cache"], 4),
    }, args.json)


def memory_one(args) -> dict:
    """One configuration, in this (fresh) process: peak RSS of loading the teacher and one pass, minus RSS before.
    A cache it writes goes to a temporary folder, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="destila-memory-") as workdir:
        return _memory_in(args, Path(workdir))


def _memory_in(args, workdir: Path) -> dict:
    """``memory_one``'s measurement, a cache written under ``workdir``."""
    import torch

    from destila.cache import build_cache

    max_tokens = args.batches * args.batch_size * args.seq_len
    gc.collect()
    baseline = _status_mib("VmRSS")
    _reset_peak()
    began = time.perf_counter()
    if args.mode == "cache":
        report = build_cache(_spec(args, workdir / "c", max_tokens, shard_size=args.shard_size))
        tokens = report.written_tokens
    else:
        from destila.data import load_texts, pack_documents
        from destila.models import load_causal_lm, load_tokenizer

        model = load_causal_lm(args.teacher)
        packed = pack_documents(load_texts(args.data), load_tokenizer(args.teacher), args.seq_len, max_tokens)
        _bare_pass(model, packed, args.batch_size)
        tokens = int(packed.numel())
    seconds = time.perf_counter() - began
    peak = _status_mib("VmHWM")
    from destila.models import load_causal_lm

    vocab = load_causal_lm(args.teacher).get_output_embeddings().weight.shape[0]
    return {
        "measure": "memory", "mode": args.mode, "teacher": args.teacher, "seq_len": args.seq_len,
        "batch_size": args.batch_size, "head_chunk_rows": args.head_chunk_rows, "tokens": tokens,
        "baseline_mib": round(baseline, 1), "peak_mib": round(peak, 1), "load_and_pass_peak_mib": round(peak - baseline, 1),
        "logits_BTV_float32_mib": round(args.batch_size * args.seq_len * vocab * 4 / 2**20, 1),
        "seconds": round(seconds, 2), "torch": torch.__version__,
    }


def measure_memory(args) -> None:
    """Each (mode, seq_len) in a fresh process, so one configuration's peak cannot hide another's."""
    for seq_len in args.seq_lens:
        for mode in args.modes:
            cmd = [sys.executable, __file__, "memory-one", "--mode", mode, "--seq-len", str(seq_len),
                   "--teacher", args.teacher, "--data", args.data, "--batch-size", str(args.batch_size),
                   "--batches", str(args.batches), "--top-k", str(args.top_k),
                   "--head-chunk-rows", str(args.head_chunk_rows), "--encoding", args.encoding]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
            _emit(json.loads(out), args.json)


def measure_reader(args) -> None:
    """Reader tokens/s (random access, DataLoader) and a student's training tokens/s, in one process."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from destila.cache import TopKCache
    from destila.data import collate

    cache = TopKCache(args.cache)
    tokens_per_item = cache.seq_len
    order = torch.randperm(len(cache), generator=torch.Generator().manual_seed(0)).tolist()
    results = {"measure": "reader", "cache": str(args.cache), "sequences": len(cache), "seq_len": cache.seq_len,
               "top_k": cache.top_k, "encoding": cache.manifest.encoding, "targets": cache.manifest.targets["kind"]}

    def rate(epoch) -> float:
        began = time.perf_counter()
        tokens = epoch()
        return tokens / (time.perf_counter() - began)

    def items():
        for i in order:
            cache[i]
        return len(order) * tokens_per_item

    # The first epoch includes each shard's checksum and a cold page cache;
    # later ones are the steady state. Medians, since other jobs share the CPU.
    results["items_first_epoch_tokens_per_s"] = round(rate(items))
    results["items_tokens_per_s"] = round(_median([rate(items) for _ in range(args.epochs)]))
    for workers in args.workers:
        loader = torch.utils.data.DataLoader(cache, batch_size=args.batch_size, shuffle=True, num_workers=workers,
                                             collate_fn=collate, persistent_workers=workers > 0)

        def batches(loader=loader):
            return sum(batch["input_ids"].numel() for batch in loader)

        rate(batches)  # starts the workers
        results[f"dataloader_workers{workers}_tokens_per_s"] = round(_median([rate(batches) for _ in range(args.epochs)]))

    config = AutoConfig.from_pretrained(_teacher_folder(args.teacher))
    config.num_hidden_layers = args.student_layers
    student = AutoModelForCausalLM.from_config(config)
    student.train()
    batch = torch.stack([cache[i]["input_ids"] for i in order[: args.student_batch]])
    times = []
    for step in range(args.student_steps + 1):
        began = time.perf_counter()
        loss = student(input_ids=batch, labels=batch).loss  # plain cross-entropy over the full vocabulary
        loss.backward()
        student.zero_grad(set_to_none=True)
        if step:  # step 0 is the warm-up
            times.append(time.perf_counter() - began)
    student_rate = batch.numel() / _median(times)
    # The slowest steady-state way of reading is the one the criterion must hold for.
    slowest_reader = min(v for k, v in results.items() if k.endswith("tokens_per_s") and "first" not in k)
    results.update({
        "student_layers": args.student_layers, "student_batch": args.student_batch,
        "student_params_m": round(sum(p.numel() for p in student.parameters()) / 1e6, 1),
        "student_train_tokens_per_s": round(student_rate, 1),
        "slowest_reader_over_student": round(slowest_reader / student_rate, 1),
    })
    _emit(results, args.json)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def _teacher_folder(teacher: str) -> str:
    from destila.models import resolve_source

    return resolve_source(teacher)[0]


def build_parser() -> argparse.ArgumentParser:
    """The command line this script reads (the commands shown in the docs are parsed with it by the tests)."""
    parser = argparse.ArgumentParser(prog="python benchmarks/cache_measure.py", description=__doc__.split("\n\n")[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--teacher", default="smollm2")
    common.add_argument("--data", default="pydoc")
    common.add_argument("--top-k", type=int, default=100)
    common.add_argument("--batch-size", type=int, default=8)
    common.add_argument("--head-chunk-rows", type=int, default=1024)
    common.add_argument("--encoding", default="plain", choices=["plain", "compact"])
    common.add_argument("--json", help="append the JSON records to this file")

    p = verbs.add_parser("pass", parents=[common])
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--workdir")
    p.set_defaults(func=measure_pass)

    i = verbs.add_parser("pass-interleaved", parents=[common])
    i.add_argument("--seq-len", type=int, default=512)
    i.add_argument("--max-tokens", type=int)
    i.set_defaults(func=measure_interleaved)

    m = verbs.add_parser("memory", parents=[common])
    m.add_argument("--seq-lens", type=int, nargs="+", default=[256, 1024])
    m.add_argument("--modes", nargs="+", default=["cache", "bare"], choices=["cache", "bare"])
    m.add_argument("--batches", type=int, default=2)
    m.set_defaults(func=measure_memory)

    one = verbs.add_parser("memory-one", parents=[common])
    one.add_argument("--mode", choices=["cache", "bare"], required=True)
    one.add_argument("--seq-len", type=int, required=True)
    one.add_argument("--batches", type=int, default=2)
    one.add_argument("--shard-size", type=int, default=128)
    one.set_defaults(func=lambda a: print(json.dumps(memory_one(a))))

    r = verbs.add_parser("reader", parents=[common])
    r.add_argument("cache")
    r.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    r.add_argument("--student-layers", type=int, default=6)
    r.add_argument("--student-batch", type=int, default=4)
    r.add_argument("--student-steps", type=int, default=5)
    r.add_argument("--epochs", type=int, default=3)
    r.set_defaults(func=measure_reader)

    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
