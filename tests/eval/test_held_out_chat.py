"""Held-out eval on chat data: only the trained positions are scored (and the table says so); generation samples
go through the chat template; --prompts; documents counted."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from destila.cache import TopKCache
from destila.data import DataSpec
from destila.cli.main import main as cli
from destila.eval import EvalSpec, evaluate_model, markdown_table
from destila.eval.run import documents_in

CONVERSATIONS = [
    [{"role": "user", "content": f"Name a Python keyword, please ({i})."},
     {"role": "assistant", "content": word + " is a keyword of Python."}]
    for i, word in enumerate(["while", "for", "with", "class", "def", "lambda", "yield", "return"] * 2)
]


@pytest.fixture(scope="module")
def chat_cache(tiny_chat_llama_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("chat-eval")
    data = folder / "chat.jsonl"
    data.write_text("".join(json.dumps({"messages": c}) + "\n" for c in CONVERSATIONS))
    with pytest.raises(SystemExit) as exit_info:
        cli(["cache", "build", str(tiny_chat_llama_dir), str(data), "--messages-field", "messages",
             "-o", str(folder / "cache"), "--seq-len", "128", "--top-k", "8", "--packing", "none"])
    assert exit_info.value.code == 0
    return folder / "cache"


def test_an_assistant_only_cache_scores_only_the_trained_positions(tiny_chat_llama_dir, chat_cache):
    result = evaluate_model(EvalSpec([str(tiny_chat_llama_dir)], cache=str(chat_cache), new_tokens=4))
    cache = TopKCache(chat_cache)
    trained = sum(int((cache[i]["labels"] != -100).sum()) for i in range(len(cache)))
    every = sum(cache[i]["input_ids"].numel() for i in range(len(cache)))
    assert result["tokens"] == trained < every / 2
    assert result["scored_positions"] == "assistant"
    assert len(cache) == result["documents"] == len(CONVERSATIONS)  # one conversation per (padded) row
    assert "assistant turns only" in markdown_table([result])


def test_samples_use_the_chat_template_and_the_prompts_file(tiny_chat_llama_dir, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    asked = [[{"role": "user", "content": "What does yield do?"}], [{"role": "user", "content": "And with?"}]]
    prompts.write_text("".join(json.dumps({"messages": m}) + "\n" for m in asked))
    result = evaluate_model(EvalSpec([str(tiny_chat_llama_dir)], data=DataSpec(["def f(): pass"] * 4, seq_len=16),
                                     new_tokens=5, prompts=str(prompts)))
    assert result["chat_template_applied"] is True
    assert [s["prompt"] for s in result["samples"]] == ["What does yield do?", "And with?"]
    tokenizer = AutoTokenizer.from_pretrained(tiny_chat_llama_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_chat_llama_dir).eval()
    for sample, messages in zip(result["samples"], asked):
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                            return_dict=True)["input_ids"]
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=5, min_new_tokens=5, do_sample=False,
                                 pad_token_id=tokenizer.eos_token_id)
        assert sample["text"] == tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


def test_conversation_prompts_without_a_chat_template_are_refused(tiny_llama_dir, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    with pytest.raises(ValueError, match="need a chat template"):
        evaluate_model(EvalSpec([str(tiny_llama_dir)], data=DataSpec(["def f(): pass"] * 4, seq_len=16),
                                new_tokens=2, prompts=str(prompts)))


def test_documents_are_counted_where_position_ids_restart():
    scored = torch.tensor([1, 1, 1, 1, 1])
    items = [{"position_ids": torch.tensor([0, 1, 2, 0, 1]), "labels": scored},  # two documents
             {"position_ids": torch.tensor([2, 3, 0, 1, 2]), "labels": scored},  # the end of one, then a new one
             {"position_ids": torch.tensor([0, 1, 0, 0, 0]), "labels": torch.tensor([1, 1, -100, -100, -100])},
             {"labels": scored}]                                                  # not packed: one document
    assert documents_in(items) == 6  # padding (no scored position) is no document
