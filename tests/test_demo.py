"""The demo: its time budget, its report's verdict, its plots' layout, and the pipeline end to end on a tiny teacher."""

import dataclasses
import functools
import json
import re
from pathlib import Path

import pytest
from rich.console import Console
from transformers import TrainerControl, TrainerState, TrainingArguments

from conftest import pydoc_texts
from destila.cache import read_manifest
from destila.demo.budget import StepBudget, plan_training, scaled_reserve, split_seconds, steps_that_fit
from destila.demo import Demo, DemoSettings, split_documents, training_runs
from destila.demo.report import curves_figure, metrics_figure, verdict
from destila.demo.samples import degenerate, distinct_words


def test_split_holds_out_every_fifth_document():
    train, held = split_documents([str(i) for i in range(12)], 5)
    assert held == ["4", "9"] and len(train) == 10


def test_training_order_pairs_each_distilled_student_with_its_baseline():
    assert training_runs(2) == [("distilled", 0), ("baseline", 0), ("distilled", 1), ("baseline", 1)]


def test_distinct_words_ignores_whitespace_punctuation_and_case():
    assert distinct_words("\n\n\n\n") == 0
    assert distinct_words("open open open") == 1
    assert distinct_words("Use `open()`, then read the file. The FILE") == 6


# -- budget ---------------------------------------------------------------------------


def test_budget_arithmetic():
    assert steps_that_fit(100, 3.0, cap=400) == 33
    assert steps_that_fit(100, 3.0, cap=20) == 20
    assert steps_that_fit(-5, 3.0, cap=20) == 1  # a stage always makes one step
    assert split_seconds(660, 180, 2) == 240
    assert split_seconds(100, 180, 2) == 0
    with pytest.raises(ValueError, match="seconds_per_step"):
        steps_that_fit(10, 0, cap=5)
    # The evaluation's reserve follows the teacher's measured speed, at most halved on a fast machine.
    assert scaled_reserve(210, 450, measured_at=450) == 210
    assert scaled_reserve(210, 150, measured_at=450) == 630  # a loaded machine: 3× slower, 3× the reserve
    assert scaled_reserve(210, 600, measured_at=450) == pytest.approx(157.5)
    assert scaled_reserve(210, 4500, measured_at=450) == 105  # never below half
    with pytest.raises(ValueError, match="teacher_tokens_per_second: expected a positive number, found 0"):
        scaled_reserve(210, 0, measured_at=450)


def test_plan_sizes_cache_and_steps_from_measured_speeds_and_says_when_the_minimum_does_not_fit():
    common = dict(teacher_tokens_per_second=256.0, step_tokens=1024, trainings=2, epochs=2.0, max_tokens=65536,
                  min_steps=20, max_steps=400)
    # 1024 tokens per step, 2 passes: a step costs 2 s of teacher pass (1024 / 2 / 256) + 2 trainings × 4 s.
    plan = plan_training(600, step_seconds=4.0, **common)
    assert plan == {"tokens": 30 * 1024, "steps": 60, "fits": True, "seconds_needed": 20 * 10.0}
    # A capped cache: the time it leaves goes to more passes over it.
    capped = plan_training(600, step_seconds=4.0, **{**common, "max_tokens": 8192})
    assert capped["tokens"] == 8192 and capped["steps"] == (600 - 32) // 8
    # Too slow: fewer than 20 steps, and what 20 would need.
    slow = plan_training(150, step_seconds=4.0, **common)
    assert slow["steps"] == 15 and not slow["fits"] and slow["seconds_needed"] == 200.0
    with pytest.raises(ValueError, match="positive measured speeds"):
        plan_training(150, step_seconds=0.0, **common)


