"""`DraftEvalSpec`: what ``destila eval TEACHER --draft DRAFT --prompts P`` measures, checked once (light to import).

The flags are generated from these fields (:func:`destila.cli.fields.add_fields`); Python callers fill the
same object::

    measure_draft(DraftEvalSpec("smollm2", "draft/", "prompts.txt", max_new_tokens=32))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from destila.ranges import check_finite_at_least, check_int_at_least, check_optional_int_at_least

WAYS = ("teacher", "draft", "prompt_lookup")
"""The three ways every prompt is answered: the teacher alone, assisted by the draft, and prompt-lookup decoding."""


@dataclass(frozen=True)
class DraftEvalSpec:
    """The teacher, the draft, the prompts, and how much and how to generate."""

    teacher: str = field(metadata={"flag": False, "help": "the teacher (eval's one MODEL)"})
    draft: str | None = field(default=None, metadata={
        "help": "measure this model as the teacher's draft in speculative decoding (assisted generation): "
                "the teacher alone, with the draft, and with prompt lookup, on --prompts", "metavar": "DRAFT"})
    prompts: str | list | None = field(default=None, metadata={"flag": False, "help": "eval's --prompts"})
    max_new_tokens: int = field(default=64, metadata={"help": "with --draft: tokens generated per prompt at most"})
    temperature: float = field(default=0.0, metadata={
        "help": "with --draft: 0 is greedy (the text must be the teacher's own, token for token); above 0 samples "
                "(speculative sampling: distributed as the teacher's, seeded by --seed)"})
    seed: int = field(default=0, metadata={"flag": False, "help": "eval's --seed: the sampling seed when sampling"})
    draft_tokens: int = field(default=1, metadata={
        "help": "with --draft: tokens the draft proposes per teacher forward, always (transformers' "
                "num_assistant_tokens, constant schedule, no confidence cut-off); 0 keeps what the draft's "
                "generation_config.json says (for a plain model transformers' adaptive default: up to 20, fewer after "
                "a rejection, drafting stops under 0.4 confidence)"})
    prompt_lookup_tokens: int = field(default=1, metadata={
        "help": "with --draft: tokens prompt-lookup decoding proposes per step (transformers' "
                "prompt_lookup_num_tokens); the default gives it the draft's default budget"})
    matmul: str = field(default="timed", metadata={
        "choices": ("timed", "torch"), "help": "with --draft: 'timed' takes each CPU linear layer of a few rows "
        "the faster of two ways to the same product, timed once per shape, in all three ways alike; 'torch' "
        "keeps torch's own product throughout"})
    draft_vocab: int | None = field(default=None, metadata={
        "help": "with --draft: the draft proposes only from its head's first N rows of the teacher's most frequent "
                "tokens (the draft's draft_vocab.json, written by `destila recipe draft`); the output stays exact"})
    device: str = field(default="cpu", metadata={"flag": False, "help": "eval's --device"})
    ways: tuple[str, ...] = field(default=WAYS, metadata={
        "flag": False, "help": "which ways to run (the teacher alone always: it is the baseline and the reference)"})

    def __post_init__(self):
        if self.prompts is None:
            raise ValueError("--draft: expected --prompts FILE (a .txt file, one prompt per line, or .jsonl rows "
                             "with 'messages' or 'prompt'), found none")
        if isinstance(self.prompts, Path):
            object.__setattr__(self, "prompts", str(self.prompts))
        check_int_at_least("max_new_tokens", self.max_new_tokens, 1)
        check_int_at_least("prompt_lookup_tokens", self.prompt_lookup_tokens, 1)
        check_int_at_least("draft_tokens", self.draft_tokens, 0, hint="0 keeps the draft's own generation config")
        if self.matmul not in ("timed", "torch"):
            raise ValueError(f"matmul: expected 'timed' or 'torch', found {self.matmul!r}")
        check_finite_at_least("temperature", self.temperature, 0, hint="0 means greedy decoding")
        check_optional_int_at_least("draft_vocab", self.draft_vocab, 1)
        unknown = [way for way in self.ways if way not in WAYS]
        if unknown or "teacher" not in self.ways:
            raise ValueError(f"ways: expected 'teacher' and any of {', '.join(WAYS[1:])}, found {list(self.ways)}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0
