"""The built-in offline task: multiple-choice cloze over held-out Python documentation topics.

Each question is a prose sentence of a held-out topic
(``context``) and four candidate next sentences: the true one and three drawn
from *other* held-out topics. A model that follows the text prefers the true
continuation; chance is 25%. The harness scores it (``acc``: highest total
log-likelihood; ``acc_norm``: per byte), so the figures are the harness's.

The documents are ``pydoc_data.topics`` sorted by name, and the held-out ones
are every ``holdout_every``-th (indices ``holdout_every-1``, ``2*holdout_every-1``, …),
the documents the demo never trains on. Everything is derived from that text
and ``seed``: the same CPython gives the same questions.

Naive equivalent::

    for context, true_next in consecutive_sentences(held_out):
        choices = shuffled([true_next, *random_sentences_from_other_topics(3)])
        score[model] += argmax(loglikelihood(context, c) for c in choices) == choices.index(true_next)
"""

from __future__ import annotations

import random
import re
from pathlib import Path

from destila.eval.tasks.files import default_task_dir, write_task

TASK_NAME = "pydoc_cloze"
TEMPLATE = Path(__file__).with_name(f"{TASK_NAME}.yaml")
CHOICES = 4

# Sentence ends: ., ! or ? then space, then what starts a sentence (a capital, a quote, a bracket).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"“(])")
_UNDERLINE = re.compile(r"^[*=\-~^]+$")
# Prose sentences of moderate length: shorter ones are fragments, longer ones dominate the log-likelihood.
_MIN_CHARS, _MAX_CHARS = 40, 240


def held_out_topics(holdout_every: int = 5) -> list[str]:
    """Every ``holdout_every``-th of Python's documentation topics, sorted by name."""
    # pydoc_data.topics is large (about 0.75 MB of text): only when the task is written
    from pydoc_data.topics import topics

    names = sorted(topics)
    return [topics[n] for i, n in enumerate(names) if i % holdout_every == holdout_every - 1]


def prose_runs(text: str) -> list[list[str]]:
    """The sentences of each run of adjacent prose paragraphs of a topic.

    Titles and indented blocks (code, grammar) are left out and end a run, so
    consecutive sentences of a run are consecutive in the text.
    """
    runs, run = [], []
    for block in re.split(r"\n\s*\n", text):
        lines = block.split("\n")
        if not lines[0] or lines[0][0].isspace() or any(_UNDERLINE.match(line.strip()) for line in lines):
            if run:
                runs.append(run)
            run = []
            continue
        run += [s.strip() for s in _SENTENCE_END.split(" ".join(line.strip() for line in lines))]
    return runs + [run] if run else runs


def _usable(sentence: str) -> bool:
    return _MIN_CHARS <= len(sentence) <= _MAX_CHARS and sentence[-1] in ".!?"


def cloze_questions(documents: list[str], seed: int = 0, context_sentences: int = 1) -> list[dict]:
    """``{"context", "choices", "answer", "topic"}`` per question (``answer``: index of the true choice)."""
    rng = random.Random(seed)
    runs = [prose_runs(doc) for doc in documents]
    pools = [[s for run in doc for s in run if _usable(s)] for doc in runs]
    questions = []
    for topic, doc in enumerate(runs):
        others = [s for other, pool in enumerate(pools) if other != topic for s in pool]
        if len(others) < CHOICES - 1:
            raise ValueError(f"{TASK_NAME}: expected at least {CHOICES - 1} sentences in the other documents, "
                             f"found {len(others)}; give more documents")
        for sentences in doc:
            for i in range(1, len(sentences)):
                if not _usable(sentences[i]):
                    continue
                choices = [sentences[i], *rng.sample(others, CHOICES - 1)]
                rng.shuffle(choices)
                questions.append({"context": " ".join(sentences[max(0, i - context_sentences):i]),
                                  "choices": choices, "answer": choices.index(sentences[i]), "topic": topic})
    if not questions:
        raise ValueError(f"{TASK_NAME}: the documents hold no prose sentence with a predecessor; give more text")
    return questions


def build_pydoc_cloze(folder: str | Path | None = None, *, holdout_every: int = 5, seed: int = 0) -> Path:
    """Write the task (``pydoc_cloze.jsonl`` and ``pydoc_cloze.yaml``) into ``folder``; return the YAML's path.

    ``folder`` defaults to ``$DESTILA_HOME/tasks/pydoc_cloze``; see :func:`destila.eval.tasks.files.write_task`.
    """
    folder = folder if folder is not None else default_task_dir(TASK_NAME)
    return write_task(folder, TASK_NAME, TEMPLATE, cloze_questions(held_out_topics(holdout_every), seed=seed))
