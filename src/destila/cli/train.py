"""`destila train`: a student from a cache (offline), or online from a teacher and data."""

from __future__ import annotations

import json

# CLI flag -> DistillationArguments / TrainingArguments field. The common
# Trainer options get short flags; any other field goes through --trainer-arg.
_LOSS_FLAGS = {
    "loss_impl": dict(choices=["fused", "chunked", "dense"], default="fused",
                      help="how the loss is computed (default: fused)"),
    "divergence": dict(choices=["forward_kl", "reverse_kl", "jsd", "tvd"], default="forward_kl"),
    "beta": dict(type=float, default=0.5, help="JSD mixture weight"),
    "tail": dict(choices=["bucket", "renorm", "none"], default="bucket",
                 help="how the mass outside the teacher's top-K is treated (default: bucket)"),
    "temperature": dict(type=float, default=1.0),
    "soft_weight": dict(type=float, default=1.0, help="weight of the divergence to the teacher"),
    "hard_weight": dict(type=float, default=0.0, help="weight of the cross-entropy on the next tokens"),
    "chunk_size": dict(type=int, default=2048, help="rows per loss chunk"),
    "eval_fraction": dict(type=float, default=0.0, help="fraction of sequences held out for evaluation"),
    "online_loss": dict(choices=["dense", "topk"], default="dense",
                        help="online only: full-vocabulary loss, or top-K on the fly through the same loss"),
    "online_top_k": dict(type=int, default=100, help="online topk only: K"),
}
_TRAINER_FLAGS = {
    "max_steps": dict(type=int, default=-1, help="optimizer steps (overrides --epochs)"),
    "num_train_epochs": dict(flag="--epochs", type=float, default=1.0),
    "per_device_train_batch_size": dict(flag="--batch-size", type=int, default=8),
    "per_device_eval_batch_size": dict(flag="--eval-batch-size", type=int, default=8),
    "gradient_accumulation_steps": dict(flag="--grad-accum", type=int, default=1),
    "learning_rate": dict(flag="--lr", type=float, default=5e-5),
    "lr_scheduler_type": dict(flag="--lr-scheduler", default="linear", help="linear, cosine, constant, ..."),
    "warmup_steps": dict(type=float, default=0, help="warm-up steps (a fraction < 1 means a ratio)"),
    "weight_decay": dict(type=float, default=0.0),
    "seed": dict(type=int, default=42),
    "logging_steps": dict(type=float, default=10),
    "save_steps": dict(type=float, default=500, help="checkpoint every N steps"),
    "save_total_limit": dict(type=int, default=None, help="keep at most N checkpoints"),
    "eval_steps": dict(type=float, default=None, help="evaluate the held-out part every N steps"),
    "report_to": dict(default="none", help="none, tensorboard, wandb, ... (comma-separated)"),
}
_SWITCHES = {
    "bf16": "bfloat16 mixed precision",
    "fp16": "float16 mixed precision (GPU)",
    "gradient_checkpointing": "recompute activations in backward to save memory",
    "allow_tokenizer_mismatch": "train although the student's tokenizer differs from the cache's (same vocabulary size only)",
}


def _flag(name: str, spec: dict) -> str:
    return spec.pop("flag", "--" + name.replace("_", "-"))


def add_lora_flags(parser) -> None:
    """``--lora-r``, ``--lora-alpha``, ... from :class:`LoraArguments` (names, defaults and help declared there)."""
    from dataclasses import MISSING, fields

    from destila.training.peft_student import LoraArguments

    group = parser.add_argument_group("LoRA student (needs destila[peft])")
    for spec in fields(LoraArguments):
        flag = "--" + spec.name.replace("_", "-")
        if spec.type in (bool, "bool"):
            group.add_argument(flag, dest=spec.name, action="store_true", help=spec.metadata["help"])
        else:
            kind = {"int": int, "float | None": float, "float": float, "str": str}[str(spec.type)]
            default = spec.default if spec.default is not MISSING else None
            group.add_argument(flag, dest=spec.name, type=kind, default=default, help=spec.metadata["help"])


