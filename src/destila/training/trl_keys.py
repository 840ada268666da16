"""TRL's config keys (SFTConfig, GKDConfig, ModelConfig, ScriptArguments) mapped onto destila's options.

A YAML written for ``trl sft`` or ``trl gkd`` runs with ``destila train
--config``: each key below becomes the destila option it means, or is
refused with the reason, every refusal listed in one line. Keys that are
``transformers.TrainingArguments`` fields need no mapping (destila takes them
under the same names). docs/training.md shows this table (:func:`markdown_table`,
written there by ``make docs``). What TRL means by the keys it leaves out is
:mod:`destila.training.trl_defaults`.

GKD's ``beta`` alone selects the divergence, as in TRL's generalised JSD:
``beta: 0`` is forward KL, ``beta: 1`` reverse KL, anything between the
JSD with that β (mixture ``m = βp + (1 − β)q``, p the teacher), which is
destila's ``jsd``. A ``divergence`` given beside it wins, and must be ``jsd``
when β is strictly between 0 and 1.

A config TRL wrote out in full (``to_dict()`` as YAML: every
``TrainingArguments`` field present, :func:`written_in_full`; or the config
object itself, passed in Python) holds every default TRL has: GKD's
``lmbda 0.5``, ``temperature 0.9`` and ``disable_dropout true``
(:data:`GKD_DUMP_DEFAULTS`) are accepted there, and ``to_dict()``'s
``<EOS_TOKEN>``-style masks are read as not set everywhere. TRL's own
``DistillationConfig``'s keys are :mod:`destila.training.trl_distillation`'s,
and its ``datasets:`` mixture is :mod:`destila.training.trl_datasets`'.

Naive equivalent::

    options = {MAPPED[k][0]: MAPPED[k][1](v) if k in MAPPED else v for k, v in yaml.items()}
"""

from __future__ import annotations

import difflib

from destila.io.markdown import table_lines
from destila.training.trl_datasets import DatasetMixture, held_out_fraction
from destila.training.trl_distillation import DISTILLATION_MEANINGS, DISTILLATION_REFUSED, is_distillation_config

# Packed rows that never split a sequence: what TRL's `packing: true` does.
PACKED = "bfd"


def _boolean(value) -> bool:
    if not isinstance(value, bool):  # "maybe" or 1 would be read as true
        raise ValueError(f"expected true or false, found {value!r}")
    return value


def _lora_modules(value):
    return ",".join(value) if isinstance(value, (list, tuple)) else value


# TRL key: (destila option, value conversion, what it means in destila)
MAPPED = {
    "model_name_or_path": ("student", str, "the student (STUDENT): a folder, hub id or .gguf file"),
    "teacher_model_name_or_path": ("teacher", str, "the online teacher (--teacher)"),
    "dataset_name": ("data", str, "the online data (--data): a file, a folder or a datasets hub name"),
    "dataset_config": ("subset", str, "--subset"),
    "dataset_train_split": ("split", str, "--split"),
    "dataset_text_field": ("text_field", str, "--text-field"),
    "dataset_num_proc": ("num_proc", int, "--num-proc"),
    "dataset_streaming": ("streaming", _boolean, "--streaming (the online data read as a stream)"),
    "max_length": ("seq_len", int, "--seq-len (tokens per training row)"),
    "max_seq_length": ("seq_len", int, "--seq-len (older TRL name)"),
    "packing": ("packing", lambda v: PACKED if v else "none",
                f"true: --packing {PACKED} (whole sequences, never split); false: --packing none"),
    "assistant_only_loss": ("loss_on", lambda v: "assistant" if v else "all",
                            "true: --loss-on assistant; false: --loss-on all"),
    "completion_only_loss": ("loss_on", lambda v: "completion" if v else "all",
                             "true: --loss-on completion; false: --loss-on all"),
    "lora_target_modules": ("lora_target_modules", _lora_modules, "--lora-target-modules (a list becomes a,b,c)"),
    "datasets": ("data", DatasetMixture, "the online data (--data): TRL's mixture, loaded by TRL's get_dataset and "
                                         "saved once as a datasets folder (each entry's path, name, data_dir, "
                                         "data_files, split, columns and fraction as TRL reads them); beside it "
                                         "streaming must stay false"),
    "test_split_size": ("eval_fraction", held_out_fraction, "--eval_fraction: that fraction of the packed sequences "
                                                        "held out and evaluated (a fraction; a count of rows is "
                                                        "refused)"),
}

