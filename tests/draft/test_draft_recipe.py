"""`destila recipe draft`: size by measured cost, the teacher's answers, one teacher pass, KD, the measurement.

Run end to end on a tiny random Llama as a user would run it on the real one; the output folder must load as a
plain model and serve as transformers' assistant model.
"""

import json

import pytest
import torch
from conftest import save_tiny_model
from draft_cli import prompt_file, run

from destila.draft.head import VOCAB_FILE
from destila.draft.recipe import HELD_OUT_FILE
from destila.draft.size import choose_layers
from destila.generation.prompts import load_prompts


@pytest.fixture(scope="module")
def teacher(tmp_path_factory, tiny_tokenizer):
    return save_tiny_model(tmp_path_factory.mktemp("recipe-teacher"), tiny_tokenizer, layers=4, hidden=64)


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    return prompt_file(tmp_path_factory.mktemp("recipe-prompts"), topic=5, count=10, width=40)


SMALL = ["--tokens", "96", "--answer-tokens", "8", "--eval-prompts", "2", "--eval-new-tokens", "6", "--seq-len", "32",
         "--top-k", "8", "--draft-vocab", "64", "--generate-batch-size", "4", "--batch-size", "2"]


def test_the_recipe_ends_with_a_loadable_draft_and_its_measurement(teacher, prompts, tmp_path, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "draft"
    assert run(["recipe", "draft", str(teacher), "-o", str(out), "--prompts", str(prompts), *SMALL]) == 0
    stages = json.loads((out / "stages.json").read_text())
    assert list(stages) == ["size", "answers", "cache", "init", "train", "ranking", "measure"]
    assert 1 <= stages["size"]["layers"] < 4 and len(stages["size"]["drafts"]) == 3  # 1, 2, 3 of 4 layers
    assert stages["answers"]["answers"] == 8  # 10 prompts, every 5th held out
    assert stages["train"]["trained_tokens"] >= 96
    ways = {row["way"]: row for row in stages["measure"]["ways"]}
    assert ways["draft"]["identical"] == 2 and stages["measure"]["errors"] == []
    assert stages["measure"]["settings"]["draft_vocab"] == 64
    assert len(json.loads((out / VOCAB_FILE).read_text())["token_ids"]) == 320
    # DRAFT is a plain model folder: transformers' assisted generation takes it as it is, proposing as measured.
    draft = AutoModelForCausalLM.from_pretrained(out)
    assert draft.generation_config.num_assistant_tokens == stages["measure"]["settings"]["draft_tokens"] == 1
    assert draft.generation_config.num_assistant_tokens_schedule == "constant"
    model = AutoModelForCausalLM.from_pretrained(teacher)
    tokenizer = AutoTokenizer.from_pretrained(out)
    ids = tokenizer("The for statement", return_tensors="pt")["input_ids"]
    alone = model.generate(ids, max_new_tokens=6, do_sample=False)
    assisted = model.generate(ids, max_new_tokens=6, do_sample=False, assistant_model=draft)
    assert torch.equal(alone, assisted)
    assert "speculative decoding" in capsys.readouterr().out
    # Every held-out prompt (every 5th, never answered for training) is kept, and measures the draft again.
    lines = prompts.read_text().splitlines()
    held_out = out / "work" / HELD_OUT_FILE
    assert [p.text for p in load_prompts(held_out)] == [lines[4], lines[9]]
    report = tmp_path / "again.json"
    assert run(["eval", str(teacher), "--draft", str(out), "--prompts", str(held_out), "--max-new-tokens", "6",
                "--draft-vocab", "64", "--json", str(report)]) == 0
    assert json.loads(report.read_text())["settings"]["prompts"] == 2
    # Rerun: every stage done before, nothing trained again.
    before = (out / "model.safetensors").read_bytes()
    assert run(["recipe", "draft", str(teacher), "-o", str(out), "--prompts", str(prompts), *SMALL]) == 0
    assert "done before" in capsys.readouterr().out and (out / "model.safetensors").read_bytes() == before


def test_the_deepest_draft_within_the_cost_ratio_is_chosen():
    costs = {"teacher_ms": 50, "drafts": [{"layers": 1, "ratio": 0.08}, {"layers": 2, "ratio": 0.12},
                                          {"layers": 4, "ratio": 0.22}]}
    assert choose_layers(costs, 0.15) == 2
    assert choose_layers(costs, 0.05) == 1  # none affordable: the cheapest
    assert choose_layers(costs, 1.0) == 4


def test_costs_are_read_through_a_line_so_one_disturbed_candidate_does_not_decide(monkeypatch):
    from destila.draft import size

    # Candidate 4 measured twice as slow as its neighbours (another program's load): the fit still ranks by depth.
    slow = {1: 6.0, 2: 7.0, 3: 8.0, 4: 18.0, 6: 11.0, 8: 13.0}
    fixed, per_layer = size._line(list(slow.items()))
    fitted = {n: fixed + per_layer * n for n in slow}
    assert all(fitted[a] < fitted[b] for a, b in zip(sorted(slow), sorted(slow)[1:]))


def test_a_draft_as_deep_as_the_teacher_is_refused_in_one_line(teacher, prompts, tmp_path, capsys):
    assert run(["recipe", "draft", str(teacher), "-o", str(tmp_path / "d"), "--prompts", str(prompts),
                 "--layers", "4", *SMALL]) != 0
    assert "layers: the draft must have fewer layers than the teacher's 4, found 4" in capsys.readouterr().err


def test_fewer_training_prompts_are_taken_evenly_from_the_whole_list(tmp_path):
    from destila.draft.recipe import DraftRecipe, DraftSettings

    path = tmp_path / "prompts.txt"
    path.write_text("".join(f"question number {i}\n" for i in range(100)))
    settings = DraftSettings(prompts=str(path), holdout_every=5, train_prompts=60)
    train, held = DraftRecipe("unused-teacher", tmp_path / "draft", settings).prompts()
    numbers = [int(p.text.split()[-1]) for p in train]
    assert len(numbers) == 60 == len(set(numbers)) and not {n % 5 for n in numbers} & {4}  # none held out
    # The last training prompts are taken as well as the first: 80 left, the 60 kept reach the end of the list.
    assert numbers[0] == 0 and numbers[-1] >= 95
    assert [p.text for p in held] == [f"question number {i}" for i in range(4, 100, 5)]


def test_sampled_answers_join_the_greedy_ones_in_the_cache_the_draft_trains_on(teacher, prompts, tmp_path):
    from destila.cache import inspect_cache
    from destila.io.json_lines import read_json_lines

    out = tmp_path / "draft"
    assert run(["recipe", "draft", str(teacher), "-o", str(out), "--prompts", str(prompts), "--layers", "1",
                "--sampled-answers", "2", "--sample-temperature", "0.7", *SMALL]) == 0
    stages = json.loads((out / "stages.json").read_text())
    assert stages["answers"]["answers"] == 8 and stages["answers"]["sampled"] == 16
    work = out / "work"
    greedy, sampled = list(read_json_lines(work / "answers.jsonl")), list(read_json_lines(work / "sampled.jsonl"))
    assert len(greedy) == 8 and len(sampled) == 16
    assert json.loads((work / "sampled.jsonl.generate.json").read_text())["temperature"] == 0.7
    # The cache's teacher pass read every answer: its pairs are the greedy ones, then the sampled ones.
    pairs = [row["completion"] for row in read_json_lines(work / "pairs.jsonl")]
    assert pairs == [r["messages"][-1]["content"] for r in greedy + sampled]
    manifest = json.loads((work / "cache" / "manifest.json").read_text())
    assert manifest["data_source"] == str(work / "pairs.jsonl")
    assert inspect_cache(work / "cache")["trained_positions"] > 0


@pytest.mark.parametrize("argv, expected", [
    (["--sampled-answers", "-1"], "sampled_answers: expected an integer ≥ 0"),
    (["--sample-temperature", "0"], "sample_temperature: expected a finite number > 0, found 0.0"),
])
def test_bad_sampled_answer_settings_are_refused_in_one_line(teacher, prompts, tmp_path, argv, expected, capsys):
    assert run(["recipe", "draft", str(teacher), "-o", str(tmp_path / "d"), "--prompts", str(prompts), *argv,
                *SMALL]) != 0
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err, err


@pytest.mark.parametrize("other, expected", [
    (["--sampled-answers", "2"], "sampled_answers: 0 before, 2 now"),
    (["--tokens", "192"], "tokens: 96 before, 192 now"),
    (["--divergence", "tvd"], "divergence: 'forward_kl' before, 'tvd' now"),
])
def test_a_rerun_with_other_settings_is_refused_naming_them_and_nothing_is_rewritten(teacher, prompts, tmp_path,
                                                                                   other, expected, capsys):
    out = tmp_path / "draft"
    argv = ["recipe", "draft", str(teacher), "-o", str(out), "--prompts", str(prompts), "--layers", "1"]
    assert run([*argv, *SMALL]) == 0
    before = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    capsys.readouterr()
    assert run([*argv, *SMALL, *other]) != 0  # the later flag wins
    err = capsys.readouterr().err
    assert f"holds a draft run with other settings ({expected}); run the same command to resume it" in err, err
    assert "Traceback" not in err
    assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == before
    # Batch sizes only size the teacher's calls: a rerun with others resumes (here: every stage done before).
    assert run([*argv, *SMALL, "--generate-batch-size", "2", "--cache-batch-size", "3"]) == 0
    assert capsys.readouterr().out.count("done before") == 7


def test_a_folder_whose_settings_were_not_recorded_is_refused(teacher, prompts, tmp_path, capsys):
    out = tmp_path / "draft"
    argv = ["recipe", "draft", str(teacher), "-o", str(out), "--prompts", str(prompts), "--layers", "1", *SMALL]
    out.mkdir()
    (out / "stages.json").write_text(json.dumps({"size": {"layers": 1, "seconds": 0.1}}))
    assert run(argv) != 0
    err = capsys.readouterr().err
    assert "holds a draft run whose settings were not recorded (an earlier destila wrote it); choose another -o" \
        in err and "Traceback" not in err, err
    assert sorted(p.name for p in out.iterdir()) == ["stages.json"]
