"""`destila demo`: the embedded default run end to end, its time budget, stages, continuations and report.

- :mod:`~destila.demo.pipeline`: the stages in order (:class:`Demo`, :class:`DemoSettings`)
- :mod:`~destila.demo.budget`: how many training steps fit in the minutes left
- :mod:`~destila.demo.stages`: the stage log that lets a rerun skip finished stages, and one training stage
- :mod:`~destila.demo.samples`: greedy continuations and the degeneracy check
- :mod:`~destila.demo.report`: the markdown report and its figures

Importing this package stays light (no transformers): ``destila --help`` imports it.
"""

from destila.demo.pipeline import DEMO_PROMPTS, Demo, DemoSettings, DemoWontFit, split_documents, training_runs

__all__ = ["DEMO_PROMPTS", "Demo", "DemoSettings", "DemoWontFit", "split_documents", "training_runs"]
