"""A bad call raises ValueError naming the argument, the expected and the found."""

from __future__ import annotations

import pytest
import torch
from loss_oracle import make_case

from destila import DistillLoss, distill_loss


def good():
    case = make_case(n=6, h=4, v=10, k=3, seed=2, pad=False)
    return dict(hidden=case.hidden, weight=case.weight, topk_ids=case.topk_ids, topk_logprobs=case.topk_logprobs,
                tail_logmass=case.tail_logmass, labels=case.labels, bias=case.bias)


def edit(**changes):
    args = good()
    for key, fn in changes.items():
        args[key] = fn(args[key]) if callable(fn) else fn
    return args


def _set(t, index, value):
    t = t.clone()
    t[index] = value
    return t


BAD_TENSORS = {
    "hidden 1-d": (edit(hidden=lambda t: t[0]), ["hidden", "[N, H]", "found [4]"]),
    "hidden int": (edit(hidden=lambda t: t.long()), ["hidden", "floating-point", "int64"]),
    "weight H": (edit(weight=lambda t: t[:, :3]), ["weight", "H = 4", "found [10, 3]"]),
    "bias V": (edit(bias=lambda t: t[:9]), ["bias", "[10]", "found [9]"]),
    "ids rows": (edit(topk_ids=lambda t: t[:5]), ["topk_ids", "[6]", "found [5, 3]"]),
    "ids float": (edit(topk_ids=lambda t: t.double()), ["topk_ids", "integer", "float64"]),
    "ids K > V": (edit(topk_ids=torch.zeros(6, 11, dtype=torch.long)), ["topk_ids", "K ≤ V = 10", "K = 11"]),
    "logprobs shape": (edit(topk_logprobs=lambda t: t[:, :2]), ["topk_logprobs", "[6, 3]", "found [6, 2]"]),
    "tail shape": (edit(tail_logmass=lambda t: t[:, None]), ["tail_logmass", "[6]", "found [6, 1]"]),
    "labels shape": (edit(labels=lambda t: t[:3]), ["labels", "[6]", "found [3]"]),
    "id too big": (edit(topk_ids=lambda t: _set(t, (1, 2), 10)), ["topk_ids", "[0, 10)", "found 10", "row 1"]),
    "id negative": (edit(topk_ids=lambda t: _set(t, (2, 0), -3)), ["topk_ids", "found -3", "row 2"]),
    "id repeated": (edit(topk_ids=lambda t: _set(t, (3, 1), int(t[3, 0]))), ["topk_ids", "distinct", "row 3"]),
    "logprob nan": (edit(topk_logprobs=lambda t: _set(t, (1, 1), float("nan"))), ["topk_logprobs", "nan", "row 1"]),
    "logprob +inf": (edit(topk_logprobs=lambda t: _set(t, (1, 1), float("inf"))), ["topk_logprobs", "inf"]),
    "logits not logprobs": (edit(topk_logprobs=lambda t: t + 5.0), ["topk_logprobs", "≤ 0", "row 1"]),
    "mass above one": (edit(topk_logprobs=lambda t: _set(t, (4, slice(None)), -0.5)),
                       ["topk_logprobs", "sum", "row 4"]),
    "tail nan": (edit(tail_logmass=lambda t: _set(t, 2, float("nan"))), ["tail_logmass", "nan", "row 2"]),
    "label too big": (edit(labels=lambda t: _set(t, 1, 10)), ["labels", "[0, 10)", "found 10", "row 1"]),
    "hard without labels": (edit(labels=None), ["labels", "hard_weight=0.5", "found None"]),
}


@pytest.mark.parametrize("impl", ["fused", "dense"])
@pytest.mark.parametrize("name", list(BAD_TENSORS))
def test_bad_tensors(name, impl):
    args, needles = BAD_TENSORS[name]
    with pytest.raises(ValueError) as err:
        distill_loss(**args, impl=impl, hard_weight=0.5)
    message = str(err.value)
    assert message.startswith(needles[0] + ":"), message
    assert "expected" in message and "found" in message
    for needle in needles[1:]:
        assert needle in message, message


def test_values_on_dropped_rows_and_padding_are_not_checked():
    args = good()
    args["labels"] = _set(args["labels"], 1, -100)
    args["topk_ids"] = _set(args["topk_ids"], (1, 0), 999)       # a dropped row may hold anything
    args["topk_logprobs"] = _set(args["topk_logprobs"], (1, 1), float("nan"))
    args["topk_ids"] = _set(args["topk_ids"], (2, 2), -7)        # padding: any id
    args["topk_logprobs"] = _set(args["topk_logprobs"], (2, 2), float("-inf"))
    assert torch.isfinite(distill_loss(**args))


BAD_OPTIONS = {
    "divergence": ("kl", ["divergence", "forward_kl", "found 'kl'"]),
    "tail": ("rest", ["tail", "bucket", "found 'rest'"]),
    "impl": ("triton", ["impl", "fused", "found 'triton'"]),
    "beta": (1.0, ["beta", "(0, 1)", "found 1.0"]),
    "temperature": (0.0, ["temperature", "(0, inf)", "found 0.0"]),
    "soft_weight": (-1.0, ["soft_weight", "[0, inf)", "found -1.0"]),
    "hard_weight": (float("nan"), ["hard_weight", "found nan"]),
    "chunk_size": (0, ["chunk_size", "positive int", "found 0"]),
    "ignore_index": (-100.0, ["ignore_index", "int", "found -100.0"]),
}


@pytest.mark.parametrize("option", list(BAD_OPTIONS))
def test_bad_options(option):
    value, needles = BAD_OPTIONS[option]
    for make in (lambda: distill_loss(**good(), **{option: value}), lambda: DistillLoss(**{option: value})):
        with pytest.raises(ValueError) as err:
            make()
        message = str(err.value)
        assert message.startswith(option + ":") and "expected" in message and "found" in message
        for needle in needles[1:]:
            assert needle in message, message


def test_unknown_module_option():
    with pytest.raises(ValueError, match="found unknown \\['temprature'\\]"):
        DistillLoss(temprature=2.0)


def test_tensors_on_different_devices_are_named():
    args = good()
    args["labels"] = args["labels"].to("meta")
    with pytest.raises(ValueError, match="labels: expected a tensor on cpu"):
        distill_loss(**args)


def test_rows_are_checked_block_by_block(monkeypatch):
    """Long batches are validated in row blocks; an error still names its row in the whole batch."""
    import destila.losses.inputs as inputs

    monkeypatch.setattr(inputs, "_CHECK_BLOCK", 2)
    assert torch.isfinite(distill_loss(**good()))
    with pytest.raises(ValueError, match="found 10 at row 3, entry 1"):
        distill_loss(**edit(topk_ids=lambda t: _set(t, (3, 1), 10)))
