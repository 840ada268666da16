"""The loss on a CUDA device against the float64 oracle: float64, float32 and bf16 inputs, every impl and path.

Skipped without CUDA (the GPU check, ``benchmarks/gpu/check.sh``, runs it first). Tolerances as in
``test_oracle.py`` (1e-10 float64, 1e-5 float32: TF32 stays off for float32 inputs) and ``test_bf16.py``
(bf16: the loss to 1e-5, the gradients to 8e-3, their rounding to bf16 and G's); the fast path's memory is
checked against its arithmetic: no float32 copy of the head, the buffer freed before the final cast.
"""

from __future__ import annotations

import pytest
import torch
from loss_oracle import make_case, oracle

from destila import distill_loss
from destila.losses import LossOptions, describe_path

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def rel_err(found, expected) -> float:
    found, expected = found.detach().double().cpu(), expected.detach().double().cpu()
    return float((found - expected).abs().max() / expected.abs().max().clamp(min=1e-30))


def _cuda(case):
    move = lambda t: None if t is None else t.cuda()  # noqa: E731
    for name in ("hidden", "weight", "bias", "topk_ids", "topk_logprobs", "tail_logmass", "labels"):
        setattr(case, name, move(getattr(case, name)))
    return case


def _run(base, options, **call):
    ref = base.to(torch.float64).leaves()
    want = oracle(ref, **options)[0]
    want.backward()
    case = _cuda(base.leaves())
    loss = distill_loss(*case.args(), bias=case.bias, **options, **call)
    loss.backward()
    return (loss, case.hidden.grad, case.weight.grad, case.bias.grad), (want, ref.hidden.grad, ref.weight.grad,
                                                                        ref.bias.grad)


@pytest.mark.parametrize("impl", ["fused", "chunked", "dense"])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)], ids=["f64", "f32"])
@pytest.mark.parametrize("options", [
    dict(divergence="forward_kl", tail="bucket", temperature=1.0, hard_weight=0.5),
    dict(divergence="jsd", tail="renorm", temperature=0.7, hard_weight=0.5, beta=0.3),
    dict(divergence="reverse_kl", tail="none", temperature=2.0, hard_weight=0.0),
    dict(divergence="tvd", tail="bucket", temperature=2.0, hard_weight=0.5),
], ids=["fkl", "jsd-T07", "rkl-T2", "tvd-T2"])
def test_float64_and_float32_on_cuda(options, dtype, tol, impl):
    base = make_case(n=200, h=40, v=5000, k=30).to(dtype)
    got, want = _run(base, options, impl=impl, chunk_size=64)
    for name, g, w in zip(("loss", "hidden", "weight", "bias"), got, want):
        assert rel_err(g, w) <= tol, (name, rel_err(g, w))


@pytest.mark.parametrize("precision,kernels", [("auto", "auto"), ("fast", "torch"), ("exact", "auto"),
                                               ("exact", "torch")])
def test_bf16_paths_on_cuda(precision, kernels):
    """The fast path is what auto takes for bf16 on CUDA; each path within the bf16 tolerance of the oracle."""
    base = make_case(n=300, h=64, v=9000, k=40, seed=2).to(torch.bfloat16, lp_dtype=torch.float16)
    options = dict(divergence="forward_kl", tail="bucket", temperature=2.0, hard_weight=0.5)
    got, want = _run(base, options, chunk_size=128, precision=precision, kernels=kernels)
    assert rel_err(got[0], want[0]) <= 1e-5
    assert all(g.dtype == torch.bfloat16 for g in got[1:])
    assert max(rel_err(g, w) for g, w in zip(got[1:], want[1:])) <= 8e-3
    text = describe_path(LossOptions(precision=precision, kernels=kernels), got[1], got[2])
    assert ("precision fast" in text) == (precision != "exact")
    assert ("row math triton" in text) == (kernels == "auto")


def test_fast_path_memory_has_no_float32_head_copy():
    """Peak of the fast path: inputs, bf16 gradients, the float32 dW and one [chunk, V] float32 buffer, freed
    before dW is cast (so the peak is the larger of loop and cast, not their sum), and no float32 copy of W."""
    n, h, v, k, chunk = 4096, 1024, 32768, 64, 1024
    gen = torch.Generator(device="cuda").manual_seed(0)
    hidden = torch.randn(n, h, device="cuda", generator=gen).bfloat16().requires_grad_()
    weight = (torch.randn(v, h, device="cuda", generator=gen) / h ** 0.5).bfloat16().requires_grad_()
    ids = torch.stack([torch.randperm(v, device="cuda", generator=gen)[:k] for _ in range(8)]).repeat(n // 8, 1)
    lp = torch.log_softmax(torch.randn(n, k, device="cuda", generator=gen), 1).half() - 0.1
    tail = torch.full((n,), -2.5, device="cuda")
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    distill_loss(hidden, weight, ids, lp, tail, chunk_size=chunk).backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    grads = n * h * 2 + v * h * 2                      # dh, dW in bf16 (they outlive the call as .grad)
    loop = grads - v * h * 2 + v * h * 4 + chunk * v * 4  # during the loop: dh, float32 dW, the buffer
    cast = grads + v * h * 4                             # at the cast: dh, float32 dW and its bf16 copy
    slack = 64 << 20                                     # targets of a chunk, per-row vectors, allocator rounding
    assert peak <= max(loop, cast) + slack, (peak / 2**20, max(loop, cast) / 2**20)
