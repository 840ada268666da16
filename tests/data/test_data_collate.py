"""The one collate and label shift (destila.data.collate)."""

import torch

from destila.data import collate, hf_labels, shift_labels
from destila.constants import IGNORE_INDEX


def test_user_labels_and_attention_mask_are_honoured():
    # The case that shaped the collate: one user label (7) and two padding positions.
    item = {"input_ids": [5, 6, 7, 2, 2], "labels": [-100, -100, 7, -100, -100], "attention_mask": [1, 1, 1, 0, 0]}
    batch = collate([item])
    # Position 1 (having read tokens 5, 6) predicts token 2, the 7: the only target. The batch's labels are
    # position-aligned; Hugging Face's convention (the 7 at its own position) is hf_labels of them.
    assert batch["labels"].tolist() == [[-100, 7, -100, -100, -100]]
    assert hf_labels(batch["labels"]).tolist() == [[-100, -100, 7, -100, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0, 0]]


def test_user_labels_on_padding_are_not_trained():
    item = {"input_ids": [5, 6, 7, 2], "labels": [5, 6, 7, 2], "attention_mask": [1, 1, 1, 0]}
    assert collate([item])["labels"].tolist() == [[6, 7, -100, -100]]


def test_loss_mask_gives_next_tokens_where_trained_and_keeps_positions():
    item = {"input_ids": torch.tensor([3, 4, 5, 6, 7]), "position_ids": torch.tensor([0, 1, 0, 1, 2]),
            "loss_mask": torch.tensor([True, False, True, True, False])}
    batch = collate([item, item])
    assert batch["labels"].tolist() == [[4, -100, 6, 7, -100]] * 2
    assert hf_labels(batch["labels"]).tolist() == [[-100, 4, -100, 6, 7]] * 2
    assert batch["position_ids"].tolist() == [[0, 1, 0, 1, 2]] * 2
    assert "attention_mask" not in batch and "loss_mask" not in batch  # packed rows: the per-document mask comes from positions


def test_items_of_different_lengths_are_padded_and_padding_never_trained():
    batch = collate([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}], pad_token_id=9)
    assert batch["input_ids"].tolist() == [[1, 2, 3], [4, 5, 9]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["labels"].tolist() == [[2, 3, -100], [5, -100, -100]]


def test_cache_fields_are_stacked_unchanged():
    item = {"input_ids": torch.arange(4), "topk_ids": torch.zeros(4, 3, dtype=torch.long),
            "topk_logprobs": torch.full((4, 3), -1.0, dtype=torch.float16), "tail_logmass": torch.zeros(4),
            "loss_mask": torch.tensor([True, True, False, False])}
    batch = collate([item, item])
    assert batch["topk_ids"].shape == (2, 4, 3) and batch["topk_logprobs"].dtype == torch.float16
    assert batch["labels"].tolist() == [[1, 2, -100, -100]] * 2


def test_shift_labels_equals_the_naive_loop():
    targets = torch.randint(0, 50, (3, 11))
    valid = torch.rand(3, 11) > 0.3
    expected = [[int(targets[b, t + 1]) if t + 1 < 11 and valid[b, t] else IGNORE_INDEX for t in range(11)]
                for b in range(3)]
    assert shift_labels(targets, valid).tolist() == expected
