"""Documents and tokens of a built-in corpus's splits, and what tokenising each costs: the figures of docs/data.md.

Each split is tokenised into a fresh token store (as `cache build` does before
the teacher runs) in a fresh process (destila.bench.run_isolated) with
fresh datasets and token-store caches: the time is that process's wall time,
imports included, and the peak is its RSS peak minus its baseline after imports.

    python benchmarks/corpus_size.py stdlib --split train test
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

# Imported here, not in the worker: libraries count in the baseline, only the tokenising in the peak.
from destila.data import DataSpec, build_store  # noqa: E402
from destila.io.markdown import markdown_table  # noqa: E402
from destila.models import load_tokenizer  # noqa: E402

HERE = Path(__file__).resolve().parent


def tokenise(corpus: str, split: str, tokenizer: str, folder: str, max_tokens: int | None = None) -> dict:
    """Worker: ``corpus``'s ``split`` tokenised into a token store at ``folder`` (the whole split, or until
    ``max_tokens``); its documents (one per module for ``stdlib``, empty ones left out) and tokens (an EOS after
    each document included)."""
    store = build_store(DataSpec(corpus, split=split, max_tokens=max_tokens), load_tokenizer(tokenizer), folder)
    return {"corpus": corpus, "split": split, "documents": int(store.documents), "tokens": int(len(store.tokens))}


def build_parser() -> argparse.ArgumentParser:
    """The command line this script reads (the commands shown in the docs are parsed with it by the tests)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", choices=["stdlib", "pydoc"])
    parser.add_argument("--split", nargs="+", default=["train"], help="splits to count (stdlib: train, test)")
    parser.add_argument("--tokenizer", default="smollm2", help="a model folder or 'smollm2' (the embedded teacher)")
    parser.add_argument("--max-tokens", type=int, default=None, help="stop each split at this many tokens")
    return parser


def main(argv: list[str] | None = None) -> list[dict]:
    args = build_parser().parse_args(argv)

    from destila.bench import run_isolated

    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    rows = []
    for split in args.split:
        with tempfile.TemporaryDirectory(prefix="destila-corpus-size-") as caches:
            os.environ["HF_DATASETS_CACHE"] = os.path.join(caches, "hf")
            os.environ["DESTILA_DATA_CACHE"] = os.path.join(caches, "stores")
            load_before = os.getloadavg()[0]
            run = run_isolated("corpus_size:tokenise", {"corpus": args.corpus, "split": split,
                                                        "tokenizer": args.tokenizer, "folder": f"{caches}/store",
                                                        "max_tokens": args.max_tokens})
        if run["status"] != "ok":
            sys.exit(f"corpus_size: {args.corpus} --split {split}: {run['status']}: {run.get('error')}")
        rows.append({**run["result"], "seconds": round(run["wall_seconds"], 1), "peak_rss_bytes": run["peak_bytes"],
                     "load_before": round(load_before, 1), "load_after": round(os.getloadavg()[0], 1)})
        print(json.dumps(rows[-1]), flush=True)
    print(markdown_table(["split", "documents", "tokens", "seconds", "peak RSS above baseline"],
                         [(f"`{row['split']}`", f"{row['documents']:,}", f"{row['tokens']:,}", f"{row['seconds']:.1f}",
                           f"{row['peak_rss_bytes'] / 2**20:,.0f} MB") for row in rows]))
    return rows


if __name__ == "__main__":
    main()
