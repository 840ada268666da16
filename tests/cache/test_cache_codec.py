"""The compact codec alone (numpy): exact ids, counts and tails; log-probs within the documented error."""

import numpy as np
import pytest

from destila.cache.encodings.compact_blocks import (
    BlockError,
    CompactLayout,
    decode_sampled_row,
    decode_topk_row,
    encode_sampled_row,
    encode_topk_row,
)

LENGTH, VOCAB, K = 40, 5000, 16


def teacher_rows(seed=0, positions=LENGTH - 1, k=K, vocab=VOCAB, spread=3.0):
    """Peaked float64 distributions over ``vocab``: their top-k ids (random order), log-probs and exact tails."""
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((positions, vocab)) * spread
    logp = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
    ids = np.argsort(-logp, axis=1)[:, :k]
    ids = np.take_along_axis(ids, rng.permuted(np.tile(np.arange(k), (positions, 1)), axis=1), 1)
    lp = np.take_along_axis(logp, ids, 1)
    rest = logp.copy()
    np.put_along_axis(rest, ids, -np.inf, 1)
    tail = np.logaddexp.reduce(rest, axis=1)
    return ids, lp, tail.astype(np.float32)


def row_fields(seed=0):
    rng = np.random.default_rng(seed)
    mask = np.ones(LENGTH, bool)
    mask[-1] = False
    return rng.integers(0, VOCAB, LENGTH), np.arange(LENGTH), mask


def bucket_kl(lp_a, tail_a, lp_b, tail_b):
    """Per-position KL(a ‖ b) of the K+1-bucket distributions, float64."""
    a = np.concatenate([lp_a, tail_a[:, None]], 1).astype(np.float64)
    b = np.concatenate([lp_b, tail_b[:, None]], 1).astype(np.float64)
    pa = np.exp(a)
    return np.where(pa > 0, pa * (a - np.where(pa > 0, b, 0)), 0).sum(1)


@pytest.mark.parametrize("levels", [128, 512, 2048])
def test_topk_round_trip(levels):
    layout = CompactLayout.for_vocab(VOCAB, sqrt_levels=levels)
    assert layout.id_bytes == 2
    inputs, positions, mask = row_fields()
    ids, lp, tail = teacher_rows()
    out = decode_topk_row(encode_topk_row(inputs, positions, mask, ids, lp, tail, layout), LENGTH, K, layout)
    assert np.array_equal(out["input_ids"], inputs) and np.array_equal(out["position_ids"], positions)
    assert np.array_equal(out["loss_mask"], mask)
    # ids exact (ascending per position), the tail bit for bit
    order = np.argsort(ids, axis=1)
    assert np.array_equal(out["ids"], np.take_along_axis(ids, order, 1))
    assert np.array_equal(out["tail"].view(np.uint32), tail.view(np.uint32))
    ref = np.take_along_axis(lp, order, 1)
    got = out["logprobs"].astype(np.float64)
    # every position's decoded mass is exactly the mass the tail leaves: 1 - exp(tail)
    mass = np.logaddexp.reduce(np.concatenate([got, out["tail"][:, None].astype(np.float64)], 1), axis=1)
    assert np.abs(mass).max() < 1e-6
    # up to the row's one common shift, sqrt(p) is off by at most half a step
    levels_used = np.rint(np.exp(ref / 2) * levels)
    shift = got - 2 * np.log(np.where(levels_used > 0, levels_used, 0.25) / levels)
    assert np.abs(shift - shift[:, :1]).max() < 1e-5
    assert np.abs(np.exp(ref / 2) - levels_used / levels).max() <= 0.5 / levels + 1e-12
    # the KL the rounding costs is about K·step²/6 (docs/cache.md); the max within 4× the mean bound
    kl = bucket_kl(ref, tail, got, out["tail"])
    bound = K / (6 * levels**2)
    assert kl.mean() <= 1.5 * bound and kl.max() <= 4 * bound and kl.min() >= -1e-9


def test_topk_k_equal_to_vocab_and_one_trained_position():
    vocab = 50
    layout = CompactLayout.for_vocab(vocab)
    assert layout.id_bytes == 1
    inputs, positions = np.arange(3), np.array([0, 1, 0])  # a new document at position 2
    mask = np.array([True, False, False])
    ids, lp, _ = teacher_rows(positions=1, k=vocab, vocab=vocab)
    tail = np.array([-np.inf], np.float32)
    out = decode_topk_row(encode_topk_row(inputs, positions, mask, ids, lp, tail, layout), 3, vocab, layout)
    assert np.array_equal(out["ids"][0], np.arange(vocab)) and np.isneginf(out["tail"][0])
    assert np.array_equal(out["position_ids"], positions)
    assert abs(np.logaddexp.reduce(out["logprobs"][0].astype(np.float64))) < 1e-6


def test_sampled_round_trip_is_exact():
    rng = np.random.default_rng(5)
    layout = CompactLayout.for_vocab(70000)
    assert layout.id_bytes == 3
    samples, positions = 12, LENGTH - 1
    draws = rng.integers(0, 70000, (positions, samples)) // rng.integers(1, 5000, (positions, 1))
    ids = np.zeros((positions, samples), np.int64)
    counts = np.zeros_like(ids)
    for p in range(positions):
        u, c = np.unique(draws[p], return_counts=True)
        ids[p, : len(u)], counts[p, : len(u)] = u, c
    inputs, position_ids, mask = row_fields()
    out = decode_sampled_row(encode_sampled_row(inputs, position_ids, mask, ids, counts, layout), LENGTH, samples,
                             layout)
    assert np.array_equal(out["ids"], ids) and np.array_equal(out["counts"], counts)
    assert np.array_equal(out["input_ids"], inputs)


def test_damaged_blocks_do_not_decode():
    layout = CompactLayout.for_vocab(VOCAB)
    inputs, positions, mask = row_fields()
    block = bytearray(encode_topk_row(inputs, positions, mask, *teacher_rows(), layout))
    block[len(block) // 2] ^= 0x10
    with pytest.raises(BlockError):
        decode_topk_row(bytes(block), LENGTH, K, layout)
    with pytest.raises(BlockError):
        decode_topk_row(b"not zstd at all", LENGTH, K, layout)
    good = encode_topk_row(inputs, positions, mask, *teacher_rows(), layout)
    with pytest.raises(BlockError, match="need"):
        decode_topk_row(good, LENGTH, K + 1, layout)  # a block that does not hold what the manifest says
