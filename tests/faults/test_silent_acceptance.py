"""Input that used to be accepted without a word: now refused, or warned about with counts.

Each test runs the real commands on real (edited) files and asserts the
exit code, the one line, and that nothing already written changed.
"""

import json
import shutil

import pytest
import torch
from fault_helpers import (  # noqa: F401 (fixtures)
    build_command, copy_of, destila_in_process, edit_manifest, error_line, small_cache, snapshot, student,
    train_cache, train_command,
)
from safetensors.torch import load_file, save_file
from conftest import shard_metadata_of

from destila.cache.format import sha256_file


def rewrite_shard(cache, change):
    """Change the first shard's tensors with ``change(tensors)`` and record its new size and checksum:
    a shard whose checksum holds but whose values are wrong (a bug in a writer, or a deliberate edit)."""
    manifest = json.loads((cache / "manifest.json").read_text())
    name = manifest["shards"][0]["name"]
    tensors = load_file(cache / name)
    change(tensors)
    save_file(tensors, cache / name, metadata=shard_metadata_of(cache / name))  # the cache's identity kept

    def record(raw):
        raw["shards"][0]["sha256"] = sha256_file(cache / name)
        raw["shards"][0]["bytes"] = (cache / name).stat().st_size

    edit_manifest(cache, record)
    return cache / name


def test_conversations_without_an_assistant_turn_are_refused(tiny_chat_llama_dir, tmp_path):
    data = tmp_path / "chats.jsonl"
    rows = [{"messages": [{"role": "user", "content": f"question number {i} about the weather"}]} for i in range(30)]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "cache"
    result = destila_in_process(*build_command(tiny_chat_llama_dir, data, out, "--messages-field", "messages"))
    error_line(result, "cache", 2, f"data: {data} has no trained position in the 9 conversations read",
               "no conversation has an assistant turn")
    assert not out.exists()


