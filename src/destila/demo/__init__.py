"""`destila demo`: the embedded default run end to end, its time budget, stages, continuations and report.

- :mod:`~destila.demo.settings`: what the demo runs (:class:`DemoSettings`, the prompts)
- :mod:`~destila.demo.pipeline`: the stages in order (:class:`Demo`)
- :mod:`~destila.demo.budget`: how many training steps fit in the minutes left
- :mod:`~destila.demo.stages`: the stage log that lets a rerun skip finished stages, and one training stage
- :mod:`~destila.demo.samples`: greedy continuations and the degeneracy check
- :mod:`~destila.demo.report`: the markdown report and its figures

Public names are loaded lazily: the command line reads :mod:`~destila.demo.settings` for its flags
without importing the pipeline (transformers, the trainer).
"""

from importlib import import_module

_PUBLIC = {
    "DEMO_PROMPTS": "destila.demo.settings",
    "DemoSettings": "destila.demo.settings",
    "Demo": "destila.demo.pipeline",
    "DemoWontFit": "destila.demo.pipeline",
    "split_documents": "destila.demo.pipeline",
    "training_runs": "destila.demo.pipeline",
}

__all__ = list(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'destila.demo' has no attribute {name!r}")
