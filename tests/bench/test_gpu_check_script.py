"""benchmarks/gpu/check.sh cannot run without a GPU; its dry run checks the steps, the wheel list and the paths.

The dry run reads a .gpu folder (here a stand-in with a file per listed wheel and a tokenizer config), prints
every step's command and runs none; each command is then parsed by the real parser of what it calls.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import tomllib
from importlib import import_module
from pathlib import Path

import pytest

from destila.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu" / "check.sh"
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
import prepare  # noqa: E402  (benchmarks/gpu is a folder of scripts)

STEPS = ["tests", "loss", "main_teacher", "main_job", "loss_256k", "teacher", "student", "e2e", "precision",
         "chunk_curve", "verdicts"]


def _stand_in(folder: Path, skip: str | None = None) -> Path:
    (folder / "wheels").mkdir(parents=True)
    for name, version in prepare.wanted().items():
        if name != skip:
            (folder / "wheels" / f"{name}-{version}-py3-none-any.whl").write_bytes(b"")
    (folder / "tokenizer").mkdir()
    (folder / "tokenizer" / "tokenizer_config.json").write_text("{}")
    (folder / "smollm2-config").mkdir()
    (folder / "smollm2-config" / "config.json").write_text("{}")
    return folder


def _dry_run(gpu_dir: Path, out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPU_DIR": str(gpu_dir), "PYTHON": sys.executable}
    return subprocess.run(["bash", str(SCRIPT), "--dry-run", str(out)], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=120)


def test_the_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_dry_run_lists_every_step_whose_commands_parse(tmp_path):
    done = _dry_run(_stand_in(tmp_path / "gpu"), tmp_path / "out")
    assert done.returncode == 0, done.stderr
    steps = [line for line in done.stdout.splitlines() if line.startswith("step ")]
    assert [line.split()[1] for line in steps] == STEPS
    results = tmp_path / "out" / "gpu-dry-run"
    written = set()
    for line in steps:
        argv = shlex.split(line.split(":", 1)[1])
        assert argv[0] == sys.executable
        written |= {Path(argv[i + 1]) for i, a in enumerate(argv) if a in ("--json", "--plot")}
        if argv[1:3] == ["-m", "destila"]:
            with contextlib.redirect_stderr(io.StringIO()):
                cli_main.build_parser().parse_args(argv[3:])  # exits 2 on an unknown flag
        elif argv[1:3] == ["-m", "benchmarks.peers"]:
            from benchmarks.peers.run import build_parser

            args = build_parser().parse_args(argv[3:])
            assert {"liger-fljsd", "liger-distill", "cce"} <= set(args.peers) and args.peer_beta == 0.0
            assert set(args.impls) == {"fused", "fused-exact", "chunked"}
        elif argv[1:3] == ["-m", "pytest"]:
            tests = [a.split("::")[0] for a in argv if ".py" in a]
            assert tests and all((ROOT / t).is_file() for t in tests)
            for node in (a for a in argv if "::" in a):  # a named test exists in its file
                path, name = node.split("::")
                assert f"def {name}(" in (ROOT / path).read_text(), node
        else:
            script = argv[1]
            assert (ROOT / script).is_file(), script
            if script.count("/") == 1:  # benchmarks/NAME.py: its own parser
                import_module(script.removesuffix(".py").replace("/", ".")).build_parser().parse_args(argv[2:])
    assert all(path.parent == results for path in written)
    # What comes back from a GPU machine: at most 8 files, the log and the verdicts included.
    assert len(written) + 2 <= 8
    assert not results.exists()  # a dry run writes nothing


def test_dry_run_refuses_a_missing_wheel(tmp_path):
    done = _dry_run(_stand_in(tmp_path / "gpu", skip="liger_kernel"), tmp_path / "out")
    assert done.returncode == 2
    assert "liger_kernel: expected one wheel of 0.8.5, found none" in done.stderr
    assert "make gpu-wheels" in done.stderr


def test_the_wheel_list_covers_what_the_gpu_machines_lack():
    """Every runtime dependency of destila is on those machines or in wheels.txt, and so is every peer."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    have = prepare.present() | set(prepare.wanted())
    needs = {prepare.normalise(re.split(r"[<>=!~;\[ ]", dep, maxsplit=1)[0]) for dep in project["dependencies"]}
    assert needs - have == set()
    assert {"liger_kernel", "trl", "cut_cross_entropy"} <= set(prepare.wanted())
    assert not set(prepare.wanted()) & prepare.present()  # one version of each: never a second copy


@pytest.mark.skipif(not (ROOT / ".gpu" / "wheels").is_dir(), reason="no .gpu/wheels here (`make gpu-wheels`)")
def test_the_downloaded_wheels_are_the_listed_ones():
    assert prepare.wheel_problems(ROOT / ".gpu" / "wheels") == []
