"""Each peer loss, called as the benchmark calls it, equals destila's loss where both compute the same quantity.

With K = V (every token cached, empty rest bucket) destila's bucket divergence
is the divergence over the full vocabulary, which is what the peers compute
from full logits. torchtune returns the cross-entropy to the teacher, i.e.
the forward KL plus the teacher's entropy (same gradient). TRL and Liger
take a generalized-JSD β with destila's convention ``m = βp + (1−β)q``;
their β = 0 and β = 1 are the forward and reverse KL.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from destila import distill_loss
from destila.losses.row_kernels import interpreting
from benchmarks.peers.loss import PEERS, make_teacher, peer_loss, unavailable_reason
from benchmarks.peers.run import main as peers

N, H, V = 13, 8, 50


def _installed(peer: str):
    reason = unavailable_reason(peer, "cuda" if torch.cuda.is_available() else "cpu")
    return pytest.mark.skipif(reason is not None, reason=f"{peer}: {reason}")


def _problem(peer: str, dtype):
    torch.manual_seed(0)
    hidden = torch.randn(N, H, dtype=dtype)
    weight = torch.randn(V, H, dtype=dtype) / 2
    teacher = make_teacher(peer, N, H, V, dtype, "cpu", seed=0)
    labels = torch.randint(0, V, (N,))
    labels[[2, 7]] = -100  # both sides must drop these rows
    return hidden, weight, teacher, labels


def _destila(hidden, weight, teacher_logits, labels, **kwargs):
    """destila's fused loss in float64 with K = V: the full-vocabulary divergence."""
    lp = torch.log_softmax(teacher_logits.double(), dim=1)
    every = lp.topk(V, dim=1)
    h = hidden.double().detach().requires_grad_(True)
    loss = distill_loss(h, weight.double(), every.indices, every.values, torch.full((N,), float("-inf"),
                        dtype=torch.float64), labels, impl="fused", chunk_size=4, **kwargs)
    loss.backward()
    entropy = -(lp.exp() * lp).sum(1)[labels != -100].mean()
    return loss.detach(), h.grad, entropy


def _peer(peer, hidden, weight, teacher, labels, **kwargs):
    h = hidden.detach().clone().requires_grad_(True)
    loss = peer_loss(peer, h, weight, teacher, labels, chunk_size=5, **kwargs)
    loss.backward()
    return loss.detach().double(), h.grad.double()


def _teacher_logits(teacher: dict) -> torch.Tensor:
    return teacher["logits"] if "logits" in teacher else teacher["hidden"] @ teacher["weight"].T


@_installed("torchtune")
def test_torchtune_is_forward_kl_plus_teacher_entropy():
    hidden, weight, teacher, labels = _problem("torchtune", torch.float32)
    theirs, their_grad = _peer("torchtune", hidden, weight, teacher, labels)  # 3 chunks of 5, 5, 3 rows
    ours, our_grad, entropy = _destila(hidden, weight, teacher["logits"], labels)
    assert ours > 0.1  # a real divergence, not two zeros
    assert theirs.item() == pytest.approx((ours + entropy).item(), rel=1e-5)
    assert torch.allclose(their_grad, our_grad, rtol=1e-4, atol=1e-6)
    assert their_grad[2].abs().max() == 0 and our_grad[2].abs().max() == 0  # the masked row


DIVERGENCES = [(0.0, dict(divergence="forward_kl")), (0.5, dict(divergence="jsd", beta=0.5)),
               (0.3, dict(divergence="jsd", beta=0.3)), (1.0, dict(divergence="reverse_kl"))]


@_installed("trl-gkd")
@pytest.mark.parametrize("beta, ours_kwargs", DIVERGENCES)
def test_trl_generalized_jsd_equals_destila(beta, ours_kwargs):
    hidden, weight, teacher, labels = _problem("trl-gkd", torch.float64)  # TRL's loss runs in float64
    theirs, their_grad = _peer("trl-gkd", hidden, weight, teacher, labels, beta=beta)
    ours, our_grad, _ = _destila(hidden, weight, teacher["logits"], labels, **ours_kwargs)
    assert ours > 0.01
    assert theirs.item() == pytest.approx(ours.item(), rel=1e-9)
    assert torch.allclose(their_grad, our_grad, rtol=1e-7, atol=1e-10)


