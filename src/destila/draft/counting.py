"""Teacher forwards and proposed tokens of one ``generate`` call, counted by forward hooks.

Assisted generation (transformers' ``_assisted_decoding``) loops: a candidate
generator proposes ``c`` tokens, the teacher scores them and one more in a
single forward, and the first ``m ≤ c`` that match the teacher's choice are
kept together with the teacher's own next token. So every teacher forward
adds ``m + 1`` tokens, and its input is the ``c`` proposals plus one token
(the whole prompt plus the proposals on the first forward, which fills the
KV cache). From the input widths alone::

    forwards = number of teacher forward calls
    proposed = Σ (width − 1) over later forwards + (first width − prompt length)
    accepted = new tokens − forwards

which holds for every candidate generator (a draft model, prompt lookup, a
draft on another tokenizer whose proposals arrive as teacher tokens) and
for the teacher alone (proposed = accepted = 0). Hooks see only what
``forward`` is given, so nothing of transformers' private API is touched.

The same hooks time the teacher's and the draft's forwards, so a call's
seconds split into three parts: the teacher's forwards, the draft's, and
the rest (``generate``'s own loop: choosing, comparing, cropping caches).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Counts:
    """What one ``generate`` call cost and yielded."""

    prompt_tokens: int
    widths: list[int] = field(default_factory=list)
    draft_forwards: int = 0
    teacher_seconds: float = 0.0
    draft_seconds: float = 0.0

    @property
    def teacher_forwards(self) -> int:
        return len(self.widths)

    @property
    def proposed(self) -> int:
        if not self.widths:
            return 0
        return (self.widths[0] - self.prompt_tokens) + sum(width - 1 for width in self.widths[1:])

    def accepted(self, new_tokens: int) -> int:
        return new_tokens - self.teacher_forwards


def _width(args, kwargs) -> int:
    ids = kwargs.get("input_ids", args[0] if args else None)
    if ids is None:  # generate may hand the model embeddings instead of ids
        ids = kwargs["inputs_embeds"]
    return int(ids.shape[1])


@contextmanager
def counting(teacher, prompt_tokens: int, draft=None):
    """Count the teacher's forwards (and their widths) and the draft's forwards while the block runs, and time both.

    Yields a :class:`Counts`; the hooks are removed on exit, also on an error.
    """
    counts = Counts(prompt_tokens)
    started = {"teacher": 0.0, "draft": 0.0}

    def on_teacher(_module, args, kwargs):
        counts.widths.append(_width(args, kwargs))
        started["teacher"] = time.perf_counter()

    def on_draft(_module, _args, _kwargs):
        counts.draft_forwards += 1
        started["draft"] = time.perf_counter()

    def teacher_done(_module, _args, _output):
        counts.teacher_seconds += time.perf_counter() - started["teacher"]

    def draft_done(_module, _args, _output):
        counts.draft_seconds += time.perf_counter() - started["draft"]

    handles = [teacher.register_forward_pre_hook(on_teacher, with_kwargs=True),
               teacher.register_forward_hook(teacher_done)]
    if draft is not None:
        handles += [draft.register_forward_pre_hook(on_draft, with_kwargs=True),
                    draft.register_forward_hook(draft_done)]
    try:
        yield counts
    finally:
        for handle in handles:
            handle.remove()