def test_the_plan_trains_in_the_faster_precision_it_timed(tmp_path, monkeypatch):
    """auto times float32, and bfloat16 autocast only where the CPU multiplies it natively (elsewhere it
    is emulated and slower: timing it would waste the plan's time); the faster one is trained in."""
    import torch

    from destila.demo import pipeline

    timed = []

    def fake_measure(student, input_ids, *, bf16, **options):
        timed.append("bfloat16" if bf16 else "float32")
        return {"float32": 3.0, "bfloat16": 2.0}[timed[-1]]

    monkeypatch.setattr(pipeline, "measure_step_seconds", fake_measure)
    monkeypatch.setattr(pipeline, "TopKCache", lambda path: [{"input_ids": torch.zeros(256, dtype=torch.long)}] * 4)
    heldout = {"teacher_tokens_per_second": 300.0, "eval_reserve_seconds": 60.0}

    def plan(native: bool, precision: str = "auto") -> dict:
        timed.clear()
        monkeypatch.setattr(pipeline, "native_bf16", lambda: native)
        demo = Demo(tmp_path, DemoSettings(minutes=10, precision=precision), texts=["unused"],
                    console=Console(quiet=True))
        return demo.plan("student", heldout)

    native = plan(native=True)
    assert timed == ["float32", "bfloat16"] and native["precision"] == "bfloat16"
    assert native["step_seconds"] == pytest.approx(2.0 * pipeline.STEP_OVERHEAD)
    assert native["timed_step_seconds"] == {"float32": 3.0, "bfloat16": 2.0}
    emulated = plan(native=False)
    assert timed == ["float32"] and emulated["precision"] == "float32"
    forced = plan(native=False, precision="bfloat16")
    assert timed == ["bfloat16"] and forced["precision"] == "bfloat16"
    with pytest.raises(ValueError, match="precision: expected one of auto, float32, bfloat16, found 'fp16'"):
        DemoSettings(precision="fp16")
    # The report says which precision and why.
    from destila.demo.report import precision_lines

    assert precision_lines(native)[1].startswith("Precision: bfloat16, the faster of the two; the plan's timed "
                                                 "step (forward, backward and update of one batch): float32 3.00 s, "
                                                 "bfloat16 2.00 s.")
    assert "the CPU has no native bfloat16, so only it was timed" in precision_lines(emulated)[1]
    assert "set by --precision" in precision_lines(forced, "bfloat16")[1]
    assert precision_lines({"steps": 3}) == []  # a plan recorded before precisions were timed


def test_a_bfloat16_step_is_timed_under_autocast(tiny_llama_dir, monkeypatch):
    """The bf16 timing runs the forward under bfloat16 autocast, as the Trainer's bf16 training does; the
    float32 timing does not."""
    import torch

    from destila.demo import budget

    autocast_in_forward, load = [], budget.load_causal_lm

    def load_and_watch(path):
        model = load(path)
        model.register_forward_hook(lambda module, args, output: autocast_in_forward.append(
            torch.is_autocast_enabled("cpu")))
        return model

    monkeypatch.setattr(budget, "load_causal_lm", load_and_watch)
    input_ids = torch.randint(0, 100, (2, 16))
    for bf16 in (False, True):
        autocast_in_forward.clear()
        assert budget.measure_step_seconds(str(tiny_llama_dir), input_ids, freeze_embeddings=True,
                                           learning_rate=1e-3, bf16=bf16) > 0
        assert autocast_in_forward == [bf16] * 3


def test_degenerate_continuations_are_named():
    assert degenerate("The Python 2.1, 200, 200, 200).") == "only 2 distinct words"
    assert degenerate("Open the file in the mode you need: 200, 200, 200") == "repeats '200' 3 times in a row"
    assert degenerate("a list of values and a list of values and") == "repeats 'a list of values and' 2 times in a row"
    assert degenerate("Use open() with a mode, then read the file line by line.") is None


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def drive(budget: StepBudget, clock: FakeClock, seconds_per_step, first_step_seconds: float = 0.0):
    """Run ``budget`` as the Trainer would until it stops training; returns the steps made."""
    args = TrainingArguments(output_dir="unused", report_to="none")
    state, control = TrainerState(), TrainerControl()
    budget.on_train_begin(args, state, control)
    while not control.should_training_stop:
        assert state.global_step < 1000, "the budget never stopped training"
        clock.now += seconds_per_step(state.global_step) + (first_step_seconds if state.global_step == 0 else 0)
        state.global_step += 1
        budget.on_step_end(args, state, control)
    return state.global_step


