"""TRL's words with TRL's meaning on `destila train`: GKDConfig's defaults, TRL's flags, keys equal to the cache's."""

import dataclasses
import json

import pytest

from destila.cli.main import main as cli
from destila.cli.train import parse
from destila.training import DistillationArguments
from destila.training.trl_defaults import GKD_DEFAULTS, GKD_LMBDA, GKD_SAMPLING_TEMPERATURE, describe_objective
from destila.training.trl_keys import MAPPED, REFUSED, refusal

from conftest import TRAIN_SEQ_LEN, pydoc_texts


def write(tmp_path, text, name="cfg.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_gkd_defaults_are_the_ones_trl_declares():
    import inspect

    from trl.experimental.gkd import GKDConfig, GKDTrainer

    declared = {f.name: f.default for f in dataclasses.fields(GKDConfig)}
    assert declared["beta"] == GKD_DEFAULTS["beta"] and 0 < declared["beta"] < 1  # β strictly inside: the JSD
    for name in ("learning_rate", "lr_scheduler_type", "warmup_steps"):
        assert declared[name] == GKD_DEFAULTS[name], name
    assert (declared["lmbda"], declared["temperature"]) == (GKD_LMBDA, GKD_SAMPLING_TEMPERATURE)
    # GKD's temperature is its sampling temperature: the loss is computed at the function's default, T 1.
    assert inspect.signature(GKDTrainer.generalized_jsd_loss).parameters["temperature"].default == 1.0
    assert "temperature" not in inspect.getsource(GKDTrainer.compute_loss)
    assert GKD_DEFAULTS["temperature"] == 1.0
    # Its loss is the divergence alone: the student's own cross-entropy (outputs.loss) is never added.
    source = inspect.getsource(GKDTrainer.compute_loss)
    assert "loss = self.generalized_jsd_loss(" in source and "student_outputs.loss" not in source
    assert GKD_DEFAULTS["hard_weight"] == 0.0


def test_every_trl_key_is_mapped_refused_or_destilas_own():
    from transformers import TrainingArguments
    from trl import ModelConfig, ScriptArguments
    from trl.experimental.gkd import GKDConfig

    trainer = {f.name for f in dataclasses.fields(TrainingArguments)}
    own = {f.name for f in dataclasses.fields(DistillationArguments)}
    for cls in (GKDConfig, ModelConfig, ScriptArguments):
        for f in dataclasses.fields(cls):
            if f.name in trainer or f.name in own:
                continue
            assert f.name in MAPPED or f.name in REFUSED or f.name == "use_peft", f"{cls.__name__}.{f.name}"
            if f.name in REFUSED:  # TRL's default leaves the feature off, so a dumped config is not refused for it
                default = f.default if f.default is not dataclasses.MISSING else None
                # lmbda 0.5 is on-policy and disable_dropout True changes the student: both refused when given.
                assert refusal(f.name, default) is None or f.name in ("lmbda", "disable_dropout"), f.name


def test_a_two_key_gkd_yaml_runs_trls_objective_and_schedule(tiny_cache, fresh_student, tmp_path, capsys):
    config = write(tmp_path, f"model_name_or_path: {fresh_student}\nmax_steps: 2\n")
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_:
        cli(["train", "--cache", str(tiny_cache), "-o", str(out), "--config", config, "--logging_steps", "1",
             "--save_strategy", "no", "--per_device_train_batch_size", "2"])
    assert exit_.value.code == 0
    printed = capsys.readouterr().out
    assert "objective: jsd β 0.5, T 1, soft 1 + hard 0; schedule: lr 2e-05, linear, warm-up 0 steps." in printed
    assert ("As TRL's GKDConfig defaults: divergence, beta, temperature, hard_weight, learning_rate, lr_scheduler_type, "
            "warmup_steps.") in printed and "Not TRL's" not in printed
    recorded = json.loads((out / "destila_run.json").read_text())["objective"]["options"]
    assert {k: recorded[k] for k in GKD_DEFAULTS} == GKD_DEFAULTS
    # The linear schedule without warm-up: 2e-5 · (1 − (step − 1) / 2) at each step.
    logged = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    rates = [row["learning_rate"] for row in logged if "learning_rate" in row]
    assert rates == pytest.approx([2e-5, 1e-5])  # the rate each step used


def test_gkds_sampling_temperature_is_refused_unless_1(tmp_path, capsys):
    config = write(tmp_path, "model_name_or_path: s\ntemperature: 0.9\n")
    with pytest.raises(SystemExit) as exit_:
        cli(["train", "--cache", "c", "-o", str(tmp_path / "o"), "--config", config])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "temperature 0.9 (in TRL's GKD the temperature of the student's on-policy samples; TRL's loss runs " \
           "at T 1" in err
    assert not (tmp_path / "o").exists()
    config = write(tmp_path, "model_name_or_path: s\ntemperature: 1\n", name="one.yaml")
    _, args = parse(["--cache", "c", "-o", str(tmp_path / "o"), "--config", config])
    assert args.temperature == 1.0
    _, args = parse(["s", "--cache", "c", "-o", str(tmp_path / "o"), "--temperature", "2"])  # destila's terms
    assert args.temperature == 2.0


def test_a_given_value_wins_over_trls_default(tiny_cache, tmp_path):
    config = write(tmp_path, "model_name_or_path: s\nbeta: 0\n")
    _, args = parse(["--cache", str(tiny_cache), "-o", str(tmp_path / "o"), "--config", config,
                     "--learning_rate", "1e-3"])
    assert (args.divergence, args.temperature, args.learning_rate) == ("forward_kl", 1.0, 1e-3)
    assert args.lr_scheduler_type.value == "linear" and args.warmup_steps == 0  # still TRL's: not given
    line = describe_objective(args)
    assert "Not TRL's GKDConfig defaults: divergence forward_kl (TRL jsd), learning_rate 0.001 (TRL 2e-05)." in line


def test_destilas_own_terms_keep_destilas_defaults_and_say_how_trl_differs(tmp_path):
    _, args = parse(["s", "--cache", "c", "-o", str(tmp_path / "o"), "--max_steps", "3"])
    assert (args.divergence, args.temperature, args.learning_rate) == ("forward_kl", 1.0, 5e-4)
    line = describe_objective(args)
    assert line.startswith("objective: forward_kl, T 1, soft 1 + hard 1; schedule: lr 0.0005, constant_with_warmup")
    assert "Not TRL's GKDConfig defaults: divergence forward_kl (TRL jsd), hard_weight 1 (TRL 0), learning_rate 0.0005 (TRL 2e-05), " \
           "lr_scheduler_type constant_with_warmup (TRL linear), warmup_steps 10 (TRL 0)." in line
    assert "`destila recipe on-policy`" in line


def test_trls_flags_run_online(tiny_llama_dir, fresh_student, tmp_path, capsys):
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps({"text": text}) + "\n" for text in pydoc_texts(2)))
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_:
        cli(["train", "--model_name_or_path", str(fresh_student), "--teacher_model_name_or_path",
             str(tiny_llama_dir), "--dataset_name", str(data), "--use_peft", "--max_length", "32", "-o", str(out),
             "--max_steps", "1", "--per_device_train_batch_size", "2", "--save_strategy", "no"])
    assert exit_.value.code == 0, capsys.readouterr().err
    assert "jsd β 0.5, T 1" in capsys.readouterr().out  # TRL's flags: TRL's GKDConfig defaults
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert (adapter["r"], adapter["lora_alpha"], adapter["lora_dropout"]) == (16, 32, 0.05)  # TRL's ModelConfig


