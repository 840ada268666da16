"""A student tokenizer trained on local text with Hugging Face ``tokenizers``: the other half of a
cross-tokenizer pair when nothing can be downloaded, or a smaller vocabulary for a device.

Byte-level style (GPT-2's: every byte is a token, ``Ġ`` spells a space)::

    core = Tokenizer(BPE()); pre_tokenizer = ByteLevel(add_prefix_space=False); decoder = ByteLevel()
    BpeTrainer(vocab_size, special_tokens, initial_alphabet=ByteLevel.alphabet()).train(texts)

Space-mark style (SentencePiece's spelling, as in Llama 2 or Mistral): ``▁``
for a space, prepended to the first word, and 256 ``<0xNN>`` tokens for any
byte the merges do not cover (``byte_fallback``). The same corpus, the same
vocabulary size and the same order of documents give the same tokenizer.
With a teacher, the special tokens are the teacher's (same text, same EOS,
BOS and pad roles) and so is the chat template: a conversation renders to
the same text for both, which cross-tokenizer alignment needs.
"""

from __future__ import annotations

import json
from pathlib import Path

from destila.crosstok.spec import TokenizerSpec, check_tokenizer_folder
from destila.data import load_texts
from destila.data.spans import check_spells_bytes
from destila.models import load_tokenizer

_DEFAULT_SPECIALS = ["<|endoftext|>"]


def training_texts(spec: TokenizerSpec) -> list[str]:
    """The documents of ``spec.data`` the tokenizer learns from (every ``holdout_every``-th left out)."""
    texts = load_texts(spec.data, text_field=spec.text_field)
    if spec.holdout_every:
        texts = [t for i, t in enumerate(texts) if i % spec.holdout_every != spec.holdout_every - 1]
    return texts


def _specials(teacher) -> tuple[list[str], dict]:
    """``(special token texts in id order, {role: text})`` of the teacher, or the default."""
    if teacher is None:
        return list(_DEFAULT_SPECIALS), {"eos_token": _DEFAULT_SPECIALS[0], "pad_token": _DEFAULT_SPECIALS[0]}
    added = sorted((int(i), t.content) for i, t in teacher.added_tokens_decoder.items())
    roles = {role: str(getattr(teacher, role)) for role in ("eos_token", "bos_token", "pad_token", "unk_token")
             if getattr(teacher, role, None) is not None}
    return [text for _, text in added], roles


def _byte_level(specials: list[str], vocab_size: int):
    # tokenizers: only when a tokenizer is trained
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    return core, trainer


def _space_mark_pipeline(core) -> None:
    # tokenizers: only when a tokenizer is trained
    from tokenizers import decoders, pre_tokenizers

    core.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    core.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                      decoders.Strip(" ", 1, 0)])


def _space_mark(specials: list[str], vocab_size: int, texts: list[str]):
    """A ▁-spelling BPE with byte fallback: trained, then rebuilt with the 256 byte tokens after the specials."""
    # tokenizers: only when a tokenizer is trained
    from tokenizers import Tokenizer, models, trainers

    draft = Tokenizer(models.BPE())
    _space_mark_pipeline(draft)
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    room = vocab_size - len(byte_tokens)
    draft.train_from_iterator(texts, trainer=trainers.BpeTrainer(vocab_size=room, special_tokens=specials,
                                                                 show_progress=False))
    learned = json.loads(draft.to_str())["model"]
    ordered = specials + byte_tokens + [t for t, _ in sorted(learned["vocab"].items(), key=lambda kv: kv[1])
                                        if t not in specials]
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in learned["merges"]]
    core = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(ordered)}, merges=merges, byte_fallback=True))
    _space_mark_pipeline(core)
    core.add_special_tokens(specials)
    return core


def train_tokenizer(spec: TokenizerSpec, texts: list[str] | None = None, teacher_tokenizer=None):
    """Train the tokenizer ``spec`` describes and save it in ``spec.out``; returns the loaded tokenizer.

    ``texts`` replaces reading ``spec.data`` (documents given in Python);
    ``teacher_tokenizer`` replaces loading ``spec.teacher``. The result
    spells every text back byte for byte (checked before saving), which
    cross-tokenizer alignment needs.
    """
    # transformers takes seconds to import: only when a tokenizer is trained
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    out = Path(spec.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"student tokenizer: {out} exists and is not an empty folder; choose a new folder")
    texts = training_texts(spec) if texts is None else [t for t in texts if t]
    if not texts:
        raise ValueError(f"data: {spec.data} holds no text to train a tokenizer on")
    if teacher_tokenizer is None and spec.teacher is not None:
        teacher_tokenizer = load_tokenizer(spec.teacher)
    specials, roles = _specials(teacher_tokenizer)
    if spec.vocab_size <= len(specials) + 256:
        raise ValueError(f"vocab_size: {spec.vocab_size} leaves no room for merges beyond the {len(specials)} special "
                         "tokens and the 256 bytes; raise --vocab-size")
    if spec.style == "byte_level":
        core, trainer = _byte_level(specials, spec.vocab_size)
        core.train_from_iterator(texts, trainer=trainer)
    else:
        core = _space_mark(specials, spec.vocab_size, texts)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, **roles)
    known = set(roles.values())
    extra = [t for t in specials if t not in known]
    if extra:
        tokenizer.add_special_tokens({"additional_special_tokens": extra})
    template = getattr(teacher_tokenizer, "chat_template", None) if teacher_tokenizer is not None else None
    if template:
        tokenizer.chat_template = template
    check_spells_bytes(tokenizer, "student tokenizer")
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out)
    return AutoTokenizer.from_pretrained(out)


def load_student_tokenizer(folder):
    """The tokenizer saved in ``folder`` (by ``save_pretrained`` or :func:`train_tokenizer`; a model folder with its
    tokenizer will do). ``FileNotFoundError`` in one line when the folder holds none."""
    # transformers takes seconds to import: only when a student tokenizer is loaded
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(check_tokenizer_folder(folder))