def test_step_budget_stops_at_the_last_step_that_fits_and_reports_the_real_target():
    clock = FakeClock()
    # 100 s, 3 s per step, a slow first step (warm-up, not counted in the rate); first guess 50.
    budget = StepBudget(clock.now + 100, cap=400, guess=50, clock=clock, progress=False)
    steps = drive(budget, clock, lambda step: 3.0, first_step_seconds=7.0)
    # The first step (10 s from the callback's creation) stands for the closing costs too: the
    # steps end by 90 s: 10 s for the first step, then 3 s each: 1 + 26 steps (ending at 88 s).
    assert budget.closing_seconds == 10.0
    assert steps == budget.target == 27 and clock.now - 1000 <= 90
    assert budget.history[0] == (0, 50) and budget.history[-1][1] == 27


def test_step_budget_resizes_down_when_steps_slow_down_and_honours_the_cap():
    clock = FakeClock()
    slowing = StepBudget(clock.now + 100, cap=400, clock=clock, progress=False)
    steps = drive(slowing, clock, lambda step: 2.0 if step < 10 else 6.0)
    assert clock.now - 1000 <= 100 - 2.0 + 6.0 and steps < 50  # never more than one (slow) step late
    assert [target for _, target in slowing.history] != sorted(t for _, t in slowing.history)  # re-sized down
    clock = FakeClock()
    capped = StepBudget(clock.now + 1000, cap=12, clock=clock, progress=False)
    assert drive(capped, clock, lambda step: 1.0) == 12


def test_the_first_training_leaves_the_baseline_room_to_match_its_steps(tmp_path, monkeypatch):
    """The baseline is capped at the distilled student's steps. In a clean-clone run (430 s left before
    training, 210 s kept for the evaluation) its steps ran a little slower than the distilled student's
    (4.5 s against 4.3 s) and it made 22 steps to 24. Modelled here with a slower opening too (loading,
    first step): with an equal share it stops short; with LEAD_SHARE it matches."""
    from destila.demo import pipeline

    def steps_made(share: float) -> list[int]:
        clock = FakeClock()
        demo = Demo(tmp_path, DemoSettings(minutes=9.5), texts=["unused"], console=Console(quiet=True), clock=clock)
        clock.now += 9.5 * 60 - 430  # the stages before training
        per_step, opening = {"distilled": 4.3, "baseline": 4.5}, {"distilled": 2.0, "baseline": 6.0}

        def fake_training(student, out, cache, *, callbacks, **options):
            (budget,) = callbacks
            name = Path(out).name
            steps = drive(budget, clock, lambda step: per_step[name], first_step_seconds=opening[name])
            clock.now += budget.closing_seconds  # the final evaluation and the save, after the last step
            return {"path": str(out), "steps": steps, "train_seconds": None}

        monkeypatch.setattr(pipeline, "train_from_cache", fake_training)
        first = demo.train("student", "distilled", 0, cap=400, trainings_left=2, guess=20, reserve=210, share=share)
        second = demo.train("student", "baseline", 0, cap=first["steps"], trainings_left=1, guess=20, reserve=210)
        return [first["steps"], second["steps"]]

    equal, led = steps_made(1.0), steps_made(pipeline.LEAD_SHARE)
    assert equal[1] < equal[0]  # why the lead share exists
    assert led[0] == led[1] >= 0.85 * equal[0]


# -- report ---------------------------------------------------------------------------


def _result(ppl, agree, tokens=8160, params=50e6):
    return {"perplexity": ppl, "top1_agreement": agree, "tokens": tokens, "accuracy": 0.3, "kl_to_teacher": 1.0,
            "parameters": params, "size_bytes": 4 * params, "forward_tokens_per_second": 700.0,
            "generate_tokens_per_second": 20.0, "peak_bytes": 9e8}


def _trained(steps, tokens):
    return {"steps": steps, "tokens": tokens}


