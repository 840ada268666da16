"""The in-process runner shows what a real `destila` process shows, and leaves nothing behind."""

import logging
import os

import pytest
from fault_helpers import destila, destila_in_process, error_line


def test_a_refusal_reads_the_same_in_process_and_in_a_real_process(tmp_path):
    missing = tmp_path / "no-cache"
    real, here = destila("cache", "inspect", missing), destila_in_process("cache", "inspect", missing)
    assert (here.returncode, here.stdout, here.stderr) == (real.returncode, real.stdout, real.stderr)
    error_line(here, "cache", 2, f"{missing}: no manifest.json found")


def test_an_uncaught_exception_is_a_traceback_and_fails_the_one_line_check(monkeypatch):
    import destila.cli.main

    def broken(*_args, **_kwargs):
        raise RuntimeError("a bug, not the user's mistake")

    monkeypatch.setattr(destila.cli.main, "build_parser", broken)
    result = destila_in_process("cache", "inspect", "anything")
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert "RuntimeError: a bug, not the user's mistake" in result.stderr
    with pytest.raises(AssertionError):
        error_line(result, "cache", 1)


def test_a_run_leaves_the_environment_logging_and_folder_as_they_were(tiny_llama_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("DESTILA_DEBUG", "1")  # removed for the run, as the subprocess environment does
    environment, cwd = dict(os.environ), os.getcwd()
    handlers, level = logging.getLogger().handlers[:], logging.getLogger().level
    data = tmp_path / "notes.jsonl"
    data.write_text('{"text": "a first document"}\n["a", "list"]\n')
    result = destila_in_process("cache", "build", tiny_llama_dir, data, "-o", tmp_path / "cache")
    error_line(result, "cache", 2, "line 2: expected a JSON object")  # no traceback: DESTILA_DEBUG was not seen
    assert dict(os.environ) == environment and os.getcwd() == cwd
    assert logging.getLogger().handlers == handlers and logging.getLogger().level == level
