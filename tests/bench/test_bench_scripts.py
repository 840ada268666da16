"""The benchmark scripts the docs tell a user to run, run with their defaults at tiny shapes: each produces its rows.

Each test passes only what makes a script tiny (the tiny teacher of the fixtures, small shapes, output paths)
and leaves every other option at the script's default, so a crash in a default path fails here. The scripts
are called in-process through their ``main(argv)``; every record they print or write is read back and its
figures checked (present, finite, positive), not only the exit.

Here: ``cache_export_measure.py``, ``cache_measure.py`` (pass, pass-interleaved, memory, reader),
``crosstok_costs.py`` (bytes, tokenizer, coverage, step), ``loss_precision.py`` and ``chunk_curve.py``.
The others are in ``test_bench_scripts_more.py``.
"""

from __future__ import annotations

import json
import math

import pytest

TOP_K = 8


def printed_records(out: str) -> list[dict]:
    """The JSON objects a script printed, one a line (other lines skipped: progress, tables, the Trainer's logs)."""
    return [json.loads(line) for line in out.splitlines() if line.startswith('{"')]


def jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def positive(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@pytest.fixture(scope="module")
def tiny_caches(tmp_path_factory, tiny_llama_dir):
    """A plain and a compact top-8 cache of the tiny teacher over pydoc (16 rows of 32 tokens), and a compact
    cache with spans (16 rows of 128 tokens) for the cross-tokenizer scripts."""
    from destila.cache import build_cache

    folder = tmp_path_factory.mktemp("bench-script-caches")
    for name, options in (("plain", dict(seq_len=32, max_tokens=512)),
                          ("compact", dict(seq_len=32, max_tokens=512, encoding="compact")),
                          ("spans", dict(seq_len=128, max_tokens=2048, encoding="compact", spans=True))):
        build_cache(str(tiny_llama_dir), "pydoc", folder / name, top_k=TOP_K, progress=False, **options)
    return folder


# --- cache_export_measure.py -------------------------------------------------------------------------------------


def test_cache_export_measure_gives_bytes_and_reader_speeds_for_each_cache(tiny_caches, tmp_path, capsys):
    from benchmarks.cache_export_measure import main

    out = tmp_path / "records.jsonl"
    main([str(tiny_caches / "plain"), str(tiny_caches / "compact"), "--workdir", str(tmp_path / "work"),
          "--json", str(out)])
    records = jsonl(out)
    assert records == printed_records(capsys.readouterr().out)
    for cache, encoding in (("plain", "plain"), ("compact", "compact")):
        mine = [r for r in records if r["cache"] == cache]
        sizes = {r["layout"]: r for r in mine if r["measure"] == "bytes"}
        assert set(sizes) == {"cache shards", "export (zstd)", "export+bss", "compact-in-parquet"}
        assert all(r["encoding"] == encoding and positive(r["bytes"]) and positive(r["bytes_per_entry"])
                   and r["entries"] == 16 * 31 * TOP_K for r in sizes.values())  # 31 trained positions a row
        (export,) = [r for r in mine if r["measure"] == "export_seconds"]
        assert export["rows"] == 16 and positive(export["seconds"])
        readers = [r for r in mine if r["measure"] == "reader"]
        assert len(readers) == 4 and all(positive(r["tokens_per_second"]) for r in readers)
        assert [r["epochs"] for r in readers] == [1, 3, 3, 3]  # the first epoch once, then --epochs' default


# --- cache_measure.py --------------------------------------------------------------------------------------------


def test_cache_measure_pass_times_both_passes_each_round(tiny_llama_dir, tmp_path, capsys):
    from benchmarks.cache_measure import main

    main(["pass", "--teacher", str(tiny_llama_dir), "--seq-len", "32", "--max-tokens", "512",
          "--workdir", str(tmp_path / "pass")])
    records = printed_records(capsys.readouterr().out)
    assert [r["round"] for r in records] == [0, 1]  # --rounds' default
    for r in records:
        assert r["measure"] == "pass" and r["tokens"] == 512 and r["top_k"] == 100
        assert all(positive(r[key]) for key in ("bare_seconds", "bare_tokens_per_s", "cache_seconds",
                                                "cache_tokens_per_s", "throughput_ratio", "bytes_per_token"))
        assert (tmp_path / "pass" / f"cache-round{r['round']}" / "manifest.json").is_file()


def test_cache_measure_pass_interleaved_gives_both_rates(tiny_llama_dir, capsys):
    from benchmarks.cache_measure import main

    main(["pass-interleaved", "--teacher", str(tiny_llama_dir), "--seq-len", "32", "--max-tokens", "512"])
    (record,) = printed_records(capsys.readouterr().out)
    assert record["measure"] == "pass-interleaved" and record["tokens"] == 512
    assert all(positive(record[key]) for key in ("bare_tokens_per_s", "cache_tokens_per_s", "throughput_ratio"))


def test_cache_measure_memory_measures_each_mode_in_its_own_process(tiny_llama_dir, tmp_path, capsys, monkeypatch):
    from benchmarks.cache_measure import main

    scratch = tmp_path / "tmp"  # the measuring processes' temporary folder: their caches must not outlive them
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    out = tmp_path / "memory.jsonl"
    main(["memory", "--teacher", str(tiny_llama_dir), "--seq-lens", "32", "--json", str(out)])
    assert not [p.name for p in scratch.iterdir() if p.name.startswith("destila-memory-")]
    records = jsonl(out)
    assert records == printed_records(capsys.readouterr().out)
    assert [r["mode"] for r in records] == ["cache", "bare"]
    for r in records:
        assert r["seq_len"] == 32 and r["tokens"] == 2 * 8 * 32  # --batches × --batch-size × seq-len
        assert all(positive(r[key]) for key in ("peak_mib", "load_and_pass_peak_mib", "logits_BTV_float32_mib",
                                                "seconds"))


def test_cache_measure_reader_compares_the_readers_with_a_student(tiny_caches, tiny_llama_dir, capsys):
    from benchmarks.cache_measure import main

    main(["reader", str(tiny_caches / "plain"), "--teacher", str(tiny_llama_dir)])
    (record,) = printed_records(capsys.readouterr().out)
    assert record["sequences"] == 16 and record["seq_len"] == 32 and record["top_k"] == TOP_K
    rates = ("items_first_epoch_tokens_per_s", "items_tokens_per_s", "dataloader_workers0_tokens_per_s",
             "dataloader_workers2_tokens_per_s", "student_train_tokens_per_s", "slowest_reader_over_student")
    assert all(positive(record[key]) for key in rates)
    assert record["student_layers"] == 6


# --- crosstok_costs.py -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def student_tokenizer(tmp_path_factory, tiny_llama_dir):
    """The script's own ``tokenizer`` verb: a 512-token byte-level BPE on pydoc's training documents."""
    from benchmarks.crosstok_costs import main

    out = tmp_path_factory.mktemp("student-tokenizer")
    main(["tokenizer", "--out", str(out), "--vocab-size", "512", "--teacher", str(tiny_llama_dir)])
    return out


def test_crosstok_costs_tokenizer_writes_a_tokenizer_of_the_size_asked(student_tokenizer):
    from transformers import AutoTokenizer

    assert len(AutoTokenizer.from_pretrained(student_tokenizer)) == 512


def test_crosstok_costs_bytes_gives_the_spans_overhead_of_each_encoding(tiny_llama_dir, capsys):
    from benchmarks.crosstok_costs import main

    main(["bytes", "--teacher", str(tiny_llama_dir), "--seq-len", "32", "--max-tokens", "512"])
    (record,) = printed_records(capsys.readouterr().out)
    assert record["tokens"] == 512 and record["top_k"] == 100
    assert set(record["shard_bytes"]) == {"plain", "plain+spans", "compact", "compact+spans"}
    assert all(positive(size) for size in record["shard_bytes"].values())
    assert all(positive(record[f"{encoding}_spans_{key}"]) for encoding in ("plain", "compact")
               for key in ("bytes_per_token", "overhead"))


def test_crosstok_costs_coverage_reports_the_alignment_and_item_times(tiny_caches, student_tokenizer, capsys):
    from benchmarks.crosstok_costs import main

    main(["coverage", "--cache", str(tiny_caches / "spans"), "--student-tokenizer", str(student_tokenizer)])
    (record,) = printed_records(capsys.readouterr().out)
    coverage = record["coverage"]
    assert coverage["sequences"] == 16 and 0 < coverage["mapped_mass"] <= 1 and 0 < coverage["distilled_rows"] <= 1
    assert record["items_timed"] == 16
    assert all(positive(record[key]) for key in ("vocab_map_seconds", "cache_item_ms", "student_item_ms"))


def test_crosstok_costs_step_times_same_cross_and_stored_steps(tiny_caches, student_tokenizer, capsys):
    from benchmarks.crosstok_costs import main

    main(["step", "--cache", str(tiny_caches / "spans"), "--student-tokenizer", str(student_tokenizer),
          "--tokens-per-row", "64", "--hidden", "32"])
    (record,) = printed_records(capsys.readouterr().out)
    assert record["batch"] == [4, 64] and record["student"]["vocab"] == 512
    assert len(record["same_step_all_s"]) == len(record["cross_step_all_s"]) == 9  # --repeats' default
    figures = ("same_step_s", "cross_step_s", "cache_item_s", "cross_item_s", "stored_item_s", "store_seconds",
               "with_items_ratio", "stored_with_items_ratio",
               # the DataLoader rows, on by default (--loader-steps 12, one worker)
               "loader_same_step_s", "loader_cross_step_s", "loader_stored_step_s")
    assert all(positive(record[key]) for key in figures)


# --- loss_precision.py -------------------------------------------------------------------------------------------


def test_loss_precision_gives_every_paths_errors(tmp_path):
    from benchmarks.loss_precision import main, paths

    out = tmp_path / "precision.jsonl"
    assert main(["--rows", "64", "--hidden", "64", "--vocab", "1024", "--json", str(out)]) == 0
    rows = jsonl(out)
    # per temperature: the naive bf16 row and one row a path
    assert len(rows) == 2 * (1 + len(paths("cpu")))
    assert {(r["temperature"], r["hard_weight"]) for r in rows} == {(1.0, 0.5), (2.0, 0.0)}
    for r in rows:
        assert all(math.isfinite(r[f"{name}_error"]) and 0 <= r[f"{name}_error"] < 0.1 for name in ("loss", "dh", "dw"))
        assert r["path"] and r["rows"] == 64 and r["device"] == "cpu"


# --- chunk_curve.py ----------------------------------------------------------------------------------------------


def test_chunk_curve_gives_a_fused_row_per_chunk_and_one_picked_by_the_loss(tmp_path):
    from benchmarks.chunk_curve import main

    out = tmp_path / "curve.jsonl"
    assert main(["--seq-len", "256", "--hidden", "64", "--vocab", "1024", "--chunk-sizes", "128", "--repeats", "1",
                 "--json", str(out)]) == 0
    rows = jsonl(out)
    assert [(r["impl"], r["chunk_requested"]) for r in rows] == [("floor", 128), ("fused", 128), ("fused", "auto")]
    for r in rows:
        assert r["status"] == "ok" and positive(r["seconds"]) and positive(r["peak_bytes"])
        assert positive(r["ratio_to_floor"]) and r["seq_len"] == 256
    assert rows[1]["chunk_size"] == 128 and positive(rows[2]["chunk_size"])
