"""Where a teacher's weights live: one device, spread by accelerate's big-model inference, or
sharded across ``torchrun``'s processes by transformers' tensor-parallel plan.

``device_map="auto"`` with ``max_memory`` lets a teacher larger than one
device run: accelerate fills the GPUs in order, then CPU memory, then puts
the remaining layers on disk (``offload_folder``) and moves each layer's
weights to the compute device only while that layer runs. The results are
the same numbers as a plain load, only slower.

Code that reads a weight outside the owning module's forward (the teacher's
chunked output head, the weight fingerprint) must first bring it back from
CPU or disk: :func:`materialized` does that for one module, exactly as
accelerate's own hook does before a forward, and puts it back afterwards.

``tensor_parallel`` loads the teacher with ``tp_plan="auto"``: each process
holds a slice of every sharded weight (a ``DTensor``), all processes run the
same inputs and the forward exchanges partial results. A weight read outside
a forward is gathered whole with :func:`whole` (a collective: every process
must ask for the same tensors in the same order).
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field

DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


@dataclass(kw_only=True)
class PlacementSpec:
    """Where a teacher's weights go: one device, or spread by a device map (GPUs, CPU memory, disk).

    Declared once: :class:`~destila.cache.spec.BuildSpec` holds these fields
    (``destila cache build --device-map auto``), and online ``destila train``
    takes them for its teacher as ``--teacher-device-map`` and so on.
    Naive equivalent: ``from_pretrained(..., device_map=…, max_memory=…, offload_folder=…)``.
    """

    device: str = field(default="auto", metadata={
        "help": "auto (CUDA when present, else CPU), cpu, cuda, cuda:1, …; not used with a device map"})
    device_map: str | None = field(default=None, metadata={
        "help": "spread a teacher too large for one device: auto (GPUs in order, then CPU memory, then disk; "
                "accelerate big-model inference)", "choices": list(DEVICE_MAPS)})
    max_memory: str | None = field(default=None, metadata={
        "help": "with a device map: memory per device, e.g. 0=20GiB,1=20GiB,cpu=64GiB; the rest goes to disk"})
    offload_folder: str | None = field(default=None, metadata={
        "help": "with a device map: folder for the layers offloaded to disk"})
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)


def resolve_device(device: str) -> str:
    """``"auto"`` becomes ``"cuda"`` when a CUDA device is present, else ``"cpu"``; anything else is kept."""
    if device != "auto":
        return device
    # heavy: torch, only for device "auto"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def parse_max_memory(text: str | None) -> dict | None:
    """``"0=20GiB,1=20GiB,cpu=64GiB"`` → ``{0: "20GiB", 1: "20GiB", "cpu": "64GiB"}`` (accelerate's form).

    Keys are GPU indices or ``cpu``; what fits in none of them goes to disk
    (the offload folder). Sizes take accelerate's
    units (``B``, ``KB``, ``MB``, ``GB``, ``KiB``, ``MiB``, ``GiB``) or a
    plain byte count.
    """
    if text is None or text == "":
        return None
    limits: dict = {}
    for item in text.split(","):
        key, sep, size = item.partition("=")
        key = key.strip()
        if not sep or not _SIZE.match(size):
            raise ValueError(
                f"max_memory: expected DEVICE=SIZE[,DEVICE=SIZE...] such as 0=20GiB,cpu=64GiB, found {item!r}"
            )
        if not (key.isdigit() or key == "cpu"):
            raise ValueError(f"max_memory: devices are GPU indices (0, 1, ...) or cpu, found {key!r}")
        size = size.strip()
        limits[int(key) if key.isdigit() else key] = int(size) if size.isdigit() else size
    return limits


def load_options(device_map: str | None, max_memory: str | None, offload_folder: str | None,
                 tensor_parallel: bool = False) -> dict:
    """Keyword arguments for ``from_pretrained``: a device map, transformers' tensor-parallel plan over all
    ``torchrun`` processes, or nothing (the caller moves the model to ``device``)."""
    if tensor_parallel:
        # transformers takes seconds to import: only for tensor parallelism
        from transformers import DistributedConfig

        if device_map or max_memory or offload_folder:
            raise ValueError("tensor_parallel: cannot be combined with a device map (max_memory, offload_folder)")
        return {"distributed_config": DistributedConfig(tp_plan="auto")}
    if device_map is None:
        if max_memory or offload_folder:
            raise ValueError("max_memory/offload_folder: only used with --device-map auto; pass it as well")
        return {}
    if device_map not in DEVICE_MAPS:
        raise ValueError(f"device_map: expected one of {', '.join(DEVICE_MAPS)}, found {device_map!r}")
    options = {"device_map": device_map}
    limits = parse_max_memory(max_memory)
    if limits is not None:
        options["max_memory"] = limits
    if offload_folder:
        options["offload_folder"] = offload_folder
    return options


def check_tensor_parallel(device: str, world: int) -> None:
    """Refuse a tensor-parallel teacher outside ``torchrun``, or on a device transformers would not put it on."""
    if world < 2:
        raise ValueError("tensor_parallel: shards the teacher across torchrun's processes, found a single process; "
                         "launch with torchrun --nproc-per-node N (N ≥ 2, one per GPU) or drop --tensor-parallel")
    accelerator = resolve_device("auto")
    if device not in ("auto", accelerator):
        raise ValueError(f"tensor_parallel: transformers puts each process's shard on this machine's {accelerator} "
                         f"(cuda:LOCAL_RANK on GPUs), found --device {device}; drop --device")


def check_tensor_plan(config, world: int) -> None:
    """Refuse a teacher transformers' tensor-parallel plan cannot split over ``world`` processes.

    The plan shards attention by heads (query and key/value projections
    column-wise), so both head counts must divide by ``world``; the
    vocabulary and the MLP width need not (the last rank holds a shorter slice).
    """
    config = config.get_text_config()
    if not getattr(config, "base_model_tp_plan", None):
        raise ValueError(f"tensor_parallel: transformers has no tensor-parallel plan for {config.model_type}; "
                         "spread the teacher with --device-map auto instead")
    for attr in ("num_attention_heads", "num_key_value_heads"):
        heads = getattr(config, attr, None)
        if isinstance(heads, int) and heads % world:
            raise ValueError(f"tensor_parallel: the teacher has {attr}={heads}, which {world} processes cannot "
                             f"share evenly; run torchrun with an --nproc-per-node that divides {heads}")


def whole(tensor):
    """``tensor`` entire on this process: a tensor-parallel shard (``DTensor``) is gathered from every rank.

    A plain tensor (or None) is returned as it is. Naive equivalent:
    ``tensor.full_tensor()`` for a ``DTensor``.
    """
    gather = getattr(tensor, "full_tensor", None)
    return tensor if gather is None else gather()


def input_device(model):
    """The device the model's input ids must be on (its embedding's compute device)."""
    # heavy: torch
    import torch

    embeddings = model.get_input_embeddings()
    hook = getattr(embeddings, "_hf_hook", None)
    if hook is not None and getattr(hook, "execution_device", None) is not None:
        return torch.device(hook.execution_device)
    root = getattr(model, "_hf_hook", None)
    if root is not None and getattr(root, "execution_device", None) is not None:
        return torch.device(root.execution_device)
    return embeddings.weight.device


@contextmanager
def materialized(module):
    """While active, ``module``'s own parameters are real tensors on its compute device (not meta).

    A no-op for a module that accelerate did not offload. Naive equivalent:
    ``module.to(device)`` before and ``module.to("meta")`` after.
    """
    hook = getattr(module, "_hf_hook", None)
    if hook is None or not getattr(hook, "offload", False):
        yield module
        return
    hook.pre_forward(module)
    try:
        yield module
    finally:
        hook.post_forward(module, None)


@contextmanager
def head_weights(model):
    """``(weight [V, H], bias [V] or None)`` of the output head, over the full vocabulary: brought in from
    CPU/disk if offloaded, gathered from every rank if tensor-parallel (then every rank must enter)."""
    head = model.get_output_embeddings()
    if head is None or not hasattr(head, "weight"):
        raise ValueError(f"model: {type(model).__name__} has no linear output head")
    with materialized(head):
        yield whole(head.weight), whole(getattr(head, "bias", None))


def offloaded_state(model):
    """``(name, tensor)`` for every state-dict entry, each real and whole (brought in from CPU/disk while it
    is read, gathered from every rank if tensor-parallel).

    The names and order are those of ``model.state_dict()``; offloaded tensors
    are yielded from inside :func:`materialized`, so read each one before
    asking for the next.
    """
    names = set(model.state_dict())
    for module_name, module in model.named_modules():
        own = [(n, t) for n, t in module.named_parameters(recurse=False)]
        own += [(n, t) for n, t in module.named_buffers(recurse=False)]
        prefix = f"{module_name}." if module_name else ""
        own = [(prefix + n, t) for n, t in own if prefix + n in names]
        if not own:
            continue
        with materialized(module):
            for name, _ in own:
                local = name[len(prefix):]
                yield name, whole(getattr(module, local))
