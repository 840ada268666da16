"""`destila train` with a student whose tokenizer is not the cache's: detected, aligned once into a store the next
run reuses, the coverage in one line, the student's own tokenizer saved; a cache without spans refused with the
command that rebuilds it (which then trains); options that cannot apply refused in one line."""

from __future__ import annotations

import json
import shlex

import pytest
import torch
from conftest import make_tiny_model, pydoc_texts

from destila.cache.reader import TopKCache
from destila.cli.main import main
from destila.models import load_tokenizer, tokenizer_fingerprint


@pytest.fixture(scope="module")
def other_student(tmp_path_factory, byte_level_student_tokenizer):
    """A tiny random Llama on the byte-level student tokenizer (not the teacher's)."""
    path = tmp_path_factory.mktemp("other-student") / "student"
    model = make_tiny_model("llama", len(byte_level_student_tokenizer), layers=2)
    model.config.max_position_embeddings = 1024  # the student's tokens of a 64-token row may be more than 64
    model.save_pretrained(path)
    byte_level_student_tokenizer.save_pretrained(path)
    return path


def _train(student, cache, out, *extra):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", str(student), "--cache", str(cache), "-o", str(out), "--max_steps", "2",
              "--per_device_train_batch_size", "2", "--save_strategy", "no", "--report_to", "none", "--logging_steps", "1",
              *extra])
    if exit_info.value.code:
        raise exit_info.value


def test_a_student_with_another_tokenizer_trains_from_a_spans_cache(text_spans_cache, other_student, tmp_path,
                                                                    capsys):
    _train(other_student, text_spans_cache, tmp_path / "run")
    printed = capsys.readouterr().out
    assert printed.count("cross-tokenizer coverage on ") == 1  # every sequence, in one line
    index = list((tmp_path / "run" / "alignment").glob("items-*.json"))
    assert len(index) == 1 and list((tmp_path / "run" / "alignment").glob("vocab-map-*.safetensors"))
    assert json.loads(index[0].read_text())["sequences"] == len(TopKCache(text_spans_cache))
    # the trained student keeps its own tokenizer, and its loss was finite
    saved = load_tokenizer(str(tmp_path / "run"))
    assert tokenizer_fingerprint(saved) == tokenizer_fingerprint(load_tokenizer(str(other_student)))
    records = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "loss" in r]
    assert losses and all(torch.isfinite(torch.tensor(losses)))
    # the model card names the teacher, the cache and the data behind the aligned targets
    card = (tmp_path / "run" / "README.md").read_text()
    manifest = TopKCache(text_spans_cache).manifest
    assert "the cache's targets were aligned to the student's tokens" in card
    assert manifest.teacher_weight_fingerprint in card and manifest.data_fingerprint in card, card
    assert "not recorded" not in card
    # runs given one alignment folder share its store: written by the first, read (not rewritten) by the next
    shared = tmp_path / "alignment"
    _train(other_student, text_spans_cache, tmp_path / "a", "--alignment-dir", str(shared))
    [stored] = shared.glob("items-*.json")
    written = stored.stat().st_mtime_ns
    _train(other_student, text_spans_cache, tmp_path / "b", "--alignment-dir", str(shared), "--seed", "1")
    assert stored.stat().st_mtime_ns == written
    assert not (tmp_path / "b" / "alignment").exists()