# The command that runs what GKD's lmbda asks for.
ON_POLICY = "`destila recipe on-policy`"

# TRL key: (values that leave the feature off, TRL's default among them, so the key is harmless; the reason it is
# refused otherwise). Every field of TRL's GKDConfig, SFTConfig, DistillationConfig, ModelConfig and ScriptArguments
# that is neither a TrainingArguments field nor destila's own option is here or in MAPPED (tests read TRL's classes).
REFUSED = {
    "lmbda": ((0,), f"on-policy distillation (the student's own samples, scored by the teacher) is {ON_POLICY}; "
                    "`destila train` trains on fixed sequences: set lmbda: 0 here, or run the recipe (its --lmbda "
                    "mixes a cache's sequences in)"),
    "seq_kd": ((False,), "sequence-level KD (training on teacher-generated text) is not built in: generate the text "
                         "with `destila generate`, build a cache from it, and train on that"),
    "max_new_tokens": ((128,), f"generation length of on-policy GKD, which {ON_POLICY} runs (--max-new-tokens)"),
    "disable_dropout": ((False,), "destila keeps the student's configured dropout; set it in the student's config"),
    "model_init_kwargs": ((), "destila loads the student in float32; use --bf16 for mixed precision"),
    "teacher_model_init_kwargs": ((), "destila loads the teacher itself; see --teacher-device-map for placement"),
    "torch_dtype": (("float32",), "destila loads models in float32; use --bf16 or --fp16 for mixed precision"),
    "dtype": (("float32",), "destila loads models in float32; use --bf16 or --fp16 for mixed precision"),
    "load_in_4bit": ((False,), "quantised students are not supported"),
    "load_in_8bit": ((False,), "quantised students are not supported"),
    "bnb_4bit_quant_type": (("nf4",), "quantised students are not supported"),
    "use_bnb_nested_quant": ((False,), "quantised students are not supported"),
    "bnb_4bit_quant_storage": ((), "quantised students are not supported"),
    "trust_remote_code": ((False,), "models with remote code are not loaded"),
    "model_revision": (("main",), "a hub model is read at its main revision; download another revision to a folder "
                                  "and pass the folder"),
    "attn_implementation": ((), "the student and teacher run the attention transformers picks for them"),
    "use_dora": ((False,), "DoRA adapters are not built in; destila's adapters are plain LoRA (--lora-r)"),
    "use_rslora": ((False,), "rank-stabilised LoRA is not built in; set --lora-alpha to scale the adapters"),
    "lora_target_parameters": ((), "adapters go on modules (--lora-target-modules), not on parameters"),
    "lora_modules_to_save": ((), "no module is trained in full beside the adapters"),
    "lora_task_type": (("CAUSAL_LM",), "students are causal language models"),
    "padding_free": ((False,), "packed rows are always padding-free (position ids bound the documents)"),
    "pad_to_multiple_of": (("auto",), "rows already have the cache's fixed length"),
    "eos_token": ((), "the tokenizer is the teacher's (stored in the cache); change it there"),
    "pad_token": ((), "the tokenizer is the teacher's (stored in the cache); change it there"),
    "chat_template_path": ((), "the chat template is the teacher tokenizer's; change it before building the cache"),
    "dataset_kwargs": ((), "no extra dataset options; use the data options of `destila train --help`"),
    "dataset_test_split": (("test",), "held-out data is --eval-fraction of the training data, or an eval cache"),
    "truncation_mode": (("keep_start",), "a document longer than a row keeps its start"),
    "shuffle_dataset": ((False,), "the Trainer's sampler shuffles the sequences (--seed); they are not shuffled "
                                  "before packing"),
    "packing_strategy": (("bfd",), "TRL's bfd is --packing bfd; concatenated rows are --packing documents"),
    "eval_packing": ((), "held-out rows are packed as the training rows are"),
    "loss_type": (("nll",), "the objective is the distillation loss (--divergence, --hard-weight for the labels' "
                            "cross-entropy)"),
    "activation_offloading": ((False,), "activations are not offloaded; use --gradient_checkpointing"),
    "router_aux_loss_coef": ((), "a mixture-of-experts router's auxiliary loss is not added"),
    "ignore_bias_buffers": ((False,), "DDP's bias buffers are left as the Trainer keeps them"),
    **DISTILLATION_REFUSED,
}

