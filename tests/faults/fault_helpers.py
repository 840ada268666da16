"""Shared pieces of the fault-injection tests: `destila` command lines, small file systems, tiny models.

Every assertion is about what the user sees (exit code, the one error line,
no traceback) and what is on disk afterwards. A command runs either as
``python -m destila …`` in a subprocess with one thread, exactly as a user
would run it (:func:`destila`), or through the same entry point inside the
test process (:func:`destila_in_process`, the same result without a new
interpreter's seconds of imports). The subprocess stays wherever the process
boundary is part of what is checked: kills, two writers at once, locks held
by another process, full disks (a write can fail as late as the process's
exit), folders moved by environment variables, ``--debug`` tracebacks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import train_tiny_tokenizer, save_tiny_model
from in_process import run_in_process

SRC = str(Path(__file__).parents[2] / "src")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
       "PYTHONPATH": os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")]))}
ENV.pop("DESTILA_DEBUG", None)
CACHE_ARGS = ["--seq-len", "32", "--max-tokens", "512", "--top-k", "8", "--shard-size", "4", "--quiet"]
TRAIN_ARGS = ["--per_device_train_batch_size", "4", "--learning_rate", "3e-3", "--lr_scheduler_type", "constant",
              "--seed", "7", "--logging_steps", "1", "--use_cpu"]


def destila(*args, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "destila", *map(str, args)], env=env or ENV, capture_output=True,
                          text=True, timeout=timeout)


def destila_in_process(*args) -> subprocess.CompletedProcess:
    """:func:`destila` run by ``destila.cli.main.main`` in this process (see :mod:`in_process`)."""
    return run_in_process([*map(str, args)])


def build_command(teacher, data, out, *extra) -> list[str]:
    return ["cache", "build", str(teacher), str(data), "-o", str(out), *CACHE_ARGS, *extra]


def train_command(student, cache, out, *extra) -> list[str]:
    return ["train", str(student), "--cache", str(cache), "-o", str(out), *TRAIN_ARGS, *extra]


def error_line(result: subprocess.CompletedProcess, command: str, code: int, *needles: str) -> str:
    """Assert the failure is one ``destila <command>: error: …`` line (no traceback); return that line."""
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.returncode == code, (result.returncode, result.stderr[-3000:])
    lines = [line for line in result.stderr.splitlines() if ": error: " in line]
    assert len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith(f"destila {command}: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def copy_of(cache, tmp_path):
    """A copy of ``cache`` under ``tmp_path`` to damage (the fixture's cache stays intact)."""
    target = tmp_path / "cache"
    shutil.copytree(cache, target)
    return target


def edit_manifest(cache, change):
    """Apply ``change(raw)`` to the parsed ``manifest.json`` of ``cache`` and write it back."""
    path = cache / "manifest.json"
    raw = json.loads(path.read_text())
    change(raw)
    path.write_text(json.dumps(raw, indent=1))


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes: to assert nothing already written changed."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(Path(folder).rglob("*")) if p.is_file()}


class Tmpfs:
    """A small tmpfs mounted for one test (the tests run as root); skipped where mounting is not permitted."""

    def __init__(self, base: Path):
        self.base, self.mounts = base, []

    def mount(self, size: str, name: str = "fs", inodes: int | None = None) -> Path:
        """``inodes``: how many files and folders it holds, its root included (1: nothing can be created)."""
        point = self.base / name
        point.mkdir()
        options = f"size={size}" + (f",nr_inodes={inodes}" if inodes else "")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN): {done.stderr.strip()}")
        self.mounts.append(point)
        return point

    @staticmethod
    def read_only(point: Path) -> None:
        subprocess.run(["mount", "-o", "remount,ro", str(point)], check=True)

    @staticmethod
    def free(point: Path) -> int:
        stats = os.statvfs(point)
        return stats.f_bavail * stats.f_frsize

    @staticmethod
    def used(point: Path) -> int:
        stats = os.statvfs(point)
        return (stats.f_blocks - stats.f_bfree) * stats.f_frsize

    def fill(self, point: Path, leave: int, name: str = "filler") -> Path:
        """Write a filler file so that about ``leave`` bytes stay free (whole 4 KiB pages)."""
        filler = point / name
        filler.unlink(missing_ok=True)
        size = max(0, self.free(point) - leave)
        with open(filler, "wb") as handle:
            handle.write(b"\0" * size)
        return filler

    def unmount_all(self) -> None:
        for point in reversed(self.mounts):
            subprocess.run(["umount", "-l", str(point)], capture_output=True)


@pytest.fixture
def tmpfs(tmp_path):
    holder = Tmpfs(tmp_path)
    yield holder
    holder.unmount_all()


@pytest.fixture(scope="session")
def wide_vocab_teacher(tmp_path_factory):
    """A tiny Llama with a 4000-token tokenizer: its tokenizer.json (~0.2 MB) dominates a small cache."""
    tokenizer = train_tiny_tokenizer(vocab_size=4000)
    path = tmp_path_factory.mktemp("wide-teacher")
    save_tiny_model(path, tokenizer, hidden=16, layers=2)
    return path


@pytest.fixture(scope="session")
def small_cache(tiny_llama_dir, tmp_path_factory):
    """A complete cache of the tiny Llama: 16 sequences of 32 tokens, 4 shards, written by the CLI."""
    path = tmp_path_factory.mktemp("small-cache") / "cache"
    result = destila_in_process(*build_command(tiny_llama_dir, "pydoc", path))
    assert result.returncode == 0, result.stderr
    return path


@pytest.fixture(scope="session")
def small_export(small_cache, tmp_path_factory):
    """The small cache exported (`destila cache export`) as two Parquet files of 8 rows."""
    out = tmp_path_factory.mktemp("small-export") / "export"
    result = destila_in_process("cache", "export", small_cache, out, "--rows-per-file", "8", "--no-progress")
    assert result.returncode == 0, result.stderr
    return out


@pytest.fixture(scope="session")
def train_cache(tiny_cache):
    """The training tests' tiny cache (tests/conftest.py): about 200 sequences of 32 tokens."""
    return tiny_cache


@pytest.fixture(scope="session")
def student(fresh_student):
    """The training tests' random 2-layer student (tests/conftest.py)."""
    return fresh_student
