"""Built-in offline task family: which word comes next in held-out text (``<corpus>_next_word``)?

Each question is a stretch of a held-out document's prose ending just before
a word (``context``) and four candidate words (``choices``): the word that
follows and three other words **of exactly the same length** drawn from the
same held-out text, as often as each occurs there (so the true word is no
more frequent than its rivals on average). Chance is 25%.

Why words, and why of one length:

- The harness scores a choice by its total log-likelihood (``acc``).
  Choices of different lengths are not comparable that way: a shorter one
  pays for fewer tokens, and a model can fall below chance by preferring it
  whatever it says. Here every choice has the same number of characters, so
  ``acc`` is meaningful as it stands (``acc_norm``, the same divided by that
  length, would rank them identically and is not reported).
- A short held-out text holds many words but few sentences, so a word
  task reaches hundreds of questions (a standard error near 2 points)
  where a sentence task (``pydoc_cloze``) has about a hundred.
- A one-token choice is scored from the context's single forward pass
  (the harness reuses it across the choices), so a question costs about
  one forward of its context.

The blanked words are lower-case words of at least ``MIN_WORD_CHARS``
letters, at least ``MIN_WORDS_BEFORE`` words into their sentence. The
context is that sentence up to the word, preceded by as many whole earlier
sentences of the same paragraph run as fit in ``CONTEXT_CHARS`` characters.
Of all such words, ``questions`` are drawn with ``seed``; the same text and
seed give the same questions.

Naive equivalent::

    for context, word in sampled(words_with_their_preceding_text(held_out)):
        choices = shuffled([word, *other_words_of_length(len(word), 3)])
        score[model] += argmax(loglikelihood(context, " " + c) for c in choices) == choices.index(word)
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from functools import partial
from pathlib import Path

from destila.eval.tasks.files import write_task
from destila.eval.tasks.pydoc_cloze import prose_runs
from destila.eval.tasks.sources import HELD_OUT_TEXT

SUFFIX = "next_word"
TEMPLATE = Path(__file__).with_name(f"{SUFFIX}.yaml")
CHOICES = 4
QUESTIONS = 600
"""Questions per task: a standard error of at most 2.04 points (at 50% accuracy), whatever the score."""
MIN_WORD_CHARS = 4
MIN_WORDS_BEFORE = 3
CONTEXT_CHARS = 200

# A lower-case word, then at most some closing punctuation (kept in the text, not in the choice).
_WORD = re.compile(rf"([a-z]{{{MIN_WORD_CHARS},}})[.,;:!?)\"”’']*")


def task_name(corpus: str) -> str:
    return f"{corpus}_{SUFFIX}"


def _context(run: list[str], sentence: int, prefix: str) -> str:
    """``prefix`` (the sentence up to the word), after the run's earlier sentences that fit in CONTEXT_CHARS."""
    if len(prefix) > CONTEXT_CHARS:  # a long sentence: its last CONTEXT_CHARS characters, from a word start
        cut = prefix.find(" ", len(prefix) - CONTEXT_CHARS)
        return prefix[cut + 1:] if cut >= 0 else prefix[-CONTEXT_CHARS:]
    context = prefix
    for earlier in reversed(run[:sentence]):
        if len(earlier) + 1 + len(context) > CONTEXT_CHARS:
            break
        context = f"{earlier} {context}"
    return context


def blanks(documents: list[str]) -> list[dict]:
    """Every place a question can be asked: ``{"context", "word", "document", "sentence"}`` in document order
    (``sentence``: the sentence's number in its document, counted over its prose runs)."""
    found = []
    for index, document in enumerate(documents):
        number = 0
        for run in prose_runs(document):
            for sentence, text in enumerate(run):
                words = list(re.finditer(r"\S+", text))
                for word in words[MIN_WORDS_BEFORE:]:
                    match = _WORD.fullmatch(word.group())
                    if match:
                        found.append({"context": _context(run, sentence, text[:word.start()].rstrip()),
                                      "word": match.group(1), "document": index, "sentence": number})
                number += 1
    return found


def next_word_questions(documents: list[str], questions: int = QUESTIONS, seed: int = 0,
                        name: str = SUFFIX) -> list[dict]:
    """``{"context", "choices", "answer", "document", "sentence"}`` per question (``answer``: index of the true
    word; questions of one sentence share ``document`` and ``sentence``).

    ``questions`` of the possible blanks are drawn (all of them when there
    are fewer), in document order. A word whose length has fewer than three
    other words in the text cannot be asked and is skipped.
    """
    if questions < 1:
        raise ValueError(f"{name}: expected at least 1 question, found {questions}")
    places = blanks(documents)
    by_length: dict[int, list[str]] = defaultdict(list)  # every occurrence: drawn as often as it occurs
    for place in places:
        by_length[len(place["word"])].append(place["word"])
    askable = [p for p in places if len(set(by_length[len(p["word"])]) - {p["word"]}) >= CHOICES - 1]
    if not askable:
        raise ValueError(f"{name}: the documents hold no lower-case word of {MIN_WORD_CHARS}+ letters with "
                         f"{CHOICES - 1} others of its length; give more text")
    rng = random.Random(seed)
    chosen = sorted(rng.sample(range(len(askable)), min(questions, len(askable))))
    rows = []
    for place in (askable[i] for i in chosen):
        word, pool = place["word"], by_length[len(place["word"])]
        others: list[str] = []
        while len(others) < CHOICES - 1:
            other = rng.choice(pool)
            if other != word and other not in others:
                others.append(other)
        choices = [word, *others]
        rng.shuffle(choices)
        rows.append({"context": place["context"], "choices": choices, "answer": choices.index(word),
                     "document": place["document"], "sentence": place["sentence"]})
    return rows


def build_next_word(corpus: str, folder: str | Path | None = None, *, questions: int = QUESTIONS,
                    seed: int = 0) -> Path:
    """Write ``<corpus>_next_word`` (its JSON lines and YAML) into ``folder``; return the YAML's path.

    ``corpus`` names an entry of :data:`destila.eval.tasks.sources.HELD_OUT_TEXT`;
    ``folder`` defaults to ``$DESTILA_HOME/tasks/<corpus>_next_word``.
    """
    if corpus not in HELD_OUT_TEXT:
        raise ValueError(f"next-word task: expected a corpus among {', '.join(HELD_OUT_TEXT)}, found {corpus!r}")
    name = task_name(corpus)
    rows = next_word_questions(HELD_OUT_TEXT[corpus](), questions=questions, seed=seed, name=name)
    return write_task(folder, name, TEMPLATE, rows)


NEXT_WORD_TASKS = {task_name(corpus): partial(build_next_word, corpus) for corpus in HELD_OUT_TEXT}
"""``<corpus>_next_word`` → its builder, one per held-out corpus."""