@_installed("trl-chunked")
@pytest.mark.parametrize("beta, ours_kwargs", DIVERGENCES[:2])
def test_trl_chunked_divergence_equals_destila(beta, ours_kwargs):
    hidden, weight, teacher, labels = _problem("trl-chunked", torch.float32)
    theirs, their_grad = _peer("trl-chunked", hidden, weight, teacher, labels, beta=beta)
    ours, our_grad, _ = _destila(hidden, weight, _teacher_logits(teacher), labels, **ours_kwargs)
    assert ours > 0.01
    assert theirs.item() == pytest.approx(ours.item(), rel=1e-5)
    assert torch.allclose(their_grad, our_grad, rtol=1e-4, atol=1e-6)


def _interpreter_loops_to_runtime_bounds() -> bool:
    """Whether Triton's interpreter runs a loop whose bound is a kernel argument (Triton 3.6's fails under
    NumPy ≥ 2.4; 3.8's runs it)."""
    import triton
    import triton.language as tl

    @triton.jit
    def count_kernel(out_ptr, n):
        for i in range(0, n):
            tl.store(out_ptr + i, i)

    out = torch.zeros(3)
    try:
        count_kernel[(1,)](out, 3)
    except Exception:  # noqa: BLE001 - the interpreter's own error types differ between versions
        return False
    return out.tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("peer", ["liger-fljsd", "liger-distill"])
def test_liger_equals_destila(peer):
    """Liger's losses as the benchmark calls them, value and gradient: compiled on a GPU, and on CPU under
    Triton's interpreter (tests/conftest.py turns it on), where their speed means nothing but their values do."""
    if importlib.util.find_spec("liger_kernel") is None:
        pytest.skip("liger-kernel not installed (pip install 'destila[peers]')")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not interpreting():
        pytest.skip("Liger's Triton kernels run on CPU tensors only under TRITON_INTERPRET=1")
    if device == "cpu" and peer == "liger-fljsd" and not _interpreter_loops_to_runtime_bounds():
        import numpy
        import triton

        pytest.skip(f"Liger's JSD kernel loops to a runtime bound, which Triton {triton.__version__}'s interpreter "
                    f"cannot do under NumPy {numpy.__version__} (compiled on a GPU it runs)")
    hidden, weight, teacher, labels = _problem(peer, torch.float32)
    h = hidden.to(device).requires_grad_(True)
    theirs = peer_loss(peer, h, weight.to(device), {k: v.to(device) for k, v in teacher.items()}, labels.to(device),
                       beta=0.0, chunk_size=5)
    theirs.backward()
    ours, our_grad, _ = _destila(hidden, weight, _teacher_logits(teacher), labels, divergence="forward_kl")
    assert ours > 0.01
    assert theirs.item() == pytest.approx(ours.item(), rel=1e-4)
    assert torch.allclose(h.grad.double().cpu(), our_grad, rtol=1e-3, atol=1e-6)


def test_bad_peer_arguments_are_errors(capsys):
    for extra, expected in ((["--peers", "torchtune,magic"], "magic"), (["--peer-beta", "2"], "[0, 1]"),
                            (["--peer_bta", "0.5"], "did you mean --peer_beta?")):
        with pytest.raises(SystemExit) as done:
            peers(["loss", *extra])
        assert done.value.code == 2 and expected in capsys.readouterr().err


def test_destila_itself_has_no_peer_flags(capsys):
    """The package measures destila alone; the peers' rows come from the script beside it."""
    from destila.cli.main import main

    with pytest.raises(SystemExit) as done:
        main(["bench", "loss", "--peers"])
    assert done.value.code == 2 and "unrecognized arguments: --peers" in capsys.readouterr().err


def test_unavailable_peers_say_why(monkeypatch):
    for peer in PEERS:
        package = PEERS[peer].module.split(".")[0]
        if importlib.util.find_spec(package) is None:
            assert "not installed" in unavailable_reason(peer, "cpu")
    if importlib.util.find_spec("liger_kernel") is not None:
        monkeypatch.setenv("TRITON_INTERPRET", "0")
        assert "TRITON_INTERPRET=1" in unavailable_reason("liger-fljsd", "cpu")
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        assert unavailable_reason("liger-fljsd", "cpu") is None  # runs, its time marked as the interpreter's


def _sweep_rows(path) -> dict:
    import json

    return {r["impl"]: r for r in map(json.loads, path.read_text().splitlines())}


