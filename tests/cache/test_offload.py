"""A teacher spread over CPU memory and disk (accelerate's device map) writes the very same cache."""

import json
import subprocess
import sys

import pytest
from transformers import AutoModelForCausalLM

from conftest import pydoc_texts
from destila.cache import build_cache
from destila.cache.spec import BuildSpec
from destila.models import load_causal_lm
from destila.models.placement import parse_max_memory


def parameter_bytes(folder) -> int:
    model = AutoModelForCausalLM.from_pretrained(folder)
    return sum(p.numel() * p.element_size() for p in model.parameters())


def cache_files(path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()
            and not p.name.endswith(".lock")}


@pytest.mark.slow
@pytest.mark.parametrize("share", [0.7, 0.2], ids=["some-layers-on-disk", "all-on-disk"])
def test_offloaded_teacher_writes_a_byte_identical_cache(tiny_llama_dir, tmp_path, share):
    docs, options = pydoc_texts(3), dict(seq_len=32, top_k=16, batch_size=4, shard_size=16, progress=False)
    plain = tmp_path / "plain"
    build_cache(str(tiny_llama_dir), docs, plain, device="cpu", **options)
    offloaded = tmp_path / "offloaded"
    budget = f"cpu={int(share * parameter_bytes(tiny_llama_dir))}"  # smaller than the model
    build_cache(str(tiny_llama_dir), docs, offloaded, device_map="auto", max_memory=budget,
                offload_folder=str(tmp_path / "offload"), **options)
    # The same loading the build did: some (or all) layers really live on disk.
    placed = load_causal_lm(str(tiny_llama_dir), device_map="auto", max_memory=budget,
                            offload_folder=str(tmp_path / "offload")).hf_device_map
    assert "disk" in placed.values(), placed
    assert (share < 0.5) == all(where == "disk" for where in placed.values()), placed
    expected, found = cache_files(plain), cache_files(offloaded)
    assert sorted(found) == sorted(expected)
    assert any(name.endswith(".safetensors") or "shard" in name for name in expected)
    for name in expected:
        assert found[name] == expected[name], name


def test_device_map_mistakes_are_refused(tiny_llama_dir, tmp_path):
    with pytest.raises(ValueError, match="max_memory: expected DEVICE=SIZE"):
        parse_max_memory("cpu:10GB")
    with pytest.raises(ValueError, match="only used with --device-map auto"):
        build_cache(BuildSpec(str(tiny_llama_dir), pydoc_texts(1), tmp_path / "c", max_memory="cpu=1GB",
                              progress=False))
    command = [sys.executable, "-m", "destila", "cache", "build", str(tiny_llama_dir), "pydoc", "-o",
               str(tmp_path / "c2"), "--device-map", "everywhere"]
    refused = subprocess.run(command, capture_output=True, text=True)
    assert refused.returncode == 2 and "invalid choice: 'everywhere'" in refused.stderr


def test_parse_max_memory_reads_accelerate_sizes():
    assert parse_max_memory("0=20GiB, 1=20GiB,cpu=64GiB") == {0: "20GiB", 1: "20GiB", "cpu": "64GiB"}
    assert parse_max_memory("cpu=1000") == {"cpu": 1000}
    assert parse_max_memory(None) is None
    assert json.dumps(parse_max_memory("cpu=5MB")) == '{"cpu": "5MB"}'


@pytest.mark.slow
def test_offloaded_online_teacher_gives_the_same_training(tiny_llama_dir, tmp_path):
    from destila.student import StudentInitSpec, init_student
    from destila.data import DataSpec
    from destila.training import DistillationArguments, TrainSpec, train_student

    student = tmp_path / "student"
    init_student(StudentInitSpec(str(tiny_llama_dir), student, config={"num_hidden_layers": 1}, seed=1))
    budget = f"cpu={int(0.2 * parameter_bytes(tiny_llama_dir))}"
    losses = {}
    for name, placement in (("plain", None), ("offloaded", dict(device_map="auto", max_memory=budget,
                                                                  offload_folder=str(tmp_path / "offload")))):
        out = tmp_path / name
        args = DistillationArguments(output_dir=str(out), max_steps=3, per_device_train_batch_size=2, logging_steps=1,
                                     save_strategy="no", online_loss="topk", top_k=8, seed=3)
        train_student(TrainSpec(str(student), out, args, teacher=str(tiny_llama_dir),
                                data=DataSpec(pydoc_texts(2), seq_len=32), teacher_placement=placement))
        losses[name] = [json.loads(line)["loss"] for line in (out / "log.jsonl").read_text().splitlines()
                        if '"loss"' in line]
    assert len(losses["plain"]) == 3 and losses["offloaded"] == losses["plain"]