def register(subparsers) -> None:
    train = subparsers.add_parser(
        "train",
        help="train a student from a cache (or online from a teacher)",
        description="Offline: destila train STUDENT --cache CACHE -o OUT. "
        "Online baseline: destila train STUDENT --teacher TEACHER --data DATA -o OUT.",
    )
    train.add_argument("student", help="student folder (e.g. from `destila student init`)")
    train.add_argument("-o", "--out", required=True, help="output folder: checkpoints, log.jsonl, final model")
    source = train.add_argument_group("targets")
    source.add_argument("--cache", help="top-K cache from `destila cache build` (offline)")
    source.add_argument("--teacher", help="online: teacher folder, hub id, .gguf file or 'smollm2'")
    source.add_argument("--teacher-gguf-file", help="online: GGUF file name inside the teacher folder")
    source.add_argument("--data", help="online: text data (.txt/.jsonl/.parquet, folder, or 'pydoc')")
    source.add_argument("--text-field", default="text", help="online: text field of jsonl/parquet data")
    source.add_argument("--seq-len", type=int, default=512, help="online: tokens per packed sequence")
    source.add_argument("--max-tokens", type=int, help="online: cap on the tokens taken from the data")
    loss = train.add_argument_group("loss")
    for name, spec in _LOSS_FLAGS.items():
        spec = dict(spec)
        loss.add_argument(_flag(name, spec), dest=name, **spec)
    trainer = train.add_argument_group("trainer (transformers.TrainingArguments)")
    for name, spec in _TRAINER_FLAGS.items():
        spec = dict(spec)
        trainer.add_argument(_flag(name, spec), dest=name, **spec)
    for name, text in _SWITCHES.items():
        trainer.add_argument("--" + name.replace("_", "-"), dest=name, action="store_true", help=text)
    add_lora_flags(train)
    trainer.add_argument("--resume", nargs="?", const=True, default=None, metavar="CHECKPOINT",
                         help="resume from the last checkpoint in OUT, or from CHECKPOINT")
    trainer.add_argument("--trainer-arg", action="append", default=[], metavar="KEY=VALUE",
                         help="any other TrainingArguments field, e.g. --trainer-arg optim=adafactor")
    train.set_defaults(func=run)


def _parse_extra(items: list[str]) -> dict:
    extra = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--trainer-arg: expected KEY=VALUE, found {item!r}")
        key, raw = item.split("=", 1)
        try:
            extra[key] = json.loads(raw)
        except json.JSONDecodeError:
            extra[key] = raw
    return extra


def run(args) -> int:
    from dataclasses import fields

    from destila.training import DistillationArguments, train_student
    from destila.training.peft_student import LoraArguments

    options = {name: getattr(args, name) for name in [*_LOSS_FLAGS, *_TRAINER_FLAGS, *_SWITCHES]}
    options["report_to"] = [r for r in options["report_to"].split(",") if r and r != "none"] or "none"
    if options["save_total_limit"] is None:
        del options["save_total_limit"]
    if options["eval_steps"] is not None:
        options["eval_strategy"] = "steps"
    extra = _parse_extra(args.trainer_arg)
    known = {f.name for f in fields(DistillationArguments)}
    unknown = sorted(set(extra) - known)
    if unknown:
        raise ValueError(f"--trainer-arg: TrainingArguments has no field(s) {', '.join(unknown)}")
    training_args = DistillationArguments(output_dir=args.out, **{**options, **extra})
    lora = LoraArguments(**{f.name: getattr(args, f.name) for f in fields(LoraArguments)})
    result = train_student(
        args.student, args.out, training_args,
        cache=args.cache, teacher=args.teacher, data=args.data, teacher_gguf_file=args.teacher_gguf_file,
        seq_len=args.seq_len, max_tokens=args.max_tokens, text_field=args.text_field, resume=args.resume, lora=lora,
    )
    if training_args.process_index == 0:
        if result["eval"]:
            print("held-out: " + ", ".join(f"{k.removeprefix('eval_')} {v:.4g}" for k, v in result["eval"].items()
                                           if isinstance(v, float)))
        print(f"{'adapter' if lora.enabled else 'student'} saved to {args.out}")
        if result["merged"]:
            print(f"merged student saved to {result['merged']}")
    return 0
