"""`StudentInitSpec`: what ``destila student init`` is asked for, one field per flag.

The command's flags are generated from these fields (name, type, default,
choices, help; see :func:`destila.cli.fields.add_fields`). The fields are
:func:`~destila.student.init.init_student`'s keywords, save two the command
turns into them: ``config`` (``KEY=VALUE`` texts → ``config_overrides``) and
``seed`` (left out → 0). Naive equivalent::

    init_student(spec.teacher, spec.out, layers=spec.layers, select=spec.select, data=spec.data, ...,
                 config_overrides=parse_config_overrides(spec.config) if spec.config else None,
                 seed=spec.seed or 0)

Kept free of torch: ``destila --help`` builds this command's parser.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from destila.student.layers import CRITERIA, SELECTIONS, parse_layers

NOT_INIT_KEYWORDS = ("config", "seed")
"""The fields that are not ``init_student``'s keywords as they stand (see the module's docstring)."""


def layers_flag(text: str) -> int | list[int]:
    """``--layers`` read by argparse: :func:`~destila.student.layers.parse_layers`, its error as the flag's error."""
    try:
        return parse_layers(text)
    except ValueError as err:
        # argparse names the flag itself ("argument --layers: ..."): the prefix would say it twice.
        raise argparse.ArgumentTypeError(str(err).removeprefix("--layers: ")) from None


@dataclass
class StudentInitSpec:
    """The teacher, the output folder, how the student is cut (or built fresh), and its calibration text."""

    teacher: str = field(metadata={
        "help": "teacher: HF folder, hub id, .gguf file, or 'smollm2' (embedded default)", "metavar": "teacher"})
    out: str = field(metadata={"help": "output folder (must not exist or be empty)", "aliases": ["-o"]})
    layers: int | list[int] | None = field(default=None, metadata={
        "help": "a count (N layers chosen by --select) or explicit teacher layers such as 0-7,27-29",
        "type": layers_flag})
    config: list[str] | None = field(default=None, metadata={
        "help": "fresh random model of the teacher's architecture with these config changes (a .json file, a JSON "
                "object, or key=value pairs, e.g. num_hidden_layers=4 hidden_size=256)",
        "nargs": "+", "metavar": "JSON|KEY=VALUE"})
    select: str | None = field(default=None, metadata={
        "help": "even: evenly spaced, first and last kept (the default); importance: the layers whose removal costs "
                "most on calibration text; contiguous: drop the block of consecutive layers that changes the hidden "
                "states least (both need --cache or --data)",
        "choices": SELECTIONS})
    criterion: str | None = field(default=None, metadata={
        "help": "importance measure: greedy_kl (drop one layer at a time, each time the one whose removal costs "
                "least KL to the teacher given those already dropped; default), skip_kl (each layer's KL when it "
                "alone is skipped; about half a pass per layer) or block_influence (1 - cosine between the layer's "
                "input and output; one teacher pass)",
        "choices": CRITERIA})
    hidden_size: int | None = field(default=None, metadata={"help": "residual stream width of the student"})
    intermediate_size: int | None = field(default=None, metadata={"help": "MLP width of the student"})
    num_attention_heads: int | None = field(default=None, metadata={
        "help": "query heads per layer (head_dim stays the teacher's)"})
    num_key_value_heads: int | None = field(default=None, metadata={
        "help": "key/value heads per layer (default: the teacher's, or as few as the head count allows)"})
    cache: str | None = field(default=None, metadata={
        "help": "take the calibration tokens from this cache's input_ids", "metavar": "CACHE"})
    data: str | None = field(default=None, metadata={
        "help": "take them from this data: pydoc, a .txt/.jsonl/.parquet/.csv file or a folder", "metavar": "DATA"})
    text_field: str = field(default="text", metadata={"help": "field holding the text in --data rows"})
    calibration_tokens: int | None = field(default=None, metadata={
        "help": "about this many calibration tokens; a quarter of the rows is held out for the perplexity "
                "(default: 4096)"})
    gguf_file: str | None = field(default=None, metadata={"help": "GGUF file name inside the teacher folder"})
    tokenizer: str | None = field(default=None, metadata={
        "help": "give the student this tokenizer (a folder; another vocabulary than the teacher's, e.g. made by "
                "`destila student tokenizer`): a cut keeps the teacher's embedding rows of the tokens both have and "
                "builds the others from their pieces; a fresh model is sized to it", "metavar": "DIR"})
    seed: int | None = field(default=None, metadata={
        "help": "seed for a fresh model's initialisation (with --config; default 0)"})
