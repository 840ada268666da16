"""The distributed commands of docs/scale.md, run verbatim with torchrun on CPU (gloo).

Each command is read from the docs themselves, so the docs show exactly what
is tested; only the program (``torchrun``/``destila``) is resolved to this
interpreter's, and the run happens in a folder holding ``student/`` and
``cache/`` (or, for a cache build, ``teacher/`` and ``data/``).
"""

import json
import math
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import pydoc_texts

DOCS = Path(__file__).parents[2] / "docs" / "scale.md"


def documented(prefix: str) -> list[str]:
    """The one command line of docs/scale.md that starts with ``prefix``, split into words."""
    lines = [line.strip() for line in DOCS.read_text().splitlines() if line.strip().startswith(prefix)]
    assert len(lines) == 1, f"expected one line starting with {prefix!r} in {DOCS}, found {lines}"
    return shlex.split(lines[0].split("  #")[0])


def run_documented(words: list[str], workdir: Path, *extra: str, timeout: int = 300) -> subprocess.CompletedProcess:
    from test_train_processes import environment

    binary = Path(sys.executable).parent
    program = {"torchrun": str(binary / "torchrun"), "destila": str(binary / "destila")}[words[0]]
    launched = subprocess.run([program, *words[1:], *extra], cwd=workdir, env=environment(), capture_output=True,
                              text=True, timeout=timeout)
    assert launched.returncode == 0, launched.stderr[-4000:]
    return launched


def records(path: Path) -> tuple[dict, list[dict]]:
    """``(engine record, training records)`` of a log.jsonl; fails if any step was logged twice."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    engines = [r for r in lines if "engine" in r]
    steps = [r for r in lines if "loss" in r]
    assert len(engines) == 1, engines
    assert len({r["step"] for r in steps}) == len(steps), "a step was logged more than once"
    return engines[0], steps


def final_step(path: Path) -> int:
    """The optimizer steps of a finished run (its closing ``train_runtime`` record)."""
    (last,) = [json.loads(line) for line in path.read_text().splitlines() if "train_runtime" in line]
    return last["step"]


@pytest.fixture
def workdir(tmp_path, tiny_cache, fresh_student):
    (tmp_path / "student").symlink_to(fresh_student, target_is_directory=True)
    (tmp_path / "cache").symlink_to(tiny_cache, target_is_directory=True)
    return tmp_path


@pytest.mark.slow
def test_documented_torchrun_training_is_data_parallel(workdir, tiny_cache):
    from destila.cache import TopKCache

    run_documented(documented("destila train student/ --cache cache/ -o single/"), workdir)
    launched = run_documented(documented("torchrun --standalone --nproc-per-node 2 -m destila train student/ --cache cache/ -o out/"), workdir)
    single, _ = records(workdir / "single" / "log.jsonl")
    double, _ = records(workdir / "out" / "log.jsonl")
    assert single["world_size"] == 1 and single["engine"] == "single"
    assert double == {**double, "world_size": 2, "engine": "ddp", "backend": "gloo"}
    assert "world_size 2" in launched.stdout  # reported once, by rank 0
    assert launched.stdout.splitlines().count("student saved to out") == 1  # by rank 0 only
    sequences = len(TopKCache(tiny_cache))
    batch = 4
    one_epoch_one, one_epoch_two = final_step(workdir / "single" / "log.jsonl"), final_step(workdir / "out" / "log.jsonl")
    assert one_epoch_one == math.ceil(sequences / batch)
    assert one_epoch_two == math.ceil(sequences / (2 * batch))  # half the steps: each rank takes half the data
    assert (workdir / "out" / "model.safetensors").is_file()


@pytest.mark.slow
def test_fsdp_full_shard_two_processes_follow_one_process(workdir):
    """Same global batch (2 × 2 vs 1 × 4): the same loss at every step, within 1e-5."""
    common = ("--max_steps", "5", "--logging_steps", "1", "--learning_rate", "3e-3", "--lr_scheduler_type", "constant",
              "--seed", "7", "--save_steps", "100")
    run_documented(documented("destila train student/ --cache cache/ -o single/"), workdir, *common)
    run_documented(documented("torchrun --standalone --nproc-per-node 2 -m destila train student/ --cache cache/ "
                              "-o sharded/"), workdir, *common)
    _, single = records(workdir / "single" / "log.jsonl")
    engine, sharded = records(workdir / "sharded" / "log.jsonl")
    assert engine["engine"] == "fsdp2" and engine["world_size"] == 2 and engine["global_batch"] == 4
    assert [r["step"] for r in sharded] == [r["step"] for r in single] == [1, 2, 3, 4, 5]
    for one, two in zip(single, sharded):
        assert two["loss"] == pytest.approx(one["loss"], rel=1e-5), one["step"]
    from transformers import AutoModelForCausalLM

    reloaded = AutoModelForCausalLM.from_pretrained(workdir / "sharded")  # the gathered full model
    assert reloaded.get_output_embeddings().weight.shape[0] == reloaded.config.vocab_size


def test_fsdp_without_a_launcher_is_refused(tmp_path):
    from destila.training import DistillationArguments

    with pytest.raises(ValueError, match="fsdp: .* needs a distributed launch"):
        DistillationArguments(output_dir=str(tmp_path), fsdp="full_shard")


@pytest.mark.slow
def test_documented_tensor_parallel_cache_build_equals_one_process(tmp_path, tiny_llama_dir, monkeypatch):
    """Two processes sharing one teacher (tp_plan="auto", gloo) write the cache one process writes."""
    import torch

    from destila.cache import TopKCache, build_cache, read_manifest, verify_cache

    (tmp_path / "teacher").symlink_to(tiny_llama_dir, target_is_directory=True)
    (tmp_path / "data").mkdir()
    for number, text in enumerate(pydoc_texts(6)):
        (tmp_path / "data" / f"{number}.txt").write_text(text)
    sizes = dict(seq_len=32, max_tokens=32 * 20, top_k=12, shard_size=8, batch_size=4, logprob_dtype="float32")
    monkeypatch.chdir(tmp_path)
    build_cache("teacher/", "data/", "plain/", progress=False, **sizes)
    flags = [f"--{name.replace('_', '-')}={value}" for name, value in sizes.items()]
    launched = run_documented(documented("torchrun --standalone --nproc-per-node 2 -m destila cache build teacher/ "
                                         "data/ -o tp-cache/"), tmp_path, *flags, "--quiet")
    assert launched.stdout.count("with the teacher split over 2 processes") == 1  # rank 0 alone reports
    plain, split = read_manifest(tmp_path / "plain"), read_manifest(tmp_path / "tp-cache")
    assert split.complete and split.content() == plain.content()
    # rank 0 wrote every shard, of consecutive sequences, as one process does
    assert [(s.name, s.rows) for s in split.shards] == [(s.name, s.rows) for s in plain.shards]
    assert verify_cache(tmp_path / "tp-cache").ok and not list((tmp_path / "tp-cache").glob("progress-rank*"))
    one, two = TopKCache(tmp_path / "plain"), TopKCache(tmp_path / "tp-cache")
    for i in range(len(one)):
        x, y = one[i], two[i]
        assert torch.equal(x["input_ids"], y["input_ids"]) and torch.equal(x["topk_ids"], y["topk_ids"]), i
        torch.testing.assert_close(y["topk_logprobs"], x["topk_logprobs"], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(y["tail_logmass"], x["tail_logmass"], rtol=1e-5, atol=1e-5)
