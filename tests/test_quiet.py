"""Library noise that is wrong or useless for destila's runs is gone; everything else is left alone."""

import importlib.util
import os
import subprocess
import sys

import pytest

from destila.cli.main import main

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}

PACKED_GPT2 = """
{prelude}
import torch
from transformers import GPT2Config, GPT2LMHeadModel
model = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2, pad_token_id=0, eos_token_id=0))
ids = torch.tensor([[5, 6, 0, 7, 8, 0]])  # two packed documents, each ending with EOS (= pad)
model(input_ids=ids, position_ids=torch.tensor([[0, 1, 2, 0, 1, 2]]))
"""


def run(code: str) -> str:
    """stdout and stderr of ``python -c code``, in one stream in the order they were written."""
    done = subprocess.run([sys.executable, "-c", code], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:]
    return done.stdout


# One process for both "with destila" checks (each Python start with transformers costs seconds): the packed model
# runs right after `import destila` (that import alone must silence it), and the trainer is imported after it.
TRAINER_MARK = "--- importing destila.training ---"


@pytest.fixture(scope="module")
def with_destila() -> tuple[str, str]:
    """The output up to the packed GPT-2 run after ``import destila``, and the whole output (with the trainer's
    import)."""
    code = PACKED_GPT2.format(prelude="import destila") + f"print({TRAINER_MARK!r}, flush=True)\nimport destila.training\n"
    output = run(code)
    assert TRAINER_MARK in output
    return output.partition(TRAINER_MARK)[0], output


def test_packed_rows_do_not_warn_about_a_missing_attention_mask(with_destila):
    assert "strongly recommend passing in an `attention_mask`" in run(PACKED_GPT2.format(prelude=""))
    packed, _ = with_destila
    assert "attention_mask" not in packed


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="DeepSpeed is not installed")
def test_importing_the_trainer_does_not_print_deepspeeds_cpu_warning(with_destila):
    _, whole = with_destila
    assert "Setting accelerator to CPU" not in whole


def test_commands_show_no_loading_or_writing_bars(tiny_llama_dir, tmp_path, capfd):
    with pytest.raises(SystemExit) as exit_:
        main(["student", "init", str(tiny_llama_dir), "-o", str(tmp_path / "s"), "--layers", "1"])
    assert exit_.value.code == 0
    captured = capfd.readouterr()
    assert "Loading weights" not in captured.err + captured.out
    assert "Writing model shards" not in captured.err + captured.out


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao (the peers extra) is not installed")
def test_torchaos_warning_about_its_cpp_extensions_is_dropped():
    """peft imports torchao whenever it makes a LoRA layer, when torchao is installed; destila uses none of its
    C++ extensions."""
    warning = "Skipping import of cpp extensions due to incompatible torch version"
    if warning not in run("import torchao"):
        pytest.skip("this torchao was built for the installed torch: it gives no warning")
    assert warning not in run("import destila\nimport torchao")
