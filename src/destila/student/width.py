"""Width pruning (Minitron): a narrower copy of a model, keeping the channels, neurons and heads that matter.

Importance is measured on calibration text, per token, and averaged:

- hidden channel ``d``: ``|x_d|`` at the output of every RMSNorm of the
  residual stream (each layer's two norms and the final one), summed over
  norms: what the channel carries into every block and into the head;
- MLP neuron ``i`` of a layer: ``|a_i| · ‖W_down[:, i]‖``, the size of what
  the neuron adds to the residual stream (``a`` = the input of ``down_proj``);
- attention head ``j`` of a layer: ``‖W_o[:, j] · o_j‖``, the size of what
  the head adds to the residual stream. Query heads are kept within whole
  key/value groups: the groups with the largest summed head importance, and
  in each the most important query heads, the same number per group.

The hidden channels kept are the same everywhere (one residual stream);
neurons and heads are chosen per layer. ``head_dim`` stays the teacher's and
is written into the config, so the student's attention shapes do not depend
on ``hidden_size / num_attention_heads``.

Naive equivalent: build the smaller config, then copy
``W[rows_kept][:, columns_kept]`` for every weight.
"""

from __future__ import annotations

import contextlib
import re

import torch

from destila.student.calibration import Calibration
from destila.student.spec import WIDTH_FIELDS

WIDTH_FAMILIES = ("llama", "mistral", "qwen2", "qwen3")


