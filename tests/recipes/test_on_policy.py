"""`destila recipe on-policy`: rounds of student samples, one teacher pass each, training from the cache.

Fast tests cover the pieces (the prompt split, the round windows, the mix of
caches) and the refusals of bad input. The slow ones run the recipe end to
end on tiny random models: in process; killed with SIGKILL during sampling,
during the teacher pass and during training, then resumed by the same
command (the final weights equal an undisturbed run's); and stage by stage
in fresh processes, to show the recipe's peak memory is its largest stage's
and not the sum of the teacher's and the student's.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ENV, pydoc_texts, run_and_kill, save_tiny_model

from destila.cache import TopKCache, build_cache, read_manifest
from destila.cli.main import main
from destila.generation.prompts import Prompt
from destila.losses import LossOptions
from destila.recipes import OnPolicyRecipe, OnPolicySettings
from destila.recipes.on_policy_data import MixedCache, answer_tokens, round_window, split_prompts, write_pairs

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"


def run_cli(argv):
    with pytest.raises(SystemExit) as done:
        main(argv)
    return done.value.code


def prompt_lines(count: int, chars: int = 50) -> list[str]:
    lines = [line.strip()[:chars] for text in pydoc_texts(40) for line in text.splitlines() if len(line.strip()) > 20]
    return lines[:count]


def write_prompts(path: Path, count: int, chars: int = 50) -> Path:
    path.write_text("\n".join(prompt_lines(count, chars)) + "\n")
    return path


# -- pieces ------------------------------------------------------------------------------------


def test_split_prompts_holds_out_every_nth():
    prompts = [Prompt(text=str(i)) for i in range(7)]
    train, held = split_prompts(prompts, 3)
    assert [p.text for p in held] == ["2", "5"] and [p.text for p in train] == ["0", "1", "3", "4", "6"]
    with pytest.raises(ValueError, match="give at least 3 prompts"):
        split_prompts(prompts[:2], 3)


def test_round_window_walks_through_the_prompts_and_wraps():
    assert round_window(5, None, 3) == [0, 1, 2, 3, 4]
    assert round_window(5, 2, 1) == [0, 1] and round_window(5, 2, 2) == [2, 3] and round_window(5, 2, 3) == [4, 0]
    assert round_window(5, 9, 2) == [0, 1, 2, 3, 4]


def test_samples_become_prompt_answer_pairs(tiny_tokenizer, tmp_path):
    samples = tmp_path / "samples.jsonl"
    records = [
        {"messages": [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": " an answer"}],
         "text": "<s>user Q?</s>assistant an answer", "prompt_index": 0, "sample": 0, "finished": True},
        {"messages": [{"role": "user", "content": "R"}, {"role": "assistant", "content": ""}],
         "text": "R", "prompt_index": 1, "sample": 0, "finished": False},
    ]
    samples.write_text("".join(json.dumps(r) + "\n" for r in records))
    counts = write_pairs(samples, tmp_path / "pairs.jsonl")
    pairs = [json.loads(line) for line in (tmp_path / "pairs.jsonl").read_text().splitlines()]
    assert pairs == [{"prompt": "<s>user Q?</s>assistant", "completion": " an answer"},
                     {"prompt": "R", "completion": ""}]
    assert counts == {"samples": 2, "finished": 1}
    assert answer_tokens(samples, tiny_tokenizer) == len(tiny_tokenizer(" an answer")["input_ids"])
    assert answer_tokens(samples, tiny_tokenizer, skip={(0, 0)}) == 0
    samples.write_text(json.dumps(records[1]) + "\n")
    with pytest.raises(ValueError, match="every answer in .* is empty"):
        write_pairs(samples, tmp_path / "pairs.jsonl")


@pytest.mark.parametrize("bad, message", [
    (dict(rounds=0), "rounds: expected an integer ≥ 1, found 0"),
    (dict(lmbda=0.0), "lmbda: expected a number in \\(0, 1\\]"),
    (dict(lmbda=0.5), "no --mix-offline cache is given"),
    (dict(mix_offline="c", lmbda=1.0), "would be unused"),
    (dict(temperature=0.0), "temperature: expected a finite number > 0"),
    (dict(temperature=float("nan")), "temperature: expected a finite number > 0"),
    (dict(learning_rate=float("inf")), "learning_rate: expected a positive finite number, found inf"),
    (dict(top_p=0.0), "top_p"),
])
def test_settings_refuse_what_cannot_run(bad, message):
    with pytest.raises(ValueError, match=message):
        OnPolicySettings(**bad)


@pytest.fixture(scope="module")
def other_cache(tiny_llama_dir, tmp_path_factory):
    """A second cache of the same teacher and K as ``tiny_cache``, over other documents."""
    path = tmp_path_factory.mktemp("offline") / "cache"
    build_cache(str(tiny_llama_dir), pydoc_texts(12)[8:], path, seq_len=32, top_k=16, progress=False)
    return path


def test_mixed_cache_holds_the_fraction_lmbda_and_is_the_same_on_every_call(tiny_cache, other_cache):
    on_policy, offline = TopKCache(tiny_cache), TopKCache(other_cache)
    mixed = MixedCache(on_policy, offline, lmbda=0.75, round_number=1, seed=3)
    assert len(mixed.offline_indices) == round(len(on_policy) / 3)
    assert len(mixed) == len(on_policy) + len(mixed.offline_indices)
    assert len(on_policy) / len(mixed) == pytest.approx(0.75, abs=0.01)
    # The first items are the round's own; the rest are the offline cache's chosen sequences.
    assert torch.equal(mixed[0]["input_ids"], on_policy[0]["input_ids"])
    last = mixed[len(mixed) - 1]
    assert torch.equal(last["topk_ids"], offline[mixed.offline_indices[-1]]["topk_ids"])
    assert set(last) == set(on_policy[0])
    again = MixedCache(on_policy, offline, lmbda=0.75, round_number=1, seed=3)
    assert again.offline_indices == mixed.offline_indices
    # The next round takes the next offline sequences of the same permutation.
    second = MixedCache(on_policy, offline, lmbda=0.75, round_number=2, seed=3)
    assert not set(second.offline_indices) & set(mixed.offline_indices) or len(offline) < 2 * len(mixed.offline_indices)
    # Training sees the round cache's attributes.
    assert mixed.manifest is on_policy.manifest and mixed.seq_len == on_policy.seq_len


def test_mixed_cache_refuses_targets_of_another_k(tiny_cache, tiny_llama_dir, tmp_path):
    other_k = tmp_path / "k8"
    build_cache(str(tiny_llama_dir), pydoc_texts(2), other_k, seq_len=32, top_k=8, progress=False)
    with pytest.raises(ValueError, match="mix_offline: .* has top-K 8 but the on-policy caches have 16"):
        MixedCache(TopKCache(tiny_cache), TopKCache(other_k), lmbda=0.5, round_number=1, seed=0)


# -- bad input: one line, exit code 2, before any model is loaded -----------------------------------


def test_bad_input_is_one_line(tiny_llama_dir, tiny_chat_llama_dir, fresh_student, tmp_path, capsys):
    prompts = write_prompts(tmp_path / "prompts.txt", 10)
    base = ["recipe", "on-policy", str(tiny_llama_dir), str(fresh_student), "-o", str(tmp_path / "out")]

    assert run_cli([*base]) == 2  # no --prompts
    assert "--prompts" in capsys.readouterr().err

    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    assert run_cli([*base, "--prompts", str(empty)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"destila recipe: error: prompts: {empty} holds no prompt; expected at least one"

    assert run_cli([*base, "--prompts", str(prompts), "--rounds", "0"]) == 2
    assert capsys.readouterr().err.strip() == "destila recipe: error: rounds: expected an integer ≥ 1, found 0"

    other = ["recipe", "on-policy", str(tiny_chat_llama_dir), str(fresh_student), "--prompts", str(prompts),
             "-o", str(tmp_path / "out")]
    assert run_cli(other) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "student: its tokenizer" in err[0] and "differs from the teacher's" in err[0]

    assert run_cli([*base, "--prompts", str(tmp_path / "missing.txt")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert not (tmp_path / "out" / "stages.json").exists()  # refused before any stage ran

    # Prompts longer than the sequence: no answer token to score; said at the first teacher pass, not by the reader.
    short = [*base[:4], "-o", str(tmp_path / "short"), "--prompts", str(prompts), "--seq-len", "8",
             "--max-new-tokens", "4", "--device", "cpu"]
    assert run_cli(short) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no answer token fits in seq_len 8" in err[0] and "raise --seq-len" in err[0], err


# -- end to end -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_rounds_end_to_end_with_an_offline_mix(tiny_llama_dir, fresh_student, other_cache, tmp_path, capsys):
    # Prompts of about 16 tokens: with 12 new tokens every answer fits in the offline cache's 32.
    prompts = write_prompts(tmp_path / "prompts.txt", 10, chars=24)
    out = tmp_path / "out"
    settings = OnPolicySettings(rounds=2, max_new_tokens=12, steps_per_round=3, seq_len=32, top_k=16, batch_size=2,
                                holdout_every=5, device="cpu", mix_offline=str(other_cache), lmbda=0.5)
    report = OnPolicyRecipe(str(tiny_llama_dir), str(fresh_student), str(prompts), out, settings,
                            LossOptions(divergence="reverse_kl")).run()
    state = json.loads((out / "stages.json").read_text())
    per_round = ["sample", "teacher", "train", "heldout-sample", "heldout-teacher", "eval"]
    assert list(state) == [f"round0-{s}" for s in per_round[3:]] + [f"round{r}-{s}" for r in (1, 2) for s in per_round]
    assert [r["round"] for r in report["rounds"]] == [0, 1, 2]
    assert all(r["kl_to_teacher"] > 0 for r in report["rounds"])
    assert report["rounds"][1]["samples"] == 8 and report["rounds"][1]["steps"] == 3
    # lmbda 0.5: as many offline sequences as on-policy ones in each round's training set.
    train = state["round1-train"]
    assert train["offline_sequences"] == train["on_policy_sequences"] > 0
    # Round 2 sampled with round 1's student, which trained from round 1's cache of the teacher.
    sampled_by = json.loads((out / "round2/samples.jsonl.generate.json").read_text())["teacher"]
    assert sampled_by == str(out / "round1/student")
    manifest = read_manifest(out / "round1/cache")
    assert manifest.teacher == str(tiny_llama_dir)
    # Targets only on the student's answers: a prompt's positions are never trained.
    pairs = [json.loads(line) for line in (out / "round1/cache-pairs.jsonl").read_text().splitlines()]
    assert len(pairs) == 8 and all(p["prompt"] in prompt_lines(10, chars=24) for p in pairs)
    cache = TopKCache(out / "round1/cache")
    trained = sum(int((cache[i]["labels"] != -100).sum()) for i in range(len(cache)))
    assert 0 < trained < sum(int(cache[i]["input_ids"].numel()) for i in range(len(cache))) - 8
    assert (out / "report.md").read_text().startswith("# destila on-policy distillation report")
    # Run again: every stage is skipped, the report is the same.
    capsys.readouterr()
    again = OnPolicyRecipe(str(tiny_llama_dir), str(fresh_student), str(prompts), out, settings,
                           LossOptions(divergence="reverse_kl")).run()
    assert again["rounds"] == report["rounds"]
    assert capsys.readouterr().out.count("done before") == len(state)
    # Resuming with other settings is refused, naming the difference.
    with pytest.raises(ValueError, match="steps_per_round: 3 before, 4 now"):
        OnPolicyRecipe(str(tiny_llama_dir), str(fresh_student), str(prompts), out,
                       OnPolicySettings(**{**settings.__dict__, "steps_per_round": 4}),
                       LossOptions(divergence="reverse_kl")).run()


# -- killed at three moments, resumed: the weights of an undisturbed run -------------------------------


@pytest.fixture(scope="module")
def slow_pair(tmp_path_factory, tiny_tokenizer):
    """A teacher and a student wide enough that each stage lasts long enough to be killed mid-way."""
    from destila.student import StudentInitSpec, init_student

    root = tmp_path_factory.mktemp("slow-pair")
    save_tiny_model(root / "teacher", tiny_tokenizer, layers=6, hidden=128)
    init_student(StudentInitSpec(str(root / "teacher"), root / "student", config={"num_hidden_layers": 2}, seed=1))
    return root / "teacher", root / "student"


KILL_ARGS = ["--rounds", "2", "--max-new-tokens", "24", "--steps-per-round", "8", "--save-steps", "2",
             "--seq-len", "32", "--top-k", "8", "--batch-size", "2", "--generate-batch-size", "2",
             "--cache-batch-size", "1", "--shard-size", "2", "--holdout-every", "6", "--device", "cpu",
             "--divergence", "jsd"]


def recipe_command(teacher, student, prompts, out):
    return [sys.executable, "-m", "destila", "recipe", "on-policy", str(teacher), str(student), "--prompts",
            str(prompts), "-o", str(out), *KILL_ARGS]


def env_with_src() -> dict:
    return {**ENV, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), ENV.get("PYTHONPATH")]))}


def recorded(out: Path) -> dict:
    try:
        return json.loads((out / "stages.json").read_text())
    except (FileNotFoundError, ValueError):
        return {}


def lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def shards(folder: Path) -> int:
    try:
        return len(read_manifest(folder).shards)
    except (FileNotFoundError, ValueError):
        return 0


@pytest.mark.slow
def test_killed_during_sampling_teacher_pass_and_training_then_resumed_equals_an_undisturbed_run(
        slow_pair, tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    monkeypatch.setattr("conftest.ENV", env_with_src())
    teacher, student = slow_pair
    prompts = write_prompts(tmp_path / "prompts.txt", 24)
    reference = tmp_path / "reference"
    done = subprocess.run(recipe_command(teacher, student, prompts, reference), env=env_with_src(),
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]

    out = tmp_path / "killed"
    moments = [  # (the stage that must be cut, when to kill)
        ("round1-sample", lambda: lines(out / "round1/samples.jsonl") >= 4),
        ("round1-teacher", lambda: shards(out / "round1/cache") >= 2),
        ("round2-train", lambda: (out / "round2/student/checkpoint-4/trainer_state.json").exists()),
    ]
    for stage, when in moments:
        assert run_and_kill(recipe_command(teacher, student, prompts, out), when, timeout=300), f"ended before {stage}"
        assert stage not in recorded(out), f"{stage} finished before the kill"
    finished = subprocess.run(recipe_command(teacher, student, prompts, out), env=env_with_src(),
                              capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr[-3000:]

    assert (out / "round1/samples.jsonl").read_bytes() == (reference / "round1/samples.jsonl").read_bytes()
    for folder in ("round1/cache", "round2/cache"):
        got, want = read_manifest(out / folder), read_manifest(reference / folder)
        assert [s.sha256 for s in got.shards] == [s.sha256 for s in want.shards], folder
    final = AutoModelForCausalLM.from_pretrained(out / "round2/student").state_dict()
    expected = AutoModelForCausalLM.from_pretrained(reference / "round2/student").state_dict()
    for key, value in expected.items():
        torch.testing.assert_close(final[key], value, rtol=1e-5, atol=1e-6)
    got = json.loads((out / "report.json").read_text())["rounds"]
    want = json.loads((reference / "report.json").read_text())["rounds"]
    assert [r["kl_to_teacher"] for r in got] == pytest.approx([r["kl_to_teacher"] for r in want], rel=1e-5)


# -- peak memory: the largest stage's, not the teacher's plus the student's --------------------------


@pytest.fixture(scope="module")
def wide_pair(tmp_path_factory, tiny_tokenizer):
    """A teacher whose weights (75 MB) and a student whose training state (weights, gradients, Adam: 75 MB)
    dwarf the libraries' own allocations, so that loading both at once would show."""
    from destila.student import StudentInitSpec, init_student

    root = tmp_path_factory.mktemp("wide-pair")
    save_tiny_model(root / "teacher", tiny_tokenizer, layers=8, hidden=512)
    init_student(StudentInitSpec(str(root / "teacher"), root / "student", config={"num_hidden_layers": 2}, seed=1))
    return root / "teacher", root / "student"


