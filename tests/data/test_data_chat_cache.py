"""Chat distillation end to end: a conversation jsonl through `destila cache build --messages-field messages`.

The cache's loss mask must cover exactly the assistant tokens (checked against an independent rendering that
scans token ids for the ChatML markers), and training from it must move only assistant positions.
"""

import json

import pytest
import torch

from destila.cache import TopKCache
from destila.cli.main import main
from destila.data import collate, pydoc_texts

from conftest import make_tiny_model, requires_real_teacher

SEQ_LEN = 128


def conversations(count: int = 40) -> list[list[dict]]:
    """System/user/assistant turns cut from Python's documentation, two exchanges in every other conversation."""
    topics = pydoc_texts()
    made = []
    for i in range(count):
        text = topics[i % len(topics)]
        turns = [{"role": "system", "content": "You answer questions about Python."},
                 {"role": "user", "content": f"Explain topic {i}."},
                 {"role": "assistant", "content": text[:60].strip()}]
        if i % 2:
            turns += [{"role": "user", "content": "More, please."}, {"role": "assistant", "content": text[60:100].strip()}]
        made.append(turns)
    return made


def write_chat(path, count: int = 40):
    path.write_text("".join(json.dumps({"messages": c, "id": i}) + "\n" for i, c in enumerate(conversations(count))))
    return path


def independent_stream(tokenizer, convs):
    """Tokens, assistant-target flags and document numbers of the conversations end to end, without destila."""
    opener = tokenizer("<|im_start|>assistant\n", add_special_tokens=False).input_ids
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    tokens, targets, docs = [], [], []
    for d, conv in enumerate(convs):
        ids = tokenizer(tokenizer.apply_chat_template(conv, tokenize=False), add_special_tokens=False).input_ids
        inside = False
        for j, token in enumerate(ids):
            targets.append(inside)
            if inside:
                inside = token != end
            elif ids[max(0, j - len(opener) + 1) : j + 1] == opener:
                inside = True
        tokens += ids
        docs += [d] * len(ids)
    return tokens, targets, docs


def expected_rows(tokenizer, convs, rows: int):
    tokens, targets, docs = independent_stream(tokenizer, convs)
    for r in range(rows):
        base = r * SEQ_LEN
        mask = [t + 1 < SEQ_LEN and docs[base + t + 1] == docs[base + t] and targets[base + t + 1]
                for t in range(SEQ_LEN)]
        yield tokens[base : base + SEQ_LEN], mask


def build_chat_cache(teacher, tmp_path, capsys, extra=()):
    data = write_chat(tmp_path / "chat.jsonl")
    with pytest.raises(SystemExit) as done:
        main(["cache", "build", str(teacher), str(data), "--messages-field", "messages", "-o", str(tmp_path / "c"),
              "--seq-len", str(SEQ_LEN), "--packing", "documents", "--quiet", *extra])
    assert done.value.code == 0, capsys.readouterr().err
    return TopKCache(tmp_path / "c")


def assert_mask_is_the_assistant_tokens(cache, tokenizer):
    """Labels (the trained positions) are exactly the assistant tokens; no teacher target is stored elsewhere."""
    from destila.cache.stats import inspect_cache

    checked = 0
    for i, (ids, mask) in enumerate(expected_rows(tokenizer, conversations(), len(cache))):
        item = cache[i]
        mask = torch.tensor(mask)
        assert item["input_ids"].tolist() == ids
        assert torch.equal(item["labels"] != -100, mask), f"row {i}"
        assert torch.equal(item["labels"][:-1][mask[:-1]], item["input_ids"][1:][mask[:-1]])
        assert torch.isfinite(item["topk_logprobs"][mask]).all()
        assert torch.isneginf(item["topk_logprobs"][~mask]).all()  # read back as -inf: nothing stored there
        checked += int(mask.sum())
    assert checked > 200
    summary = inspect_cache(cache.path)
    assert summary["stored_entries"] == checked * cache.manifest.top_k  # the shards hold no more
    assert summary["trained_positions"] == checked and summary["data"]["spec"]["loss_on"] == "assistant"
    assert summary["trained_fraction"] == checked / (len(cache) * SEQ_LEN) < 0.5


def test_chat_cache_mask_is_exactly_the_assistant_tokens(tiny_chat_llama_dir, tiny_chat_tokenizer, tmp_path, capsys):
    cache = build_chat_cache(tiny_chat_llama_dir, tmp_path, capsys, ["--top-k", "8", "--batch-size", "4"])
    assert_mask_is_the_assistant_tokens(cache, tiny_chat_tokenizer)
    with pytest.raises(SystemExit):
        main(["cache", "inspect", str(cache.path)])
    shown = capsys.readouterr().out
    assert "messages 'messages', loss on assistant, packing documents" in shown and "trained " in shown


def test_training_moves_only_assistant_positions(tiny_chat_llama_dir, tiny_chat_tokenizer, tmp_path, capsys):
    from destila.training import DistillationArguments, DistillationTrainer

    cache = build_chat_cache(tiny_chat_llama_dir, tmp_path, capsys, ["--top-k", "8"])
    student = make_tiny_model("llama", len(tiny_chat_tokenizer), seed=3, layers=2)
    args = DistillationArguments(output_dir=str(tmp_path / "out"), hard_weight=1.0, report_to="none")
    trainer = DistillationTrainer(model=student, args=args, cache=cache, processing_class=tiny_chat_tokenizer)
    assert trainer.train_dataset is cache
    batch = trainer.data_collator([cache[0], cache[1]])
    mask = batch["labels"] != -100
    user = (~mask).nonzero()[3]  # a position in a system/user turn
    assistant = mask.nonzero()[3]

    def gradients(batch):
        student.zero_grad()
        trainer.compute_loss(student, {k: v.clone() for k, v in batch.items()}).backward()
        return torch.cat([p.grad.flatten() for p in student.parameters() if p.grad is not None])

    reference = gradients(batch)
    for position, moves in ((user, False), (assistant, True)):
        perturbed = {k: v.clone() for k, v in batch.items()}
        b, t = position.tolist()
        perturbed["topk_ids"][b, t] = perturbed["topk_ids"][b, t].flip(0)  # another teacher distribution at t
        assert (perturbed["labels"][b, t] != -100) == moves  # and the hard target is there only on assistant turns
        changed = not torch.equal(gradients(perturbed), reference)
        assert changed == moves, f"position {position.tolist()} (assistant: {moves})"


@pytest.mark.real_model
@requires_real_teacher
def test_chat_cache_mask_embedded_teacher(tmp_path, capsys):
    from destila.models import load_tokenizer

    cache = build_chat_cache("smollm2", tmp_path, capsys, ["--top-k", "20", "--batch-size", "4"])
    assert_mask_is_the_assistant_tokens(cache, load_tokenizer("smollm2"))
