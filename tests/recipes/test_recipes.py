"""The recipes end to end on a tiny random teacher, through the command line, then resumed."""

import json

import pytest
from transformers import AutoConfig

from destila.cli.main import main
from destila.recipes.progressive import parse_stages

SMALL = ["--seq-len", "32", "--train-tokens", "1024", "--eval-tokens", "256", "--top-k", "8", "--max-steps", "3",
         "--batch-size", "4", "--new-tokens", "4"]


def run_cli(argv):
    with pytest.raises(SystemExit) as done:
        main(argv)
    return done.value.code


def test_parse_stages():
    assert parse_stages("15,6") == [15, 6]
    for bad in ("6,15", "6,6", "0", "a,b", ""):
        with pytest.raises(ValueError, match="stages"):
            parse_stages(bad)


def test_stages_must_be_smaller_than_the_teacher(tiny_llama_dir, tmp_path, capsys):
    assert run_cli(["recipe", "progressive", str(tiny_llama_dir), "pydoc", "--stages", "4,2", "-o",
                    str(tmp_path / "p"), *SMALL]) == 2
    assert "smaller than the teacher's 4 layers" in capsys.readouterr().err


@pytest.mark.slow
def test_progressive_recipe_end_to_end_and_resume(tiny_llama_dir, tmp_path, capsys):
    out = tmp_path / "progressive"
    # The documented command, with tiny sizes.
    argv = ["recipe", "progressive", str(tiny_llama_dir), "pydoc", "--stages", "3,2", "-o", str(out), *SMALL]
    assert run_cli(argv) == 0
    state = json.loads((out / "stages.json").read_text())
    assert list(state) == ["teacher", "heldout-cache", "stage1-cache", "stage1-init", "stage1-train",
                           "stage2-cache", "stage2-init", "stage2-train", "evaluate"]
    assert AutoConfig.from_pretrained(out / "stage1/student").num_hidden_layers == 3
    assert AutoConfig.from_pretrained(out / "stage2/student").num_hidden_layers == 2
    # Stage 2's cache is the assistant's, not the teacher's.
    stage1 = json.loads((out / "stage1/cache/manifest.json").read_text())
    stage2 = json.loads((out / "stage2/cache/manifest.json").read_text())
    assert stage1["teacher_weight_fingerprint"] != stage2["teacher_weight_fingerprint"]
    assert stage2["teacher"] == str(out / "stage1/student")
    report = json.loads((out / "report.json").read_text())
    assert [r["model"] for r in report["results"]] == ["teacher", "3-layer assistant", "2-layer student"]
    assert report["results"][0]["top1_agreement"] == 1.0
    assert all(r["kl_to_teacher"] > 0 for r in report["results"][1:])
    assert (out / "report.md").read_text().startswith("# destila progressive distillation report")
    capsys.readouterr()
    assert run_cli(argv) == 0
    assert capsys.readouterr().out.count("done before") == 9
    # Other settings would be skipped past: refused, naming them, before anything is written.
    assert run_cli([*argv, "--max-steps", "5"]) == 2
    assert "holds a progressive distillation run with other settings (max_steps: 3 before, 5 now)" \
        in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("init", ["random", "copy"])
def test_self_recipe(tiny_llama_dir, tmp_path, init):
    out = tmp_path / "self"
    assert run_cli(["recipe", "self", str(tiny_llama_dir), "pydoc", "--init", init, "-o", str(out), *SMALL]) == 0
    report = json.loads((out / "report.json").read_text())
    model, student = report["results"]
    assert model["top1_agreement"] == 1.0 and student["parameters"] == model["parameters"]
    # A copy starts at the model itself (KL ≈ 0 after 3 small steps); random weights start far away.
    if init == "copy":
        assert student["kl_to_teacher"] < 0.05
    else:
        assert student["kl_to_teacher"] > 0.5


def test_a_folder_with_stages_but_no_recorded_settings_is_refused(tiny_llama_dir, tmp_path, capsys):
    out = tmp_path / "self"
    out.mkdir()
    (out / "stages.json").write_text(json.dumps({"model": {"path": str(tiny_llama_dir), "seconds": 0.1}}))
    assert run_cli(["recipe", "self", str(tiny_llama_dir), "pydoc", "-o", str(out), *SMALL]) == 2
    err = capsys.readouterr().err
    assert f"out: {out} holds a self-distillation run whose settings were not recorded" in err
    assert "Traceback" not in err and sorted(p.name for p in out.iterdir()) == ["stages.json"]
