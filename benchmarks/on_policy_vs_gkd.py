"""Off-policy KD on teacher-written answers, destila's on-policy rounds and TRL's GKDTrainer (lmbda=1),
at equal student steps, from the same starting student.

- ``offline``: the teacher answers the training prompts (``destila generate``), one teacher pass caches its
  top-K on those answers, the student trains ``rounds × steps_per_round`` steps on that cache;
- ``on-policy``: ``destila recipe on-policy`` (``rounds`` rounds of ``steps_per_round`` steps);
- ``trl-gkd``: ``trl.experimental.gkd.GKDTrainer`` with ``lmbda=1`` (the student samples every batch, the
  teacher is loaded beside it and scores the samples over the full vocabulary), ``rounds × steps_per_round`` steps.

All three use the same loss (generalised JSD, ``beta``), batch size, learning rate, sampling temperature and answer
length. Each trains in its own process (:func:`destila.bench.run_isolated`): its peak memory (RSS on CPU,
allocated bytes on CUDA) and wall time are its own. Every final student is then scored on the held-out prompts,
with the teacher's top-K bucket KL per answer token (K = ``top_k``):

- on its own answers (the on-policy metric: the student answers, the teacher scores), seeded alike for all;
- on the teacher's answers (one set, written once).

usage (after `make install`; default: the embedded SmolLM2 teacher and a 6-layer student cut from it)::

    .venv/bin/python benchmarks/on_policy_vs_gkd.py --work /tmp/on-policy-bench --seeds 0,1 \\
        --json benchmarks/results/on_policy_vs_gkd.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

# Every library a method uses, imported before the measuring child takes its baseline, so that each method is
# charged for what it allocates (models, activations, optimizer state), not for which modules it imports.
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
import datasets  # noqa: E402,F401
import transformers  # noqa: E402,F401
from trl.experimental.gkd import GKDTrainer  # noqa: E402,F401

import destila.cache  # noqa: E402,F401
import destila.eval.run  # noqa: E402,F401
import destila.generation  # noqa: E402,F401
import destila.recipes  # noqa: E402,F401
import destila.training  # noqa: E402,F401
from destila.io.json_lines import append_json_line, json_lines  # noqa: E402
from destila.io.markdown import markdown_table  # noqa: E402

HERE = Path(__file__).resolve().parent
WORKER = "on_policy_vs_gkd"  # this file, imported by the measuring child processes
METHODS = ("offline", "on-policy", "trl-gkd")


def prompts_from_pydoc(count: int) -> list[str]:
    """Questions about Python's documentation topics, in topic order (a generated chat set)."""
    from pydoc_data.topics import topics

    names = sorted(topics)
    step = max(1, len(names) // count)
    return [f"Explain the Python topic '{name}' in two sentences." for name in names[::step][:count]]


def settings_for(args, seed: int) -> dict:
    return dict(rounds=args.rounds, steps_per_round=args.steps_per_round, samples_per_prompt=1,
                max_new_tokens=args.max_new_tokens, temperature=1.0, top_k=args.top_k, seq_len=args.seq_len,
                batch_size=args.batch_size, learning_rate=args.learning_rate, holdout_every=args.holdout_every,
                device=args.device, seed=seed, save_steps=max(args.steps_per_round, 10))


def _recipe(teacher, student, prompts, out, settings, beta: float = 0.5):
    """The recipe object: its stages are the building blocks of every method here (one loss for all)."""
    from destila.losses import LossOptions
    from destila.recipes import OnPolicyRecipe, OnPolicySettings

    return OnPolicyRecipe(teacher, student, prompts, out, OnPolicySettings(**settings),
                          LossOptions(divergence="jsd", beta=beta))


def _split(prompts: str, holdout_every: int):
    from destila.generation.prompts import load_prompts
    from destila.recipes.on_policy_data import split_prompts

    return split_prompts(load_prompts(prompts), holdout_every)


# -- the three trainings (each one process) ------------------------------------------------------------


def train_on_policy(teacher: str, student: str, prompts: str, out: str, settings: dict, beta: float) -> dict:
    report = _recipe(teacher, student, prompts, out, settings, beta).run()
    state = json.loads((Path(out) / "stages.json").read_text())
    training = sum(v["seconds"] for k, v in state.items() if k.split("-", 1)[1] in ("sample", "teacher", "train"))
    return {"student": report["student"], "training_stage_seconds": training}


def train_offline(teacher: str, student: str, prompts: str, out: str, settings: dict, beta: float) -> dict:
    out = Path(out)
    recipe = _recipe(teacher, student, prompts, out, settings, beta)
    train, _ = _split(prompts, settings["holdout_every"])
    samples = recipe.sample(teacher, train, out / "teacher-samples.jsonl", seed=settings["seed"] + 1)
    cache = recipe.teacher_pass(teacher, samples["path"], out / "cache")
    recipe.settings.steps_per_round = settings["rounds"] * settings["steps_per_round"]
    result = recipe.train(student, cache["path"], out / "student", 1)
    return {"student": result["path"], "steps": result["steps"]}


def train_gkd(teacher: str, student: str, prompts: str, out: str, settings: dict, beta: float) -> dict:
    """TRL's GKDTrainer, fully on-policy: the student samples each batch and the resident teacher scores it."""
    import torch
    from datasets import Dataset
    from trl.experimental.gkd import GKDConfig, GKDTrainer

    from destila.generation.run import use_chat_template
    from destila.generation.sampling import render
    from destila.models import load_causal_lm, load_tokenizer

    tokenizer = load_tokenizer(student)
    train, _ = _split(prompts, settings["holdout_every"])
    use_template = use_chat_template(tokenizer, train, "auto")
    texts = [render(p, tokenizer, use_template) for p in train]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def collate(rows: list[dict]) -> dict:
        # Prompts left-padded, as generate needs; GKD (lmbda=1) replaces input_ids by the samples and adds
        # their labels. No labels here: the Trainer would count this batch's (none) as the loss's divisor.
        ids = [tokenizer(r["text"], add_special_tokens=False)["input_ids"] for r in rows]
        width = max(map(len, ids))
        prompts_ = torch.full((len(ids), width), pad, dtype=torch.long)
        mask = torch.zeros((len(ids), width), dtype=torch.long)
        for row, seq in enumerate(ids):
            prompts_[row, width - len(seq):] = torch.tensor(seq)
            mask[row, width - len(seq):] = 1
        return {"prompts": prompts_, "prompt_attention_mask": mask, "input_ids": prompts_, "attention_mask": mask}

    device = settings["device"]
    args = GKDConfig(
        output_dir=out, max_steps=settings["rounds"] * settings["steps_per_round"],
        per_device_train_batch_size=settings["batch_size"], learning_rate=settings["learning_rate"],
        lr_scheduler_type="constant_with_warmup", warmup_steps=5, logging_steps=1, save_strategy="no",
        report_to="none", seed=settings["seed"], lmbda=1.0, beta=beta, temperature=settings["temperature"],
        max_new_tokens=settings["max_new_tokens"], seq_kd=False, use_cpu=device == "cpu", disable_tqdm=True,
        dataloader_num_workers=0, remove_unused_columns=False,
    )
    trainer = GKDTrainer(model=load_causal_lm(student, device=device),
                         teacher_model=load_causal_lm(teacher, device=device), args=args,
                         train_dataset=Dataset.from_dict({"text": texts}), data_collator=collate,
                         processing_class=tokenizer)
    trainer.train()
    trainer.save_model(out)
    tokenizer.save_pretrained(out)
    return {"student": out, "steps": trainer.state.global_step}


# -- scoring --------------------------------------------------------------------------------------------


def teacher_answers(teacher: str, prompts: str, out: str, settings: dict) -> dict:
    """The teacher's answers to the held-out prompts and their top-K cache (written once, shared)."""
    out = Path(out)
    recipe = _recipe(teacher, teacher, prompts, out, settings)
    _, held = _split(prompts, settings["holdout_every"])
    samples = recipe.sample(teacher, held, out / "samples.jsonl", seed=7)
    return recipe.teacher_pass(teacher, samples["path"], out / "cache")


def score(teacher: str, student: str, prompts: str, out: str, settings: dict, teacher_cache: str) -> dict:
    """KL to the teacher on the student's own held-out answers and on the teacher's."""
    out = Path(out)
    recipe = _recipe(teacher, student, prompts, out, settings)
    _, held = _split(prompts, settings["holdout_every"])
    # The seed of the recipe's own per-round held-out answers: the on-policy student's last round scores alike.
    own = recipe.sample(student, held, out / "own-samples.jsonl", seed=settings["seed"] + 1_000_003)
    own_cache = recipe.teacher_pass(teacher, own["path"], out / "own-cache")
    on_own = recipe.evaluate(student, own_cache["path"])
    on_teacher = recipe.evaluate(student, teacher_cache)
    return {"kl_own_answers": on_own["kl_to_teacher"], "kl_teacher_answers": on_teacher["kl_to_teacher"],
            "own_answer_tokens": on_own["tokens"], "teacher_answer_tokens": on_teacher["tokens"]}


# -- driver ---------------------------------------------------------------------------------------------


def isolated(target: str, kwargs: dict, device: str) -> dict:
    from destila.bench import run_isolated

    run = run_isolated(f"{WORKER}:{target}", kwargs, device=device)
    if run["status"] != "ok":
        sys.exit(f"on_policy_vs_gkd: {target} {kwargs.get('out')} failed ({run['status']}): {run['error']}")
    return run


def build_parser() -> argparse.ArgumentParser:
    """The command line this script reads (the commands shown in the docs are parsed with it by the tests)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher", default="smollm2")
    parser.add_argument("--student", help="starting student (default: --layers layers cut from the teacher)")
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--prompts", type=int, default=60,
                        help="pydoc-topic questions (every --holdout-every-th held out)")
    parser.add_argument("--holdout-every", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps-per-round", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--top-k", type=int, default=100)
    parser.add_argument("--beta", type=float, default=0.5, help="generalised JSD weight, the same for all three")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--work", type=Path, default=Path("/tmp/on-policy-bench"))
    parser.add_argument("--json", type=Path, help="append one JSON line per (method, seed) here")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    args.work.mkdir(parents=True, exist_ok=True)

    from destila.models import resolve_source
    from destila.student import StudentInitSpec, init_student

    teacher = resolve_source(args.teacher)[0]
    student = args.student
    if student is None:
        student = str(args.work / f"student-{args.layers}")
        if not (Path(student) / "config.json").exists():
            init_student(StudentInitSpec(teacher, student, layers=args.layers))
    prompts = args.work / "prompts.jsonl"
    prompts.write_text(json_lines({"messages": [{"role": "user", "content": p}]} for p in prompts_from_pydoc(args.prompts)))
    rows = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        settings = settings_for(args, seed)
        shared = isolated("teacher_answers", dict(teacher=teacher, prompts=str(prompts),
                                                  out=str(args.work / "teacher-heldout"), settings=settings),
                          args.device)["result"]
        start = isolated("score", dict(teacher=teacher, student=student, prompts=str(prompts),
                                       out=str(args.work / f"start-s{seed}"), settings=settings,
                                       teacher_cache=shared["path"]), args.device)["result"]
        rows.append({"method": "start", "seed": seed, **start})
        print(json.dumps(rows[-1]), flush=True)
        for method in args.methods.split(","):
            out = args.work / f"{method}-s{seed}"
            target = {"offline": "train_offline", "on-policy": "train_on_policy", "trl-gkd": "train_gkd"}[method]
            trained = isolated(target, dict(teacher=teacher, student=student, prompts=str(prompts), out=str(out),
                                            settings=settings, beta=args.beta), args.device)
            scores = isolated("score", dict(teacher=teacher, student=trained["result"]["student"],
                                            prompts=str(prompts), out=str(out) + "-score", settings=settings,
                                            teacher_cache=shared["path"]), args.device)["result"]
            rows.append({"method": method, "seed": seed, "peak_bytes": trained["peak_bytes"],
                         "wall_seconds": trained["wall_seconds"], **trained["result"], **scores,
                         "settings": settings, "beta": args.beta, "teacher": args.teacher})
            print(json.dumps(rows[-1]), flush=True)
            if args.json:
                append_json_line(args.json, rows[-1])
    print(table(rows))


def table(rows: list[dict]) -> str:
    """Markdown: per method, the mean over seeds (and each seed) of the KLs, peak memory and wall time."""
    lines = []
    for method in ("start", *METHODS):
        mine = [r for r in rows if r["method"] == method]
        if not mine:
            continue

        def cell(key, fmt):
            values = [r[key] for r in mine if r.get(key) is not None]
            if not values:
                return "–"
            return fmt.format(statistics.mean(values)) + " (" + ", ".join(fmt.format(v) for v in values) + ")"

        lines.append((method, cell("kl_own_answers", "{:.4f}"), cell("kl_teacher_answers", "{:.4f}"), _mib(mine),
                      cell("wall_seconds", "{:.0f} s")))
    return markdown_table(["method", "KL on own answers", "KL on teacher answers", "peak memory", "wall time"], lines,
                          "lllll")


def _mib(rows: list[dict]) -> str:
    values = [r["peak_bytes"] / 2**20 for r in rows if r.get("peak_bytes")]
    return f"{statistics.mean(values):.0f} MiB" if values else "–"


if __name__ == "__main__":
    main()
