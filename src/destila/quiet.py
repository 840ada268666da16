"""Library messages that are wrong or useless for destila's runs, filtered at their loggers.

- DeepSpeed (an optional engine, imported by accelerate whenever installed)
  warns at import that a CPU machine has no GPU: nobody asked for it.
- torchao (installed beside peft by the benchmarks' extra; peft looks at it
  whenever it makes a LoRA layer) warns at import that its C++ extensions
  were built for another torch: destila uses none of them.
- transformers warns once that ``input_ids`` "may be padded" and recommends
  an ``attention_mask`` when a row holds the pad id (GPT-2's is its EOS) and
  no mask is given. destila gives a mask whenever it pads; packed rows carry
  ``position_ids`` instead, which bound the documents, so the advice is wrong.

Only these exact messages are dropped (logger filters, nothing else changes).
Naive equivalent: ``logging.getLogger(name).addFilter(lambda r: text not in r.getMessage())``.
"""

from __future__ import annotations

import logging

_DROPPED = {
    "DeepSpeed": "unable to detect it",
    "transformers.modeling_utils": "We strongly recommend passing in an `attention_mask`",
    "torchao": "Skipping import of cpp extensions due to incompatible torch version",
}


def _drop(text: str):
    return lambda record: text not in record.getMessage()


def quiet_library_noise() -> None:
    """Install the filters (once per logger; calling again adds nothing)."""
    for name, text in _DROPPED.items():
        logger = logging.getLogger(name)
        if not any(getattr(f, "_destila", False) for f in logger.filters):
            drop = _drop(text)
            drop._destila = True
            logger.addFilter(drop)


# Set by the command line: transformers' "Loading weights" / "Writing model shards" bars are noise there
# (one per command); a Python user keeps transformers' defaults.
_bars_off = False


def request_quiet_bars() -> None:
    """Ask for transformers' own bars off; applied by :func:`apply_quiet_bars` once transformers is imported
    (importing it here would slow every command, ``--help`` included)."""
    global _bars_off
    _bars_off = True


def apply_quiet_bars() -> None:
    """Turn transformers' loading/writing bars off if requested; download bars (huggingface_hub) stay as they were."""
    if not _bars_off:
        return
    # transformers takes seconds to import: this runs when a model loads, with transformers imported
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging

    downloads_off = hub_utils.are_progress_bars_disabled()
    hf_logging.disable_progress_bar()
    if not downloads_off:
        hub_utils.enable_progress_bars()
