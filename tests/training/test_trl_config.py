"""TRL / SFT / GKD YAML keys with `destila train --config`: mapped onto destila's options, or refused all at once."""

from pathlib import Path

import pytest

from destila.cli.main import main as cli
from destila.cli.train import parse
from destila.training.trl_keys import MAPPED, REFUSED

DOCS = Path(__file__).resolve().parents[2] / "docs" / "training.md"

# The keys of an `trl sft --config` file (TRL's SFTConfig, ModelConfig and ScriptArguments names).
SFT_YAML = """\
model_name_or_path: {student}
dataset_name: chat.jsonl
dataset_text_field: content
max_length: 64
packing: true
assistant_only_loss: true
learning_rate: 2.0e-5
lr_scheduler_type: cosine
report_to: none
"""

# TRL's GKD example, off-policy (lmbda 0): β alone selects the generalised JSD.
GKD_YAML = """\
model_name_or_path: {student}
beta: 0.5
temperature: 1.0
lmbda: 0
seq_kd: false
learning_rate: 1.0e-3
per_device_train_batch_size: 4
max_steps: 2
logging_steps: 1
save_strategy: "no"
use_cpu: true
"""


def write(tmp_path, text, **values):
    path = tmp_path / "cfg.yaml"
    path.write_text(text.format(**values))
    return str(path)


def test_sft_keys_map_onto_destila_options(tmp_path):
    config = write(tmp_path, SFT_YAML, student="my-student")
    namespace, args = parse(["--teacher", "t", "-o", str(tmp_path / "o"), "--config", config])
    assert namespace.student == "my-student" and namespace.data == "chat.jsonl"
    assert (namespace.seq_len, namespace.packing, namespace.loss_on, namespace.text_field) == \
        (64, "bfd", "assistant", "content")
    assert args.learning_rate == 2e-5


@pytest.mark.parametrize("beta, divergence", [(0.0, "forward_kl"), (1.0, "reverse_kl"), (0.3, "jsd")])
def test_gkd_beta_alone_selects_the_divergence(tmp_path, beta, divergence):
    config = write(tmp_path, f"beta: {beta}\n")
    _, args = parse(["s", "--cache", "c", "-o", str(tmp_path / "o"), "--config", config])
    assert args.divergence == divergence and (divergence != "jsd" or args.beta == beta)
    _, flags = parse(["s", "--cache", "c", "-o", str(tmp_path / "p"), "--beta", str(beta)])
    assert flags.divergence == divergence


def test_beta_beside_another_divergence_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli(["train", "s", "--cache", "c", "-o", str(tmp_path / "o"), "--divergence", "tvd", "--beta", "0.3"])
    assert exit_.value.code == 2
    assert "only --divergence jsd has a β" in capsys.readouterr().err


def test_gkd_yaml_trains_offline_from_a_cache(tiny_cache, fresh_student, tmp_path):
    config = write(tmp_path, GKD_YAML, student=fresh_student)
    out = tmp_path / "out"
    _, args = parse(["--cache", str(tiny_cache), "-o", str(out), "--config", config])
    assert (args.divergence, args.beta, args.temperature) == ("jsd", 0.5, 1.0)
    with pytest.raises(SystemExit) as exit_:
        cli(["train", "--cache", str(tiny_cache), "-o", str(out), "--config", config])
    assert exit_.value.code == 0 and (out / "model.safetensors").exists()


def test_unsupported_keys_are_listed_in_one_line(tmp_path, capsys):
    config = write(tmp_path, "lmbda: 0.5\nseq_kd: true\nmax_new_tokens: 64\nlearning_rat: 1\nbeta: 0.5\n"
                             "max_length: 64\n")
    with pytest.raises(SystemExit) as exit_:
        cli(["train", "s", "--cache", "c", "-o", str(tmp_path / "o"), "--config", config])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    for key in ("lmbda 0.5 (on-policy", "seq_kd True (sequence-level", "max_new_tokens 64 (",
                "unknown option 'learning_rat' (did you mean learning_rate?)"):
        assert key in err


def test_the_docs_show_every_mapped_and_refused_key():
    text = DOCS.read_text()
    for key, (target, _, _) in MAPPED.items():
        assert f"| `{key}` | `{target}`" in text, key
    for key in REFUSED:
        assert f"| `{key}` | refused" in text, key
    assert "| `beta` |" in text and "| `use_peft` |" in text


