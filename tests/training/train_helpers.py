"""Fixtures for training tests: a tiny cache of the tiny llama teacher and fresh students."""

from __future__ import annotations

import json

import pytest

from conftest import pydoc_texts
from destila.cache import build_cache
from destila.student import init_student

DOCS = 6  # pydoc topics: about 200 sequences of 32 tokens with the tiny tokenizer
SEQ_LEN = 32


@pytest.fixture(scope="session")
def tiny_cache(tiny_llama_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("cache") / "cache"
    build_cache(str(tiny_llama_dir), pydoc_texts(DOCS), path, seq_len=SEQ_LEN, top_k=16, progress=False)
    return path


@pytest.fixture(scope="session")
def fresh_student(tiny_llama_dir, tmp_path_factory):
    """A random 2-layer student: far from the teacher, so distillation has work to do."""
    path = tmp_path_factory.mktemp("student") / "student"
    init_student(str(tiny_llama_dir), path, config_overrides={"num_hidden_layers": 2}, seed=1)
    return path


def read_log(path) -> dict[int, dict]:
    """The last logged training record per step (a resumed run logs some steps twice)."""
    records = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if "loss" in record:
            records[record["step"]] = record
    return records
