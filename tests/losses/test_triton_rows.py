"""The Triton row kernels against the float64 oracle: every divergence, tail, temperature and edge case.

Without a GPU the kernels run on CPU tensors under Triton's interpreter
(``TRITON_INTERPRET=1``, set here before any kernel is built); with one, on
CUDA tensors, compiled. Tolerances are those of ``test_oracle.py``: 1e-10
for float64 inputs, 1e-5 for float32 (relative, max-abs error over max-abs
reference). The fast path's bf16 numerics have their own, written next to
that test.

The interpreter spends about half a second setting up each launch (two per
chunk), so the default suite checks each divergence, tail, temperature and
edge case once, in one or a few chunks; the whole matrix is marked slow
(``make test-slow``).
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # tests/conftest.py does it first; here for a direct run

from loss_oracle import make_case, oracle  # noqa: E402

from destila import distill_loss  # noqa: E402
from destila.losses import LossOptions, describe_path  # noqa: E402
from destila.losses import plan as plan_module  # noqa: E402
from destila.losses.row_kernels import bf16_rows_over, rest_stats, write_grad  # noqa: E402

pytest.importorskip("triton", reason="the triton extra is not installed (pip install 'destila[triton]')")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DIVERGENCES = ["forward_kl", "reverse_kl", "jsd", "tvd"]
TAILS = ["bucket", "renorm", "none"]
TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5}


def rel_err(found, expected) -> float:
    found, expected = found.detach().double().cpu(), expected.detach().double().cpu()
    return float((found - expected).abs().max() / expected.abs().max().clamp(min=1e-30))


def _on_device(case):
    move = lambda t: None if t is None else t.to(DEVICE)  # noqa: E731
    case.hidden, case.weight, case.bias = move(case.hidden), move(case.weight), move(case.bias)
    case.topk_ids, case.topk_logprobs = case.topk_ids.to(DEVICE), case.topk_logprobs.to(DEVICE)
    case.tail_logmass, case.labels = move(case.tail_logmass), move(case.labels)
    return case


def check(dtype, options: dict, case_kwargs: dict | None = None, *, impl="fused", chunk_size=16, tol=None,
          precision="auto"):
    """The Triton path on ``dtype`` inputs against the oracle on the same values in float64."""
    base = make_case(**(case_kwargs or {})).to(dtype)
    ref_case = base.to(torch.float64).leaves()
    want_loss, want_stats = oracle(ref_case, **options)
    want_loss.backward()
    wants = [ref_case.hidden.grad, ref_case.weight.grad, None if ref_case.bias is None else ref_case.bias.grad]

    case = _on_device(base.leaves())
    loss, stats = distill_loss(*case.args(), bias=case.bias, impl=impl, chunk_size=chunk_size, kernels="triton",
                               precision=precision, return_stats=True, **options)
    loss.backward()
    tol = TOLERANCE[dtype] if tol is None else tol
    assert torch.isfinite(loss)
    assert rel_err(loss, want_loss) <= tol, (float(loss), float(want_loss))
    for name, got, want in zip(["hidden", "weight", "bias"], [case.hidden.grad, case.weight.grad,
                                                               None if case.bias is None else case.bias.grad], wants):
        if want is not None:
            assert got.dtype == dtype
            assert rel_err(got, want) <= tol, (name, rel_err(got, want))
    stat_tol = max(TOLERANCE[dtype] if tol is None else tol, 1e-6)
    assert abs(float(stats["soft"]) - float(want_stats["soft"])) <= stat_tol * max(want_stats["soft_scale"], 1e-30)
    assert rel_err(stats["hard"], want_stats["hard"]) <= stat_tol
    assert float(stats["agree"]) == want_stats["agree"]


@pytest.mark.parametrize("divergence,tail,temperature,hard_weight", [
    ("forward_kl", "bucket", 0.7, 0.5), ("reverse_kl", "renorm", 2.0, 0.5), ("jsd", "none", 1.0, 0.5),
    ("tvd", "bucket", 1.0, 0.0)])
def test_each_divergence_tail_and_temperature(divergence, tail, temperature, hard_weight):
    check(torch.float64, dict(divergence=divergence, tail=tail, temperature=temperature, hard_weight=hard_weight,
                              soft_weight=0.8, beta=0.3))


@pytest.mark.slow
@pytest.mark.parametrize("temperature,hard_weight", [(1.0, 0.0), (1.0, 0.5), (2.0, 0.5), (0.7, 0.5)])
@pytest.mark.parametrize("tail", TAILS)
@pytest.mark.parametrize("divergence", DIVERGENCES)
def test_every_divergence_tail_and_temperature(divergence, tail, temperature, hard_weight):
    check(torch.float64, dict(divergence=divergence, tail=tail, temperature=temperature, hard_weight=hard_weight,
                              soft_weight=0.8, beta=0.3), chunk_size=7)


def test_padding_ignored_rows_and_an_empty_rest_bucket():
    """The oracle's case pads rows and ignores every fifth; K = V leaves the rest bucket empty."""
    check(torch.float64, dict(divergence="jsd", tail="bucket", temperature=2.0, hard_weight=0.5),
          dict(n=5, h=3, v=7, k=7, pad=False), chunk_size=3)
    case = _on_device(make_case(n=9, v=17, k=4, drop_every=1).leaves())  # every row ignored
    loss = distill_loss(*case.args(), bias=case.bias, kernels="triton", chunk_size=9, temperature=0.7,
                        hard_weight=0.5)
    loss.backward()
    assert loss.item() == 0.0 and not case.weight.grad.any() and not case.hidden.grad.any()


