"""Where a teacher's weights live: one device, or spread by accelerate's big-model inference.

``device_map="auto"`` with ``max_memory`` lets a teacher larger than one
device run: accelerate fills the GPUs in order, then CPU memory, then puts
the remaining layers on disk (``offload_folder``) and moves each layer's
weights to the compute device only while that layer runs. The results are
the same numbers as a plain load, only slower.

Code that reads a weight outside the owning module's forward (the teacher's
chunked output head, the weight fingerprint) must first bring it back from
CPU or disk: :func:`materialized` does that for one module, exactly as
accelerate's own hook does before a forward, and puts it back afterwards.
"""

from __future__ import annotations

import re
from contextlib import contextmanager

DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)


def resolve_device(device: str) -> str:
    """``"auto"`` becomes ``"cuda"`` when a CUDA device is present, else ``"cpu"``; anything else is kept."""
    if device != "auto":
        return device
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


def load_options(device_map: str | None, max_memory: str | None, offload_folder: str | None) -> dict:
    """Keyword arguments for ``from_pretrained``: a device map, or nothing (the caller moves the model to ``device``)."""
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


def input_device(model):
    """The device the model's input ids must be on (its embedding's compute device)."""
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
    """``(weight [V, H], bias [V] or None)`` of the output head, brought in from CPU/disk if offloaded."""
    head = model.get_output_embeddings()
    if head is None or not hasattr(head, "weight"):
        raise ValueError(f"model: {type(model).__name__} has no linear output head")
    with materialized(head):
        yield head.weight, getattr(head, "bias", None)


def offloaded_state(model):
    """``(name, tensor)`` for every state-dict entry, each real (brought in from CPU/disk while it is read).

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
                yield name, getattr(module, local)
