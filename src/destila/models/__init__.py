"""Models as destila needs them: loading (folder, hub id, GGUF, the embedded default) and placement.

- :mod:`~destila.models.loading`: load a causal LM and its tokenizer; the decoder, the output head
  and the check that ``logits = h Wᵀ + b``; fingerprints
- :mod:`~destila.models.placement`: where a teacher's weights live (one device, a device map, or
  tensor-parallel across ``torchrun`` processes)

The loading functions are re-exported here: ``from destila.models import load_causal_lm``.
"""

from destila.models.loading import (
    EMBEDDED,
    INIT_INCOMPLETE,
    MODEL_HELP,
    SAVE_INCOMPLETE,
    check_plain_head,
    check_source,
    config_hash,
    decoder_of,
    destila_home,
    embedded_gguf_path,
    embedded_teacher_dir,
    final_hidden_states,
    hub_unreachable,
    load_causal_lm,
    load_config,
    load_tokenizer,
    output_head,
    resolve_source,
    tokenizer_fingerprint,
    weight_fingerprint,
)

__all__ = ["EMBEDDED", "INIT_INCOMPLETE", "MODEL_HELP", "SAVE_INCOMPLETE", "check_plain_head", "check_source", "config_hash", "decoder_of", "destila_home",
           "embedded_gguf_path", "embedded_teacher_dir", "final_hidden_states", "hub_unreachable",
           "load_causal_lm", "load_config", "load_tokenizer", "output_head", "resolve_source", "tokenizer_fingerprint",
           "weight_fingerprint"]