def test_a_trl_flag_and_destilas_own_disagreeing_are_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli(["train", "a", "--model_name_or_path", "b", "--cache", "c", "-o", str(tmp_path / "o")])
    assert exit_.value.code == 2
    assert "--model_name_or_path 'b' sets student, which is given as 'a'" in capsys.readouterr().err


def test_lmbda_points_at_the_on_policy_recipe(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli(["train", "s", "--cache", "c", "-o", str(tmp_path / "o"), "--lmbda", "0.5"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "lmbda 0.5 (on-policy distillation" in err and "`destila recipe on-policy`" in err
    _, args = parse(["s", "--cache", "c", "-o", str(tmp_path / "o"), "--lmbda", "0"])
    assert args.divergence == "jsd"  # lmbda 0 is off-policy: harmless, and TRL's terms


def test_keys_equal_to_the_caches_settings_are_accepted(tiny_cache, tmp_path):
    config = write(tmp_path, f"max_length: {TRAIN_SEQ_LEN}\ndataset_text_field: text\n")
    namespace, _ = parse(["s", "--cache", str(tiny_cache), "-o", str(tmp_path / "o"), "--config", config,
                          "--seq-len", str(TRAIN_SEQ_LEN), "--packing", "documents"])
    assert namespace.seq_len == 512 and namespace.packing is None  # said nothing new: back to the defaults


def test_keys_that_differ_from_the_caches_settings_name_both_values(tiny_cache, tmp_path, capsys):
    config = write(tmp_path, "dataset_name: stanfordnlp/imdb\nmax_length: 64\npacking: true\n")
    with pytest.raises(SystemExit) as exit_:
        cli(["train", "s", "--cache", str(tiny_cache), "-o", str(tmp_path / "o"), "--config", config])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    for part in ("max_length 64 (the cache in", "was built with seq_len 32)", "packing 'bfd' (",
                 "built with packing 'documents')", "dataset_name 'stanfordnlp/imdb' (", "built with data '<texts>')"):
        assert part in err, part


def test_misspelt_yaml_keys_get_did_you_mean(tmp_path, capsys):
    config = write(tmp_path, "learning_rat: 1\nmodel_name_or_pat: s\n")
    with pytest.raises(SystemExit) as exit_:
        cli(["train", "--cache", "c", "-o", str(tmp_path / "o"), "--config", config])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert "unknown option 'learning_rat' (did you mean learning_rate?)" in err
    assert "unknown option 'model_name_or_pat' (did you mean model_name_or_path?)" in err


def test_the_docs_show_the_line_a_trl_run_prints(tmp_path):
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "training.md").read_text()
    shown = next(block for block in docs.split("```text\n")[1:] if block.startswith("objective: ")).split("\n")[0]
    args = DistillationArguments(output_dir=str(tmp_path), use_cpu=True, **GKD_DEFAULTS)
    assert shown == describe_objective(args)


def test_use_peft_takes_trls_lora_defaults_where_none_is_given(tmp_path):
    config = write(tmp_path, "use_peft: true\nlora_alpha: 8\n")
    _, args = parse(["s", "--cache", "c", "-o", str(tmp_path / "o"), "--use_peft", "--lora_r", "4"])
    assert (args.lora_r, args.lora_alpha, args.lora_dropout) == (4, 32, 0.05)
    _, args = parse(["s", "--cache", "c", "-o", str(tmp_path / "p"), "--config", config])
    assert (args.lora_r, args.lora_alpha, args.lora_dropout) == (16, 8, 0.05)