def test_the_peer_sweep_runs_with_the_default_chunk_size(tmp_path):
    """No --chunk-size: every row, the peers' included, runs at the chunk destila's fused loss chooses."""
    out = tmp_path / "peers.jsonl"
    with pytest.raises(SystemExit) as done:
        peers(["loss", "--hidden", "32", "--vocab", "512", "--top-k", "4", "--seq-lens", "256", "--impls", "fused",
               "--repeats", "1", "--peers", "torchtune,trl-gkd", "--json", str(out)])
    assert done.value.code == 0
    rows = _sweep_rows(out)
    assert list(rows) == ["floor", "fused", "torchtune", "trl-gkd"]
    for row in rows.values():
        assert row["status"] == "ok", row
        assert row["seconds"] > 0 and row["floor_seconds"] > 0 and row["peak_bytes"] > 0
    assert {row["chunk_size"] for row in rows.values()} == {rows["fused"]["chunk_size"]} and rows["fused"]["chunk_size"]


@pytest.mark.slow
def test_the_documented_peer_sweep_measures_fused_and_two_peers(tmp_path):
    """The command as a new user runs it, every default kept: a fused row and at least two peers measured."""
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "peers.jsonl"
    done = subprocess.run([sys.executable, "-m", "benchmarks.peers", "loss", "--seq-lens", "1024", "--hidden", "128",
                           "--vocab", "4096", "--repeats", "1", "--json", str(out)],
                          cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = _sweep_rows(out)
    assert rows["fused"]["status"] == "ok" and rows["fused"]["seconds"] > 0
    measured = [p for p in PEERS if rows[p]["status"] == "ok" and rows[p]["seconds"] > 0]
    assert len(measured) >= 2, {p: rows[p]["status"] for p in PEERS}


@pytest.mark.slow
@_installed("torchtune")
def test_tiny_sweep_with_peers_through_the_cli(tmp_path, capsys):
    import json

    out = {ext: tmp_path / f"peers.{ext}" for ext in ("jsonl", "png")}
    with pytest.raises(SystemExit) as done:
        peers(["loss", "--hidden", "32", "--vocab", "256", "--top-k", "4", "--chunk-size", "32",
              "--seq-lens", "128", "--impls", "fused", "--repeats", "1", "--peers", "torchtune,liger-fljsd",
              "--json", str(out["jsonl"]), "--plot", str(out["png"])])
    assert done.value.code == 0
    rows = {r["impl"]: r for r in map(json.loads, out["jsonl"].read_text().splitlines())}
    assert list(rows) == ["floor", "fused", "torchtune", "liger-fljsd"]
    assert rows["torchtune"]["status"] == "ok" and rows["torchtune"]["peak_bytes"] > 0
    # Its input is counted: the teacher's full logits, 128 × 256 float32, on top of the student's.
    assert rows["torchtune"]["input_bytes"] - rows["fused"]["input_bytes"] >= 128 * 256 * 4 - 128 * (6 * 4 + 4)
    assert rows["torchtune"]["inputs"].startswith("teacher logits") and rows["fused"]["inputs"].startswith("top-K")
    # Under the suite's TRITON_INTERPRET=1 Liger runs in Triton's interpreter: measured, its time marked as such.
    assert rows["liger-fljsd"]["status"] == "ok" and "interpreter" in rows["liger-fljsd"]["note"]
    assert out["png"].read_bytes()[:4] == b"\x89PNG"
    printed = capsys.readouterr().out
    assert "destila beside its peers" in printed and "N=128" in printed


def test_cce_equals_destila_cross_entropy_on_gpu():
    """Cut Cross-Entropy's linear cross-entropy is destila's hard term alone (soft_weight 0, hard_weight 1)."""
    reason = unavailable_reason("cce", "cuda" if torch.cuda.is_available() else "cpu")
    if reason:
        pytest.skip(f"cce: {reason}")
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(64, 32, generator=gen).bfloat16().cuda()
    weight = (torch.randn(300, 32, generator=gen) / 32 ** 0.5).bfloat16().cuda()
    labels = torch.randint(0, 300, (64,), generator=gen).cuda()
    labels[::7] = -100
    theirs = peer_loss("cce", hidden, weight, {}, labels)
    ids, lp = torch.zeros(64, 1, dtype=torch.long, device="cuda"), torch.full((64, 1), -1.0, device="cuda")
    ours = distill_loss(hidden.float(), weight.float(), ids, lp, labels=labels, soft_weight=0.0, hard_weight=1.0)
    assert theirs.item() == pytest.approx(ours.item(), rel=1e-3)
