"""`destila eval TEACHER --draft DRAFT`: three ways of decoding, counted and compared token for token.

Tiny random Llamas stand in for teacher and draft; the draft is cut from the
teacher by `destila student init`, as a user would make one.
"""

import json
import logging
import time

import pytest
import torch
from conftest import pydoc_texts, save_tiny_model
from draft_cli import prompt_file, run

from destila.draft import measure as measure_module
from destila.draft.head import NarrowHead, frequent_tokens, write_ranking
from destila.draft.measure import measure_draft
from destila.draft.spec import DraftEvalSpec


@pytest.fixture(scope="module")
def teacher(tmp_path_factory, tiny_tokenizer):
    return save_tiny_model(tmp_path_factory.mktemp("draft-teacher"), tiny_tokenizer, layers=4, hidden=64)


@pytest.fixture(scope="module")
def cut_draft(teacher, tmp_path_factory):
    out = tmp_path_factory.mktemp("draft-cut") / "draft"
    assert run(["student", "init", str(teacher), "-o", str(out), "--layers", "2"]) == 0
    return out


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    return prompt_file(tmp_path_factory.mktemp("draft-prompts"), topic=2, count=3, width=50)


def _ways(report: dict) -> dict:
    return {row["way"]: row for row in report["ways"]}


def test_the_cli_reports_three_ways_and_greedy_text_identical_to_the_teacher(teacher, cut_draft, prompts, tmp_path,
                                                                            capsys):
    out = tmp_path / "r.json"
    code = run(["eval", str(teacher), "--draft", str(cut_draft), "--prompts", str(prompts),
                 "--max-new-tokens", "12", "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    report = json.loads(out.read_text())
    ways = _ways(report)
    assert set(ways) == {"teacher", "draft", "prompt_lookup"}
    assert report["errors"] == []
    for row in ways.values():
        assert row["identical"] == 3 and row["differing_prompts"] == []
        assert row["new_tokens"] > 0 and row["tokens_per_second"] > 0
        assert row["tokens_per_forward"] == pytest.approx(row["new_tokens"] / row["teacher_forwards"], abs=1e-3)
        assert 0 <= row["accepted"] <= row["proposed"]
    alone = ways["teacher"]
    assert alone["proposed"] == 0 and alone["teacher_forwards"] == alone["new_tokens"] and alone["speedup"] == 1
    # Same tokenizer: every draft forward proposes one token.
    assert ways["draft"]["proposed"] == ways["draft"]["draft_forwards"] > 0
    for text in report["texts"]:
        assert text["draft"] == text["teacher"] == text["prompt_lookup"]
    assert "speculative decoding: 3 prompts" in printed
    assert "the draft proposes 1 per teacher forward, prompt lookup 1; timed products (" in " ".join(printed.split())
    assert "verdict: " in printed  # what to use, after the table
    for row in ways.values():  # the forward's time split, and its cost in plain steps, account for the speed
        split = row["teacher_ms_per_forward"] + row["draft_ms_per_forward"] + row["other_ms_per_forward"]
        assert split == pytest.approx(1000 * row["seconds"] / row["teacher_forwards"], rel=1e-3, abs=0.01)
        assert row["teacher_ms_per_forward"] > 0 and row["other_ms_per_forward"] >= 0
        assert (row["draft_ms_per_forward"] > 0) == (row["way"] == "draft")
        assert row["speedup"] == pytest.approx(row["tokens_per_forward"] / row["forward_cost"], rel=2e-3)
    assert alone["forward_cost"] == 1
    assert "ms per teacher forward" in " ".join(printed.split())
    settings = report["settings"]
    assert settings["teacher_forward_ms"] > 0 and settings["teacher_forward_2_ms"] > 0
    assert isinstance(settings["one_token_forward_fair"], bool)


def test_the_teacher_as_its_own_draft_has_every_proposal_accepted(teacher, prompts):
    # draft_tokens 0: transformers' adaptive schedule, which proposes more after every fully accepted step.
    report = measure_draft(DraftEvalSpec(str(teacher), str(teacher), str(prompts), max_new_tokens=16, draft_tokens=0),
                           progress=False)
    draft = _ways(report)["draft"]
    # Proposals past an end-of-sequence token or the length limit are the only ones the teacher can drop.
    assert draft["acceptance"] > 0.8
    assert draft["tokens_per_forward"] > 2
    assert draft["identical"] == 3


@pytest.mark.parametrize("tokens", [1, 3])
def test_the_draft_proposes_its_tokens_before_every_teacher_forward(teacher, prompts, tokens):
    # The teacher as its own draft: every proposal is accepted, so each forward yields the proposals plus one.
    spec = DraftEvalSpec(str(teacher), str(teacher), str(prompts), max_new_tokens=16, draft_tokens=tokens,
                         ways=("teacher", "draft"))
    report = measure_draft(spec, progress=False)
    draft = _ways(report)["draft"]
    assert draft["identical"] == 3 and report["settings"]["draft_tokens"] == tokens
    assert draft["draft_forwards"] == draft["proposed"]
    # Proposals are capped only by the length limit or an end token: 16 tokens take ceil(16 / (tokens + 1)) forwards.
    assert draft["teacher_forwards"] <= 3 * -(-16 // (tokens + 1)) + 3
    assert draft["proposed"] <= tokens * draft["teacher_forwards"]
    assert draft["tokens_per_forward"] <= tokens + 1


def test_the_products_are_timed_in_all_ways_alike_or_left_to_torch(teacher, cut_draft, prompts):
    for matmul in ("timed", "torch"):
        report = measure_draft(DraftEvalSpec(str(teacher), str(cut_draft), str(prompts), max_new_tokens=6,
                                             matmul=matmul), progress=False)
        ways = report["settings"]["matmul_ways"]
        assert report["settings"]["matmul"] == matmul and report["errors"] == []
        assert sum(ways.values()) > 0 and (ways["weight_major"] == 0 if matmul == "torch" else True)


def test_an_assisted_answer_that_differs_is_an_error_and_the_command_fails(teacher, cut_draft, prompts, monkeypatch,
                                                                           capsys):
    answer = measure_module._answer

    def wrong_when_assisted(teacher_model, ids, config, options, draft, seed):
        result = answer(teacher_model, ids, config, options, draft, seed)
        if "assistant_model" in options and result["tokens"]:
            result["tokens"][-1] = (result["tokens"][-1] + 1) % 300
        return result

    monkeypatch.setattr(measure_module, "_answer", wrong_when_assisted)
    code = run(["eval", str(teacher), "--draft", str(cut_draft), "--prompts", str(prompts),
                 "--max-new-tokens", "6"])
    printed = capsys.readouterr().out
    assert code == 1
    assert "draft: greedy answers to prompts [0, 1, 2] differ from the teacher's own" in printed


INNER_WARNING = "Passing `generation_config` together with generation-related"


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_transformers_warning_about_its_own_inner_generate_call_is_not_shown_and_nothing_else_is_hidden(
        teacher, cut_draft, prompts):
    from transformers.utils import logging as transformers_logging

    logger, records = logging.getLogger("transformers.generation.utils"), _Records()
    logger.addHandler(records)
    try:
        transformers_logging.warning_once.cache_clear()  # it warns once per process: make this test's call the first
        measure_draft(DraftEvalSpec(str(teacher), str(cut_draft), str(prompts), max_new_tokens=6), progress=False)
        inside = list(records.messages)
        # The same assisted call outside the measurement: transformers does warn, so the check above can fail.
        from destila.models import load_causal_lm

        model, draft = load_causal_lm(str(teacher)), load_causal_lm(str(cut_draft))
        transformers_logging.warning_once.cache_clear()
        model.generate(input_ids=torch.tensor([[5, 6, 7]]), attention_mask=torch.ones(1, 3, dtype=torch.long),
                       assistant_model=draft, do_sample=False, max_new_tokens=4)
        logger.warning("another message of the generation logger")
    finally:
        logger.removeHandler(records)
        transformers_logging.warning_once.cache_clear()
    assert not any(m.startswith(INNER_WARNING) for m in inside), inside
    outside = records.messages[len(inside):]
    assert any(m.startswith(INNER_WARNING) for m in outside), outside
    assert "another message of the generation logger" in outside


def test_a_slow_draft_step_is_timed_as_the_drafts_and_not_the_loops(teacher, cut_draft, prompts, monkeypatch):
    load_draft, pause = measure_module.load_draft, 0.05

    def slow_draft(spec, teacher_model, tokenizer):
        draft = load_draft(spec, teacher_model, tokenizer)
        forward = draft.forward

        def slow_forward(*args, **kwargs):
            time.sleep(pause)
            return forward(*args, **kwargs)

        draft.forward = slow_forward
        return draft

    monkeypatch.setattr(measure_module, "load_draft", slow_draft)
    spec = DraftEvalSpec(str(teacher), str(cut_draft), str(prompts), max_new_tokens=8, ways=("teacher", "draft"))
    draft = _ways(measure_draft(spec, progress=False))["draft"]
    steps_per_forward = draft["draft_forwards"] / draft["teacher_forwards"]
    assert draft["draft_ms_per_forward"] >= 1000 * pause * steps_per_forward
    # The pause is the draft's, not generate's own loop nor the teacher's (each far under it for these tiny models).
    assert draft["other_ms_per_forward"] < 1000 * pause and draft["teacher_ms_per_forward"] < 1000 * pause


def test_sampling_is_seeded_and_reports_no_identity(teacher, cut_draft, prompts):
    spec = DraftEvalSpec(str(teacher), str(cut_draft), str(prompts), max_new_tokens=8, temperature=0.8, seed=3)
    first, second = (measure_draft(spec, progress=False) for _ in range(2))
    assert first["texts"] == second["texts"]
    assert all("identical" not in row for row in first["ways"])
    assert first["settings"]["seed"] == 3


def test_a_narrow_head_equals_the_full_head_on_its_tokens_and_is_minus_infinity_elsewhere():
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=True).double()
    ids = [7, 3, 41, 0]
    hidden = torch.randn(2, 5, 16, dtype=torch.float64)
    narrow = NarrowHead(head, ids)(hidden)
    full = head(hidden)
    torch.testing.assert_close(narrow[..., ids], full[..., ids].detach(), rtol=1e-12, atol=1e-12)
    rest = [i for i in range(50) if i not in ids]
    assert torch.isneginf(narrow[..., rest]).all()


def test_a_ranked_narrow_draft_keeps_the_teachers_greedy_text(teacher, cut_draft, prompts, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(teacher)
    ranking = frequent_tokens([tokenizer(t)["input_ids"] for t in pydoc_texts(5)], len(tokenizer))
    assert sorted(ranking["token_ids"]) == list(range(len(tokenizer)))
    draft = tmp_path / "draft"
    import shutil

    shutil.copytree(cut_draft, draft)
    write_ranking(draft, ranking)
    report = measure_draft(DraftEvalSpec(str(teacher), str(draft), str(prompts), max_new_tokens=12, draft_vocab=64),
                           progress=False)
    assert report["errors"] == [] and _ways(report)["draft"]["identical"] == 3


@pytest.mark.parametrize("argv, expected", [
    (["--max-new-tokens", "8", "--data", "pydoc"], "--max-new-tokens would be ignored here; they go with --draft"),
    (["--draft", "D", "--prompts", "P", "--cache", "C"], "--draft measures generation only; --cache go in a run"),
])
def test_draft_flags_out_of_place_are_refused_in_one_line(teacher, argv, expected, capsys):
    assert run(["eval", str(teacher), *argv]) != 0
    assert expected in capsys.readouterr().err


@pytest.fixture(scope="module")
def draft_on_another_tokenizer(tmp_path_factory):
    from conftest import train_tiny_tokenizer

    return save_tiny_model(tmp_path_factory.mktemp("draft-other-tokenizer"), train_tiny_tokenizer(280), layers=1,
                           hidden=32)


@pytest.mark.parametrize("temperature", ["0", "0.7"])
def test_a_draft_on_another_tokenizer_is_refused_in_one_line(teacher, draft_on_another_tokenizer, prompts,
                                                             temperature, capsys):
    assert run(["eval", str(teacher), "--draft", str(draft_on_another_tokenizer), "--prompts", str(prompts),
                 "--temperature", temperature]) != 0
    err = capsys.readouterr().err
    assert "tokenizer differs from the teacher's; expected a draft on the teacher's tokenizer" in err
    assert "Traceback" not in err
