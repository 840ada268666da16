"""``pydoc`` as prompts: questions about sentences of Python's documentation, with a held-out split by topic.

The embedded default needs prompts that work offline, as its text does. Each
prose paragraph of ``pydoc_data.topics`` gives one prompt from its first
sentence::

    Explain in simple words: "Assignment of an object to a single target is recursively defined as follows."

Every ``holdout_every``-th topic (in sorted order) is held out whole, so a
held-out prompt never shares a topic with the prompts a draft trains on.
"""

from __future__ import annotations

import re

PYDOC = "pydoc"
"""The name that stands for these prompts wherever a prompt file is expected."""
_TEMPLATE = 'Explain in simple words: "{}"'


def _first_sentences(text: str) -> list[str]:
    sentences = []
    for paragraph in re.split(r"\n\s*\n", text):
        paragraph = " ".join(paragraph.split())
        if len(paragraph) < 60 or not paragraph[0].isupper() or paragraph.endswith(":"):
            continue  # headings, code, lists introduced by a colon
        sentence = re.split(r"(?<=[.!?])\s", paragraph)[0]
        if 40 <= len(sentence) <= 240 and sentence.endswith("."):
            sentences.append(sentence)
    return sentences


def pydoc_prompts(holdout_every: int = 5) -> tuple[list[str], list[str]]:
    """``(training prompts, held-out prompts)``, in topic order (892 and 54 with the default)."""
    # pydoc_data.topics is large (about 0.75 MB of text): only when the prompts are read
    from pydoc_data.topics import topics

    train, held = [], []
    for number, name in enumerate(sorted(topics)):
        prompts = [_TEMPLATE.format(s) for s in _first_sentences(topics[name])]
        (held if number % holdout_every == holdout_every - 1 else train).extend(prompts)
    return train, held
