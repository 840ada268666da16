"""Every impl against the float64 oracle: loss, statistics and gradients of hidden, weight and bias.

Tolerances (relative, max-abs error over max-abs reference): 1e-10 for
float64 inputs, 1e-5 for float32 inputs (compared with the oracle run on the
same float32 values in float64). The statistics are float32 by contract and
are held to 1e-6 (Σ D against the sum of its terms' magnitudes, as it may cancel).
"""

from __future__ import annotations

import functools
import itertools

import pytest
import torch
from loss_oracle import make_case, oracle

from destila import distill_loss

IMPLS = ["dense", "chunked", "fused"]
DIVERGENCES = ["forward_kl", "reverse_kl", "jsd", "tvd"]
TAILS = ["bucket", "renorm", "none"]
TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5}


def rel_err(found: torch.Tensor, expected: torch.Tensor) -> float:
    found, expected = found.detach().double(), expected.detach().double()
    scale = expected.abs().max().clamp(min=1e-30)
    return float((found - expected).abs().max() / scale)


@functools.lru_cache(maxsize=None)
def reference(dtype, options: tuple, case_kwargs: tuple = ()):
    """Oracle loss, stats and gradients for the case rounded to ``dtype`` (computed in float64)."""
    case = make_case(**dict(case_kwargs)).to(dtype).to(torch.float64).leaves()
    loss, stats = oracle(case, **dict(options))
    loss.backward()
    grads = [case.hidden.grad, case.weight.grad, None if case.bias is None else case.bias.grad]
    return loss.detach(), stats, grads


def run_impl(impl, dtype, options: dict, case_kwargs: dict | None = None, **call):
    case = make_case(**(case_kwargs or {})).to(dtype).leaves()
    loss, stats = distill_loss(*case.args(), bias=case.bias, impl=impl, return_stats=True, **options, **call)
    loss.backward()
    grads = [case.hidden.grad, case.weight.grad, None if case.bias is None else case.bias.grad]
    return loss, stats, grads, case


def assert_matches(impl, dtype, options: dict, case_kwargs: dict | None = None, **call):
    key = tuple(sorted(options.items()))
    ref_loss, ref_stats, ref_grads = reference(dtype, key, tuple(sorted((case_kwargs or {}).items())))
    loss, stats, grads, case = run_impl(impl, dtype, options, case_kwargs, **call)
    tol = TOLERANCE[dtype]
    assert torch.isfinite(loss)
    assert rel_err(loss, ref_loss) <= tol, (float(loss), float(ref_loss))
    for name, got, want in zip(["hidden", "weight", "bias"], grads, ref_grads):
        if want is None:
            continue
        assert got.dtype == dtype and got.shape == want.shape
        assert rel_err(got, want) <= tol, name
    # The statistics are float32 by contract, whatever the inputs. Σ D can
    # cancel (tail="none" can go negative): its error is measured against Σ|terms|.
    stat_tol = max(tol, 1e-6)
    assert abs(float(stats["soft"]) - float(ref_stats["soft"])) <= stat_tol * max(ref_stats["soft_scale"], 1e-30)
    assert rel_err(stats["hard"], ref_stats["hard"]) <= stat_tol
    assert float(stats["rows"]) == ref_stats["rows"]
    assert float(stats["agree"]) == ref_stats["agree"]
    assert all(s.dtype == torch.float32 and s.dim() == 0 and not s.requires_grad for s in stats.values())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("temperature,hard_weight", [(1.0, 0.0), (1.0, 0.5), (2.0, 0.0), (0.7, 0.5)])
@pytest.mark.parametrize("tail", TAILS)
@pytest.mark.parametrize("divergence", DIVERGENCES)
def test_every_combination(divergence, tail, temperature, hard_weight, impl, dtype):
    options = dict(divergence=divergence, tail=tail, temperature=temperature, hard_weight=hard_weight,
                   soft_weight=0.8, beta=0.3)
    assert_matches(impl, dtype, options, chunk_size=7)


@pytest.mark.parametrize("impl", ["chunked", "fused"])
@pytest.mark.parametrize("chunk_size", [1, 7, 47, 60])
@pytest.mark.parametrize("options", [
    dict(divergence="forward_kl", tail="bucket", temperature=2.0, hard_weight=0.5),
    dict(divergence="jsd", tail="renorm", temperature=1.0, hard_weight=0.0, beta=0.7),
], ids=["fkl-bucket-T2-hard", "jsd-renorm"])
def test_chunk_sizes(options, chunk_size, impl):
    assert_matches(impl, torch.float64, options, chunk_size=chunk_size)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case_kwargs", [
    dict(bias=False),
    dict(labels=False),
    dict(tail=False),  # rest mass derived from the top-K
    dict(n=5, h=3, v=7, k=7, pad=False),  # K = V: no rest bucket
    dict(n=1, h=1, v=2, k=1, drop_every=0),
], ids=["no-bias", "no-labels", "derived-tail", "k-equals-v", "tiny"])
def test_case_variants(case_kwargs, impl):
    hard = 0.0 if case_kwargs.get("labels", True) is False else 0.5
    for divergence in DIVERGENCES:
        options = dict(divergence=divergence, tail="bucket", temperature=1.5, hard_weight=hard)
        assert_matches(impl, torch.float64, options, case_kwargs, chunk_size=3)


@pytest.mark.parametrize("impl", IMPLS)
def test_num_items_normalises(impl):
    options = dict(divergence="forward_kl", tail="bucket", temperature=1.0, hard_weight=0.5, num_items=100)
    assert_matches(impl, torch.float64, options, chunk_size=5)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("divergence,tail", list(itertools.product(DIVERGENCES, TAILS)))
def test_all_rows_dropped(impl, divergence, tail):
    case = make_case(n=9, v=17, k=4, drop_every=1).leaves()  # every label is ignore_index
    loss, stats = distill_loss(*case.args(), bias=case.bias, impl=impl, divergence=divergence, tail=tail,
                               temperature=2.0, hard_weight=0.5, chunk_size=4, return_stats=True)
    loss.backward()
    assert loss.item() == 0.0 and loss.requires_grad
    for t in (case.hidden.grad, case.weight.grad, case.bias.grad):
        assert torch.equal(t, torch.zeros_like(t))
    assert float(stats["rows"]) == 0 and float(stats["soft"]) == 0 and float(stats["hard"]) == 0


@pytest.mark.parametrize("impl", ["chunked", "fused"])
def test_cross_entropy_at_other_temperatures_in_row_blocks(impl, monkeypatch):
    """Hard CE at T ≠ 1 walks the buffer in row blocks; make the blocks 3 rows to cover the loop."""
    import destila.losses.chunk_math as chunk

    monkeypatch.setattr(chunk, "_BLOCK_ELEMENTS", 3 * 123)
    options = dict(divergence="reverse_kl", tail="bucket", temperature=0.7, hard_weight=0.5)
    assert_matches(impl, torch.float64, options, chunk_size=8)