# What TrainingArguments.to_dict() writes for a field named *_token (eos_token, pad_token, hub_token), whatever
# its value: the mask says nothing, so the key is read as not set (the tokenizer's own tokens, no hub token).
def masked_token(name: str, value) -> bool:
    """Whether ``value`` is ``to_dict()``'s mask of the field ``name`` (``eos_token: <EOS_TOKEN>``)."""
    return name.endswith("_token") and value == f"<{name.upper()}>"


# GKDConfig's defaults (TRL 1.16) of keys otherwise refused, accepted in a config written out in full (every
# TrainingArguments field present, as to_dict() writes it), where they are what TRL wrote, not what the user chose:
# the run stays off-policy at T 1 with the student's own dropout, and its first line says so.
GKD_DUMP_DEFAULTS = {"lmbda": 0.5, "temperature": 0.9, "disable_dropout": True}
# SFTConfig's defaults (TRL 1.16) of its data keys: what a config says when no data option was chosen, so beside a
# cache (whose rows are made) they ask for nothing and are accepted whatever the cache's settings.
TRL_DATA_DEFAULTS = {"max_length": 1024, "packing": False, "dataset_text_field": "text", "assistant_only_loss": False}


def written_in_full(values) -> bool:
    """Whether ``values`` holds every ``TrainingArguments`` field: a TRL config's ``to_dict()`` written out."""
    from destila.training.trainer_source import training_argument_names  # read from the source: no import

    names = {str(key) for key in values}
    return all(name in names for name in training_argument_names())


def unchosen_data_options(values) -> dict:
    """``{destila option: TRL key}`` for the TRL data keys of ``values`` at TRL's default (see
    :data:`TRL_DATA_DEFAULTS`)."""
    return {MAPPED[key][0]: key for key, value in values.items()
            if key in TRL_DATA_DEFAULTS and value == TRL_DATA_DEFAULTS[key]}