@pytest.mark.slow
def test_peak_memory_is_the_largest_stage_not_the_sum(wide_pair, tmp_path, monkeypatch):
    from destila.eval.measure import run_isolated

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), str(SRC), os.environ.get("PYTHONPATH", "")]))
    teacher, student = (str(p) for p in wide_pair)
    prompts = str(write_prompts(tmp_path / "prompts.txt", 10, chars=24))  # about 16 tokens: the answers fit in 32
    settings = dict(rounds=1, max_new_tokens=16, steps_per_round=3, seq_len=32, top_k=16, batch_size=2,
                    device="cpu")
    common = dict(teacher=teacher, student=student, prompts=prompts, settings=settings)
    whole = run_isolated("on_policy_workers:whole", {**common, "out": str(tmp_path / "whole")}, threads=1)
    assert whole["status"] == "ok", whole["error"]
    peaks = {}
    for kind in ("sample", "teacher", "train", "eval"):
        run = run_isolated("on_policy_workers:stage", {**common, "kind": kind, "reference": str(tmp_path / "whole"),
                                                       "out": str(tmp_path / kind)}, threads=1)
        assert run["status"] == "ok", (kind, run["error"])
        peaks[kind] = run["peak_bytes"]
    largest = max(peaks.values())
    mib = {k: round(v / 2**20, 1) for k, v in {**peaks, "whole": whole["peak_bytes"]}.items()}
    print("peak MiB", mib)
    assert whole["peak_bytes"] <= 1.1 * largest, mib
    # The test can fail: the teacher pass and the training, resident together, would exceed the bound.
    assert peaks["teacher"] + peaks["train"] > 1.3 * largest, mib
