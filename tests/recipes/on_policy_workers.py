"""Workers for the on-policy memory test, each run in a fresh process by :func:`destila.eval.measure.run_isolated`
(this folder is put on PYTHONPATH).

Every library any stage uses is imported here, at the top, so that it sits in
every worker's baseline alike: a stage measured alone and the whole recipe
are then charged for what they allocate, not for which modules they import.
"""

from __future__ import annotations

from pathlib import Path

import datasets  # noqa: F401
import transformers  # noqa: F401
from transformers import Trainer  # noqa: F401

import destila.cache  # noqa: F401
import destila.eval.run  # noqa: F401
import destila.generation  # noqa: F401
import destila.training  # noqa: F401
from destila.generation.prompts import load_prompts
from destila.recipes import OnPolicyRecipe, OnPolicySettings
from destila.recipes.on_policy_data import split_prompts


def whole(teacher: str, student: str, prompts: str, out: str, settings: dict) -> dict:
    """The whole recipe in this process."""
    report = OnPolicyRecipe(teacher, student, prompts, out, OnPolicySettings(**settings)).run()
    return {"rounds": len(report["rounds"]) - 1}


def stage(kind: str, teacher: str, student: str, prompts: str, reference: str, out: str, settings: dict) -> dict:
    """One stage of round 1 alone, on the inputs the whole recipe gave it (``reference`` is its folder)."""
    recipe = OnPolicyRecipe(teacher, student, prompts, out, OnPolicySettings(**settings))
    reference, out = Path(reference), Path(out)
    if kind == "sample":
        train, _ = split_prompts(load_prompts(prompts), recipe.settings.holdout_every)
        return recipe.sample(student, train, out / "samples.jsonl", seed=recipe.settings.seed + 1)
    if kind == "teacher":
        return recipe.teacher_pass(teacher, str(reference / "round1/samples.jsonl"), out / "cache")
    if kind == "train":
        return recipe.train(student, str(reference / "round1/cache"), out / "student", 1)
    if kind == "eval":
        return recipe.evaluate(str(reference / "round1/student"), str(reference / "round1/heldout-cache"))
    raise ValueError(kind)
