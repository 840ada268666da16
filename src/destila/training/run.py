"""`train_student`: one call from a student folder and a cache (or an online
teacher and data) to a trained student saved for plain `transformers`."""

from __future__ import annotations

from pathlib import Path

from destila.cache import TopKCache
from destila.cache.dataset import open_cache
from destila.cache.derived_checks import check_cache_tokenizer
from destila.data import DataSpec, collate, packed_source, texts_source
from destila.io import reported_os_error
from destila.models import SAVE_INCOMPLETE, load_causal_lm, load_tokenizer, output_head, tokenizer_fingerprint
from destila.io.permissions import readable_by_all
from destila.targets.online import OnlineTeacher
from destila.targets.spec import check_training_temperature
from destila.targets.truncate import check_top_k
from destila.training.arguments import DistillationArguments
from destila.training.callbacks import EngineReport, JsonlLogCallback
from destila.training.datasets import Subset
from destila.training.finite import check_weights
from destila.training.hidden_distillation import hidden_term
from destila.training.objective import objective_of
from destila.training.output_dir import LOG_FILE, WRITE_FAILURE, RunRecordCallback, claim_output_dir
from destila.training.peft_student import MERGED_DIR, LoraArguments, base_reference, merge_adapter, with_adapters
from destila.training.sharing import check_push, write_model_card
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
    eval_cache: str | Path | None = None,
    eval_sequences: int | None = None,
    lora: LoraArguments | None = None,
    teacher_placement: dict | None = None,
) -> dict:
    """Train ``student`` from ``cache`` (offline) or from ``teacher`` on ``data`` (online).

    Writes checkpoints and ``log.jsonl`` into ``out`` and, at the end,
    ``trainer_state.json``, ``train_results.json``, ``all_results.json``
    (and ``eval_results.json``) as ``Trainer.save_state``/``save_metrics`` do, and the
    student (safetensors, config, tokenizer) loadable with
    ``AutoModelForCausalLM.from_pretrained(out)``; with ``lora`` adapters
    enabled, the adapter instead (``PeftModel.from_pretrained``), and with
    ``lora.merge`` also ``out/merged``, the plain merged model.
    ``teacher_placement`` (online only) holds :func:`destila.models.load_causal_lm`'s
    ``device_map``/``max_memory``/``offload_folder`` for a teacher larger than one device.
    Returns ``{"train": Trainer metrics, "steps": optimizer steps, "eval": held-out metrics or {},
    "engine": what ran (:func:`destila.training.engines.describe_engine`), "merged": folder or None}``.

    ``out`` is claimed by :func:`~destila.training.output_dir.claim_output_dir`:
    a folder holding another run is refused unless ``resume`` (continue it
    from its newest complete checkpoint, or from the checkpoint path given)
    or ``args.overwrite``; a second concurrent writer is refused at once.

    Held-out data: ``args.eval_fraction`` of the training source, or
    ``eval_cache`` (a cache of other documents, its first ``eval_sequences``
    sequences), evaluated every ``args.eval_steps`` when
    ``args.eval_strategy="steps"`` and once at the end.
    """
    from transformers import AutoTokenizer

    if (cache is None) == (teacher is None) or (teacher is not None and data is None):
        raise ValueError("train: give either a cache (offline), or a teacher and data (online)")
    out = Path(out)
    args = args or DistillationArguments(output_dir=str(out))
    if Path(args.output_dir).resolve() != out.resolve():
        raise ValueError(f"train: args.output_dir is {args.output_dir} but out is {out}; they must agree")
    check_push(args)  # before anything loads: without a Hub the run would fail at its end
    if eval_cache is not None and (args.eval_fraction > 0 or cache is None):
        raise ValueError("train: an eval cache goes with offline training (a cache) and eval_fraction 0")
    if lora is None:
        lora = args.lora_arguments()
    elif args.lora_r and lora != args.lora_arguments():
        raise ValueError("train: lora and the LoRA fields of args (lora_r, ...) disagree; give them in one place")
    model = load_causal_lm(student)
    if args.freeze_embeddings:
        model.get_input_embeddings().requires_grad_(False)
        output_head(model)[0].requires_grad_(False)
    online, spec = None, None
    if cache is not None:
        # A cache folder, an export of one (a folder, a hub id, a datasets.Dataset), or a dataset of cache
        # items with a cache's attributes (a mix of caches): destila.cache.dataset.open_cache.
        source = open_cache(cache)
        if getattr(source, "vocab_size", 0) is None:  # rows that do not record it: the student's
            source.assume_vocab_size(output_head(model)[0].shape[0])
        tokenizer = (AutoTokenizer.from_pretrained(source.tokenizer_path) if source.tokenizer_path is not None
                     else load_tokenizer(student))
        if isinstance(source, TopKCache):  # the student ships this tokenizer: the one the cache's ids mean
            check_cache_tokenizer(cache, source.manifest, tokenizer)
        check_training_temperature(args.temperature, source.manifest.temperature, f"the cache {cache}")
        check_top_k(args.top_k, source)
        check_student(
            model, student, vocab_size=source.vocab_size, fingerprint=source.manifest.tokenizer_fingerprint,
            seq_len=source.seq_len, allow_tokenizer_mismatch=args.allow_tokenizer_mismatch,
        )
    else:
        teacher_model = load_causal_lm(teacher, gguf_file=teacher_gguf_file, **(teacher_placement or {}))
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
    if lora is not None and lora.enabled:
        model = with_adapters(model, lora, base=base_reference(student))
    hidden = hidden_term(args.hidden_options(), model, teacher_model=online.model if online else None,
                         source=source)
    eval_dataset = None  # with args.eval_fraction, the trainer holds out its split of the source
    if eval_cache is not None:
        held_out = open_cache(eval_cache)
        if held_out.manifest.tokenizer_fingerprint != source.manifest.tokenizer_fingerprint:
            raise ValueError(f"train: the eval cache {eval_cache} was built with another tokenizer than the "
                             "training cache; build both with the same teacher")
        eval_dataset = Subset(held_out, range(min(len(held_out), eval_sequences or len(held_out))))
    objective = objective_of(args, cache=cache, teacher=teacher, data=spec, student=student,
                             cache_content=source.manifest.ids_fingerprint if cache is not None else None, out=out)
    with args.main_process_first(desc="claiming the output folder"):
        claim = claim_output_dir(out, resume=resume, overwrite=args.overwrite, is_main=args.process_index == 0,
                                 objective=objective, inputs={"student": student, "cache": cache, "teacher": teacher,
                                                              "data": data, "eval cache": eval_cache})
    try:
        for note in claim.notes:
            print(note)
        trainer = DistillationTrainer(
            model=model,
            args=args,
            train_dataset=source,
            eval_dataset=eval_dataset,
            data_collator=collate,
            processing_class=tokenizer,
            teacher=online,
            hidden=hidden,
            callbacks=[JsonlLogCallback(out / LOG_FILE), RunRecordCallback(claim.run_id), *callbacks],
        )
        if any(getattr(callback, "shows_progress", False) for callback in callbacks):
            # A callback draws its own bar (e.g. destila.demo.budget.StepBudget, whose total is the real
            # step target); the Trainer's would count toward max_steps, or print every log line.
            from transformers.trainer_callback import PrinterCallback, ProgressCallback

            trainer.remove_callback(ProgressCallback)
            trainer.remove_callback(PrinterCallback)
        engine = EngineReport(trainer, out / LOG_FILE)
        trainer.add_callback(engine)
        result = trainer.train(resume_from_checkpoint=claim.checkpoint)
        metrics = trainer.evaluate() if trainer.eval_dataset is not None else {}
        check_weights(trainer.model, trainer.state, args, "the final save")
        flag = out / SAVE_INCOMPLETE  # until the last file is written, the folder is refused as a model
        if trainer.is_world_process_zero():
            flag.write_text("written by `destila train`; removed when the final save is complete\n")
        trainer.save_model(str(out))  # weights (or the adapter), config and (processing_class) tokenizer
        # The files a Trainer script leaves: trainer_state.json, train_results.json, eval_results.json, all_results.json.
        trainer.save_state()
        trainer.save_metrics("train", result.metrics)
        if metrics:
            trainer.save_metrics("eval", metrics)
        if trainer.is_world_process_zero():
            write_model_card(trainer, out)  # teacher, cache, data fingerprints, objective, held-out figures
            readable_by_all(out)
            flag.unlink()
        merged = None
        if lora is not None and lora.merge:
            merged = out / MERGED_DIR
            if trainer.is_world_process_zero():
                merge_adapter(out, student, merged)
                write_model_card(trainer, merged, model_name=f"{out.name}-merged", merged=True)
            trainer.accelerator.wait_for_everyone()
    except BaseException as err:
        claim.undo()  # a new run refused before its first checkpoint leaves nothing that blocks the same command
        # A full or read-only disk hides in torch's writer errors: name it and the folder.
        reported = reported_os_error(err, out, WRITE_FAILURE) if isinstance(err, Exception) else None
        if reported is None:
            raise
        raise reported from err
    finally:
        claim.release()
    return {"train": result.metrics, "steps": result.global_step, "eval": metrics, "engine": engine.engine,
            "merged": str(merged) if merged else None}
