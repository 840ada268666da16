"""Tied weights that a checkpoint leaves out, declared as such so the Trainer reloads them without a warning.

``save_pretrained`` leaves a tied weight out of the file (``lm_head.weight``
is ``model.embed_tokens.weight`` in SmolLM2 and Llama students with
``tie_word_embeddings``). The Trainer reloads a checkpoint (``--resume``, the
best model at the end) with ``model.load_state_dict(state, strict=False)``,
which lists the tied key as missing, although loading its source filled it:
both names hold the same tensor. The Trainer's own rule for keys a model
leaves out on purpose is ``model._keys_to_ignore_on_save``: when exactly
those are missing it calls ``model.tie_weights()`` instead of warning. So the
tied weights that really share their source's tensor are added there; any
other missing key is still reported.

Naive equivalent::

    model._keys_to_ignore_on_save |= {key for key, source in model.all_tied_weights_keys.items()
                                      if model.get_parameter(key) is model.get_parameter(source)}
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


def declare_tied_unsaved(model) -> set[str]:
    """Add ``model``'s tied weights that share their source's tensor to ``model._keys_to_ignore_on_save``
    (which ``save_pretrained`` already leaves out); returns them. A model that ties nothing is left as it is."""
    tied = {key for key in (getattr(model, "all_tied_weights_keys", None) or {}) if shares_its_source(model, key)}
    if tied:
        model._keys_to_ignore_on_save = set(model._keys_to_ignore_on_save or ()) | tied
    return tied
