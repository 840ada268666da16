"""`train_student`: one call from a student folder and a cache (or an online
teacher and data) to a trained student saved for plain `transformers`.

The run reads as its stages: the targets (the cache checked against the
student, or the online teacher and its data), the held-out data, the claim
on the output folder, the trainer, the loop, the save (and the merge).

It writes checkpoints and ``log.jsonl`` into ``spec.out`` and, at the end,
``trainer_state.json``, ``train_results.json``, ``all_results.json`` (and
``eval_results.json``) as ``Trainer.save_state``/``save_metrics`` do, and the
student (safetensors, config, tokenizer) loadable with
``AutoModelForCausalLM.from_pretrained(out)``; with LoRA adapters
(``args.lora_r > 0``), the adapter instead (``PeftModel.from_pretrained``),
and with ``args.merge`` also ``out/merged``, the plain merged model.

``out`` is claimed by :func:`~destila.training.output_dir.claim_output_dir`:
a folder holding another run is refused unless ``spec.resume`` (continue it
from its newest complete checkpoint, or from the checkpoint path given) or
``args.overwrite``; a second concurrent writer is refused at once.

Held-out data: ``args.eval_fraction`` of the training source, or
``spec.eval_cache`` (a cache of other documents, its first
``eval_sequences`` sequences), evaluated every ``args.eval_steps`` when
``args.eval_strategy="steps"`` and once at the end.

A student whose tokenizer is not the cache's trains on the cache read in its
own tokens (:mod:`destila.crosstok.training`; the cache needs byte spans),
aligned once and stored in ``spec.alignment_dir`` (default ``out/alignment``).

The student, its targets and the output folder are checked here; everything
else (the online teacher, K′ against the cache, the hidden-state term, LoRA
adapters, frozen embeddings) is :class:`DistillationTrainer`'s own construction.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from destila.cache import TopKCache
from destila.cache.checks.derived import check_cache_tokenizer
from destila.cache.dataset import open_cache
from destila.crosstok.training import cross_tokenizer_dataset, training_items
from destila.data import DataSpec, as_data_spec, as_sequences, collate
from destila.io import reported_os_error
from destila.models import SAVE_INCOMPLETE, load_causal_lm, load_tokenizer, output_head, tokenizer_fingerprint
from destila.io.permissions import readable_by_all
from destila.targets.spec import check_training_temperature
from destila.training.arguments import DistillationArguments
from destila.training.callbacks import EngineReport, JsonlLogCallback
from destila.training.datasets import Subset
from destila.training.finite import check_weights
from destila.training.objective import objective_of
from destila.training.output_dir import LOG_FILE, WRITE_FAILURE, RunRecordCallback, claim_output_dir
from destila.training.peft_student import MERGED_DIR, base_reference, merge_adapter, record_base
from destila.training.run_end import end_step, final_model_saved, restore_end
from destila.training.sharing import check_push, write_model_card
from destila.training.spec import TrainSpec
from destila.training.trainer import DistillationTrainer


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
    # A fingerprint of "" (rows that do not record their tokenizer) takes the student's.
    if student_fingerprint is not None and fingerprint and student_fingerprint != fingerprint \
            and not allow_tokenizer_mismatch:
        raise ValueError(
            f"student: its tokenizer (fingerprint {student_fingerprint}) differs from the {source}'s "
            f"({fingerprint}); token ids would not mean the same thing. Pass --allow-tokenizer-mismatch "
            "only if you know the two vocabularies are identical"
        )
    limit = context_length(model)
    if limit is not None and seq_len > limit:
        raise ValueError(f"student: sequences have {seq_len} tokens but the student's context is {limit} tokens")


def _cross_items(crossed, held_crossed, eval_dataset, folder, model, args):
    """The training items of a student with another tokenizer (and its held-out items in place), and its tokenizer."""
    first = lambda: args.main_process_first(desc="aligning the cache to the student's tokenizer")  # noqa: E731
    items = training_items(crossed, folder, model, main_process_first=first,
                           show=print if args.process_index == 0 else lambda line: None)
    if held_crossed is not None:
        held = training_items(held_crossed, folder, model, main_process_first=first, show=lambda line: None)
        eval_dataset.source = held  # the same first eval_sequences, in the student's tokens
    return items, crossed.student_tokenizer


def train_student(spec: TrainSpec | str, out: str | Path | None = None, args: DistillationArguments | None = None, *,
                  callbacks: tuple = (), **options) -> dict:
    """Train the student ``spec`` describes, from a cache (offline) or from a teacher on data (online).

    ``train_student(TrainSpec(student, out, args, cache=...))``; the flat form
    ``train_student(student, out, args, cache=..., ...)`` builds the same spec
    (``options`` are :class:`TrainSpec` fields, and the
    :class:`~destila.data.DataSpec` fields ``seq_len``, ``max_tokens`` and
    ``text_field`` of online ``data`` given as a name or a list). ``callbacks``: extra
    ``TrainerCallback`` objects (a budget, a step clock). What is written, the
    output folder's claim, held-out data and other tokenizers: the module docstring.
    Returns ``{"train": Trainer metrics, "steps": optimizer steps, "eval": held-out metrics or {},
    "engine": what ran (:func:`destila.training.engines.describe_engine`), "loss_path": which way the loss
    ran (:func:`destila.losses.describe_path`), "merged": folder or None}``.
    """
    spec = _spec_of(spec, out, args, options)
    out, args = spec.out, spec.args
    check_push(args)  # before anything loads: without a Hub the run would fail at its end
    # Opened first: the files of a cache and of the eval cache are checked before a model loads.
    cache = open_cache(spec.cache) if not spec.online else None
    held_out = _eval_cache(spec, cache)
    model = load_causal_lm(spec.student)
    targets = _offline_targets(spec, model, cache) if cache is not None else _online_targets(spec, model)
    eval_dataset, held_crossed = _held_out(spec, model, targets, held_out)
    claim = _claim(spec, targets)
    try:
        for note in claim.notes:
            print(note)
        end = end_step(claim.checkpoint, args)
        if end is not None and final_model_saved(out, end):  # before anything loads: there is nothing to do
            print(f"train: the run in {out} finished at step {end} and its final model is saved; nothing changed "
                  f"(a larger --max_steps trains on from there)")
            return {"train": {}, "steps": end, "eval": {}, "engine": None, "loss_path": None, "merged": None,
                    "finished": True}
        source, tokenizer = targets.source, targets.tokenizer
        if targets.crossed is not None:  # the cache in the student's tokens, aligned once into the claimed folder
            source, tokenizer = _cross_items(targets.crossed, held_crossed, eval_dataset,
                                             spec.alignment_dir or out / "alignment", model, args)
        trainer, engine = _trainer(spec, model, source, eval_dataset, tokenizer, targets.teacher, claim, callbacks)
        if end is not None:  # at the end, but the final save did not complete: save it, training no step
            print(f"train: {claim.checkpoint} is the run's last step ({end}); saving the final model from it")
            restore_end(trainer, claim.checkpoint)
            result_metrics, steps = {}, end
        else:
            result = trainer.train(resume_from_checkpoint=claim.checkpoint)
            result_metrics, steps = result.metrics, result.global_step
        metrics = trainer.evaluate() if trainer.eval_dataset is not None else {}
        _save(trainer, out, args, result_metrics, metrics)
        merged = _merge(trainer, spec)
    except BaseException as err:
        claim.undo()  # a new run refused before its first checkpoint leaves nothing that blocks the same command
        # A full or read-only disk hides in torch's writer errors: name it and the folder.
        reported = reported_os_error(err, out, WRITE_FAILURE) if isinstance(err, Exception) else None
        if reported is None:
            raise
        raise reported from err
    finally:
        claim.release()
    return {"train": result_metrics, "steps": steps, "eval": metrics, "engine": engine.engine,
            "loss_path": engine.loss_path, "merged": str(merged) if merged else None}


@dataclass
class _Targets:
    """Where the student's targets come from: the training source and the tokenizer the student ships."""

    source: object  # the cache (or its export, or a mix) offline; the packed data online
    tokenizer: object
    teacher: object = None  # the online teacher model
    data: DataSpec | None = None  # online data recorded with the run (documents given in Python are not)
    crossed: object = None  # the cache read in another student tokenizer (destila.crosstok.training)