def doc_block(start: str, language: str) -> str:
    """The fenced ``language`` block of docs/training.md whose first line starts with ``start``."""
    blocks = DOCS.read_text().split(f"```{language}\n")[1:]
    return next(block.split("```")[0] for block in blocks if block.startswith(start))


def test_the_docs_gkd_yaml_parses_as_shown(tmp_path):
    config = tmp_path / "gkd.yaml"
    config.write_text(doc_block("# gkd.yaml", "yaml"))
    namespace, args = parse(["--cache", "c", "-o", str(tmp_path / "o"), "--config", str(config)])
    assert namespace.student == "student/" and (args.divergence, args.beta, args.max_steps) == ("jsd", 0.5, 1000)


def test_the_docs_python_example_runs(tiny_cache, fresh_student, tmp_path, monkeypatch):
    code = doc_block("from peft import LoraConfig", "python")
    code = (code.replace('"student/"', repr(str(fresh_student))).replace('"cache/"', repr(str(tiny_cache)))
            .replace("max_steps=200", "max_steps=2, use_cpu=True, report_to='none'").replace("eval_steps=50", "eval_steps=2")
            .replace("top_k=20", "top_k=8"))
    monkeypatch.chdir(tmp_path)
    scope = {}
    exec(compile(code, "docs/training.md", "exec"), scope)
    assert scope["trainer"].state.global_step == 2
    assert any("eval_kl" in record for record in scope["trainer"].state.log_history)


# TRL's example CLI config (examples/cli_configs/example_config.yaml), as `trl sft --config` takes it.
TRL_EXAMPLE = """\
model_name_or_path: {student}
dataset_name: stanfordnlp/imdb
report_to: none
learning_rate: 0.0001
lr_scheduler_type: cosine
"""


def test_trls_example_sft_config_beside_a_cache_is_refused_naming_its_data_keys(tiny_cache, tmp_path, capsys):
    config = write(tmp_path, TRL_EXAMPLE + "max_length: 64\npacking: true\n", student="s")
    with pytest.raises(SystemExit) as exit_:
        cli(["train", "--cache", str(tiny_cache), "-o", str(tmp_path / "o"), "--config", config])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    for key in ("dataset_name 'stanfordnlp/imdb' (the cache", "max_length 64 (the cache", "packing 'bfd' (the cache"):
        assert key in err


@pytest.mark.parametrize("value", ["maybe", 1, "yes please"])
def test_use_peft_takes_only_a_boolean(value):
    """A value that is no boolean was taken as true (LoRA trained); each is refused with the value found."""
    from destila.training.trl_keys import map_trl_keys

    options, problems = map_trl_keys({"use_peft": value}, known=set())
    assert options == {} and problems == [f"use_peft: expected true or false, found {value!r}"]


def test_use_peft_with_lora_r_0_is_refused_not_a_full_model_run(tmp_path):
    from destila.training.trl_keys import map_trl_keys

    _, problems = map_trl_keys({"use_peft": True, "lora_r": 0}, known={"lora_r"})
    assert len(problems) == 1 and "lora_r 0 turns them off" in problems[0]
    options, problems = map_trl_keys({"use_peft": True, "lora_r": 8}, known={"lora_r"})
    assert problems == [] and options["lora_r"] == 8


def test_use_peft_maybe_on_the_command_line_is_one_line(capsys):
    with pytest.raises(SystemExit) as done:
        cli(["train", "student", "--cache", "cache", "-o", "out", "--use_peft", "maybe"])
    assert done.value.code == 2
    assert "use_peft: expected true or false, found 'maybe'" in capsys.readouterr().err


def test_dataset_streaming_is_read_as_streaming():
    from destila.training.trl_keys import map_trl_keys

    assert map_trl_keys({"dataset_streaming": True}, known={"streaming"}) == ({"streaming": True}, [])
    assert map_trl_keys({"dataset_streaming": False}, known={"streaming"}) == ({"streaming": False}, [])
    assert map_trl_keys({"dataset_streaming": "maybe"}, known=set())[1] == [
        "dataset_streaming: expected true or false, found 'maybe'"]
    _, problems = map_trl_keys({"datasets": [{"path": "a.jsonl"}], "dataset_streaming": True}, known=set())
    assert problems and "streaming true beside datasets" in problems[0]


def test_dataset_streaming_on_the_command_line_streams_the_data(tmp_path):
    namespace, _ = parse(["s", "--data", "x.jsonl", "--dataset_streaming", "true", "-o", str(tmp_path / "o")])
    assert namespace.streaming is True
