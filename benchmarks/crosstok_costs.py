"""Measurements behind docs/cross_tokenizer.md (``python benchmarks/crosstok_costs.py VERB …``).

A lab script, not part of the package: it drives destila through its public API.

- ``bytes``: the same teacher pass cached four times, plain and compact, with and without ``--spans``; the
  shard bytes of each and what the spans add.
- ``tokenizer``: the pydoc student tokenizer (byte-level BPE trained on the training documents, every 5th
  held out as in ``destila demo``) written to ``--out``.
- ``coverage``: the pair's coverage report on a spans cache, the vocabulary map's build time, and the time to
  read one item in the student's tokens against one plain cache item.
- ``step``: one training step (forward, fused loss, backward) of a small student on batches of equal shape,
  from the same-tokenizer cache and from the cross-tokenizer dataset, alternated; the dataset's item time, and
  the item time of the same items written once and read from their store (``destila.crosstok.stored_items``);
  then steps with a DataLoader worker reading the items, from each of the three.

Each prints one JSON object and appends it to ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from destila.io.json_lines import append_json_line


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def _emit(record: dict, path: str | None) -> None:
    record = {**record, "load_average": _load(), "machine": platform.machine(), "cpus": os.cpu_count(),
              "command": "python " + " ".join(sys.argv)}
    print(json.dumps(record))
    if path:
        append_json_line(path, record)


def measure_bytes(args) -> None:
    from destila.cache import build_cache
    from destila.cache.format import read_manifest

    sizes = {}
    with tempfile.TemporaryDirectory() as tmp:
        for encoding in ("plain", "compact"):
            for spans in (False, True):
                out = Path(tmp) / f"{encoding}-{spans}"
                build_cache(args.teacher, args.data, out, seq_len=args.seq_len, max_tokens=args.max_tokens,
                            top_k=args.top_k, encoding=encoding, spans=spans, progress=False)
                manifest = read_manifest(out)
                sizes[f"{encoding}{'+spans' if spans else ''}"] = sum(s.bytes for s in manifest.shards)
        tokens = manifest.tokens
    record = {"measure": "bytes", "teacher": args.teacher, "data": args.data, "tokens": tokens, "top_k": args.top_k,
              "seq_len": args.seq_len, "shard_bytes": sizes}
    for encoding in ("plain", "compact"):
        extra = sizes[f"{encoding}+spans"] - sizes[encoding]
        record[f"{encoding}_spans_bytes_per_token"] = extra / tokens
        record[f"{encoding}_spans_overhead"] = extra / sizes[encoding]
    _emit(record, args.json)


def make_tokenizer(args) -> None:
    from destila.crosstok import TokenizerSpec, train_tokenizer

    began = time.perf_counter()
    tokenizer = train_tokenizer(TokenizerSpec("pydoc", args.out, vocab_size=args.vocab_size, style=args.style,
                                              teacher=args.teacher, holdout_every=5))
    _emit({"measure": "tokenizer", "out": args.out, "vocab_size": len(tokenizer), "style": args.style,
           "seconds": time.perf_counter() - began}, args.json)


def measure_coverage(args) -> None:
    import torch

    from destila.cache.reader import TopKCache
    from destila.crosstok import CrossTokenizerCache, build_vocab_map, coverage_report, load_student_tokenizer

    torch.set_num_threads(1)  # as in a DataLoader worker
    cache = TopKCache(args.cache)
    student = load_student_tokenizer(args.student_tokenizer)
    from transformers import AutoTokenizer

    teacher = AutoTokenizer.from_pretrained(cache.tokenizer_path)
    began = time.perf_counter()
    build_vocab_map(teacher, student)
    map_seconds = time.perf_counter() - began
    data = CrossTokenizerCache(cache, student)
    report = coverage_report(data, max_sequences=None)
    count = min(len(cache), args.items)
    cache_times, item_times = [], []
    for index in range(count):
        began = time.perf_counter()
        cache[index]
        cache_times.append(time.perf_counter() - began)
        began = time.perf_counter()
        data[index]
        item_times.append(time.perf_counter() - began)
    _emit({"measure": "coverage", "cache": str(args.cache), "student_tokenizer": str(args.student_tokenizer),
           "coverage": report.as_dict(), "vocab_map_seconds": map_seconds,
           "cache_item_ms": 1000 * statistics.median(cache_times),
           "student_item_ms": 1000 * statistics.median(item_times), "items_timed": count}, args.json)


def measure_step(args) -> None:
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from destila import distill_loss
    from destila.cache import build_cache
    from destila.cache.reader import TopKCache
    from destila.crosstok import CrossTokenizerCache, load_student_tokenizer, stored_items
    from destila.data import collate

    torch.set_num_threads(args.threads)
    cross_cache = TopKCache(args.cache)
    student_tokenizer = load_student_tokenizer(args.student_tokenizer)
    data = CrossTokenizerCache(cross_cache, student_tokenizer)
    length, batch_size, vocab = args.tokens_per_row, args.batch_size, len(student_tokenizer)
    config = LlamaConfig(vocab_size=vocab, hidden_size=args.hidden, intermediate_size=4 * args.hidden,
                         num_hidden_layers=args.layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=4096, tie_word_embeddings=True)
    with tempfile.TemporaryDirectory() as tmp:
        # The same-tokenizer baseline: a cache of the same K over the student's own vocabulary, made by a random
        # teacher of that vocabulary on the same data, rows of `length` student tokens.
        torch.manual_seed(1)
        AutoModelForCausalLM.from_config(config).save_pretrained(Path(tmp) / "teacher")
        student_tokenizer.save_pretrained(Path(tmp) / "teacher")
        build_cache(str(Path(tmp) / "teacher"), args.data, Path(tmp) / "cache", seq_len=length,
                    max_tokens=length * batch_size * (args.loader_steps + 1), top_k=cross_cache.top_k, progress=False)
        same_cache = TopKCache(Path(tmp) / "cache")
        same_items = [same_cache[i] for i in range(batch_size)]
        began = time.perf_counter()
        stored = stored_items(data, Path(tmp) / "items")
        store_seconds = time.perf_counter() - began
        loader_times = _loader_steps(args, same_cache, data, stored, length, batch_size, config) \
            if args.loader_steps else {}
        stored_times = []
        for index in range(min(len(data), args.items)):
            began = time.perf_counter()
            stored[index]
            stored_times.append(time.perf_counter() - began)
    cross_items = []
    for index in range(len(data)):
        item = data[index]
        if len(item["input_ids"]) >= length:
            cross_items.append({k: v[:length] for k, v in item.items()})
        if len(cross_items) == batch_size:
            break
    else:
        raise SystemExit(f"fewer than {batch_size} cached sequences hold {length} student tokens")
    # What the data side costs per item, alternated: a cache item as read for same-tokenizer training, and the
    # same cached sequence read in the student's tokens (the read, the alignment, the targets moved).
    read_times, item_times = [], []
    for index in range(min(len(data), args.items)):
        began = time.perf_counter()
        cross_cache[index]
        middle = time.perf_counter()
        data[index]
        read_times.append(middle - began)
        item_times.append(time.perf_counter() - middle)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    batches = {"same": collate(same_items), "cross": collate(cross_items)}
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)

    def step(batch):
        began = time.perf_counter()
        hidden = model.model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).last_hidden_state
        loss = distill_loss(hidden, model.lm_head.weight, batch["topk_ids"], batch["topk_logprobs"],
                            batch["tail_logmass"], batch["labels"], hard_weight=0.5, impl="fused")
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return time.perf_counter() - began

    times = {"same": [], "cross": []}
    for name in ("same", "cross"):
        step(batches[name])  # warm-up
    for _ in range(args.repeats):
        for name in ("same", "cross"):
            times[name].append(step(batches[name]))
    same, cross = statistics.median(times["same"]), statistics.median(times["cross"])
    item, read = statistics.median(item_times), statistics.median(read_times)
    stored_item = statistics.median(stored_times)
    _emit({"measure": "step", "cache": str(args.cache), "student_tokenizer": str(args.student_tokenizer),
           "student": {"layers": args.layers, "hidden": args.hidden, "vocab": vocab,
                       "parameters": sum(p.numel() for p in model.parameters())},
           "batch": [batch_size, length], "top_k": cross_cache.top_k, "threads": args.threads,
           "repeats": args.repeats, "same_step_s": same, "cross_step_s": cross, "cross_over_same": cross / same,
           "same_step_all_s": times["same"], "cross_step_all_s": times["cross"],
           "cache_item_s": read, "cross_item_s": item, "items_timed": len(item_times),
           # data read in the training process, no DataLoader workers: step plus its batch's items
           "same_with_items_s": same + batch_size * read, "cross_with_items_s": cross + batch_size * item,
           "with_items_ratio": (cross + batch_size * item) / (same + batch_size * read),
           # the items written once (store_seconds for the whole cache) and read back from the store
           "store_seconds": store_seconds, "store_sequences": len(data), "stored_item_s": stored_item,
           "stored_with_items_s": cross + batch_size * stored_item,
           "stored_with_items_ratio": (cross + batch_size * stored_item) / (same + batch_size * read),
           **loader_times}, args.json)


class _Cut:
    """Items of ``source`` cut to ``length`` tokens (the cross items are as long as their text's student tokens)."""

    def __init__(self, source, length: int):
        self.source, self.length = source, length

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> dict:
        return {k: v[: self.length] for k, v in self.source[index].items() if k not in ("span_start", "span_end")}


def _loader_steps(args, same_cache, data, stored, length: int, batch_size: int, config) -> dict:
    """Seconds per training step with the items read by a DataLoader worker, as a Trainer reads them
    (``dataloader_num_workers``): same-tokenizer, cross-tokenizer aligned per item, and the same items from
    their store, in turn, twice each."""
    import torch
    from transformers import AutoModelForCausalLM

    from destila import distill_loss
    from destila.data import collate

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    sources = {"same": _Cut(same_cache, length), "cross": _Cut(data, length), "stored": _Cut(stored, length)}
    seconds = {name: [] for name in sources}
    for _ in range(2):
        for name, source in sources.items():
            loader = torch.utils.data.DataLoader(source, batch_size=batch_size, num_workers=args.workers,
                                                 collate_fn=collate)
            batches = iter(loader)
            next(batches)  # the workers started and the first batch made
            began, steps = time.perf_counter(), 0
            for batch in batches:
                hidden = model.model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).last_hidden_state
                loss = distill_loss(hidden, model.lm_head.weight, batch["topk_ids"], batch["topk_logprobs"],
                                    batch["tail_logmass"], batch["labels"], hard_weight=0.5)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                steps += 1
                if steps == args.loader_steps:
                    break
            seconds[name].append((time.perf_counter() - began) / steps)
    same, cross, stored_step = min(seconds["same"]), min(seconds["cross"]), min(seconds["stored"])
    return {"loader_workers": args.workers, "loader_steps": args.loader_steps, "loader_same_step_s": same,
            "loader_cross_step_s": cross, "loader_cross_over_same": cross / same,
            "loader_stored_step_s": stored_step, "loader_stored_over_same": stored_step / same,
            "loader_same_all_s": seconds["same"], "loader_cross_all_s": seconds["cross"],
            "loader_stored_all_s": seconds["stored"]}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    size = verbs.add_parser("bytes")
    size.add_argument("--teacher", default="smollm2")
    size.add_argument("--data", default="pydoc")
    size.add_argument("--seq-len", type=int, default=512)
    size.add_argument("--max-tokens", type=int, default=16384)
    size.add_argument("--top-k", type=int, default=100)
    size.set_defaults(func=measure_bytes)
    tok = verbs.add_parser("tokenizer")
    tok.add_argument("--out", required=True)
    tok.add_argument("--vocab-size", type=int, default=4096)
    tok.add_argument("--style", default="byte_level")
    tok.add_argument("--teacher", default="smollm2")
    tok.set_defaults(func=make_tokenizer)
    cov = verbs.add_parser("coverage")
    cov.add_argument("--cache", required=True)
    cov.add_argument("--student-tokenizer", required=True)
    cov.add_argument("--items", type=int, default=32)
    cov.set_defaults(func=measure_coverage)
    st = verbs.add_parser("step")
    st.add_argument("--cache", required=True)
    st.add_argument("--student-tokenizer", required=True)
    st.add_argument("--data", default="pydoc")
    st.add_argument("--tokens-per-row", type=int, default=448)
    st.add_argument("--batch-size", type=int, default=4)
    st.add_argument("--layers", type=int, default=2)
    st.add_argument("--hidden", type=int, default=128)
    st.add_argument("--repeats", type=int, default=9)
    st.add_argument("--threads", type=int, default=1)
    st.add_argument("--items", type=int, default=32, help="cached sequences whose item times are measured")
    st.add_argument("--loader-steps", type=int, default=12, help="steps timed with a DataLoader (0: none)")
    st.add_argument("--workers", type=int, default=1, help="the DataLoader's worker processes")
    st.set_defaults(func=measure_step)
    for verb in (size, tok, cov, st):
        verb.add_argument("--json", default=None, help="append the record to this JSON-lines file")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
