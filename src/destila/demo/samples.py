"""Text a model writes: greedy continuations of a few prompts, side by side.

Perplexity says how well a model predicts; reading what it writes says
whether that is enough to be useful. Continuations are greedy (the
most likely token at each step, so a rerun writes the same text; a sampled
one would cost as much again and say less about the model itself) and are
decoded without special tokens.
"""

from __future__ import annotations

import re

from destila.models import load_causal_lm, load_tokenizer


def distinct_words(text: str) -> int:
    """How many different words (a letter, then letters, digits or ``_``; case-insensitive) ``text`` holds.

    >>> distinct_words("the file, the FILE and\\n\\n\\n")
    3
    """
    return len({word.lower() for word in re.findall(r"[^\W\d_]\w*", text)})


def degenerate(text: str, min_distinct: int = 5) -> str | None:
    """Why ``text`` reads as a degenerate continuation, in words; ``None`` when it does not.

    Degenerate: fewer than ``min_distinct`` distinct words, or one n-gram of words (numbers count)
    repeated back to back: a 1- to 3-word n-gram three times running, a longer one (up to 10 words)
    twice running. Ordinary prose repeats words, but not the same phrase immediately after itself.

    >>> degenerate("The Python 2.1, 200, 200, 200).")
    'only 2 distinct words'
    >>> degenerate("Open the file in the mode you need: 200, 200, 200")
    "repeats '200' 3 times in a row"
    >>> degenerate("Use open() with a mode, then read the file line by line.") is None
    True
    """
    distinct = distinct_words(text)
    if distinct < min_distinct:
        return f"only {distinct} distinct word{'s' * (distinct != 1)}"
    words = [w.lower() for w in re.findall(r"\w+", text)]
    for n in range(1, 11):
        runs_needed = 3 if n <= 3 else 2
        for start in range(len(words) - n * runs_needed + 1):
            gram = words[start:start + n]
            if all(words[start + k * n:start + (k + 1) * n] == gram for k in range(runs_needed)):
                return f"repeats {' '.join(gram)!r} {runs_needed} times in a row"
    return None


def continuations(model_path: str, prompts: list[str], new_tokens: int) -> list[dict]:
    """``[{"prompt", "greedy"}]``: ``new_tokens`` new tokens per prompt, greedy.

    Naive equivalent: ``pipeline("text-generation", model_path)(prompt, max_new_tokens=new_tokens,
    do_sample=False)`` per prompt.
    """
    # heavy: torch, only when samples are generated
    import torch

    model = load_causal_lm(model_path).eval()
    tokenizer = load_tokenizer(model_path)
    rows = []
    with torch.no_grad():
        for prompt in prompts:
            inputs = tokenizer(prompt, return_tensors="pt")
            greedy = model.generate(**inputs, do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                    pad_token_id=tokenizer.eos_token_id)
            start = inputs.input_ids.shape[1]
            rows.append({"prompt": prompt, "greedy": tokenizer.decode(greedy[0, start:], skip_special_tokens=True)})
    return rows