def test_records_without_text_are_counted_in_a_warning(tiny_llama_dir, tmp_path):
    data = tmp_path / "docs.jsonl"
    rows = [{"text": None}, {"title": "no text field"}, {"text": ""}]  # first: read before the token budget ends
    rows += [{"text": f"document {i} of the collection, with a few words in it"} for i in range(40)]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    result = destila_in_process(*build_command(tiny_llama_dir, data, tmp_path / "cache"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"data: 3 of the 20 records read from {data} were left out: their 'text' field is missing, null, " \
           "empty or not a string" in result.stderr


@pytest.mark.parametrize("edit, needle", [
    (lambda t: t["topk_logprobs"].view(-1)[3:5].fill_(float("nan")), "2 top-K log-probs are NaN or +inf"),
    pytest.param(lambda t: t["topk_logprobs"].view(-1)[7:8].fill_(float("inf")), "1 top-K log-probs are NaN or +inf",
                 marks=pytest.mark.slow),  # the same check as NaN; the default suite keeps one case
    pytest.param(lambda t: t["topk_logprobs"].view(-1)[0:1].fill_(0.5), "top-K log-probs above 0 (max 0.5)",
                 marks=pytest.mark.slow),
])
def test_inspect_and_eval_refuse_impossible_log_probs(small_cache, student, tmp_path, edit, needle):
    cache = copy_of(small_cache, tmp_path)
    shard = rewrite_shard(cache, edit)
    inspected = destila_in_process("cache", "inspect", cache)
    error_line(inspected, "cache", 2, f"{shard}: row 0 holds {needle}", "no statistics from damaged data")
    assert inspected.stdout == ""
    evaluated = destila_in_process("eval", student, "--cache", cache, "--max-tokens", "64", "--new-tokens", "2")
    error_line(evaluated, "eval", 2, f"{shard}: row 0 (sequence 0) holds {needle}", "destila cache verify")


def test_train_refuses_impossible_log_probs_naming_the_shard(small_cache, student, tmp_path):
    cache = copy_of(small_cache, tmp_path)
    shard = rewrite_shard(cache, lambda t: t["topk_logprobs"].view(-1)[3:5].fill_(float("nan")))
    out = tmp_path / "out"
    trained = destila_in_process(*train_command(student, cache, out, "--max_steps", "4"))  # 4 of 4: every sequence
    line = error_line(trained, "train", 2, f"{shard}: row 0 (sequence 0) holds 2 top-K log-probs are NaN or +inf",
                      "destila cache verify")
    assert "Python" not in line and not (out / "model.safetensors").exists()


@pytest.mark.parametrize("edit, needle, verified", [
    (lambda t: t["position_ids"].view(-1)[5:6].fill_(-3), "negative position ids (min -3)",
     "row 0: negative position_ids (min -3)"),
    (lambda t: t["topk_logprobs"].view(-1)[0:1].fill_(float("-inf")),
     "1 trained positions with a top-K log-prob of -inf while the rest of the vocabulary has probability",
     "row 0: 1 non-finite top-K log-probs"),
])
def test_train_and_verify_refuse_targets_no_teacher_gives(small_cache, student, tmp_path, edit, needle, verified):
    cache = copy_of(small_cache, tmp_path)
    shard = rewrite_shard(cache, edit)  # its checksum and identity kept
    result = destila_in_process("cache", "verify", cache)
    assert result.returncode == 1 and f"FAULT {shard.name}: {verified}" in result.stdout
    out = tmp_path / "out"
    trained = destila_in_process(*train_command(student, cache, out, "--max_steps", "4"))  # 4 of 4: every sequence
    error_line(trained, "train", 2, f"{shard}: row 0 (sequence 0) holds {needle}", "destila cache verify")
    assert not out.exists()


@pytest.mark.parametrize("change, needle", [
    (lambda raw: raw.update(tokens=raw["tokens"] + 32), "tokens is 544, but 16 sequences of 32 tokens make 512"),
    (lambda raw: raw.update(vocab_size=100), "vocab_size is 100, smaller than the tokenizer's 320 tokens"),
])
def test_an_edited_manifest_is_refused_by_inspect_and_verify(small_cache, tmp_path, change, needle):
    cache = copy_of(small_cache, tmp_path)
    edit_manifest(cache, change)
    inspected = destila_in_process("cache", "inspect", cache)
    error_line(inspected, "cache", 2, f"{cache / 'manifest.json'} contradicts itself ({needle})")
    verified = destila_in_process("cache", "verify", cache)
    assert verified.returncode == 1 and f"FAULT manifest.json: {needle}" in verified.stdout


def test_inspect_refuses_a_cache_whose_tokenizer_was_deleted(small_cache, tmp_path):
    cache = copy_of(small_cache, tmp_path)
    shutil.rmtree(cache / "tokenizer")
    error_line(destila_in_process("cache", "inspect", cache), "cache", 2,
               "the tokenizer copied from the teacher is missing")


def swap_first_two_shards(raw):
    first, second = raw["shards"][0], raw["shards"][1]
    first["sequences"], second["sequences"] = second["sequences"], first["sequences"]


def test_train_refuses_shards_out_of_order_before_writing_anything(small_cache, student, tmp_path):
    cache = copy_of(small_cache, tmp_path)
    edit_manifest(cache, swap_first_two_shards)
    out = tmp_path / "out"
    result = destila_in_process(*train_command(student, cache, out, "--max_steps", "1"))
    error_line(result, "train", 2, "its sequence_index differs from the manifest's", "destila cache verify")
    assert not out.exists()


@pytest.mark.slow  # a training run and four refused resumes
def test_resume_refuses_another_cache_student_or_learning_rate(train_cache, student, small_cache, tmp_path):
    out = tmp_path / "out"
    first = destila_in_process(*train_command(student, train_cache, out, "--max_steps", "2", "--save_steps", "1"))
    assert first.returncode == 0, first.stderr[-2000:]
    before = snapshot(out)
    other_student = tmp_path / "other-student"
    shutil.copytree(student, other_student)
    cases = [
        (train_command(student, train_cache, out, "--max_steps", "3", "--resume", "--learning_rate", "1e-3"),
         "learning_rate 0.003 (recorded) vs 0.001 (given)"),
        (train_command(student, small_cache, out, "--max_steps", "3", "--resume"),
         f"cache {str(train_cache.resolve())!r} (recorded) vs {str(small_cache.resolve())!r} (given)"),
        (train_command(other_student, train_cache, out, "--max_steps", "3", "--resume"),
         f"student {str(student.resolve())!r} (recorded) vs {str(other_student.resolve())!r} (given)"),
        (train_command(student, train_cache, out, "--max_steps", "3", "--resume", "--seed", "8"),  # not listed: the
         "seed 7 (recorded) vs 8 (given)"),                                 # seed decides the batches' order too
    ]
    for command, needle in cases:
        result = destila_in_process(*command)
        error_line(result, "train", 2, f"resume: the run in {out} was trained with other inputs", needle, "--overwrite")
        assert snapshot(out) == before


@pytest.mark.slow  # two builds
def test_a_rebuild_over_a_damaged_shard_recomputes_it(small_cache, tiny_llama_dir, tmp_path):
    cache = copy_of(small_cache, tmp_path)
    original = snapshot(cache)
    shard = cache / json.loads((cache / "manifest.json").read_text())["shards"][1]["name"]
    data = bytearray(shard.read_bytes())
    data[-10] ^= 0xFF  # same size, other bytes: only the checksum tells
    shard.write_bytes(bytes(data))
    rebuilt = destila_in_process(*build_command(tiny_llama_dir, "pydoc", cache))
    assert rebuilt.returncode == 0, rebuilt.stderr[-2000:]
    assert f"shard {shard.name}: checksum mismatch" in rebuilt.stderr
    assert "wrote 4 sequences" in rebuilt.stdout
    assert snapshot(cache) == original
    assert destila_in_process("cache", "verify", cache).returncode == 0


def test_hidden_layers_with_sampled_targets_is_refused_before_the_teacher_pass(tiny_llama_dir, tmp_path):
    out = tmp_path / "cache"
    command = [a for a in build_command(tiny_llama_dir, "pydoc", out, "--hidden-layers", "1", "--targets", "sampled")
               if a not in ("--top-k", "8")]  # a top-K width goes with top-K targets only
    result = destila_in_process(*command)
    error_line(result, "cache", 2, "hidden_layers: teacher hidden states are stored beside top-K targets only",
               "drop --targets sampled or --hidden-layers")
    assert not out.exists()


def test_distill_loss_leaves_the_callers_int64_ids_unchanged():
    from destila import distill_loss

    torch.manual_seed(0)
    hidden, weight = torch.randn(6, 8, dtype=torch.float64), torch.randn(20, 8, dtype=torch.float64)
    ids = torch.stack([torch.randperm(20)[:4] for _ in range(6)])  # int64, as a cache reader returns them
    logprobs = torch.log_softmax(torch.randn(6, 4, dtype=torch.float64), -1) - 0.5
    logprobs[1, 3] = float("-inf")  # a padded entry
    labels = torch.tensor([3, -100, 5, 7, -100, 2])  # ignored rows
    before = ids.clone()
    first = distill_loss(hidden, weight, ids, logprobs, labels=labels)
    assert torch.equal(ids, before)
    second = distill_loss(hidden, weight, ids, logprobs, labels=labels)  # used to fail: "found id 0 twice"
    assert torch.equal(first, second)


def test_train_refuses_a_cache_without_trained_positions(small_cache, student, tmp_path):
    """A cache made before data without trained positions was refused: train would report a loss of 0.0."""
    cache = copy_of(small_cache, tmp_path)
    manifest = json.loads((cache / "manifest.json").read_text())
    for shard in manifest["shards"]:
        tensors = load_file(cache / shard["name"])
        tensors["loss_mask"][:] = False
        for name in ("topk_ids", "topk_logprobs", "tail_logmass"):
            tensors[name] = tensors[name][:0].contiguous()
        save_file(tensors, cache / shard["name"], metadata=shard_metadata_of(cache / shard["name"]))
        shard["sha256"], shard["bytes"] = sha256_file(cache / shard["name"]), (cache / shard["name"]).stat().st_size
    (cache / "manifest.json").write_text(json.dumps(manifest, indent=1))
    out = tmp_path / "out"
    result = destila_in_process(*train_command(student, cache, out, "--max_steps", "1"))
    error_line(result, "train", 2, f"{cache}: the cache holds no trained position")
    assert not out.exists()