@pytest.mark.parametrize("case_kwargs", [
    dict(bias=False),
    dict(labels=False),
    dict(tail=False),  # rest mass derived from the top-K
    dict(n=5, h=3, v=7, k=7, pad=False),  # K = V: the rest bucket is empty
    dict(n=1, h=1, v=2, k=1, drop_every=0),
    dict(n=9, v=17, k=4, drop_every=1),  # every row ignored
], ids=["no-bias", "no-labels", "derived-tail", "k-equals-v", "tiny", "all-ignored"])
@pytest.mark.parametrize("temperature", [0.7, 1.0, 2.0])
@pytest.mark.slow
def test_edge_cases(case_kwargs, temperature):
    hard = 0.0 if case_kwargs.get("labels", True) is False else 0.5
    for divergence in DIVERGENCES:
        options = dict(divergence=divergence, tail="bucket", temperature=temperature, hard_weight=hard)
        if case_kwargs.get("drop_every") == 1:
            case = _on_device(make_case(**case_kwargs).leaves())
            loss = distill_loss(*case.args(), bias=case.bias, kernels="triton", chunk_size=4, **options)
            loss.backward()
            assert loss.item() == 0.0 and not case.weight.grad.any() and not case.hidden.grad.any()
        else:
            check(torch.float64, options, case_kwargs, chunk_size=3)


@pytest.mark.parametrize("impl", ["fused", "chunked"])
@pytest.mark.parametrize("options", [
    dict(divergence="forward_kl", tail="bucket", temperature=2.0, hard_weight=0.5),
    dict(divergence="jsd", tail="renorm", temperature=0.7, hard_weight=0.5, beta=0.7),
    dict(divergence="reverse_kl", tail="none", temperature=1.0, hard_weight=0.0),
], ids=["fkl-bucket-T2-hard", "jsd-renorm-T07-hard", "rkl-none"])
@pytest.mark.slow
def test_float32_and_the_chunked_impl(options, impl):
    check(torch.float32, options, impl=impl)
    check(torch.float64, options, impl=impl, chunk_size=60)


def test_float32_inputs_and_the_chunked_impl():
    options = dict(divergence="forward_kl", tail="bucket", temperature=2.0, hard_weight=0.5)
    check(torch.float32, options, chunk_size=64)
    check(torch.float64, options, impl="chunked", chunk_size=64)


@pytest.mark.slow
def test_rows_longer_than_one_block():
    """V above the kernels' 4096-column block: the online max / sum-exp crosses blocks."""
    check(torch.float64, dict(divergence="jsd", tail="bucket", temperature=0.7, hard_weight=0.5),
          dict(n=6, h=8, v=9000, k=20), chunk_size=4)


def test_fast_precision_numerics_against_the_oracle():
    """precision='fast' on bf16 inputs: float32 logits, G rounded once to bf16, float32 dW.

    Tolerance, relative to the largest reference value: the loss is float32
    accurate (1e-5: its logits are exact products of the bf16 inputs summed in
    float32); the gradients carry G's rounding to bf16 (2^-9 relative per
    entry) and the rounding of dh and dW to bf16 on return (2^-9): 8e-3 bounds
    both, as for the exact path in test_bf16.py. On CPU these GEMMs are emulated
    in float32; the interpreter truncates G to bf16 instead of rounding (up to
    2^-8 relative), still inside the bound.
    """
    for options in (dict(divergence="jsd", tail="bucket", temperature=2.0, hard_weight=0.5, beta=0.4),):
        base = make_case(n=64, h=48, v=300, k=12, seed=1).to(torch.bfloat16, lp_dtype=torch.float16)
        ref_case = base.to(torch.float64).leaves()
        want_loss = oracle(ref_case, **options)[0]
        want_loss.backward()
        for kernels in ("triton", "torch"):
            case = _on_device(base.leaves())
            loss = distill_loss(*case.args(), bias=case.bias, chunk_size=32, precision="fast", kernels=kernels,
                                **options)
            loss.backward()
            assert rel_err(loss, want_loss) <= 1e-5
            for got, want in ((case.hidden.grad, ref_case.hidden.grad), (case.weight.grad, ref_case.weight.grad),
                              (case.bias.grad, ref_case.bias.grad)):
                assert got.dtype == torch.bfloat16
                assert rel_err(got, want) <= 8e-3


