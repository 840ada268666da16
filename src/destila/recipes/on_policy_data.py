"""The data of the on-policy recipe: which prompts each round samples, the teacher's view of the samples,
and the round's training set (the round's own cache, mixed with a fixed offline cache).

Naive equivalent of one round's data::

    prompts = train_prompts[window(round)]
    samples = student.generate(prompts)                      # destila.generation.generate
    pairs = [(rendered_prompt, answer) for each sample]      # write_pairs
    cache = teacher_topk(pairs, loss_on="completion")        # destila.cache.build_cache
    train_set = cache + offline[some] so that a fraction lmbda is on-policy   # MixedCache
"""

from __future__ import annotations

from pathlib import Path

import torch

from destila.generation.prompts import Prompt
from destila.io import write_atomic
from destila.io.json_lines import json_lines, read_json_lines


def split_prompts(prompts: list[Prompt], holdout_every: int) -> tuple[list[Prompt], list[Prompt]]:
    """``(train, held_out)``: every ``holdout_every``-th prompt is held out for the per-round metrics."""
    train = [p for i, p in enumerate(prompts) if i % holdout_every != holdout_every - 1]
    held = [p for i, p in enumerate(prompts) if i % holdout_every == holdout_every - 1]
    if not held or not train:
        raise ValueError(
            f"prompts: {len(prompts)} prompts with every {holdout_every}th held out leave "
            f"{len(train)} to train on and {len(held)} to evaluate on; give at least {holdout_every} prompts "
            "or a smaller --holdout-every"
        )
    return train, held


def round_window(count: int, per_round: int | None, round_number: int) -> list[int]:
    """Indices (into the training prompts) that round ``round_number`` (1-based) samples.

    All of them when ``per_round`` is None; otherwise the next ``per_round``
    prompts in order, wrapping around, so successive rounds see new prompts.
    Naive equivalent: ``[(start + i) % count for i in range(per_round)]``, ``start = (round - 1) * per_round``.
    """
    if per_round is None or per_round >= count:
        return list(range(count))
    start = (round_number - 1) * per_round
    return [(start + i) % count for i in range(per_round)]


def write_pairs(samples: str | Path, pairs: str | Path) -> dict:
    """The samples of ``destila generate`` as prompt/completion pairs for the teacher pass; counts.

    ``prompt`` is the text the student read (the chat template applied when
    it was), ``completion`` its answer, so the cache holds targets on the
    answer only (``loss_on="completion"``). Written to a temporary name and
    renamed: a kill leaves the whole file or none.
    """
    samples, pairs = Path(samples), Path(pairs)
    rows, finished = [], 0
    for record in read_json_lines(samples):
        answer = record["messages"][-1]["content"]
        text = record["text"]
        prompt = text[: len(text) - len(answer)] if answer else text
        rows.append({"prompt": prompt, "completion": answer})
        finished += bool(record.get("finished"))
    if not any(r["completion"] for r in rows):
        raise ValueError(f"samples: every answer in {samples} is empty (the student ended each one at once); "
                         "nothing to distil. Raise --max-new-tokens or start from a student that writes")
    write_atomic(pairs, json_lines(rows, ensure_ascii=False))
    return {"samples": len(rows), "finished": finished}


def answer_tokens(samples: str | Path, tokenizer, skip: set = frozenset()) -> int:
    """Tokens the student generated in ``samples`` (its answers, re-tokenised), for the generation speed;
    ``skip``: ``(prompt_index, sample)`` pairs left out (those written by an earlier, killed run)."""
    records = read_json_lines(samples)
    answers = [r["messages"][-1]["content"] for r in records if (r["prompt_index"], r["sample"]) not in skip]
    return sum(len(ids) for ids in tokenizer(answers, add_special_tokens=False)["input_ids"]) if answers else 0


def check_mixable(on_policy, offline, offline_path) -> None:
    """Refuse an offline cache whose targets do not mean the same thing as the round's cache."""
    a, b = on_policy.manifest, offline.manifest
    checks = [
        ("tokenizer", a.tokenizer_fingerprint, b.tokenizer_fingerprint, "build it with the recipe's teacher"),
        ("vocabulary size", a.vocab_size, b.vocab_size, "build it with the recipe's teacher"),
        ("target kind", a.target_kind, b.target_kind, "build it with --kind topk"),
        ("top-K", on_policy.top_k, offline.top_k, f"build it with --top-k {on_policy.top_k} or pass that --top-k"),
        ("temperature", a.temperature, b.temperature, f"build it with --temperature {a.temperature}"),
    ]
    for what, want, found, fix in checks:
        if want != found:
            raise ValueError(f"mix_offline: {offline_path} has {what} {found!r} but the on-policy caches have "
                             f"{want!r}; {fix}")


class MixedCache(torch.utils.data.Dataset):
    """One round's training set: every sequence of the round's cache plus offline sequences, so that a
    fraction ``lmbda`` of the set is on-policy (GKD's ``lmbda``; the trainer shuffles the set, so each
    batch holds about that fraction).

    The offline sequences are the round's slice of one fixed, seeded
    permutation of the offline cache: successive rounds take fresh ones
    until the cache is used up, then wrap around. Same arguments, same set:
    a resumed round trains on exactly what the uninterrupted one did.
    Attributes other than the items (``manifest``, ``tokenizer_path``,
    ``seq_len``, ``vocab_size``, …) are the round cache's, which is what
    training checks the student against.

    Naive equivalent::

        take = round(len(round_cache) * (1 - lmbda) / lmbda)
        items = list(round_cache) + [offline[i] for i in permutation[(r - 1) * take : r * take]]
    """

    def __init__(self, on_policy, offline, *, lmbda: float, round_number: int, seed: int, offline_path=None):
        if not 0 < lmbda <= 1:
            raise ValueError(f"lmbda: expected a number in (0, 1], found {lmbda}")
        check_mixable(on_policy, offline, offline_path or "the offline cache")
        self.on_policy, self.offline = on_policy, offline
        take = round(len(on_policy) * (1 - lmbda) / lmbda)
        order = torch.randperm(len(offline), generator=torch.Generator().manual_seed(seed)).tolist()
        start = (round_number - 1) * take
        self.offline_indices = [order[(start + i) % len(order)] for i in range(take)]
        # Offline caches may store teacher hidden states; the round caches never do.
        self.fields = set(on_policy[0])

    def __len__(self) -> int:
        return len(self.on_policy) + len(self.offline_indices)

    def __getitem__(self, index: int) -> dict:
        if index < len(self.on_policy):
            return self.on_policy[index]
        item = self.offline[self.offline_indices[index - len(self.on_policy)]]
        return {k: v for k, v in item.items() if k in self.fields}

    def __repr__(self) -> str:
        return f"{self.on_policy.path} mixed with {len(self.offline_indices)} sequences of {self.offline.path}"

    def __getattr__(self, name):
        if name in ("on_policy", "offline", "offline_indices", "fields"):  # not set yet (unpickling)
            raise AttributeError(name)
        return getattr(self.on_policy, name)
