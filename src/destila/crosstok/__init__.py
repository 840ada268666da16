"""Distillation across tokenizers: a teacher cache aligned, by byte offsets, to a student with another vocabulary.

    from destila.crosstok import CrossTokenizerCache, TokenizerSpec, coverage_report, train_tokenizer
    train_tokenizer(TokenizerSpec("pydoc", "student-tok/", vocab_size=4096, teacher="smollm2", holdout_every=5))
    data = CrossTokenizerCache("cache/", "student-tok/", map_folder="run/")   # a cache built with --spans
    print(coverage_report(data).line())
    batch = destila.data.collate([data[0], data[1]])       # then destila.distill_loss, as for a cache

See docs/cross_tokenizer.md for the method and its rules.
"""

from importlib import import_module

# Public name → submodule, loaded on first use so that `destila --help` does not import torch or transformers.
_HOMES = {
    "STYLES": "spec", "TokenizerSpec": "spec",
    "train_tokenizer": "student_tokenizer", "training_texts": "student_tokenizer",
    "load_student_tokenizer": "student_tokenizer",
    "align": "align", "Groups": "align",
    "VocabMap": "vocab_map", "build_vocab_map": "vocab_map", "load_or_build": "vocab_map",
    "CrossTokenizerCache": "dataset", "Aligned": "dataset", "no_spans_message": "dataset",
    "require_bucket_tail": "dataset",
    "Coverage": "coverage", "coverage_report": "coverage", "LOW_COVERAGE": "coverage",
    "uld_loss": "uld",
    "stored_items": "store", "StoredItems": "store",
    "transplant_vocabulary": "transplant", "transplant_plan": "transplant",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'destila.crosstok' has no attribute {name!r}")
    return getattr(import_module(f"destila.crosstok.{_HOMES[name]}"), name)


def __dir__():
    return __all__
