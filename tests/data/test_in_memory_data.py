"""Data given in Python: `build_cache` takes a `datasets.Dataset` or a list of dicts in every format (text,
messages, prompt/completion, TRL's conversational prompt/completion), packs them as the same rows in a file would
be, and a student trains from the result offline."""

import json

import pytest
import torch

from conftest import pydoc_texts
from destila.cache import TopKCache, build_cache
from destila.training import DistillationArguments, DistillationTrainer, train_student

SEQ_LEN = 128


def rows_of(kind: str) -> list[dict]:
    texts = pydoc_texts(6)
    if kind == "text":
        return [{"text": t[:400]} for t in texts]
    if kind == "messages":
        return [{"messages": [{"role": "user", "content": t[:40]}, {"role": "assistant", "content": t[40:200]}]}
                for t in texts]
    if kind == "prompt_completion":
        return [{"prompt": t[:40], "completion": t[40:200]} for t in texts]
    return [{"prompt": [{"role": "user", "content": t[:40]}], "completion": [{"role": "assistant", "content": t[40:200]}]}
            for t in texts]


@pytest.mark.parametrize("kind", ["text", "messages", "prompt_completion", "conversational"])
def test_in_memory_rows_build_the_cache_a_file_of_them_builds(kind, tiny_chat_llama_dir, tmp_path):
    import datasets

    rows = rows_of(kind)
    file = tmp_path / "rows.jsonl"
    file.write_text("".join(json.dumps(row) + "\n" for row in rows))
    options = dict(seq_len=SEQ_LEN, top_k=8, progress=False)
    fingerprints = {}
    for name, data in (("file", str(file)), ("list", rows), ("dataset", datasets.Dataset.from_list(rows))):
        build_cache(str(tiny_chat_llama_dir), data, tmp_path / name, **options)
        manifest = TopKCache(tmp_path / name).manifest
        fingerprints[name] = (manifest.ids_fingerprint, manifest.data_fingerprint, manifest.data["loss_on"])
    assert fingerprints["list"] == fingerprints["dataset"] == fingerprints["file"]
    expected_loss_on = {"text": "all", "messages": "assistant"}.get(kind, "completion")
    assert fingerprints["list"][2] == expected_loss_on
    assert TopKCache(tmp_path / "list").manifest.data_source == f"<6 {'text' if kind == 'text' else 'messages' if kind == 'messages' else 'prompt_completion'} rows given in Python>"


def test_conversational_pairs_train_the_completion_as_trl_renders_it(tiny_chat_llama_dir, tiny_chat_tokenizer,
                                                                      tmp_path):
    text = pydoc_texts(1)[0]
    row = {"prompt": [{"role": "user", "content": text[:30]}], "completion": [{"role": "assistant", "content": text[30:80]}]}
    build_cache(str(tiny_chat_llama_dir), [row], tmp_path / "c", seq_len=SEQ_LEN, top_k=8, progress=False)
    item = TopKCache(tmp_path / "c")[0]
    tok = tiny_chat_tokenizer
    head = tok.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
    whole = tok.apply_chat_template(row["prompt"] + row["completion"], tokenize=False)
    prompt_ids = tok(head, add_special_tokens=False)["input_ids"]
    completion_ids = tok(whole[len(head):], add_special_tokens=False)["input_ids"]
    assert len(prompt_ids) + len(completion_ids) < SEQ_LEN  # the whole conversation fits one row
    assert item["input_ids"][: len(prompt_ids) + len(completion_ids)].tolist() == prompt_ids + completion_ids
    # labels are position-aligned: position t predicts token t+1; every completion token is predicted, nothing else
    trained = item["labels"][item["labels"] != -100].tolist()
    assert trained == completion_ids


def test_pairs_mixing_text_and_messages_are_refused_in_one_line(tiny_chat_llama_dir, tmp_path):
    rows = [{"prompt": "a question", "completion": [{"role": "assistant", "content": "an answer"}]}]
    with pytest.raises(ValueError, match="field .completion. holds a list of messages, but field .prompt. holds text"):
        build_cache(str(tiny_chat_llama_dir), rows, tmp_path / "c", seq_len=SEQ_LEN, top_k=8, progress=False)


