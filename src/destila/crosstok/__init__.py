"""Distillation across tokenizers: a teacher cache aligned, by byte offsets, to a student with another vocabulary.

    from destila.crosstok import train_tokenizer, TokenizerSpec
    train_tokenizer(TokenizerSpec("pydoc", "student-tok/", vocab_size=4096, teacher="smollm2", holdout_every=5))

See docs/cross_tokenizer.md for the method and its rules.
"""

from importlib import import_module

# Public name → submodule, loaded on first use so that `destila --help` does not import torch or transformers.
_HOMES = {
    "STYLES": "spec", "TokenizerSpec": "spec",
    "train_tokenizer": "student_tokenizer", "training_texts": "student_tokenizer",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'destila.crosstok' has no attribute {name!r}")
    return getattr(import_module(f"destila.crosstok.{_HOMES[name]}"), name)


def __dir__():
    return __all__