def _offline_targets(spec: TrainSpec, model, source) -> _Targets:
    """The opened cache checked against the student (its vocabulary, tokenizer, temperature and context), or
    read in the student's tokens when its tokenizer is another."""
    # heavy: transformers
    from transformers import AutoTokenizer

    args = spec.args
    if getattr(source, "vocab_size", 0) is None:  # rows that do not record it: the student's
        source.assume_vocab_size(output_head(model)[0].shape[0])
    tokenizer = (AutoTokenizer.from_pretrained(source.tokenizer_path) if source.tokenizer_path is not None
                 else load_tokenizer(spec.student))
    if isinstance(source, TopKCache):  # the student ships this tokenizer: the one the cache's ids mean
        check_cache_tokenizer(spec.cache, source.manifest, tokenizer)
    check_training_temperature(args.temperature, source.manifest.temperature, f"the cache {spec.cache}")
    crossed = cross_tokenizer_dataset(source, spec.student, model, tail=args.tail, path=spec.cache,
                                      hidden_loss=args.hidden_options().hidden_loss,
                                      allow_tokenizer_mismatch=args.allow_tokenizer_mismatch)
    if crossed is None and spec.alignment_dir is not None:
        raise ValueError("alignment_dir: the student reads the cache's own tokens (its tokenizer is the cache's), "
                         "so nothing is aligned; drop --alignment-dir")
    if crossed is None:
        check_student(
            model, spec.student, vocab_size=source.vocab_size, fingerprint=source.manifest.tokenizer_fingerprint,
            seq_len=source.seq_len, allow_tokenizer_mismatch=args.allow_tokenizer_mismatch,
        )
    return _Targets(source, tokenizer, crossed=crossed)