def test_bf16_gradient_is_one_rounding_of_the_float32_one():
    """write_grad into the bf16 view over the buffer's own rows equals the float32 G rounded once (to 1 ulp:
    the interpreter's float32 → bf16 store truncates where CUDA rounds to nearest)."""
    gen = torch.Generator().manual_seed(0)
    scores = (3 * torch.randn(5, 5000, generator=gen)).to(DEVICE)
    scores[:, :40] = float("-inf")  # teacher tokens
    temperature = torch.tensor([0.7], device=DEVICE)
    rest_max, rest_sum, lse_t = rest_stats(scores, temperature, True)
    shift = rest_max.clamp(min=torch.finfo(torch.float32).min)
    a, b = torch.randn(5, generator=gen).to(DEVICE), torch.rand(5, generator=gen).to(DEVICE)
    labels, beta = torch.tensor([3, 41, 4999, 100, 7], device=DEVICE), torch.rand(5, generator=gen).to(DEVICE)
    in_place = scores.clone()
    write_grad(in_place, in_place, shift, a, temperature=temperature, lse_t=lse_t, b=b, labels=labels, beta=beta)
    aliased = scores.clone()
    g16 = bf16_rows_over(aliased)
    write_grad(aliased, g16, shift, a, temperature=temperature, lse_t=lse_t, b=b, labels=labels, beta=beta)
    exact, rounded = in_place.cpu(), g16.float().cpu()
    ulp = exact.abs() * 2.0 ** -7  # bf16 keeps 8 significant bits: one ulp is ≤ 2^-7 of the value
    assert ((rounded - exact).abs() <= ulp).all()
    assert rounded[1, 41] == exact[1, 41] == 0 or rounded[1, 41] != 0  # a label at a teacher token: no -β here
    assert exact[0, 3] == 0.0 and exact[2, 4999] < 0  # -inf positions give 0; a rest-token label gets -β


def test_the_path_is_said_and_refused_when_it_cannot_run(monkeypatch):
    case = _on_device(make_case(n=8, v=40, k=4).leaves())
    text = describe_path(LossOptions(kernels="triton", chunk_size=4), case.hidden, case.weight, case.bias)
    assert "row math triton" in text and "chunk 4 rows" in text
    assert "row math torch" in describe_path(LossOptions(kernels="torch"), case.hidden, case.weight)
    monkeypatch.setattr(plan_module, "triton_missing", lambda: "triton is not installed (pip install 'x')")
    with pytest.raises(ValueError, match="kernels: 'triton' asked for, but triton is not installed"):
        distill_loss(*case.args(), kernels="triton")
    assert "row math torch" in describe_path(LossOptions(), case.hidden, case.weight)  # auto: said, not silent
    if DEVICE == "cpu":
        monkeypatch.undo()
        monkeypatch.delenv("TRITON_INTERPRET")
        with pytest.raises(ValueError, match="kernels: 'triton' runs on CUDA tensors"):
            distill_loss(*case.args(), kernels="triton")


def test_fast_precision_on_float32_inputs_rounds_them_as_autocast_does():
    """Mixed-precision training hands the loss float32 hidden states and master weights: precision='fast' rounds
    both to bf16 for the GEMMs (what autocast does for a plain lm_head) and returns float32 gradients. Against the
    oracle on the rounded values: the loss to 1e-5, the gradients to 4e-3 (G's rounding to bf16 only: they are
    not rounded on return)."""
    base = make_case(n=64, h=48, v=300, k=12, seed=3)
    rounded = base.to(torch.bfloat16, lp_dtype=torch.float64).to(torch.float64).leaves()
    options = dict(divergence="forward_kl", tail="bucket", temperature=2.0, hard_weight=0.5)
    want = oracle(rounded, **options)[0]
    want.backward()
    case = _on_device(base.to(torch.float32).leaves())
    text = describe_path(LossOptions(precision="fast", kernels="torch"), case.hidden, case.weight, case.bias)
    assert "float32 inputs rounded to bf16" in text
    loss = distill_loss(*case.args(), bias=case.bias, chunk_size=32, precision="fast", kernels="torch", **options)
    loss.backward()
    assert rel_err(loss, want) <= 1e-5
    for got, ref in ((case.hidden.grad, rounded.hidden.grad), (case.weight.grad, rounded.weight.grad)):
        assert got.dtype == torch.float32 and rel_err(got, ref) <= 4e-3
