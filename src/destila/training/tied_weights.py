"""Which keys a checkpoint of a tied-embedding student really lacks.

``save_pretrained`` leaves a tied weight out of the file (``lm_head.weight``
is ``model.embed_tokens.weight`` in SmolLM2 and Llama students with
``tie_word_embeddings``). The Trainer reloads a checkpoint (``--resume``, the
best model at the end) with ``model.load_state_dict(state, strict=False)``,
which lists the tied key as missing, although loading its source filled it:
both names hold the same tensor. Such keys are not missing.

Naive equivalent::

    [key for key in missing if not (key in model.all_tied_weights_keys and
         model.get_parameter(key) is model.get_parameter(model.all_tied_weights_keys[key]))]
"""

from __future__ import annotations


def shares_its_source(model, key: str) -> bool:
    """Whether ``key`` is a tied weight (the model's ``{target: source}`` map) that holds its source's very tensor."""
    source = (getattr(model, "all_tied_weights_keys", None) or {}).get(key)
    if source is None:
        return False
    try:
        target, origin = model.get_parameter(key), model.get_parameter(source)
    except AttributeError:  # a name the model does not hold (a wrapped or reshaped model)
        return False
    return target is origin or (target.data_ptr() == origin.data_ptr() and target.shape == origin.shape)


def really_missing(model, missing_keys) -> list[str]:
    """``missing_keys`` without the tied weights whose source was loaded into the very same tensor."""
    missing = list(missing_keys)
    return [key for key in missing if not (shares_its_source(model, key)
                                          and model.all_tied_weights_keys[key] not in missing)]
