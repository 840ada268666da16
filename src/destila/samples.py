"""Text a model writes: greedy and sampled continuations of a few prompts, side by side.

Perplexity says how well a model predicts; reading what it writes says
whether that is enough to be useful. Continuations are decoded without
special tokens; sampling is seeded, so a rerun writes the same text.
"""

from __future__ import annotations

import re


def distinct_words(text: str) -> int:
    """How many different words (a letter, then letters, digits or ``_``; case-insensitive) ``text`` holds.

    >>> distinct_words("the file, the FILE and\\n\\n\\n")
    3
    """
    return len({word.lower() for word in re.findall(r"[^\W\d_]\w*", text)})


def continuations(model_path: str, prompts: list[str], new_tokens: int, *, seed: int = 0,
                  temperature: float = 0.8, top_p: float = 0.95) -> list[dict]:
    """``[{"prompt", "greedy", "sampled"}]``: ``new_tokens`` new tokens per prompt, greedy and sampled.

    Naive equivalent: ``pipeline("text-generation", model_path)(prompt, max_new_tokens=new_tokens)``
    once with ``do_sample=False`` and once with ``do_sample=True``.
    """
    import torch

    from destila.models import load_causal_lm, load_tokenizer

    model = load_causal_lm(model_path).eval()
    tokenizer = load_tokenizer(model_path)
    rows = []
    with torch.no_grad():
        for number, prompt in enumerate(prompts):
            inputs = tokenizer(prompt, return_tensors="pt")
            common = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=tokenizer.eos_token_id)
            greedy = model.generate(**inputs, do_sample=False, **common)
            torch.manual_seed(seed + number)
            sampled = model.generate(**inputs, do_sample=True, temperature=temperature, top_p=top_p, top_k=0,
                                     **common)
            start = inputs.input_ids.shape[1]
            rows.append({
                "prompt": prompt,
                "greedy": tokenizer.decode(greedy[0, start:], skip_special_tokens=True),
                "sampled": tokenizer.decode(sampled[0, start:], skip_special_tokens=True),
            })
    return rows
