"""Peak RSS of the data stage of `cache build --max-tokens N` as the corpus grows.

The data stage is what `destila cache build` does before the teacher runs:
load the source (datasets converts a jsonl to memory-mapped Arrow), tokenise
into the token store until the budget is met, and open the packed source.
Each size runs in a fresh process (destila.bench.run_isolated) with fresh
datasets and token-store caches; the peak is that process's RSS peak minus
its baseline after imports.

    python benchmarks/data_rss.py --base-mb 50 --grow 20 --max-tokens 65536
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

# Imported here, not in the worker: libraries count in the baseline, only the data stage's own memory in the peak.
from destila.data import DataSpec, packed_source  # noqa: E402
from destila.io.json_lines import json_lines  # noqa: E402
from destila.models import load_tokenizer  # noqa: E402

HERE = Path(__file__).resolve().parent


def write_corpus(path: Path, megabytes: int) -> Path:
    """A jsonl of Python's documentation topics, repeated (each copy numbered) up to ``megabytes``."""
    from pydoc_data.topics import topics

    if path.is_file() and path.stat().st_size >= megabytes * 2**20:
        return path
    lines = json_lines({"text": topics[name]} for name in sorted(topics)).splitlines(keepends=True)
    written, copy = 0, 0
    with open(path, "w") as out:
        while written < megabytes * 2**20:
            for line in lines:
                text = f'{{"text": "copy {copy}: ' + line[len('{"text": "'):]
                out.write(text)
                written += len(text)
            copy += 1
    return path


def data_stage(corpus: str, max_tokens: int, seq_len: int, teacher: str) -> dict:
    """Worker: the data stage of `cache build TEACHER CORPUS --max-tokens N --seq-len L`."""
    source = packed_source(DataSpec(corpus, seq_len=seq_len, max_tokens=max_tokens), load_tokenizer(teacher))
    return {"sequences": len(source), "fingerprint": source.fingerprint, "store_tokens": int(len(source.store.tokens))}


def build_parser() -> argparse.ArgumentParser:
    """The command line this script reads (the commands shown in the docs are parsed with it by the tests)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-mb", type=int, default=50)
    parser.add_argument("--grow", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=65536)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--teacher", default="smollm2")
    parser.add_argument("--folder", default=os.path.join(tempfile.gettempdir(), "destila-data-rss"))
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)

    from destila.bench import run_isolated

    folder = Path(args.folder)
    folder.mkdir(parents=True, exist_ok=True)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    rows = []
    for megabytes in (args.base_mb, args.base_mb * args.grow):
        corpus = write_corpus(folder / f"corpus-{megabytes}MB.jsonl", megabytes)
        with tempfile.TemporaryDirectory(dir=folder) as caches:
            os.environ["HF_DATASETS_CACHE"] = os.path.join(caches, "hf")
            os.environ["DESTILA_DATA_CACHE"] = os.path.join(caches, "stores")
            run = run_isolated("data_rss:data_stage", {"corpus": str(corpus), "max_tokens": args.max_tokens,
                                                       "seq_len": args.seq_len, "teacher": args.teacher})
        if run["status"] != "ok":
            sys.exit(f"data_rss: {megabytes} MB: {run['status']}: {run.get('error')}")
        rows.append({"corpus_bytes": corpus.stat().st_size, "peak_rss_bytes": run["peak_bytes"],
                     "seconds": round(run["wall_seconds"], 1), **run["result"]})
        print(json.dumps(rows[-1]), flush=True)
    small, large = rows
    assert small["fingerprint"] == large["fingerprint"], "the first sequences must not depend on the corpus size"
    print(f"corpus {small['corpus_bytes'] / 2**20:.0f} MB -> {large['corpus_bytes'] / 2**20:.0f} MB: peak RSS "
          f"{small['peak_rss_bytes'] / 2**20:.1f} MB -> {large['peak_rss_bytes'] / 2**20:.1f} MB "
          f"({large['peak_rss_bytes'] / small['peak_rss_bytes'] - 1:+.1%})")


if __name__ == "__main__":
    main()