def test_an_in_memory_dataset_builds_a_cache_and_trains_offline(tiny_chat_llama_dir, tmp_path):
    import datasets
    from destila.student import StudentInitSpec, init_student

    rows = datasets.Dataset.from_list(rows_of("messages") * 4)
    build_cache(str(tiny_chat_llama_dir), rows, tmp_path / "cache", seq_len=SEQ_LEN, top_k=8, progress=False)
    init_student(StudentInitSpec(str(tiny_chat_llama_dir), tmp_path / "student", config={"num_hidden_layers": 2}, seed=1))
    out = tmp_path / "out"
    args = DistillationArguments(output_dir=str(out), max_steps=2, per_device_train_batch_size=2, save_strategy="no",
                                 report_to="none", logging_steps=1)
    result = train_student(str(tmp_path / "student"), out, args, cache=str(tmp_path / "cache"))
    assert result["steps"] == 2 and (out / "model.safetensors").is_file()


def test_the_trainer_tokenises_a_list_of_dicts_for_an_online_teacher(tiny_chat_llama_dir, tmp_path):
    from destila.models import load_causal_lm, load_tokenizer

    args = DistillationArguments(output_dir=str(tmp_path / "o"), max_steps=1, per_device_train_batch_size=2,
                                 save_strategy="no", report_to="none", online_loss="topk", top_k=8)
    trainer = DistillationTrainer(model=str(tiny_chat_llama_dir), args=args, train_dataset=rows_of("conversational"),
                                  processing_class=load_tokenizer(str(tiny_chat_llama_dir)),
                                  teacher_model=load_causal_lm(str(tiny_chat_llama_dir)))
    batch = next(iter(trainer.get_train_dataloader()))
    assert (batch["labels"] != -100).any() and torch.isfinite(torch.tensor(trainer.train().training_loss))


@pytest.mark.parametrize("place, empty", [
    ("train_dataset", "list"), ("train_dataset", "dataset"), ("eval_dataset", "list"), ("eval_dataset", "dataset"),
])
def test_an_empty_in_memory_dataset_is_refused_naming_which(tiny_chat_llama_dir, tmp_path, place, empty):
    """An empty train set failed inside torch's sampler (`num_samples=0`), naming neither; an empty eval set of
    rows was accepted and never evaluated."""
    import datasets

    from destila.models import load_causal_lm, load_tokenizer

    args = DistillationArguments(output_dir=str(tmp_path / "o"), max_steps=1, per_device_train_batch_size=2,
                                 save_strategy="no", report_to="none", online_loss="topk", top_k=8,
                                 eval_strategy="steps", eval_steps=1)
    nothing = [] if empty == "list" else datasets.Dataset.from_dict({"text": []})
    given = {"train_dataset": rows_of("text"), place: nothing}
    with pytest.raises(ValueError, match=rf"^DistillationTrainer: {place} is empty \(0 rows\); pass rows"):
        DistillationTrainer(model=str(tiny_chat_llama_dir), args=args, processing_class=load_tokenizer(
            str(tiny_chat_llama_dir)), teacher_model=load_causal_lm(str(tiny_chat_llama_dir)), **given)
    assert not (tmp_path / "o").exists()


def test_rows_without_text_are_refused_naming_the_dataset(tiny_chat_llama_dir, tmp_path):
    from destila.models import load_causal_lm, load_tokenizer

    args = DistillationArguments(output_dir=str(tmp_path / "o"), max_steps=1, per_device_train_batch_size=2,
                                 save_strategy="no", report_to="none", online_loss="topk", top_k=8)
    with pytest.raises(ValueError, match=r"^DistillationTrainer: train_dataset: data: .* holds no text"):
        DistillationTrainer(model=str(tiny_chat_llama_dir), args=args, train_dataset=[{"text": ""}] * 3,
                            processing_class=load_tokenizer(str(tiny_chat_llama_dir)),
                            teacher_model=load_causal_lm(str(tiny_chat_llama_dir)))