def test_verdict_states_the_winner_in_numbers_at_equal_steps():
    results = {"teacher": _result(15.0, 1.0), "distilled": _result(90.0, 0.41), "baseline": _result(300.0, 0.22)}
    trained = {"distilled": _trained(60, 61440), "baseline": _trained(60, 61440)}
    text = verdict(results, trained, held_out_documents=45, cache_tokens=24576, seconds=600, minutes=11)
    first = text.split("\n\n")[0]
    assert "**90.0**" in first and "6.0× the teacher's 15.0" in first and "**300.0**" in first
    assert "both after 60 steps (61,440 training tokens each)" in first
    assert "**41.0%** vs **22.0%**" in first and "better on both" in first
    assert "8,160 held-out tokens (45 documents" in text and "2.5 times" in text
    assert "10.0 min of its 11-minute budget" in text and "shared CPU" in text


def test_verdict_says_when_the_baseline_got_fewer_steps_and_gives_the_seed_spread():
    results = {"teacher": _result(15.0, 1.0), "distilled": _result(90.0, 0.41), "baseline": _result(80.0, 0.30),
               "distilled-seed1": _result(96.5, 0.40), "baseline-seed1": _result(85.0, 0.29)}
    trained = {"distilled": _trained(60, 61440), "baseline": _trained(41, 41984)}
    text = verdict(results, trained, held_out_documents=45, cache_tokens=24576, seconds=600, minutes=11)
    assert "only 41 (41,984 tokens) for the baseline" in text
    tied = {**results, "baseline": results["distilled"]}
    assert "Neither is ahead" in verdict(tied, trained, held_out_documents=45, cache_tokens=24576, seconds=600,
                                         minutes=11)
    assert "Mixed: the distilled student is better on agreement only." in text
    assert "perplexity 90.0 and 96.5 distilled (spread 6.5) vs 80.0 and 85.0 baseline (spread 5.0)" in text


def _overlaps(boxes):
    return [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:] if a[1].overlaps(b[1])]


def test_metrics_plot_is_a_grid_with_units_and_labels_that_do_not_overlap():
    results = [_result(15.4, 1.0, params=134.5e6), _result(87.3, 0.412), _result(301.0, 0.221)]
    results[0]["kl_to_teacher"] = -1e-6  # float16 rounding noise of the teacher against its own cache
    fig = metrics_figure(results, ["teacher", "distilled", "baseline"])
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 9
    width, height = fig.get_size_inches()
    assert height / width > 0.6  # a grid, not a strip
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    titles = {ax.get_title(): ax for ax in axes}
    agreement = titles["top-1 agreement with the teacher"]
    assert agreement.get_ylabel() == "% of tokens"
    assert [t.get_text() for t in agreement.texts] == ["100.0%", "41.2%", "22.1%"]
    assert [t.get_text() for t in titles["KL to the teacher (lower is better)"].texts][0] == "0"
    for ax in axes:
        assert ax.get_ylabel(), f"{ax.get_title()} has no unit"
        texts = [(t.get_text(), t.get_window_extent(renderer)) for t in ax.texts]
        texts += [(t.get_text(), t.get_window_extent(renderer)) for t in ax.get_xticklabels()]
        texts.append((ax.get_title(), ax.title.get_window_extent(renderer)))
        assert not _overlaps(texts), f"{ax.get_title()}: overlapping labels {_overlaps(texts)}"
        # Every bar label lies inside its panel (room was left above the tallest bar).
        inside = ax.get_window_extent(renderer)
        for text in ax.texts:
            box = text.get_window_extent(renderer)
            assert inside.y0 - 1 <= box.y0 and box.y1 <= inside.y1 + 1, (ax.get_title(), text.get_text())
    boxes = [("panel", ax.get_tightbbox(renderer)) for ax in axes]
    assert not _overlaps(boxes)


