"""`destila recipe self MODEL DATA`: a model distilled into a fresh copy of itself ("born-again").

The model's own top-K cache over the training documents is the target; the
student has the model's architecture and starts from random weights
(``init="random"``, the born-again setting) or from the model's own weights
(``init="copy"``: self-distillation as a regulariser, which needs far fewer
steps). Both are evaluated on held-out documents against the model's cache.

Naive equivalent::

    cache = build_cache(model, train_docs)
    student = reinitialise(copy(model))          # or copy(model)
    student = train(student, cache)
"""

from __future__ import annotations

from dataclasses import asdict

from destila.recipes.common import Recipe, RecipeSettings

# The student's starting weights, and the name it goes by in the report.
INITS = {"random": "born-again", "copy": "self-distilled"}


class SelfRecipe(Recipe):
    title = "self-distillation"

    def __init__(self, model: str, data: str, out, settings: RecipeSettings | None = None, init: str = "random",
                 **kwargs):
        if init not in INITS:
            raise ValueError(f"init: expected one of {', '.join(INITS)}, found {init!r}")
        super().__init__(data, out, settings, **kwargs)
        self.model, self.start = model, init

    def describe(self) -> dict:
        return {"model": self.model, "data": self.data, "init": self.start, **asdict(self.settings)}

    def _init(self, model: str) -> dict:
        # transformers takes seconds to import: only when the recipe runs
        from transformers import AutoConfig

        if self.start == "copy":  # all layers "cut": an exact copy
            return self.init(model, "init", layers=AutoConfig.from_pretrained(model).num_hidden_layers)
        return self.init(model, "init", config={})

    def run(self) -> dict:
        log = self.log
        self.documents()  # bad data is refused before the first stage writes anything
        self.hold_one_run()
        model = log.run("model", "model", lambda: self.resolve(self.model))["path"]
        held = log.run("heldout-cache", "held-out cache of the model (for evaluation)",
                       lambda: self.cache(model, "cache-heldout", held_out=True))
        cache = log.run("cache", "cache of the model over the training documents",
                        lambda: self.cache(model, "cache"))
        init = log.run("init", f"student: the model's architecture, {self.start} weights",
                       lambda: self._init(model))
        name = INITS[self.start]
        result = log.run("train", f"distil the model into its {name} copy",
                         lambda: self.train(init["path"], cache["path"], "student"))
        evaluation = log.run("evaluate", "evaluation on held-out documents",
                             lambda: self.evaluate([model, result["path"]], ["model", name], held["path"]))
        self.report(evaluation, {k: v for k, v in held.items() if k != "path"}, {name: result["path"]})
        return self.log.state()