def _online_targets(spec: TrainSpec, model) -> _Targets:
    """The online teacher and its packed data, checked against the student."""
    # heavy: accelerate, only when training online
    from accelerate import PartialState

    teacher = load_causal_lm(spec.teacher, gguf_file=spec.teacher_gguf_file, **(spec.teacher_placement or {}))
    tokenizer = load_tokenizer(spec.teacher, gguf_file=spec.teacher_gguf_file)
    # One process tokenises into the store; the others then map the same files.
    source = as_sequences(spec.data, tokenizer, main_first=PartialState().main_process_first)
    check_student(
        model, spec.student, vocab_size=output_head(teacher)[0].shape[0],
        fingerprint=tokenizer_fingerprint(tokenizer), seq_len=source.seq_len,
        allow_tokenizer_mismatch=spec.args.allow_tokenizer_mismatch, source="teacher",
    )
    # The spec as read (a chat file detected as messages, its loss on the assistant, bfd packing): what the card says.
    return _Targets(source, tokenizer, teacher, data=source.spec if spec.data.documents is None else None)


def _eval_cache(spec: TrainSpec, cache):
    """``spec.eval_cache`` opened (its files checked, as the training cache's are) and of the training cache's
    tokenizer, or None; before any model loads, so a damaged one costs no model load."""
    if spec.eval_cache is None:
        return None
    held_out = open_cache(spec.eval_cache)
    if cache is not None and held_out.manifest.tokenizer_fingerprint != cache.manifest.tokenizer_fingerprint:
        raise ValueError(f"train: the eval cache {spec.eval_cache} was built with another tokenizer than the "
                         "training cache; build both with the same teacher")
    return held_out


def _held_out(spec: TrainSpec, model, targets: _Targets, held_out) -> tuple:
    """``(eval dataset, the eval cache read in the student's tokens)``: the first ``eval_sequences`` of the opened
    eval cache ``held_out``, or ``(None, None)`` (with ``args.eval_fraction`` the trainer holds out its split)."""
    if held_out is None:
        return None, None
    held_crossed = None
    if targets.crossed is not None:
        held_crossed = cross_tokenizer_dataset(held_out, spec.student, model, tail=spec.args.tail,
                                               path=spec.eval_cache)
    return Subset(held_out, range(min(len(held_out), spec.eval_sequences or len(held_out)))), held_crossed


