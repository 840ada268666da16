"""`StudentInitSpec`: what ``destila student init`` is asked for, one field per flag, checked once.

The command's flags are generated from these fields (name, type, default,
choices, help; see :func:`destila.cli.fields.add_fields`), the command fills
one spec, and :func:`~destila.student.init.init_student` takes the same
object from Python::

    init_student(StudentInitSpec("smollm2", "student/", layers=15, select="importance", data="pydoc"))

Every combination that cannot apply is refused in ``__post_init__``, before
any model is loaded. ``config`` holds the fresh model's config changes: the
flag's texts (``KEY=VALUE``, a JSON object or a ``.json`` file) or, from
Python, the mapping itself; the spec keeps the mapping. A field whose
metadata says ``"flag": False`` is for Python callers only.

Kept free of torch: ``destila --help`` builds this command's parser.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from destila.crosstok.spec import check_tokenizer_folder
from destila.data.spec import as_data_spec
from destila.student.fresh import parse_config_overrides
from destila.student.layers import CRITERIA, SELECTIONS, parse_layers

WIDTH_FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads")
"""The config sizes width pruning narrows (:mod:`destila.student.width`)."""
DEFAULT_CALIBRATION_TOKENS = 4096
"""Calibration tokens read from ``--cache`` or ``--data`` when ``--calibration-tokens`` is not given."""


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
    config: list[str] | dict | None = field(default=None, metadata={
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
                f"(default: {DEFAULT_CALIBRATION_TOKENS})"})
    gguf_file: str | None = field(default=None, metadata={"help": "GGUF file name inside the teacher folder"})
    tokenizer: str | None = field(default=None, metadata={
        "help": "give the student this tokenizer (a folder; another vocabulary than the teacher's, e.g. made by "
                "`destila student tokenizer`): a cut keeps the teacher's embedding rows of the tokens both have and "
                "builds the others from their pieces; a fresh model is sized to it", "metavar": "DIR"})
    seed: int | None = field(default=None, metadata={
        "help": "seed for a fresh model's initialisation (with --config; default 0)"})
    calibration: object = field(default=None, metadata={
        "flag": False, "help": "Python only: calibration text already read, a destila.student.Calibration or "
                               "token ids [rows, length] (instead of --cache or --data)"})

    def __post_init__(self) -> None:
        self.out = Path(self.out).expanduser()
        if isinstance(self.config, (list, tuple)):
            self.config = parse_config_overrides(list(self.config))
        if self.config is not None and not isinstance(self.config, dict):
            raise ValueError(f"config: expected config changes (KEY=VALUE texts or a mapping), found {self.config!r}")
        # In the order the command line always checked them: its own flags first, then the combination.
        if self.seed is not None and self.config is None:
            raise ValueError("--seed: seeds a fresh model's initialisation (--config); a cut copies the teacher's weights")
        if self.text_field != "text" and self.data is None:
            raise ValueError("--text-field: applies to --data only; add --data DATA or drop it")
        width = self.width
        if (self.layers is not None or bool(width)) == (self.config is not None):
            raise ValueError("student init: give either --layers and/or width targets (cut and prune the teacher) "
                             "or --config (a fresh model)")
        sources = [name for name, value in (("calibration", self.calibration), ("--cache", self.cache),
                                            ("--data", self.data)) if value is not None]
        if self.config is not None and (self.select is not None or sources):
            raise ValueError("student init: --select and calibration text apply to a cut (--layers), not to --config")
        check_selection(self.layers, self.select, self.criterion)
        if self.calibration_tokens is not None and self.cache is None and self.data is None:
            raise ValueError("--calibration-tokens: applies to calibration text read from --cache or --data; add one")
        if self.select in ("importance", "contiguous") and not sources:
            raise ValueError(f"--select {self.select}: measuring the layers needs calibration text; "
                             "add --cache CACHE or --data DATA (e.g. --data pydoc)")
        if width and not sources:
            raise ValueError(f"--{next(iter(width)).replace('_', '-')}: width pruning keeps the channels and heads "
                             "that matter on calibration text; add --cache CACHE or --data DATA (e.g. --data pydoc)")
        if len(sources) > 1:
            raise ValueError(f"student init: give one source of calibration text, found {' and '.join(sources)}")
        if self.calibration_tokens is not None and self.calibration_tokens < 2:
            raise ValueError(f"--calibration-tokens: expected at least 2, found {self.calibration_tokens}")
        if self.tokenizer is not None:  # refused before the teacher is loaded
            check_tokenizer_folder(self.tokenizer)
        if self.data is not None:  # calibration text is packed as a cache build packs it (documents, then rows)
            self.data = as_data_spec(self.data, text_field=self.text_field, packing="documents")

    @property
    def width(self) -> dict:
        """The width targets given (``{field: size}``, only those set)."""
        return {name: getattr(self, name) for name in WIDTH_FIELDS if getattr(self, name) is not None}

    @property
    def fresh(self) -> bool:
        """A fresh model of the teacher's architecture (``--config``) rather than a cut."""
        return self.config is not None


def check_selection(layers, select: str | None, criterion: str | None) -> None:
    """Refuse ``--select`` / ``--criterion`` values and combinations that cannot apply (before any work)."""
    if select is not None and select not in SELECTIONS:
        raise ValueError(f"--select: expected one of {', '.join(SELECTIONS)}, found {select!r}")
    if criterion is not None and criterion not in CRITERIA:
        raise ValueError(f"--criterion: expected one of {', '.join(CRITERIA)}, found {criterion!r}")
    if criterion is not None and select != "importance":
        raise ValueError(f"--criterion {criterion}: applies to --select importance only, found --select {select}")
    if select is not None and layers is None:
        raise ValueError(f"--select {select}: chooses which layers --layers N keeps; add --layers")
    if select is not None and isinstance(layers, (list, tuple)):
        raise ValueError(f"--select {select}: the layers were given explicitly ({list(layers)}); "
                         "give --layers as a count to have them selected")
