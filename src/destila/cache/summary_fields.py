"""The fields of ``destila cache inspect``'s summary that a manifest gives alone, for a cache and an export alike."""

from __future__ import annotations

from destila.cache.format import TOKENIZER_DIR
from destila.cache.tokenizer_files import tokenizer_class


def manifest_fields(m, path) -> dict:
    """The summary's fields a cache or an export at ``path`` gives from its manifest ``m`` alone: the teacher,
    the tokenizer stored beside it, and the data."""
    return {
        "teacher": {
            "name": m.teacher, "path": m.teacher_path, "gguf_file": m.teacher_gguf_file,
            "architecture": m.teacher_architecture, "dtype": m.teacher_dtype,
            "config_hash": m.teacher_config_hash, "weight_fingerprint": m.teacher_weight_fingerprint,
        },
        "tokenizer": {
            "path": str(path / TOKENIZER_DIR), "class": tokenizer_class(path / TOKENIZER_DIR),
            "size": m.tokenizer_size, "eos_token_id": m.eos_token_id, "fingerprint": m.tokenizer_fingerprint,
        },
        "data": {"source": m.data_source, "text_field": m.text_field, "fingerprint": m.data_fingerprint,
                 "spec": m.data},
    }
