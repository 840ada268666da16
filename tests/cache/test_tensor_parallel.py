"""Tensor-parallel teacher passes that cannot run are refused with one line, before any weight is read.

The build itself (two torchrun processes sharing a tiny Llama, against a
one-process build) runs the documented command in
``tests/training/test_scale_processes.py``.
"""

import pytest
from transformers import GPT2Config, LlamaConfig

from destila.cache.spec import BuildSpec
from destila.cli.main import main
from destila.models.placement import check_tensor_parallel, check_tensor_plan, resolve_device


def refusal(argv, capsys) -> str:
    """The error line of a ``destila`` command that must exit 2."""
    with pytest.raises(SystemExit) as done:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert done.value.code == 2 and len(err.splitlines()) == 1, err
    return err


def test_outside_torchrun_and_with_a_device_map_are_refused(tiny_llama_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    build = ["cache", "build", str(tiny_llama_dir), "pydoc", "-o", str(tmp_path / "c"), "--tensor-parallel"]
    assert "found a single process; launch with torchrun --nproc-per-node N" in refusal(build, capsys)
    assert not (tmp_path / "c").exists()
    assert "--device-map spreads it over one process's devices" in refusal([*build, "--device-map", "auto"], capsys)
    assert "drop --tensor-parallel or the further teachers" in refusal([*build, "--hidden-layers", "1"], capsys)
    with pytest.raises(ValueError, match="pass one of them, not both"):
        BuildSpec(str(tiny_llama_dir), "pydoc", tmp_path / "c", tensor_parallel=True, max_memory="cpu=1GB")


def test_a_device_other_than_the_accelerator_is_refused():
    here = resolve_device("auto")
    check_tensor_parallel("auto", 2)
    check_tensor_parallel(here, 2)
    with pytest.raises(ValueError, match=f"this machine's {here} .* found --device cuda:1"):
        check_tensor_parallel("cuda:1", 2)


def test_architectures_and_head_counts_the_plan_cannot_split_are_refused():
    llama = LlamaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, vocab_size=321)
    check_tensor_plan(llama, 2)  # a vocabulary of 321 need not divide
    with pytest.raises(ValueError, match="num_key_value_heads=2, which 4 processes cannot share evenly"):
        check_tensor_plan(llama, 4)
    with pytest.raises(ValueError, match="num_attention_heads=4, which 3 processes"):
        check_tensor_plan(llama, 3)
    with pytest.raises(ValueError, match="no tensor-parallel plan for gpt2; spread the teacher with --device-map"):
        check_tensor_plan(GPT2Config(), 2)
