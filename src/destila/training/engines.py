"""Which distributed engine a training run uses, and a check that it is the one asked for.

- ``choose_device``: ``transformers.TrainingArguments`` only sets up data
  parallelism on CPU when ``use_cpu`` is set: without it accelerate looks for
  an accelerator, finds none, and reports ``NOT_PARALLEL`` even under
  ``torchrun`` (every rank then trains the whole data set alone). On a machine
  without an accelerator we set ``use_cpu`` ourselves, so ``torchrun`` gives
  real DDP over gloo; on a GPU the defaults stand (DDP over nccl).
- ``check_engine`` / ``enable_cpu_fsdp``: ``--fsdp`` and ``--deepspeed``
  either run as asked or are refused, never quietly replaced by DDP.
- ``describe_engine``: what really runs, read from the live trainer (logged
  as the first record of ``log.jsonl``).
"""

from __future__ import annotations

import os


def accelerator_available() -> bool:
    """True when torch sees any accelerator (CUDA, XPU, MPS, ...)."""
    # heavy: torch (this module's own imports are the standard library's)
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
    if args.deepspeed and (args.use_cpu or not accelerator_available()):
        # accelerate only turns DeepSpeed on for an accelerator; on CPU the
        # Trainer would quietly train without it.
        raise ValueError(
            "deepspeed: DeepSpeed needs a GPU and none was found (or --use_cpu was given); on CPU shard with "
            "--fsdp full_shard under torchrun instead (see docs/scale.md)"
        )
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


def enable_cpu_fsdp(trainer) -> None:
    """After the Trainer built its Accelerator: make a requested FSDP run on CPU really shard.

    accelerate turns a launch into FSDP only for accelerator back-ends; on a
    CPU-only machine (gloo) it keeps ``MULTI_CPU`` and the Trainer then trains
    with DDP although ``--fsdp`` was given. PyTorch's FSDP (``fully_shard``)
    itself runs on CPU over gloo, so the state is switched to FSDP with the
    plugin the Trainer built from ``fsdp_config``. Any other mismatch is
    refused rather than run as something else.
    """
    # accelerate: only for FSDP on CPU
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    args = trainer.args
    if args.fsdp_plugin_args is None or trainer.is_fsdp_enabled:
        return
    state = trainer.accelerator.state
    if state.distributed_type != DistributedType.MULTI_CPU:
        raise ValueError(
            f"fsdp: requested, but accelerate set up {state.distributed_type.value} instead of FSDP; "
            "launch with torchrun (or accelerate launch) on a supported back-end, or drop --fsdp"
        )
    plugin = FullyShardedDataParallelPlugin(**args.fsdp_plugin_args)
    if state.mixed_precision != "no":
        plugin.set_mixed_precision(state.mixed_precision)
    # accelerate keeps the distributed type in two shared states, and
    # rebuilds one from the other; both must say FSDP.
    from accelerate.state import PartialState

    PartialState().distributed_type = DistributedType.FSDP
    state.distributed_type = DistributedType.FSDP
    state.fsdp_plugin = plugin
    trainer.is_fsdp_enabled = True


def describe_engine(trainer, model) -> dict:
    """What actually runs, read from the live objects (not from the flags asked for).

    ``{"engine": "single" | "ddp" | "fsdp1" | "fsdp2" | "deepspeed", "world_size": W,
    "backend": "gloo" | "nccl" | ..., "global_batch": per-device batch × accumulation × W}``.
    """
    # heavy: torch.distributed
    import torch.distributed as dist

    state = trainer.accelerator.state
    kind = state.distributed_type.value
    if trainer.is_deepspeed_enabled:
        engine = "deepspeed"
    elif trainer.is_fsdp_enabled:
        engine = f"fsdp{state.fsdp_plugin.fsdp_version}"
    elif state.num_processes > 1:
        engine = "ddp"
    else:
        engine = "single"
    if engine == "fsdp2":
        # torch's FSDP module: only under FSDP2
        from torch.distributed.fsdp import FSDPModule

        if not isinstance(model, FSDPModule):
            raise RuntimeError(f"fsdp: FSDP2 was set up but the model is a plain {type(model).__name__}")
    args = trainer.args
    return {
        "engine": engine,
        "distributed_type": kind,
        "world_size": state.num_processes,
        "backend": dist.get_backend() if dist.is_initialized() else None,
        "global_batch": args.per_device_train_batch_size * args.gradient_accumulation_steps * state.num_processes,
    }