def test_training_curves_put_held_out_beside_training_in_a_grid():
    train = [{"step": s, "kl": 3.0 / s, "ppl": 900.0 / s, "top1_agreement": 0.05 * s} for s in range(1, 11)]
    held = [{"step": s, "eval_kl": 3.2 / s, "eval_ppl": 1000.0 / s, "eval_top1_agreement": 0.04 * s}
            for s in (5, 10)]
    fig = curves_figure({"distilled": (train, held), "baseline": (train, held)}, held_out_tokens=1020)
    axes = fig.axes
    assert len(axes) == 6
    assert [ax.get_ylabel() for ax in axes[:3]] == ["nats/token", "perplexity (log scale)", "% of tokens"]
    assert "held-out (1,020 tokens)" in axes[4].get_title() and axes[4].get_yscale() == "log"
    assert list(axes[5].lines[0].get_ydata()) == pytest.approx([20.0, 40.0])
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    page = fig.bbox
    for ax in axes:  # titles inside the figure, panels apart
        box = ax.title.get_window_extent(renderer)
        assert page.x0 <= box.x0 and box.x1 <= page.x1 and box.y1 <= page.y1, ax.get_title()
    assert not _overlaps([("panel", ax.get_tightbbox(renderer)) for ax in axes])


# -- the pipeline ---------------------------------------------------------------------


def score_in_this_process(monkeypatch):
    """The demo's models scored in the test process: a fresh Python per model costs about 10 s, and that each model
    is scored in its own process is asserted by test_eval.py::test_cli_compares_models_side_by_side."""
    from destila.demo import pipeline
    from destila.eval import evaluate_models

    monkeypatch.setattr(pipeline, "evaluate_models", functools.partial(evaluate_models, isolated=False))


@pytest.mark.parametrize("isolated", [pytest.param(False, id="in-process"),
                                      pytest.param(True, id="processes", marks=pytest.mark.slow)])
