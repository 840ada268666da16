"""Which distributed engine a training run uses, decided once from the arguments.

`transformers.TrainingArguments` only sets up data parallelism on CPU when
``use_cpu`` is set: without it accelerate looks for an accelerator, finds
none, and reports ``NOT_PARALLEL`` even under ``torchrun`` (every rank then
trains the whole data set alone). On a machine without an accelerator we set
``use_cpu`` ourselves, so ``torchrun`` gives real DDP over gloo; on a GPU the
defaults stand (DDP over nccl).
"""

from __future__ import annotations

import os


def accelerator_available() -> bool:
    """True when torch sees any accelerator (CUDA, XPU, MPS, ...)."""
    import torch

    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        return accelerator.is_available()
    return torch.cuda.is_available()


def launched_processes() -> int:
    """How many processes the launcher started (``WORLD_SIZE``; 1 without a launcher)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def choose_device(args) -> None:
    """Before ``TrainingArguments.__post_init__``: train on CPU where there is nothing else.

    This is also what makes ``bf16`` accepted on CPU (transformers refuses
    bf16 without ``use_cpu`` when no bf16-capable GPU is present).
    """
    if not args.use_cpu and not accelerator_available():
        args.use_cpu = True
    if args.use_cpu:
        args.dataloader_pin_memory = False  # pinning needs an accelerator; on CPU it only warns


def check_engine(args) -> None:
    """After ``TrainingArguments.__post_init__``: refuse a sharded engine that would not run.

    The Trainer quietly trains with plain DDP (or in one process) in cases
    where the user asked for FSDP; a run that is not what was asked for is
    refused here instead.
    """
    if args.fsdp and args.deepspeed:
        raise ValueError("fsdp/deepspeed: choose one engine, found both --fsdp and --deepspeed")
    if args.fsdp and launched_processes() < 2 and not os.environ.get("LOCAL_RANK"):
        raise ValueError(
            f"fsdp: {' '.join(args.fsdp) if isinstance(args.fsdp, list) else args.fsdp} needs a distributed "
            "launch, found a single process without a launcher; start it with "
            "`torchrun --nproc-per-node N -m destila train ...` (N = 1 is fine)"
        )
