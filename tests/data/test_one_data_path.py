"""User data has one home per spec and one way into sequences: the cache build and calibration read the same rows.

``BuildSpec`` keeps no copy of the data's fields (the row length lives in the
``DataSpec``), rows given in Python carry their options as ``GivenRows``, and
student calibration text is packed by ``as_sequences`` as a cache build packs
it, so calibration from ``--data`` and from a cache of that data see the same
tokens and positions.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields

import datasets
import torch

from destila.cache import TopKCache, build_cache, read_manifest
from destila.cache.spec import BuildSpec
from destila.data import DataSpec, GivenRows
from destila.models import load_tokenizer
from destila.student.calibration import from_cache, from_data
from destila.student.spec import StudentInitSpec


def test_build_spec_keeps_no_copy_of_the_data_fields():
    assert {"seq_len", "max_tokens", "text_field"}.isdisjoint(f.name for f in fields(BuildSpec))
    spec = BuildSpec.from_options("t", "pydoc", "o", seq_len=64, max_tokens=640, text_field="body")
    assert spec.data == DataSpec("pydoc", seq_len=64, max_tokens=640, text_field="body")
    rows = [{"text": "a b c"}, {"text": "d e f"}]
    given = BuildSpec.from_options("t", rows, "o", seq_len=16).data
    assert isinstance(given, GivenRows) and given.rows is rows and given.options["seq_len"] == 16
    assert BuildSpec("t", rows, "o").data.options == {"seq_len": 512}  # DataSpec's default row length


def test_cache_build_flags_reach_the_data_spec(tiny_llama_dir, tmp_path):
    out = tmp_path / "c"
    subprocess.run([sys.executable, "-m", "destila", "cache", "build", str(tiny_llama_dir), "pydoc", "-o", str(out),
                    "--seq-len", "24", "--max-tokens", str(24 * 3), "--top-k", "4", "--quiet"],
                   check=True, capture_output=True, text=True, timeout=300)
    manifest = read_manifest(out)
    assert (manifest.seq_len, manifest.max_tokens, manifest.sequences) == (24, 72, 3)
    assert manifest.data["seq_len"] == 24 and manifest.data["max_tokens"] == 72


def test_rows_given_in_python_are_cut_by_their_options(tiny_llama_dir, tmp_path):
    rows = datasets.Dataset.from_list([{"text": "def f(x):\n    return x + 1\n" * 6}] * 5)
    report = build_cache(str(tiny_llama_dir), rows, tmp_path / "rows", seq_len=20, top_k=4, progress=False)
    assert report.complete and read_manifest(tmp_path / "rows").seq_len == 20
    assert TopKCache(tmp_path / "rows")[0]["input_ids"].shape == (20,)


def test_calibration_from_data_reads_the_rows_a_cache_of_that_data_holds(tiny_llama_dir, tmp_path):
    documents = [f"def f{i}(x):\n    return x * {i}" for i in range(40)]  # short: several per row
    data = DataSpec(documents, seq_len=32, max_tokens=32 * 4)
    build_cache(BuildSpec(str(tiny_llama_dir), data, tmp_path / "c", progress=False))
    tokenizer = load_tokenizer(str(tiny_llama_dir))
    cached = from_cache(tmp_path / "c", tokens=32 * 4, tokenizer=tokenizer)
    read = from_data(data, tokenizer, tokens=32 * 4, seq_len=32)
    assert torch.equal(read.input_ids, cached.input_ids)
    assert torch.equal(read.position_ids, cached.position_ids)  # positions restart at each document in both
    assert torch.equal(read.scored, cached.scored)
    assert (read.position_ids == 0).sum() > read.input_ids.shape[0]  # several documents per row: bounds are real


def test_student_init_normalises_its_data_through_the_data_spec(tmp_path):
    spec = StudentInitSpec("t", tmp_path / "s", layers=2, select="importance", data="pydoc", text_field="body")
    assert spec.data == DataSpec("pydoc", text_field="body", packing="documents")
