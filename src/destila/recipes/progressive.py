"""`destila recipe progressive TEACHER DATA --stages 15,6`: distil through smaller assistants.

A large gap between teacher and student is bridged in steps (teacher
assistants): teacher → 15-layer assistant → 6-layer student. Stage i cuts its
model from the previous stage's model (evenly spaced layers, as ``destila
student init`` does), caches the previous model's top-K over the training
documents, and distils from that cache. Every model is then evaluated on
held-out documents against the teacher's own cache.

Naive equivalent::

    previous = teacher
    for layers in stages:
        cache = build_cache(previous, train_docs)
        student = cut(previous, layers)
        previous = train(student, cache)
"""

from __future__ import annotations

from dataclasses import asdict

from destila.recipes.common import Recipe, RecipeSettings


def parse_stages(text: str | list[int]) -> list[int]:
    """``"15,6"`` → ``[15, 6]``: strictly decreasing positive layer counts."""
    try:
        stages = [int(x) for x in text.split(",")] if isinstance(text, str) else [int(x) for x in text]
    except ValueError:
        raise ValueError(f"stages: expected comma-separated layer counts such as 15,6, found {text!r}") from None
    if not stages or any(n < 1 for n in stages) or any(a <= b for a, b in zip(stages, stages[1:])):
        raise ValueError(f"stages: expected strictly decreasing positive layer counts such as 15,6, found {text!r}")
    return stages


class ProgressiveRecipe(Recipe):
    title = "progressive distillation"

    def __init__(self, teacher: str, data: str, out, stages: str | list[int], settings: RecipeSettings | None = None,
                 **kwargs):
        super().__init__(data, out, settings, **kwargs)
        self.teacher = teacher
        self.stages = parse_stages(stages)

    def describe(self) -> dict:
        return {"teacher": self.teacher, "data": self.data, "stages": ",".join(map(str, self.stages)),
                **asdict(self.settings)}

    def _check_depth(self, teacher_path: str) -> None:
        # transformers takes seconds to import: only when the recipe runs
        from transformers import AutoConfig

        layers = AutoConfig.from_pretrained(teacher_path).num_hidden_layers
        if self.stages[0] >= layers:
            raise ValueError(f"stages: the first stage ({self.stages[0]} layers) must be smaller than the "
                             f"teacher's {layers} layers")

    def run(self) -> dict:
        log = self.log
        self.documents()  # bad data is refused before the first stage writes anything
        self.hold_one_run()
        teacher = log.run("teacher", "teacher", lambda: self.resolve(self.teacher))["path"]
        self._check_depth(teacher)
        held = log.run("heldout-cache", "held-out cache of the teacher (for evaluation)",
                       lambda: self.cache(teacher, "cache-heldout", held_out=True))
        previous, names, models, trained = teacher, ["teacher"], [teacher], {}
        count = len(self.stages)
        for i, layers in enumerate(self.stages, start=1):
            where = f"stage{i}"
            source = previous
            cache = log.run(f"{where}-cache", f"stage {i}/{count}: cache of the {names[-1]}",
                            lambda: self.cache(source, f"{where}/cache"))
            init = log.run(f"{where}-init", f"stage {i}/{count}: {layers} layers cut from the {names[-1]}",
                           lambda: self.init(source, f"{where}/init", layers=layers))
            result = log.run(f"{where}-train", f"stage {i}/{count}: distil the {layers}-layer model",
                             lambda: self.train(init["path"], cache["path"], f"{where}/student"))
            previous = result["path"]
            name = f"{layers}-layer" + (" student" if i == count else " assistant")
            names.append(name)
            models.append(previous)
            trained[name] = previous
        evaluation = log.run("evaluate", "evaluation on held-out documents",
                             lambda: self.evaluate(models, names, held["path"]))
        self.report(evaluation, {k: v for k, v in held.items() if k != "path"}, trained)
        return self.log.state()
