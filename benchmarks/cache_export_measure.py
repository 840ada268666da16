"""Parquet against the cache's own shards: bytes per stored entry and reader throughput
(``python benchmarks/cache_export_measure.py CACHE [CACHE …] --workdir DIR``).

A lab script, not part of the package: it drives destila through its public API
(``export_cache``, ``TopKCache``, ``open_cache``) and pyarrow. For each cache:

- ``bytes``: the cache's shard bytes and the export's Parquet bytes per stored entry (trained positions × K),
  and, to see what Parquet itself would give as the cache's native container, the same rows written with other
  Parquet settings: ``export+bss`` (byte-stream-split columns, no dictionary, zstd level 9) and
  ``compact-in-parquet`` (the compact encoding's quantisation in Parquet columns: ids ascending and
  delta-coded, ``sqrt(p)`` levels as uint16, the float32 tail; no dictionary, zstd level 9);
- ``reader``: tokens/s of ``cache[i]`` in random order (the first epoch includes each shard's SHA-256), of
  the export read by random access (``DatasetCache``) and streamed in order (``StreamedCache``); medians of
  ``--epochs`` epochs.

Each measurement prints one JSON object (and appends it to ``--json``).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import time
from pathlib import Path

from destila.io.json_lines import append_json_line


def _entries(cache) -> int:
    count = 0
    for i in range(len(cache)):
        count += int((cache[i]["labels"] != -100).sum()) * cache.top_k
    return count


# Byte-stream-split for every numeric leaf of the export's columns (Parquet has it for floats and 32/64-bit ints).
_SPLIT = ["input_ids.list.element", "position_ids.list.element", "topk_ids.list.element.list.element",
          "topk_logprobs.list.element.list.element", "tail_logmass.list.element"]


def _variant_bytes(cache, folder: Path, variant: str) -> int:
    """Parquet bytes of the cache's rows written with another layout (see the module docstring)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from destila.cache.dataset_rows import canonical, rows_table

    kind = cache.manifest.target_kind
    dtype = "float16" if cache.logprob_dtype.itemsize == 2 else "float32"
    path = folder / f"{variant}.parquet"
    writer = None
    for start in range(0, len(cache), 32):
        rows = [(i, canonical(cache.stored(i), kind, dtype)) for i in range(start, min(start + 32, len(cache)))]
        if variant == "export+bss":
            table = rows_table(rows, kind, dtype)
        else:  # the compact encoding's quantisation, in columns
            levels = int(cache.manifest.compact["sqrt_levels"]) if cache.manifest.compact else 512
            ids, deltas, quantised, tails = [], [], [], []
            for _, row in rows:
                order = np.argsort(row["ids"], axis=1)
                sorted_ids = np.take_along_axis(row["ids"], order, 1)
                probs = np.exp(np.take_along_axis(row["logprobs"].astype(np.float64), order, 1))
                ids.append(row["input_ids"].astype(np.int32))
                deltas.append(np.diff(sorted_ids, axis=1, prepend=0).astype(np.int32).reshape(-1))
                quantised.append(np.round(np.sqrt(probs) * levels).astype(np.uint16).reshape(-1))
                tails.append(row["tail"].astype(np.float32))
            table = pa.table({
                "input_ids": pa.array([a for a in ids], type=pa.list_(pa.int32())),
                "position_ids": pa.array([r["position_ids"].astype(np.int32) for _, r in rows],
                                         type=pa.list_(pa.int32())),
                "loss_mask": pa.array([r["loss_mask"] for _, r in rows], type=pa.list_(pa.bool_())),
                "id_deltas": pa.array(deltas, type=pa.list_(pa.int32())),
                "levels": pa.array(quantised, type=pa.list_(pa.uint16())),
                "tail_logmass": pa.array(tails, type=pa.list_(pa.float32())),
            })
        if writer is None:
            writer = pq.ParquetWriter(str(path), table.schema, compression="zstd", compression_level=9,
                                      use_byte_stream_split=_SPLIT if variant == "export+bss" else False,
                                      use_dictionary=False)
        writer.write_table(table, row_group_size=32)
    writer.close()
    return path.stat().st_size


def _epochs(read, count: int, epochs: int) -> list[float]:
    speeds = []
    for _ in range(epochs):
        began = time.perf_counter()
        tokens = read()
        speeds.append(tokens / (time.perf_counter() - began))
    return speeds


def measure(cache_path: str, workdir: Path, epochs: int) -> list[dict]:
    from destila.cache import TopKCache
    from destila.cache.dataset import open_cache
    from destila.cache.export import ExportSpec, export_cache

    cache = TopKCache(cache_path)
    name = Path(cache_path).name
    out = workdir / f"{name}-export"
    shutil.rmtree(out, ignore_errors=True)
    began = time.perf_counter()
    report = export_cache(ExportSpec(cache_path, str(out), progress=False))
    export_seconds = time.perf_counter() - began
    entries = _entries(cache)
    shard_bytes = sum(s.bytes for s in cache.manifest.shards)
    records = [{"cache": name, "encoding": cache.manifest.encoding, "measure": "bytes", "layout": layout,
                "bytes": size, "bytes_per_entry": size / entries, "entries": entries}
               for layout, size in (("cache shards", shard_bytes), ("export (zstd)", report.bytes))]
    scratch = workdir / f"{name}-variants"
    scratch.mkdir(parents=True, exist_ok=True)
    for variant in ("export+bss", "compact-in-parquet"):
        size = _variant_bytes(cache, scratch, variant)
        records.append({"cache": name, "encoding": cache.manifest.encoding, "measure": "bytes", "layout": variant,
                        "bytes": size, "bytes_per_entry": size / entries, "entries": entries})
    records.append({"cache": name, "measure": "export_seconds", "seconds": export_seconds, "rows": report.rows})
    tokens = len(cache) * cache.seq_len
    order = list(range(len(cache)))
    random.Random(0).shuffle(order)

    def random_access(reader):
        def read():
            for i in order:
                reader[i]
            return tokens
        return read

    fresh = lambda: TopKCache(cache_path)  # noqa: E731  (a new reader: its first epoch hashes every shard)
    first = _epochs(random_access(fresh()), len(cache), 1)[0]
    ways = {"cache[i], random order, first epoch (SHA-256 of each shard)": [first],
            "cache[i], random order": _epochs(random_access(cache), len(cache), epochs),
            "export read by random access (DatasetCache)": _epochs(random_access(open_cache(out)), len(cache), epochs)}
    streamed = open_cache(out, streaming=True)
    ways["export streamed in order (StreamedCache)"] = _epochs(lambda: sum(len(i["input_ids"]) for i in streamed),
                                                               len(cache), epochs)
    for way, speeds in ways.items():
        records.append({"cache": name, "encoding": cache.manifest.encoding, "measure": "reader", "way": way,
                        "tokens_per_second": statistics.median(speeds), "epochs": len(speeds)})
    return records


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("caches", nargs="+")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--json", default=None, help="append the records to this JSON-lines file")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    for cache in args.caches:
        for record in measure(cache, workdir, args.epochs):
            print(json.dumps(record))
            if args.json:
                append_json_line(args.json, record)


if __name__ == "__main__":
    main()