def test_demo_pipeline_end_to_end_and_resume(tiny_llama_dir, tmp_path, monkeypatch, isolated):
    if not isolated:
        score_in_this_process(monkeypatch)
    settings = DemoSettings(
        teacher=str(tiny_llama_dir), seq_len=32, train_tokens=32 * 48, eval_tokens=32 * 8, top_k=8,
        student_layers=None, student_width={"hidden_size": 24, "intermediate_size": 32}, calibration_tokens=64,
        batch_size=4, max_steps=6,
        minutes=30, new_tokens=4, eval_every=3, task_questions=4,
        eval_curve_sequences=2, eval_reserve_seconds=5,
    )
    console = Console(record=True, width=120)
    state = Demo(tmp_path, settings, texts=pydoc_texts(12), console=console).run()
    assert list(state) == ["teacher", "heldout", "student", "plan", "cache", "distilled", "baseline", "evaluate"]
    assert state["distilled"]["steps"] == state["baseline"]["steps"] == 6
    assert state["distilled"]["tokens"] == 6 * 4 * 32
    assert state["cache"]["train_tokens"] == 32 * 48 and state["heldout"]["held_out_tokens"] == 32 * 8
    # The students train on sampled targets (the best row on fresh tokens); the report's KL reads the top-K.
    trained_on, held_out = (read_manifest(tmp_path / name).targets for name in ("cache", "cache-heldout"))
    assert (trained_on["kind"], trained_on["samples"]) == ("sampled", 64)
    assert (held_out["kind"], held_out["top_k"]) == ("topk", 8)
    assert state["plan"]["fits"] and state["plan"]["step_seconds"] > 0
    precision = state["plan"]["precision"]  # the faster of those timed, what both students trained in
    assert precision == min(state["plan"]["timed_step_seconds"], key=state["plan"]["timed_step_seconds"].get)
    assert state["distilled"]["precision"] == state["baseline"]["precision"] == precision
    report = json.loads((tmp_path / "report.json").read_text())
    assert [r["model"] for r in report["results"]] == ["teacher", "distilled", "baseline"]
    teacher, distilled, baseline = report["results"]
    assert teacher["top1_agreement"] == 1.0
    for student in (distilled, baseline):
        assert student["parameters"] < teacher["parameters"] and student["kl_to_teacher"] > 0
        assert len(student["continuations"]) == 3
    # The tied embedding/head stayed frozen (freeze_embeddings), the layers moved.
    from safetensors.torch import load_file

    init = load_file(tmp_path / "student-init" / "model.safetensors")
    trained = load_file(tmp_path / "distilled" / "model.safetensors")
    assert (trained["model.embed_tokens.weight"] == init["model.embed_tokens.weight"]).all()
    assert not (trained["model.layers.0.mlp.up_proj.weight"] == init["model.layers.0.mlp.up_proj.weight"]).all()
    curves = report["training"]["distilled"]
    assert [r["step"] for r in curves["train"]] == [1, 2, 3, 4, 5, 6]
    assert [r["step"] for r in curves["held_out"]] == [3, 6]
    markdown = (tmp_path / "report.md").read_text()
    assert markdown.split("\n\n")[1].startswith("**Verdict.** Distillation reached held-out perplexity")
    assert f"Scored on {distilled['tokens']:,} held-out tokens" in markdown
    assert f"| distilled | KL to the cached teacher targets + cross-entropy | {precision} | 6 |" in markdown
    assert f"Precision: {precision}, the " in markdown
    assert all(r["task"]["questions"] == 4 and r["task"]["task"] == "pydoc_next_word" for r in report["results"])
    for section in ("Held-out comparison", "Task accuracy", "Training", "Generated text", "Time per stage", "Cache",
                    "Settings"):
        assert f"## {section}" in markdown
    assert markdown.count("### Prompt") == 3 and markdown.count("**, greedy (") == 9
    for plot in ("training_curves.png", "metrics.png"):
        assert (tmp_path / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # A second run finds every stage done and only rewrites the report.
    console = Console(record=True, width=200)  # one line per stage: the student's description is long
    Demo(tmp_path, settings, texts=pydoc_texts(12), console=console).run()
    assert console.export_text().count("done before") == 8
    # A rerun with another setting would skip every stage and keep the old results: refused, nothing rewritten.
    recorded = {name: (tmp_path / name).read_bytes() for name in ("stages.json", "recipe.json", "report.json")}
    changed = dataclasses.replace(settings, learning_rate=1e-3, seeds=2)
    with pytest.raises(ValueError, match=r"holds a demo run with other settings \(learning_rate: 0.0005 before, "
                                         r"0.001 now; seeds: 1 before, 2 now\); run the same command to resume it, "
                                         r"or choose another --out"):
        Demo(tmp_path, changed, texts=pydoc_texts(12), console=console).run()
    assert {name: (tmp_path / name).read_bytes() for name in recorded} == recorded


def test_layer_lists_on_the_command_line():
    from destila.student.layers import format_layer_list, parse_layer_list

    assert parse_layer_list("0-7,27-29") == [0, 1, 2, 3, 4, 5, 6, 7, 27, 28, 29]
    assert format_layer_list([29, 0, 1, 2, 14]) == "0-2,14,29"
    from destila.cli.demo import DemoRun

    assert DemoRun().settings().student_layers is None  # the default student keeps every layer, pruned in width
    assert DemoRun().settings().student_width == {"hidden_size": 528, "num_attention_heads": 6,
                                                  "num_key_value_heads": 2, "intermediate_size": 527}
    cut = DemoRun(layers="0-7,27-29", hidden_size=0, num_attention_heads=0, num_key_value_heads=0,
                  intermediate_size=0).settings()
    assert cut.student_layers == [*range(8), 27, 28, 29] and cut.student_width == {}
    with pytest.raises(ValueError, match="expected teacher layer indices like 0-7,27-29, found 'six'"):
        parse_layer_list("six")


def test_the_training_cache_takes_the_settings_targets_and_the_held_out_cache_stays_top_k(tmp_path):
    def targets(**settings):
        demo = Demo(tmp_path, DemoSettings(**settings), texts=["unused"], console=Console(quiet=True))
        return demo._cache_options(training=True)["targets"], demo._cache_options()["targets"]

    trained_on, held_out = targets()
    assert (trained_on.kind, trained_on.samples) == ("sampled", 64)
    assert (held_out.kind, held_out.top_k) == ("topk", 100)
    trained_on, held_out = targets(train_targets="topk", top_k=20, samples=16)
    assert (trained_on.kind, trained_on.top_k) == ("topk", 20) and held_out == trained_on
    assert targets(samples=16)[0].samples == 16
    with pytest.raises(ValueError, match="train_targets: expected one of topk, sampled, found 'dense'"):
        DemoSettings(train_targets="dense")


def test_the_precision_flag_reaches_the_settings_and_refuses_an_unknown_one(capsys):
    from destila.cli.demo import DemoRun
    from destila.cli.main import build_parser, main

    args = build_parser().parse_args(["demo", "--precision", "float32"])
    assert args.precision == "float32" and DemoRun(precision=args.precision).settings().precision == "float32"
    assert DemoRun().settings().precision == "auto"
    with pytest.raises(SystemExit) as done:
        main(["demo", "--precision", "fp16"])
    assert done.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # argparse quotes the choices on some Pythons
    assert re.fullmatch(r"destila demo: error: argument --precision: invalid choice: 'fp16' "
                        r"\(choose from '?auto'?, '?float32'?, '?bfloat16'?\)", last), last


def test_a_layer_the_teacher_lacks_is_refused_before_the_teacher_pass(tiny_llama_dir, tmp_path):
    settings = DemoSettings(teacher=str(tiny_llama_dir), seq_len=32, train_tokens=32 * 8, student_layers=[0, 9])
    with pytest.raises(ValueError, match="between 0 and 3 \\(the teacher has 4 layers\\), found \\[0, 9\\]"):
        Demo(tmp_path, settings, texts=pydoc_texts(12), console=Console(record=True)).run()
    assert not (tmp_path / "cache-heldout").exists()
    # No stage finished, so the same folder takes the corrected command (it stops at the budget, past the layers).
    from destila.demo import DemoWontFit

    corrected = dataclasses.replace(settings, student_layers=[0, 3], student_width={}, minutes=0.01)
    with pytest.raises(DemoWontFit):
        Demo(tmp_path, corrected, texts=pydoc_texts(12), console=Console(record=True)).run()
    assert json.loads((tmp_path / "recipe.json").read_text())["student_layers"] == [0, 3]
    assert list(json.loads((tmp_path / "stages.json").read_text())) == ["teacher", "heldout", "student"]


def test_too_little_time_is_refused_before_the_training_cache_and_force_says_so_first(tiny_llama_dir, tmp_path,
                                                                                       monkeypatch):
    from destila.demo import DemoWontFit

    score_in_this_process(monkeypatch)  # what is asserted is the budget's refusal and the forced report

    common = dict(teacher=str(tiny_llama_dir), seq_len=32, train_tokens=32 * 48, eval_tokens=32 * 8, top_k=8,
                  student_layers=[0, 3], student_width={}, batch_size=4, max_steps=400, min_steps=20,
                  eval_reserve_seconds=5, new_tokens=4, task_questions=0, eval_curve_sequences=2)
    # 0.01 minutes: the held-out pass alone uses them up, so no step fits.
    with pytest.raises(DemoWontFit, match=r"training steps per student fit in --minutes 0.01 .* needs at least 20, "
                                          r"about \d+ minutes: rerun with --minutes \d+"):
        Demo(tmp_path / "refused", DemoSettings(minutes=0.01, **common), texts=pydoc_texts(12),
             console=Console(record=True)).run()
    assert not (tmp_path / "refused" / "cache").exists()  # refused before the training cache
    # The refusal's advice, taken in the same folder: another budget, or --force, resumes the run.
    console = Console(record=True, width=200)
    Demo(tmp_path / "refused", DemoSettings(minutes=0.02, force=True, **common), texts=pydoc_texts(12),
         console=console).run()
    assert console.export_text().count("done before") == 3  # the teacher, its held-out pass, the student
    markdown = (tmp_path / "refused" / "report.md").read_text()
    assert markdown.split("\n\n")[1].startswith("**Below the minimum: these results come from fewer than 20")
