"""`train_student`: one call from a student folder and a cache (or an online
teacher and data) to a trained student saved for plain `transformers`."""

from __future__ import annotations

import json
from pathlib import Path

from destila.models import load_causal_lm, load_tokenizer, output_head, tokenizer_fingerprint
from destila.targets.spec import check_training_temperature
from destila.training.arguments import DistillationArguments
from destila.training.callbacks import JsonlLogCallback
from destila.data import DataSpec, collate, packed_source, texts_source
from destila.training.datasets import Subset, split_indices

LOG_FILE = "log.jsonl"


def context_length(model) -> int | None:
    config = model.config
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)


def check_student(model, student_path: str, *, vocab_size: int, fingerprint: str, seq_len: int,
                  allow_tokenizer_mismatch: bool = False, source: str = "cache") -> None:
    """Refuse a student whose vocabulary, tokenizer or context does not fit the targets.

    Token ids in the targets index the student's output head: a different
    vocabulary would distil garbage without any error further down.
    """
    rows = output_head(model)[0].shape[0]
    if rows != vocab_size:
        raise ValueError(
            f"student: its output head has {rows} rows but the {source}'s vocabulary has {vocab_size} tokens; "
            "a student must share the teacher's tokenizer (make one with `destila student init`)"
        )
    try:
        student_fingerprint = tokenizer_fingerprint(load_tokenizer(student_path))
    except (OSError, ValueError, TypeError):
        student_fingerprint = None  # a folder with weights only: the vocabulary size check above stands
    if student_fingerprint is not None and student_fingerprint != fingerprint and not allow_tokenizer_mismatch:
        raise ValueError(
            f"student: its tokenizer (fingerprint {student_fingerprint}) differs from the {source}'s "
            f"({fingerprint}); token ids would not mean the same thing. Pass --allow-tokenizer-mismatch "
            "only if you know the two vocabularies are identical"
        )
    limit = context_length(model)
    if limit is not None and seq_len > limit:
        raise ValueError(f"student: sequences have {seq_len} tokens but the student's context is {limit} tokens")


def last_complete_checkpoint(out: str | Path) -> str | None:
    """The newest ``checkpoint-N`` in ``out`` whose ``trainer_state.json`` (written last) is readable.

    The Trainer writes checkpoints in place, so a run killed while saving
    leaves a newer, partial folder behind; resuming from it would fail.
    """
    candidates = []
    for path in Path(out).glob("checkpoint-*"):
        if path.name.removeprefix("checkpoint-").isdigit():
            candidates.append((int(path.name.removeprefix("checkpoint-")), path))
    for _, path in sorted(candidates, reverse=True):
        try:
            json.loads((path / "trainer_state.json").read_text())
        except (OSError, ValueError):
            continue
        return str(path)
    return None


def train_student(
    student: str,
    out: str | Path,
    args: DistillationArguments | None = None,
    *,
    cache: str | Path | None = None,
    teacher: str | None = None,
    data: str | list[str] | DataSpec | None = None,
    teacher_gguf_file: str | None = None,
    seq_len: int = 512,
    max_tokens: int | None = None,
    text_field: str = "text",
    resume: bool | str | None = None,
    callbacks: tuple = (),
) -> dict:
    """Train ``student`` from ``cache`` (offline) or from ``teacher`` on ``data`` (online).

    Writes checkpoints and ``log.jsonl`` into ``out`` and, at the end, the
    student (safetensors, config, tokenizer) loadable with
    ``AutoModelForCausalLM.from_pretrained(out)``. Returns
    ``{"train": Trainer metrics, "steps": optimizer steps, "eval": held-out metrics or {}}``.
    """
    from transformers import AutoTokenizer

    from destila.targets.online import OnlineTeacher
    from destila.training.trainer import DistillationTrainer

    if (cache is None) == (teacher is None) or (teacher is not None and data is None):
        raise ValueError("train: give either a cache (offline), or a teacher and data (online)")
    out = Path(out)
    args = args or DistillationArguments(output_dir=str(out))
    if Path(args.output_dir).resolve() != out.resolve():
        raise ValueError(f"train: args.output_dir is {args.output_dir} but out is {out}; they must agree")
    model = load_causal_lm(student)
    online = None
    if cache is not None:
        from destila.cache import TopKCache

        source = TopKCache(cache)
        tokenizer = AutoTokenizer.from_pretrained(source.tokenizer_path)
        check_training_temperature(args.temperature, source.manifest.temperature, f"the cache {cache}")
        check_student(
            model, student, vocab_size=source.vocab_size, fingerprint=source.manifest.tokenizer_fingerprint,
            seq_len=source.seq_len, allow_tokenizer_mismatch=args.allow_tokenizer_mismatch,
        )
    else:
        teacher_model = load_causal_lm(teacher, gguf_file=teacher_gguf_file)
        tokenizer = load_tokenizer(teacher, gguf_file=teacher_gguf_file)
        if isinstance(data, (list, tuple)):
            source = texts_source(list(data), tokenizer, seq_len=seq_len, max_tokens=max_tokens)
        else:
            from accelerate import PartialState

            spec = data if isinstance(data, DataSpec) else DataSpec(
                str(data), text_field=text_field, seq_len=seq_len, max_tokens=max_tokens)
            # One process tokenises into the store; the others then map the same files.
            source = packed_source(spec, tokenizer, main_first=PartialState().main_process_first)
        check_student(
            model, student, vocab_size=output_head(teacher_model)[0].shape[0],
            fingerprint=tokenizer_fingerprint(tokenizer), seq_len=source.seq_len,
            allow_tokenizer_mismatch=args.allow_tokenizer_mismatch, source="teacher",
        )
        online = OnlineTeacher(teacher_model, args.online_loss, args.target_spec())
    hidden = _hidden_term(args, model, online, source)
    train_ids, eval_ids = split_indices(len(source), args.eval_fraction)
    trainer = DistillationTrainer(
        model=model,
        args=args,
        train_dataset=Subset(source, train_ids),
        eval_dataset=Subset(source, eval_ids) if eval_ids else None,
        data_collator=collate,
        processing_class=tokenizer,
        teacher=online,
        hidden=hidden,
        callbacks=[JsonlLogCallback(out / LOG_FILE), *callbacks],
    )
    if resume is True:
        resume = last_complete_checkpoint(out)
        if resume is None:
            print(f"train: no complete checkpoint in {out}; starting from the beginning")
    result = trainer.train(resume_from_checkpoint=resume or None)
    metrics = trainer.evaluate() if eval_ids else {}
    trainer.save_model(str(out))  # weights, config and (processing_class) tokenizer
    return {"train": result.metrics, "steps": result.global_step, "eval": metrics}


def _hidden_term(args, model, online, source):
    """The hidden-state term of ``--hidden_loss``, with teacher states from the online teacher or the cache."""
    from destila.training.hidden import HiddenDistillation

    options = args.hidden_options()
    if options.hidden_loss is None:
        return None
    if online is not None:
        return HiddenDistillation(options, model, teacher=online.model)
    layers = getattr(source, "hidden_layers", None)
    if not layers:
        raise ValueError(
            "hidden_loss: this cache holds no teacher hidden states; rebuild it with `destila cache build "
            "--hidden-layers 6,12 --hidden-dim D`, or train online with --teacher and --data"
        )
    return HiddenDistillation(options, model, cached_layers=layers, cached_dim=source.hidden_dim)