def head_dim_of(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def resolve_targets(config, hidden_size=None, intermediate_size=None, num_attention_heads=None,
                    num_key_value_heads=None) -> dict:
    """The four target sizes, unset ones filled from the teacher; ValueError for sizes that cannot be built.

    ``num_key_value_heads`` left unset keeps the teacher's if the head count
    allows, else each key/value head keeps its share of query heads.
    """
    if config.model_type not in WIDTH_FAMILIES:
        raise ValueError(f"student init: width pruning supports {', '.join(WIDTH_FAMILIES)}, "
                         f"found model type {config.model_type!r}; use --config for a fresh narrower model")
    teacher = {field: getattr(config, field) for field in WIDTH_FIELDS}
    teacher["num_key_value_heads"] = teacher["num_key_value_heads"] or teacher["num_attention_heads"]
    wanted = dict(zip(WIDTH_FIELDS, (hidden_size, intermediate_size, num_attention_heads, num_key_value_heads)))
    for field, value in wanted.items():
        flag = "--" + field.replace("_", "-")
        if value is None:
            continue
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{flag}: expected a positive integer, found {value!r}")
        if value > teacher[field]:
            raise ValueError(f"{flag}: expected at most the teacher's {teacher[field]} (pruning only narrows), "
                             f"found {value}")
    heads, kv = teacher["num_attention_heads"], teacher["num_key_value_heads"]
    group = heads // kv
    new_heads, new_kv = wanted["num_attention_heads"], wanted["num_key_value_heads"]
    if new_heads is None and new_kv is not None:
        new_heads = new_kv * group
    elif new_heads is None:
        new_heads = heads
    if new_kv is None:
        new_kv = kv if new_heads % kv == 0 else -(-new_heads // group)
    if new_heads % new_kv:
        raise ValueError(f"--num-attention-heads {new_heads} is not a multiple of --num-key-value-heads {new_kv}; "
                         "each key/value head must serve the same number of query heads")
    if new_heads // new_kv > group:
        raise ValueError(f"--num-attention-heads {new_heads} with --num-key-value-heads {new_kv}: each key/value "
                         f"head would serve {new_heads // new_kv} query heads, but the teacher's serve {group}; "
                         f"keep at least {-(-new_heads // group)} key/value heads")
    sizes = {
        "hidden_size": wanted["hidden_size"] or teacher["hidden_size"],
        "intermediate_size": wanted["intermediate_size"] or teacher["intermediate_size"],
        "num_attention_heads": new_heads,
        "num_key_value_heads": new_kv,
    }
    narrow_config(config, sizes)  # the family's own config checks, before anything is measured
    return sizes


def narrow_config(config, sizes: dict):
    """The student's config: ``config`` with ``sizes`` and the teacher's ``head_dim``; ValueError if the family refuses it.

    Some families' config validators add their own rules (Llama's asks for
    ``hidden_size`` to be a multiple of ``num_attention_heads`` even with an
    explicit ``head_dim``); their reason is passed on in one line.
    """
    values = {**config.to_dict(), **sizes, "head_dim": head_dim_of(config)}
    try:
        return config.__class__.from_dict(values)
    except Exception as err:  # transformers' strict config dataclasses raise their own error type
        cause = err.__cause__ or err
        reason = " ".join(str(cause).split())
        raise ValueError(f"student init: a {config.model_type} config refuses these sizes ({reason}); "
                         "choose sizes it accepts") from err


@contextlib.contextmanager
def _recording(model, mask_of_batch: dict):
    """Hooks that add each token's importance terms into the returned dict of sums."""
    layers = model.model.layers
    config = model.config
    hd, heads = head_dim_of(config), config.num_attention_heads
    sums = {
        "hidden": torch.zeros(config.hidden_size, dtype=torch.float64),
        "neurons": [torch.zeros(config.intermediate_size, dtype=torch.float64) for _ in layers],
        "heads": [torch.zeros(heads, dtype=torch.float64) for _ in layers],
    }

    def masked(x: torch.Tensor) -> torch.Tensor:
        return x.float()[mask_of_batch["mask"]]  # [n, D]

    def norm_hook(_module, _args, output):
        sums["hidden"] += masked(output).abs().sum(0).double().cpu()

    handles = [model.model.norm.register_forward_hook(norm_hook)]
    for index, layer in enumerate(layers):
        handles.append(layer.input_layernorm.register_forward_hook(norm_hook))
        handles.append(layer.post_attention_layernorm.register_forward_hook(norm_hook))

        def neuron_hook(module, args, index=index):
            column_norms = module.weight.float().norm(dim=0)  # [I]
            sums["neurons"][index] += (masked(args[0]).abs() * column_norms).sum(0).double().cpu()

        def head_hook(module, args, index=index):
            per_head = masked(args[0]).view(-1, heads, hd)  # [n, heads, hd]
            weight = module.weight.float().view(-1, heads, hd)  # [H, heads, hd]
            added = torch.einsum("nkd,hkd->nkh", per_head, weight)  # each head's contribution [n, heads, H]
            sums["heads"][index] += added.norm(dim=-1).sum(0).double().cpu()

        handles.append(layer.mlp.down_proj.register_forward_pre_hook(neuron_hook))
        handles.append(layer.self_attn.o_proj.register_forward_pre_hook(head_hook))
    try:
        yield sums
    finally:
        for handle in handles:
            handle.remove()


def width_importance(model, calibration: Calibration) -> dict:
    """Mean importance per hidden channel ``[H]``, per MLP neuron ``[layers][I]`` and per head ``[layers][heads]``."""
    device = next(model.parameters()).device
    current = {}
    count = 0
    with torch.no_grad(), _recording(model, current) as sums:
        for batch in calibration.batches(1024):
            current["mask"] = batch.scored.to(device)
            count += int(current["mask"].sum())
            model(**{k: v.to(device) for k, v in batch.forward_kwargs().items()}, use_cache=False)
    count = max(count, 1)
    return {"hidden": sums["hidden"] / count, "neurons": [n / count for n in sums["neurons"]],
            "heads": [h / count for h in sums["heads"]], "tokens": count}


def _top(scores: torch.Tensor, keep: int) -> list[int]:
    """Indices of the ``keep`` largest scores, in their original order."""
    return sorted(torch.argsort(scores, descending=True, stable=True)[:keep].tolist())


def keep_heads(scores: torch.Tensor, kv_heads: int, new_heads: int, new_kv: int) -> tuple[list[int], list[int]]:
    """``(query heads kept, key/value heads kept)`` for one layer's head ``scores [heads]``."""
    group = scores.numel() // kv_heads
    per_group = scores.view(kv_heads, group)
    groups = _top(per_group.sum(1), new_kv)
    share = new_heads // new_kv
    queries = [g * group + j for g in groups for j in _top(per_group[g], share)]
    return queries, groups


def _rows(heads: list[int], head_dim: int) -> torch.Tensor:
    return torch.cat([torch.arange(h * head_dim, (h + 1) * head_dim) for h in heads])


_LAYER_KEY = re.compile(r"^model\.layers\.(\d+)\.(.+)$")


def prune_width(model, calibration: Calibration, **targets) -> tuple[torch.nn.Module, dict]:
    """``(narrower model, record)``; ``targets`` as in :func:`resolve_targets`.

    The record names the targets and, per layer, the kept heads (query and
    key/value); the kept channel and neuron indices are implied by the
    weights and not stored.
    """
    # transformers takes seconds to import: only when a student is pruned
    from transformers import AutoModelForCausalLM

    config = model.config
    sizes = resolve_targets(config, **targets)
    importance = width_importance(model, calibration)
    hd = head_dim_of(config)
    kv = config.num_key_value_heads or config.num_attention_heads
    hidden = torch.tensor(_top(importance["hidden"], sizes["hidden_size"]))
    neurons = [torch.tensor(_top(n, sizes["intermediate_size"])) for n in importance["neurons"]]
    heads = [keep_heads(h, kv, sizes["num_attention_heads"], sizes["num_key_value_heads"])
             for h in importance["heads"]]

    def layer_slice(index: int, name: str, tensor: torch.Tensor) -> torch.Tensor:
        q_rows, kv_rows = _rows(heads[index][0], hd), _rows(heads[index][1], hd)
        module, _, param = name.rpartition(".")  # e.g. "mlp.up_proj", "weight"
        rows_cols = {
            "input_layernorm": (hidden, None), "post_attention_layernorm": (hidden, None),
            "self_attn.q_proj": (q_rows, hidden), "self_attn.k_proj": (kv_rows, hidden),
            "self_attn.v_proj": (kv_rows, hidden), "self_attn.o_proj": (hidden, q_rows),
            "self_attn.q_norm": (None, None), "self_attn.k_norm": (None, None),
            "mlp.gate_proj": (neurons[index], hidden), "mlp.up_proj": (neurons[index], hidden),
            "mlp.down_proj": (hidden, neurons[index]),
        }
        if module not in rows_cols:
            raise ValueError(f"student init: width pruning does not know the weight {name!r} of layer {index} "
                             f"({config.model_type}); use --config for a fresh narrower model")
        rows, cols = rows_cols[module]
        if rows is not None:
            tensor = tensor[rows]
        if cols is not None and param == "weight" and tensor.dim() == 2:
            tensor = tensor[:, cols]
        return tensor

    state = {}
    for key, tensor in model.state_dict().items():
        match = _LAYER_KEY.match(key)
        if match:
            state[key] = layer_slice(int(match.group(1)), match.group(2), tensor)
        elif key in ("model.embed_tokens.weight", "lm_head.weight"):
            state[key] = tensor[:, hidden]
        elif key == "model.norm.weight":
            state[key] = tensor[hidden]
        elif key == "lm_head.bias":
            state[key] = tensor
        else:
            raise ValueError(f"student init: width pruning does not know the weight {key!r} ({config.model_type}); "
                             "use --config for a fresh narrower model")
    student = AutoModelForCausalLM.from_config(narrow_config(config, sizes))
    missing, unexpected = student.load_state_dict({k: v.contiguous().clone() for k, v in state.items()}, strict=False)
    tied = {k for k in missing if k == "lm_head.weight"} if config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise RuntimeError(f"student init: pruned weights did not map cleanly (missing {missing}, unexpected {unexpected})")
    student.tie_weights()
    record = {**sizes, "head_dim": hd, "criterion": "activation", "calibration_tokens": importance["tokens"],
              "kept_query_heads": [h[0] for h in heads], "kept_key_value_heads": [h[1] for h in heads]}
    return student.eval(), record
