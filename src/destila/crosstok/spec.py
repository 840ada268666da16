"""`TokenizerSpec`: what ``destila student tokenizer`` is asked for, one field per flag.

Kept free of torch and transformers: ``destila --help`` builds the command's
parser from these fields. :func:`destila.crosstok.train_tokenizer` takes the
same object::

    train_tokenizer(TokenizerSpec("pydoc", "student-tok/", vocab_size=4096, teacher="smollm2", holdout_every=5))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

STYLES = ("byte_level", "space_mark")


@dataclass
class TokenizerSpec:
    """A BPE tokenizer trained on local text, saved as a folder ``AutoTokenizer`` loads."""

    data: str = field(metadata={
        "help": "text to train on: 'pydoc', a .txt/.jsonl/.parquet/.csv file or a folder of them", "metavar": "DATA"})
    out: str = field(metadata={"help": "output folder (must not exist or be empty)", "aliases": ["-o"]})
    vocab_size: int = field(default=4096, metadata={"help": "tokens in the vocabulary, special tokens included"})
    style: str = field(default="byte_level", metadata={
        "help": "byte_level: byte-level BPE, every byte a token and Ġ for a space (GPT-2, Llama 3, Qwen, SmolLM2); "
                "space_mark: SentencePiece-style BPE, ▁ for a space and <0xNN> tokens for bytes outside the "
                "vocabulary (Llama 2, Mistral, Gemma)", "choices": STYLES})
    teacher: str | None = field(default=None, metadata={
        "help": "copy this model's special tokens (same text, same roles) and chat template, so a conversation "
                "renders to the same text for both (default: <|endoftext|> only, no template)",
        "metavar": "TEACHER"})
    text_field: str = field(default="text", metadata={"help": "field holding the text in jsonl/parquet/csv rows"})
    holdout_every: int | None = field(default=None, metadata={
        "help": "leave every N-th document out of the training text (5: pydoc's held-out documents of "
                "`destila demo`), so held-out scores are not measured on text the tokenizer was fitted to",
        "metavar": "N"})

    def __post_init__(self) -> None:
        if self.style not in STYLES:
            raise ValueError(f"style: expected one of {', '.join(STYLES)}, found {self.style!r}")
        if isinstance(self.vocab_size, bool) or not isinstance(self.vocab_size, int) or self.vocab_size < 300:
            raise ValueError(f"vocab_size: expected an integer ≥ 300 (the 256 bytes and some merges), found "
                             f"{self.vocab_size!r}")
        if self.holdout_every is not None and self.holdout_every < 2:
            raise ValueError(f"holdout_every: expected 2 or more (every N-th document held out), found "
                             f"{self.holdout_every}")


def check_tokenizer_folder(folder) -> Path:
    """``folder`` as a path, refused in one line (``FileNotFoundError``) when it holds no saved tokenizer."""
    path = Path(folder).expanduser()
    if not ((path / "tokenizer.json").is_file() or (path / "tokenizer_config.json").is_file()):
        raise FileNotFoundError(f"tokenizer: {path} holds no tokenizer.json or tokenizer_config.json; expected a "
                                "folder written by save_pretrained, such as `destila student tokenizer` writes")
    return path
