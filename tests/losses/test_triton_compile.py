"""The Triton row kernels compile to H100/H200 (sm_90) and A100 (sm_80) machine code, checked with no GPU.

The interpreter tests (test_triton_rows.py) check the kernels' values; they
never lower them. Here Triton's own compiler, down to ``ptxas``, builds every
specialisation the loss launches for both targets, in a process without
``TRITON_INTERPRET`` (triton_compile.py). A planted kernel that the
interpreter runs but that cannot be built for sm_80 shows the check fails
when a kernel does not lower.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton", reason="the triton extra is not installed (pip install 'destila[triton]')")

from triton_compile import cases, planted_kernel  # noqa: E402

SCRIPT = Path(__file__).with_name("triton_compile.py")


@pytest.fixture
def compile_in(tmp_path):
    """Run triton_compile.py with its own empty Triton cache: every build really runs, and nothing is written
    outside the test's folder."""

    def run(*args: str) -> tuple[int, list[dict]]:
        return _compile(*args, cache=tmp_path / "triton-cache")

    return run


def _compile(*args: str, cache: Path) -> tuple[int, list[dict]]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"TRITON_CACHE_DIR": str(cache)}
    done = subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=300)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, rows


def test_every_row_kernel_specialisation_compiles_for_sm90_and_sm80(compile_in):
    code, rows = compile_in("90", "80")
    failures = [r for r in rows if not r["ok"]]
    assert not failures, failures
    expected = len(list(cases()))
    assert expected == 2 * (2 * 2 + 3 * 2 * 2)  # per vocabulary: stats × (dtype, T pass); grad × (dtypes, T, label)
    assert len(rows) == 2 * expected and code == 0
    assert {r["arch"] for r in rows} == {90, 80}
    assert all(r["cubin_bytes"] > 1000 for r in rows)  # ptxas ran and wrote machine code


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter half runs on CPU tensors")
def test_a_kernel_the_interpreter_runs_but_sm80_cannot_build_fails_the_check(compile_in):
    x = torch.linspace(-2, 2, 16)
    y = torch.empty(16, dtype=torch.float8_e4m3fn)
    planted_kernel()[(1,)](x, y, N=16)  # the interpreter (conftest sets TRITON_INTERPRET) runs it
    assert torch.equal(y.float(), x.to(torch.float8_e4m3fn).float())

    code, rows = compile_in("--planted", "80")
    assert code == 1 and len(rows) == 1 and not rows[0]["ok"]
    assert "fp8e4nv not supported" in rows[0]["error"]
    code, rows = compile_in("--planted", "90")
    assert code == 0 and rows[0]["ok"]
