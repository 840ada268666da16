"""Batches carry position-aligned labels; `hf_labels` of them is what an HF model computes the right loss from."""

import torch
import torch.nn.functional as F
from conftest import make_tiny_model

from destila.cache import TopKCache, build_cache
from destila.data import collate, hf_labels, shift_labels


def test_hf_model_given_a_cache_batch_computes_the_next_token_loss(tiny_llama_dir, tmp_path):
    build_cache(str(tiny_llama_dir), "pydoc", tmp_path / "c", seq_len=32, max_tokens=32 * 4, top_k=4, progress=False)
    cache = TopKCache(tmp_path / "c")
    batch = collate([cache[i] for i in range(4)])
    model = make_tiny_model("llama", cache.vocab_size, seed=5, layers=2)
    layout = {"position_ids": batch["position_ids"]}
    hf_loss = model(input_ids=batch["input_ids"], labels=hf_labels(batch["labels"]), **layout).loss
    # The loss destila trains on: position t predicts the cache's label at t (the token t+1).
    logits = model(input_ids=batch["input_ids"], **layout).logits
    targets = torch.stack([cache[i]["labels"] for i in range(4)])
    expected = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-100)
    torch.testing.assert_close(hf_loss, expected)
    assert torch.equal(batch["labels"], targets)  # the cache's labels, as they are


def test_the_two_conventions_round_trip():
    aligned = torch.tensor([[4, -100, 6, 7, -100]])
    assert hf_labels(aligned).tolist() == [[-100, 4, -100, 6, 7]]
    assert torch.equal(shift_labels(hf_labels(aligned)), aligned)
