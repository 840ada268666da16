"""An export read by its hub id goes through every check a local export gets: it is read from its snapshot in the
hub cache (huggingface_hub's layout: ``datasets--ORG--NAME/snapshots/COMMIT/…`` linking into ``blobs/``), whose
files may link into the repo's blobs and nowhere else. Offline: the snapshot is placed in a hub cache made for
the test."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
from export_damage import (
    card_points_outside,
    documents_split_resigned,
    foreign_file_added,
    mass_two_resigned,
    nothing_trained_resigned,
    reordered_resigned,
    temperature_edited,
    truncated,
)
from fault_helpers import destila_in_process, error_line, small_cache, small_export, student  # noqa: F401 (fixtures)

REPO = "someone/teacher-targets"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def hub_snapshot(export: Path, cache: Path, repo: str = REPO) -> Path:
    """``export`` placed in the hub cache ``cache`` as huggingface_hub lays a downloaded dataset out: each file a
    blob named by its hash, the snapshot's files relative links to them, ``refs/main`` naming the commit."""
    folder = cache / f"datasets--{repo.replace('/', '--')}"
    snapshot = folder / "snapshots" / COMMIT
    for file in sorted(p for p in export.rglob("*") if p.is_file()):
        blob = folder / "blobs" / hashlib.sha256(file.read_bytes()).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file, blob)
        link = snapshot / file.relative_to(export)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / "main").write_text(COMMIT)
    return snapshot


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    import datasets
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-datasets"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def test_an_intact_hub_export_is_read_from_its_snapshot(small_export, hub_cache):  # noqa: F811
    from destila.cache.dataset import open_cache

    hub_snapshot(small_export, hub_cache)
    cache = open_cache(REPO)
    assert len(cache) == 16 and cache.path == REPO
    assert cache[15]["input_ids"].shape == (32,)


def test_an_intact_hub_export_trains(small_export, student, hub_cache, tmp_path):  # noqa: F811
    hub_snapshot(small_export, hub_cache)
    result = destila_in_process("train", student, "--cache", REPO, "-o", tmp_path / "out", "--max_steps", "1",
                                "--use_cpu", "--per_device_train_batch_size", "4")
    assert result.returncode == 0, result.stderr[-2000:]


DAMAGES = [
    (truncated, "size"),
    (foreign_file_added, "not listed in destila_cache.json"),
    (reordered_resigned, "reordered"),
    (mass_two_resigned, "do not sum to 1"),
    (nothing_trained_resigned, "hold no trained position"),
    (documents_split_resigned, "the loss mask crosses a document bound"),
    (temperature_edited, "no longer give the identity"),
    (card_points_outside, "configs name the data files"),
]


@pytest.mark.parametrize("damage,needle", DAMAGES, ids=[damage.__name__ for damage, _ in DAMAGES])
def test_train_refuses_a_damaged_hub_export_before_the_first_step(  # noqa: F811
        small_export, student, hub_cache, tmp_path, damage, needle):
    export = shutil.copytree(small_export, tmp_path / "export")
    damage(export, tmp_path)
    hub_snapshot(export, hub_cache)
    out = tmp_path / "out"
    result = destila_in_process("train", student, "--cache", REPO, "-o", out, "--max_steps", "2", "--use_cpu",
                                "--per_device_train_batch_size", "4")
    error_line(result, "train", 2, needle)
    assert not out.exists() or not list(out.glob("checkpoint-*"))


def test_a_snapshot_file_linking_out_of_the_repo_folder_is_refused(small_export, hub_cache, tmp_path):  # noqa: F811
    from destila.cache.dataset import open_cache

    snapshot = hub_snapshot(small_export, hub_cache)
    outside = tmp_path / "outside.parquet"
    shutil.copyfile(snapshot / "data" / "train-00000-of-00002.parquet", outside)
    (snapshot / "data" / "train-00000-of-00002.parquet").unlink()
    (snapshot / "data" / "train-00000-of-00002.parquet").symlink_to(outside)
    with pytest.raises(ValueError, match="a symbolic link to"):
        open_cache(REPO)
