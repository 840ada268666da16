"""An export is read only as it was written: `train` and `eval` refuse a damaged or edited one before the first
optimizer step (most of them before any model loads), in one line, as `destila cache verify` does.

Each damage (:mod:`export_damage`) is applied to a copy of a real export written by `destila cache export`.
"""

from __future__ import annotations

import contextlib
import os
import shutil

import pytest
from export_damage import DAMAGES, FIRST, nothing_trained_resigned, record_of, rewrite_rows, trained_steps
from fault_helpers import destila_in_process, error_line, small_cache, small_export, student  # noqa: F401 (fixtures)

IDS = [damage.__name__ for damage, _ in DAMAGES]


def damaged(small_export, tmp_path, damage):
    export = shutil.copytree(small_export, tmp_path / "export", symlinks=True)
    damage(export, tmp_path)
    return export


@pytest.mark.parametrize("damage,needle", DAMAGES, ids=IDS)
def test_train_refuses_a_damaged_export_before_the_first_step(small_export, student, tmp_path, damage,  # noqa: F811
                                                              needle):
    export = damaged(small_export, tmp_path, damage)
    out = tmp_path / "out"
    result = destila_in_process("train", student, "--cache", export, "-o", out, "--max_steps", "2", "--use_cpu",
                                "--per_device_train_batch_size", "4", "--eval_fraction", "0.25")
    error_line(result, "train", 2, needle)
    assert not out.exists() or trained_steps(out) == 0


@pytest.mark.parametrize("damage,needle", DAMAGES, ids=IDS)
def test_eval_refuses_a_damaged_export(small_export, student, tmp_path, damage, needle):  # noqa: F811
    export = damaged(small_export, tmp_path, damage)
    result = destila_in_process("eval", student, "--cache", export, "--max-tokens", "64", "--new-tokens", "2")
    error_line(result, "eval", 2, needle)


@pytest.mark.parametrize("damage,needle", DAMAGES, ids=IDS)
def test_verify_finds_each_damage(small_export, tmp_path, damage, needle):
    from destila.cache import verify_cache

    report = verify_cache(damaged(small_export, tmp_path, damage))
    assert not report.ok and report.faults


def test_an_intact_export_verifies_trains_and_evaluates(small_export, student, tmp_path):  # noqa: F811
    from destila.cache import verify_cache

    report = verify_cache(small_export)
    assert report.ok and not report.warnings, report.faults + report.warnings
    trained = destila_in_process("train", student, "--cache", small_export, "-o", tmp_path / "out", "--max_steps",
                                 "1", "--use_cpu", "--per_device_train_batch_size", "4")
    assert trained.returncode == 0, trained.stderr[-2000:]
    evaluated = destila_in_process("eval", student, "--cache", small_export, "--max-tokens", "64", "--new-tokens", "2")
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]


def test_an_export_restored_after_a_damaged_read_is_read_whole(small_export, tmp_path, monkeypatch):
    """A file that lost half its rows is read once (or refused), then restored with its modification time:
    `datasets` keys its Arrow copy on paths and times, so it would serve the 12 rows of the damaged read again."""
    import datasets

    from destila.cache.dataset import open_cache

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-datasets"))
    export = shutil.copytree(small_export, tmp_path / "export")
    keeping_times(export, FIRST, lambda rows: rows[:4])
    with contextlib.suppress(ValueError):  # refused, or read with 4 rows missing
        open_cache(export)
    shutil.copy2(small_export / FIRST, export / FIRST)  # restored, with the time the file had before
    assert len(open_cache(export)) == 16


def keeping_times(export, name, change):
    """:func:`rewrite_rows`, the file keeping its modification time (a tool that preserves times, or a disk)."""
    times = os.stat(export / name)
    rewrite_rows(export, name, change)
    os.utime(export / name, ns=(times.st_atime_ns, times.st_mtime_ns))


def test_the_identity_is_the_sha256_of_the_record_without_it(small_export):
    from export_damage import export_identity

    record = record_of(small_export)
    assert record["identity"] == export_identity(record)


def test_a_loaded_export_with_nothing_trained_is_refused_when_opened(small_export, tmp_path):  # noqa: F811
    """Rows with their record given in Python (a ``datasets.Dataset``) are refused as the export's files are."""
    import datasets

    from destila.cache.dataset import open_cache

    export = damaged(small_export, tmp_path, nothing_trained_resigned)
    rows = datasets.load_dataset(str(export), split="train", cache_dir=str(tmp_path / "hf"))
    with pytest.raises(ValueError, match="hold no trained position"):
        open_cache(rows)
    intact = datasets.load_dataset(str(small_export), split="train", cache_dir=str(tmp_path / "hf"))
    assert len(open_cache(intact)) == 16
