"""The output folder holds what `Trainer.save_state()` / `save_metrics()` write, at its top."""

import json

from test_train import args_for

from destila.training import TrainSpec, train_student


def test_trainer_files_at_the_top_of_the_output_folder(tiny_cache, fresh_student, tmp_path):
    out = tmp_path / "out"
    result = train_student(TrainSpec(str(fresh_student), out, args_for(out, max_steps=2, eval_fraction=0.2), cache=tiny_cache))
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 2 and any("loss" in record for record in state["log_history"])
    train = json.loads((out / "train_results.json").read_text())
    assert train["train_loss"] == result["train"]["train_loss"]
    every = json.loads((out / "all_results.json").read_text())
    assert every["train_loss"] == train["train_loss"] and every["eval_kl"] == result["eval"]["eval_kl"]
    assert json.loads((out / "eval_results.json").read_text())["eval_kl"] == result["eval"]["eval_kl"]
