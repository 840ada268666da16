"""Numbers out of their range and options that mean nothing together: one line naming the option, nothing written.

Each case runs the real command line (in process) with one bad value; the
check sits where the value enters (the spec or the arguments dataclass), so
every command refuses it before a model is loaded, and the output named by
``-o`` is not created.
"""

import pytest
from fault_helpers import (  # noqa: F401 (fixtures)
    build_command, destila_in_process, error_line, small_cache, student, train_command,
)

TRAIN_CASES = [
    (["--gradient_accumulation_steps", "0"], "gradient_accumulation_steps: expected an integer ≥ 1, found 0"),
    (["--max_steps", "0"], "max_steps: expected an integer ≥ 1, found 0; or leave it out"),
    (["--max_steps", "-5"], "max_steps: expected an integer ≥ 1, found -5"),
    (["--save_steps", "0"], "save_steps: expected a finite number > 0, found 0.0"),
    (["--max_grad_norm", "-1"], "max_grad_norm: expected a finite number ≥ 0, found -1.0"),
    (["--seed", "-1"], "seed: expected an integer in [0, 2^32), found -1"),
]


@pytest.mark.parametrize("extra, needle", TRAIN_CASES, ids=[" ".join(c[0]) for c in TRAIN_CASES])
def test_train_refuses_an_option_out_of_range(student, small_cache, tmp_path, extra, needle):
    out = tmp_path / "out"
    result = destila_in_process(*train_command(student, small_cache, out, *extra))
    error_line(result, "train", 2, needle)
    assert not out.exists()


BUILD_CASES = [
    (["--targets", "sampled", "--top-k", "5"], "top_k: --top-k applies to --targets topk, not sampled"),
    (["--samples", "5"], "samples: --samples applies to --targets sampled, not topk"),
    (["--encoding", "compact", "--logprob-dtype", "bfloat16"],
     "logprob_dtype: --logprob-dtype bfloat16 applies to the plain encoding; --encoding compact"),
    (["--targets", "sampled", "--logprob-dtype", "float32"], "--targets sampled stores counts, not log-probs"),
]


@pytest.mark.parametrize("extra, needle", BUILD_CASES, ids=[" ".join(c[0]) for c in BUILD_CASES])
def test_cache_build_refuses_an_option_its_targets_would_ignore(tiny_llama_dir, tmp_path, extra, needle):
    out = tmp_path / "cache"
    command = [a for a in build_command(tiny_llama_dir, "pydoc", out) if a not in ("--top-k", "8")]
    error_line(destila_in_process(*command, *extra), "cache", 2, needle)
    assert not out.exists()


@pytest.mark.parametrize("count", ["0", "-3"])
def test_cache_inspect_refuses_a_sequence_count_below_one(small_cache, count):
    result = destila_in_process("cache", "inspect", small_cache, "--max-sequences", count)
    error_line(result, "cache", 2, f"max_sequences: expected an integer ≥ 1, found {count}")
    assert result.stdout == ""


@pytest.mark.parametrize("extra, needle", [
    (["--temperature", "nan"], "temperature: expected a finite number ≥ 0, found nan"),
    (["--temperature", "0", "--top-p", "0.5"], "top_p: greedy decoding (temperature 0) takes the most likely token"),
])
def test_generate_refuses_sampling_settings_that_mean_nothing(tiny_llama_dir, tmp_path, extra, needle):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a first prompt\na second one\n")
    out = tmp_path / "answers.jsonl"
    error_line(destila_in_process("generate", tiny_llama_dir, prompts, "-o", out, *extra), "generate", 2, needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prompts.txt"]  # no output, sidecar or lock


def test_student_init_refuses_zero_calibration_tokens(tiny_llama_dir, tmp_path):
    result = destila_in_process("student", "init", tiny_llama_dir, "-o", tmp_path / "s", "--layers", "1",
                                "--data", "pydoc", "--calibration-tokens", "0")
    error_line(result, "student", 2, "--calibration-tokens: expected at least 2, found 0")
    assert not (tmp_path / "s").exists()


def test_bench_e2e_refuses_a_student_that_cannot_load_before_the_teacher_pass(tiny_llama_dir, tmp_path):
    work = tmp_path / "work"
    result = destila_in_process("bench", "e2e", "--teacher", tiny_llama_dir, "--student", "GARBAGE",
                                "--workdir", work, "--steps", "2", "--warmup-steps", "1")
    error_line(result, "bench", 2, "could not load model 'GARBAGE'")
    assert not work.exists()  # no cache built, no row written


@pytest.mark.parametrize("extra, needle", [
    (["--eval-fraction", "0"], "eval_fraction: expected a number strictly between 0 and 1, found 0.0"),
    (["--max-tokens", "0"], "max_tokens: expected a positive number of tokens, found 0"),
    (["--max-tokens", "-1"], "max_tokens: expected a positive number of tokens, found -1"),
    (["--batch-size", "0"], "batch_size: expected an integer ≥ 1, found 0"),
])
def test_eval_refuses_an_option_out_of_range(student, small_cache, tmp_path, extra, needle):
    result = destila_in_process("eval", student, "--cache", small_cache, "--json", tmp_path / "r.json", *extra)
    error_line(result, "eval", 2, needle)
    assert not (tmp_path / "r.json").exists()