# TRL's ModelConfig LoRA defaults, taken with `use_peft: true` when not given.
PEFT_DEFAULTS = {"lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.05}
# Keys of TRL's that are destila options too, with their TRL meaning: beta (GKD's) selects the divergence.
SHARED = ("beta", "temperature", "lora_r", "lora_alpha", "lora_dropout")
# A config or a command line with any of these keys is written in TRL's terms.
TRL_ONLY = frozenset({*MAPPED, *REFUSED, "use_peft"})


def in_trl_terms(keys) -> bool:
    """Whether ``keys`` (a config's, or the flags given) include a key only TRL has (``model_name_or_path``, ...)."""
    return any(str(key).lstrip("-").replace("-", "_") in TRL_ONLY for key in keys)


def trl_temperature_problem(value) -> str | None:
    """In TRL's terms, ``temperature`` is GKD's sampling temperature: refused unless 1, where both meanings agree."""
    if value is None or float(value) == 1.0:
        return None
    return (f"temperature {value:g} (in TRL's GKD the temperature of the student's on-policy samples; TRL's loss "
            f"runs at T 1, and `destila train` samples nothing. Drop it for TRL's objective; destila's own "
            f"--temperature tempers the loss, in options without TRL's keys, and must equal the cache's)")


def refusal(name: str, value, table=None) -> str | None:
    """The problem line of the TRL key ``name`` at ``value``, or None when the value leaves the feature off;
    ``table``: where the key is read (:data:`REFUSED` by default)."""
    harmless, why = (REFUSED if table is None else table)[name]
    if value is None or value in harmless:
        return None
    return f"{name} {value!r} ({why})"


def gkd_divergence(beta: float) -> dict:
    """GKD's generalised JSD at ``beta`` as destila options: forward KL at 0, reverse KL at 1, else jsd."""
    if beta == 0:
        return {"divergence": "forward_kl"}
    if beta == 1:
        return {"divergence": "reverse_kl"}
    return {"divergence": "jsd", "beta": beta}


def beta_problem(beta: float, divergence: str, flag: str = "") -> str | None:
    """The problem line of ``beta`` beside ``divergence`` (``flag="--"`` spells them as flags), or None.

    β weighs the JSD's mixture; TRL's generalised JSD at β 0 and 1 is forward and reverse KL, so a β of 0 or 1
    beside the JSD, or any other β beside a divergence without one, asks for two objectives at once."""
    from destila.losses.divergences import REGISTRY  # heavy: torch

    if divergence not in REGISTRY:
        return None  # LossOptions names the divergences
    if REGISTRY[divergence].uses_beta:
        if beta in (0, 1):
            end = gkd_divergence(beta)["divergence"]
            return (f"{flag}beta {beta:g}: the JSD's β lies strictly between 0 and 1, and β {beta:g} is TRL's {end} "
                    f"(its generalised JSD at that end); give {flag}divergence {end}, or {flag}beta {beta:g} without "
                    f"{flag}divergence")
        return None
    with_beta = " or ".join(f"{flag}divergence {d.name}" for d in REGISTRY.values() if d.uses_beta)
    return (f"{flag}beta {beta}: only {with_beta} has a β, and {flag}divergence {divergence} is given; "
            "drop one of them")


def map_trl_keys(values: dict, known, *, in_full: bool | None = None) -> tuple[dict, list[str]]:
    """``(options, problems)``: ``values`` with TRL keys mapped; one problem line per key refused or unknown
    (with the nearest name). ``known`` holds destila's option names (they pass through unchanged). ``in_full``:
    whether ``values`` are a TRL config written out in full (default: :func:`written_in_full`); a config object
    passed in Python always is. A config holding a key only TRL's ``DistillationConfig`` has is read as one
    (:mod:`destila.training.trl_distillation`): its ``temperature`` is the loss's, its ``top_k``, ``top_p`` and
    ``shuffle_dataset`` keep that class's meaning."""
    options, problems = {}, []
    in_full = written_in_full(values) if in_full is None else in_full
    distillation = is_distillation_config(values)
    for key, value in values.items():
        name = str(key).lstrip("-").replace("-", "_")
        if masked_token(name, value):
            continue
        if in_full and not distillation and name in GKD_DUMP_DEFAULTS and value == GKD_DUMP_DEFAULTS[name]:
            continue  # TRL's default, written out with every other field
        if name == "remove_unused_columns" and value is True:
            continue  # the Trainer's and TRL's default: destila keeps the columns, which carry the targets
        if distillation and name in DISTILLATION_MEANINGS:
            problem = refusal(name, value, DISTILLATION_MEANINGS)
            if problem:
                problems.append(problem)
            continue
        if name == "use_peft":
            if value is None:  # TRL's "not set"
                continue
            if not isinstance(value, bool):  # "maybe" or 1 would be taken as true
                problems.append(f"use_peft: expected true or false, found {value!r}")
            elif value and values.get("lora_r") == 0:
                problems.append("use_peft: true asks for LoRA adapters and lora_r 0 turns them off (the whole model "
                                "would train); give lora_r ≥ 1, or drop use_peft")
            elif value:  # TRL's ModelConfig defaults for what is not given
                options.update({k: v for k, v in PEFT_DEFAULTS.items() if k not in values})
            continue
        if name in REFUSED:
            problem = refusal(name, value)
            if problem:
                problems.append(problem)
        elif name in MAPPED:
            if value is None:  # TRL's "not set"
                continue
            target, convert, _ = MAPPED[name]
            try:
                converted = convert(value)
            except (TypeError, ValueError) as err:
                problems.append(f"{name}: {err}")
                continue
            if target in options and options[target] != converted:
                problems.append(f"{name} (sets {target}, which another key sets to {options[target]!r})")
            options[target] = converted
        elif name in known:
            problem = (name == "temperature" and not distillation and in_trl_terms(values)
                       and trl_temperature_problem(value))
            if problem:  # GKD's sampling temperature, named with the other refusals
                problems.append(problem)
            options[name] = value
        else:
            problems.append(f"unknown option {key!r}{did_you_mean(name, known)}")
    if isinstance(options.get("data"), DatasetMixture) and options.get("streaming"):
        problems.append("streaming true beside datasets (TRL's mixture is loaded whole and saved once; to stream, "
                        "give one source as --data with --streaming)")
    if "beta" in options and "divergence" not in options:
        options.update(gkd_divergence(float(options.pop("beta"))))
    return options, problems


def did_you_mean(name: str, known) -> str:
    """``"; did you mean learning_rate?"`` for the nearest of ``known`` and TRL's keys, or ``""``."""
    near = difflib.get_close_matches(name, sorted({*known, *TRL_ONLY, *SHARED}), n=1, cutoff=0.6)
    return f" (did you mean {near[0]}?)" if near else ""


def _shown(values) -> str:
    return ", ".join(f"`{str(v).lower() if isinstance(v, bool) else v}`" for v in values)


def markdown_table() -> str:
    """The table of docs/training.md: every TRL key and what it is here (``make docs`` writes it there)."""
    peft = ", ".join(f"`{k}` {v}" for k, v in PEFT_DEFAULTS.items())
    rows = [(key, f"`{target}`", meaning)
            for key, (target, _, meaning) in MAPPED.items()]
    rows += [("use_peft", "`lora_r`", f"true: LoRA adapters, with TRL's ModelConfig {peft} where not given; "
                                        "on every linear layer but the head (`lora_target_modules` all-linear), "
                                        "where TRL leaves the choice to peft's per-architecture default (q_proj "
                                        "and v_proj for Llama): add `--lora_target_modules q_proj,v_proj` for that; "
                                        "true or false only, and refused beside `lora_r: 0`"),
             ("beta", "`divergence`, `beta`", "GKD's β: 0 is `forward_kl`, 1 `reverse_kl`, between `jsd` with that β"),
             ("temperature", "`temperature`", "in TRL's terms refused unless 1: GKD's is the temperature of "
                                               "on-policy samples (its loss runs at T 1), and nothing is sampled")]
    rows += [(key, f"refused unless {_shown(harmless)}" if harmless else "refused", why)
             for key, (harmless, why) in REFUSED.items()]
    rows += [("temperature (DistillationConfig)", "`temperature`", "the loss's temperature, as in TRL's "
                                                                  "DistillationTrainer (a cache's must equal it)")]
    rows += [(f"{key} (DistillationConfig)", f"refused unless {_shown(harmless)}", why)
             for key, (harmless, why) in DISTILLATION_MEANINGS.items()]
    return "\n".join(table_lines(["TRL key", "destila option", "meaning"],
                                 [(_key_cell(key), target, meaning) for key, target, meaning in rows], "lll"))


def _key_cell(key: str) -> str:
    name, _, where = key.partition(" ")
    return f"`{name}` {where}".rstrip()
