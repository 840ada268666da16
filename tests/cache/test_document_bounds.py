"""The document-bounds check (destila.cache.checks.documents) accepts every row the packings write and refuses the
rows a hand-edited export holds, exactly as its naive per-position loop would."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import pydoc_texts
from destila.cache.checks.documents import document_fault
from destila.data import DataSpec, as_sequences


def naive_fault(positions, mask) -> bool:
    """The documented naive equivalent, for one row: True when it breaks a rule."""
    length = len(positions)
    for t in range(length):
        if positions[t] != 0 and (t == 0 or positions[t] != positions[t - 1] + 1):
            return True
        if mask[t] and not (t + 1 < length and positions[t + 1] == positions[t] + 1):
            return True
    return False


@pytest.mark.parametrize("packing", ["documents", "bfd", "none"])
def test_every_row_a_packing_writes_passes(tiny_tokenizer, packing):
    pairs = [{"prompt": text[:40], "completion": text[40:90]} for text in pydoc_texts(12)]
    for data in (DataSpec(pydoc_texts(12), seq_len=24, packing=packing), pairs):
        source = as_sequences(data, tiny_tokenizer, seq_len=24, packing=packing)
        rows = source.rows(range(len(source)))
        positions, mask = rows["position_ids"].numpy(), rows["loss_mask"].numpy()
        offsets = np.arange(0, positions.size + 1, positions.shape[1])
        assert document_fault(positions.reshape(-1), mask.reshape(-1), offsets) is None
        assert mask.any()


def test_the_first_bad_row_is_named_as_the_naive_loop_finds_it():
    rng = np.random.default_rng(0)
    for _ in range(300):
        lengths = rng.integers(0, 7, size=rng.integers(1, 5))
        rows = []
        for length in lengths:  # runs of random lengths, now and then a wrong id or a mask across a bound
            positions = np.concatenate([np.arange(n) for n in rng.integers(1, 4, size=length)])[:length] \
                if length else np.zeros(0, dtype=np.int64)
            if length and rng.random() < 0.2:
                positions[rng.integers(length)] += rng.integers(1, 3)
            mask = rng.random(length) < 0.5
            rows.append((positions, mask))
        flat = [np.concatenate([r[i] for r in rows]) if rows else np.zeros(0) for i in (0, 1)]
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        found = document_fault(flat[0], flat[1].astype(bool), offsets)
        expected = next((row for row, (p, m) in enumerate(rows) if naive_fault(p, m)), None)
        assert (found[0] if found else None) == expected


def test_messages_name_the_place():
    assert "position id 3 at 2 after 1" in document_fault([0, 1, 3], [False] * 3, [0, 3])[1]
    assert "position 1 is trained but the token after it starts another document" in \
        document_fault([0, 1, 0], [True, True, False], [0, 3])[1]
    assert "is past the row end" in document_fault([0, 1], [False, True], [0, 2])[1]