def _claim(spec: TrainSpec, targets: _Targets):
    """The output folder, claimed for this run's objective (:func:`claim_output_dir`), one process first."""
    args = spec.args
    objective = objective_of(args, cache=spec.cache, teacher=spec.teacher, data=targets.data, student=spec.student,
                             cache_content=targets.source.manifest.ids_fingerprint if not spec.online else None,
                             out=spec.out)
    data_given = targets.data.source if targets.data is not None else None
    with args.main_process_first(desc="claiming the output folder"):
        return claim_output_dir(spec.out, resume=spec.resume, overwrite=args.overwrite,
                                is_main=args.process_index == 0, objective=objective,
                                inputs={"student": spec.student, "cache": spec.cache, "teacher": spec.teacher,
                                        "data": data_given, "eval cache": spec.eval_cache})


def _trainer(spec: TrainSpec, model, source, eval_dataset, tokenizer, teacher, claim, callbacks) -> tuple:
    """``(trainer, engine report)``: the :class:`DistillationTrainer` of the run, its callbacks in place."""
    args, log = spec.args, spec.out / LOG_FILE
    trainer = DistillationTrainer(
        model=model, args=args, train_dataset=source, eval_dataset=eval_dataset, data_collator=collate,
        processing_class=tokenizer, teacher_model=teacher,
        callbacks=[JsonlLogCallback(log), RunRecordCallback(claim.run_id), *callbacks],
    )
    if args.lora_arguments().enabled:  # the adapter names the student as it was given (a valid base)
        record_base(trainer.model, base_reference(spec.student))
    if any(getattr(callback, "shows_progress", False) for callback in callbacks):
        # A callback draws its own bar (e.g. destila.demo.budget.StepBudget, whose total is the real
        # step target); the Trainer's would count toward max_steps, or print every log line.
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        trainer.remove_callback(ProgressCallback)
        trainer.remove_callback(PrinterCallback)
    engine = EngineReport(trainer, log)
    trainer.add_callback(engine)
    return trainer, engine


def _save(trainer, out: Path, args, result_metrics: dict, metrics: dict) -> None:
    """The final student, flagged incomplete until its last file, and the files a Trainer script leaves."""
    check_weights(trainer.model, trainer.state, args, "the final save")
    flag = out / SAVE_INCOMPLETE  # until the last file is written, the folder is refused as a model
    if trainer.is_world_process_zero():
        flag.write_text("written by `destila train`; removed when the final save is complete\n")
    trainer.save_model(str(out))  # weights (or the adapter), config and (processing_class) tokenizer
    # The files a Trainer script leaves: trainer_state.json, train_results.json, eval_results.json, all_results.json.
    trainer.save_state()
    trainer.save_metrics("train", result_metrics)
    if metrics:
        trainer.save_metrics("eval", metrics)
    if trainer.is_world_process_zero():
        write_model_card(trainer, out)  # teacher, cache, data fingerprints, objective, held-out figures
        readable_by_all(out)
        flag.unlink()


def _merge(trainer, spec: TrainSpec) -> Path | None:
    """With ``args.merge``: the adapter merged into the student, saved plain in ``out/merged``; else None."""
    if not spec.args.lora_arguments().merge:
        return None
    out, merged = spec.out, spec.out / MERGED_DIR
    if trainer.is_world_process_zero():
        merge_adapter(out, spec.student, merged)
        write_model_card(trainer, merged, model_name=f"{out.name}-merged", merged=True)
    trainer.accelerator.wait_for_everyone()
    return merged


_DATA_OPTIONS = ("seq_len", "max_tokens", "text_field")


def _spec_of(spec, out, args, options: dict) -> TrainSpec:
    """``spec`` itself, or the :class:`TrainSpec` of the flat form (its data options folded into the DataSpec)."""
    if isinstance(spec, TrainSpec):
        if out is not None or args is not None or options:
            raise ValueError("train_student: pass either a TrainSpec or (student, out, args, **options), not both")
        return spec
    data_options = {name: options.pop(name) for name in _DATA_OPTIONS if name in options}
    # The flat form's data options shape online data only: offline, the cache holds its sequences already
    # (callers written for the keyword signature pass them either way).
    if data_options and options.get("data") is not None:
        options["data"] = as_data_spec(options["data"], **data_options)
    return TrainSpec(spec, out, args, **options)