def test_a_cache_without_spans_is_refused_with_the_command_that_rebuilds_it(tiny_chat_llama_dir, other_student,
                                                                            tmp_path, capsys):
    from destila.cache import build_cache

    texts = tmp_path / "texts.jsonl"
    texts.write_text("".join(json.dumps({"text": t}) + "\n" for t in pydoc_texts(2)))
    cache = tmp_path / "cache"
    build_cache(str(tiny_chat_llama_dir), str(texts), cache, seq_len=64, top_k=8, progress=False)
    with pytest.raises(SystemExit) as exit_info:
        _train(other_student, cache, tmp_path / "run")
    assert exit_info.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("destila train: error: student: its tokenizer (fingerprint ")
    assert "differs from the cache's" in line
    assert "stores no byte spans" in line and not (tmp_path / "run").exists()
    command = line.split("rebuild it with spans: ", 1)[1]
    assert command == (f"destila cache build {tiny_chat_llama_dir} {texts} -o {cache}-spans --spans --seq-len 64 "
                       "--top-k 8")
    with pytest.raises(SystemExit) as exit_info:
        main(shlex.split(command)[1:] + ["--no-progress"])
    assert exit_info.value.code == 0
    rebuilt, original = TopKCache(f"{cache}-spans").manifest, TopKCache(cache).manifest
    assert rebuilt.spans and not original.spans
    # the same teacher, data and targets (the data and ids fingerprints cover the spans, so they differ)
    for name in ("teacher", "data", "targets", "seq_len", "max_tokens", "sequences", "tokens", "encoding",
                 "tokenizer_fingerprint"):
        assert getattr(rebuilt, name) == getattr(original, name), name
    capsys.readouterr()
    _train(other_student, f"{cache}-spans", tmp_path / "run")
    assert "cross-tokenizer coverage on " in capsys.readouterr().out


@pytest.mark.parametrize("extra,message", [
    (["--tail", "none"], "error: tail: a student with another tokenizer gets the teacher's unmapped mass in the rest "
                         "bucket"),
    (["--hidden_loss", "mse"], "error: hidden_loss: teacher hidden states are stored per teacher token"),
])
def test_options_that_cannot_apply_across_tokenizers_are_refused(text_spans_cache, other_student, tmp_path, capsys,
                                                                 extra, message):
    with pytest.raises(SystemExit):
        _train(other_student, text_spans_cache, tmp_path / "run", *extra)
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def _first_loss(out) -> float:
    return next(row["loss"] for row in map(json.loads, (out / "log.jsonl").read_text().splitlines()) if "loss" in row)


def test_top_p_and_top_k_cut_the_aligned_targets_as_a_caches(text_spans_cache, other_student, tmp_path, capsys):
    """--top_p across tokenizers was refused as "this run has no cache (online targets)"; the aligned targets are
    the cache's K entries per row in the student's ids, descending, and both cut them as they cut a cache's."""
    _train(other_student, text_spans_cache, tmp_path / "all", "--seed", "3")
    _train(other_student, text_spans_cache, tmp_path / "nucleus", "--seed", "3", "--top_p", "0.5")
    assert _first_loss(tmp_path / "nucleus") != pytest.approx(_first_loss(tmp_path / "all"), rel=1e-4)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        _train(other_student, text_spans_cache, tmp_path / "wide", "--top_k", "99")
    assert f"top_k: the cache {text_spans_cache} holds K = 16 tokens per position" in capsys.readouterr().err


def test_an_alignment_folder_with_nothing_to_align_is_refused(text_spans_cache, tiny_chat_llama_dir, tmp_path,
                                                              capsys):
    with pytest.raises(SystemExit):  # the teacher's own tokenizer: today's path, nothing to align
        _train(tiny_chat_llama_dir, text_spans_cache, tmp_path / "run", "--alignment-dir", str(tmp_path / "al"))
    assert "alignment_dir: the student reads the cache's own tokens" in capsys.readouterr().err
    assert not (tmp_path / "al").exists()


def test_a_held_out_cache_is_read_in_the_students_tokens_too(text_spans_cache, chat_spans_cache, other_student,
                                                            tmp_path):
    from destila.training import DistillationArguments, train_student

    out = tmp_path / "run"
    args = DistillationArguments(output_dir=str(out), max_steps=1, per_device_train_batch_size=2,
                                 save_strategy="no", report_to="none", soft_weight=1.0, hard_weight=1.0)
    result = train_student(str(other_student), out, args, cache=text_spans_cache, eval_cache=chat_spans_cache,
                           eval_sequences=3)
    assert len(list((out / "alignment").glob("items-*.json"))) == 2  # the training cache's and the held-out one's
    assert torch.isfinite(torch.tensor(result["eval"]["eval_loss"]))
