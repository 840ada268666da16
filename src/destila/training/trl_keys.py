"""TRL's config keys (SFTConfig, GKDConfig, ModelConfig, ScriptArguments) mapped onto destila's options.

A YAML written for ``trl sft`` or ``trl gkd`` runs with ``destila train
--config``: each key below becomes the destila option it means, or is
refused with the reason, every refusal listed in one line. Keys that are
``transformers.TrainingArguments`` fields need no mapping (destila takes them
under the same names). docs/training.md shows this table; a test keeps the two equal.

GKD's ``beta`` alone selects the divergence, as in TRL's generalised JSD:
``beta: 0`` is forward KL, ``beta: 1`` reverse KL, anything between the
JSD with that β (mixture ``m = βp + (1 − β)q``, p the teacher), which is
destila's ``jsd``. A ``divergence`` given beside it wins, and must be ``jsd``
when β is strictly between 0 and 1.

Naive equivalent::

    options = {MAPPED[k][0]: MAPPED[k][1](v) if k in MAPPED else v for k, v in yaml.items()}
"""

from __future__ import annotations

# Packed rows that never split a sequence: what TRL's `packing: true` does.
PACKED = "bfd"


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
    "max_length": ("seq_len", int, "--seq-len (tokens per training row)"),
    "max_seq_length": ("seq_len", int, "--seq-len (older TRL name)"),
    "packing": ("packing", lambda v: PACKED if v else "none",
                f"true: --packing {PACKED} (whole sequences, never split); false: --packing none"),
    "assistant_only_loss": ("loss_on", lambda v: "assistant" if v else "all",
                            "true: --loss-on assistant; false: --loss-on all"),
    "completion_only_loss": ("loss_on", lambda v: "completion" if v else "all",
                             "true: --loss-on completion; false: --loss-on all"),
    "lora_target_modules": ("lora_target_modules", _lora_modules, "--lora-target-modules (a list becomes a,b,c)"),
}

# TRL key: (value that means "off", so the key is harmless; the reason it is refused otherwise)
REFUSED = {
    "lmbda": (0, "on-policy distillation (the student generating its own sequences) is not supported; destila "
                 "trains on fixed sequences scored by the teacher: set lmbda: 0"),
    "seq_kd": (False, "sequence-level KD (training on teacher-generated text) is not built in: generate the text "
                      "with `destila generate`, build a cache from it, and train on that"),
    "max_new_tokens": (None, "generation length of on-policy GKD, which destila does not run"),
    "disable_dropout": (None, "destila keeps the student's configured dropout; set it in the student's config"),
    "model_init_kwargs": (None, "destila loads the student in float32; use --bf16 for mixed precision"),
    "teacher_model_init_kwargs": (None, "destila loads the teacher itself; see --teacher-device-map for placement"),
    "torch_dtype": (None, "destila loads models in float32; use --bf16 or --fp16 for mixed precision"),
    "dtype": (None, "destila loads models in float32; use --bf16 or --fp16 for mixed precision"),
    "load_in_4bit": (False, "quantised students are not supported"),
    "load_in_8bit": (False, "quantised students are not supported"),
    "trust_remote_code": (False, "models with remote code are not loaded"),
    "padding_free": (None, "packed rows are always padding-free (position ids bound the documents)"),
    "eos_token": (None, "the tokenizer is the teacher's (stored in the cache); change it there"),
    "pad_token": (None, "the tokenizer is the teacher's (stored in the cache); change it there"),
    "chat_template_path": (None, "the chat template is the teacher tokenizer's; change it before building the cache"),
    "dataset_kwargs": (None, "no extra dataset options; use the data options of `destila train --help`"),
}


def gkd_divergence(beta: float) -> dict:
    """GKD's generalised JSD at ``beta`` as destila options: forward KL at 0, reverse KL at 1, else jsd."""
    if beta == 0:
        return {"divergence": "forward_kl"}
    if beta == 1:
        return {"divergence": "reverse_kl"}
    return {"divergence": "jsd", "beta": beta}


def map_trl_keys(values: dict, known, unwanted: dict | None = None) -> tuple[dict, list[str]]:
    """``(options, problems)``: ``values`` with TRL keys mapped; one problem line per key refused or unknown.

    ``known`` holds destila's option names (they pass through unchanged);
    ``unwanted`` maps option names to the reason they are refused here (e.g.
    data options beside a cache), whether given by their name or a TRL key's.
    """
    options, problems, unwanted = {}, [], unwanted or {}
    for key, value in values.items():
        name = str(key).lstrip("-").replace("-", "_")
        target = MAPPED[name][0] if name in MAPPED else name
        if target in unwanted:
            problems.append(f"{name} ({unwanted[target]})")
            continue
        if name == "use_peft":
            if value:
                options.setdefault("lora_r", values.get("lora_r", 16))  # TRL's ModelConfig default rank
            continue
        if name in REFUSED:
            harmless, why = REFUSED[name]
            if value is None or value == harmless:
                continue
            problems.append(f"{name} ({why})")
        elif name in MAPPED:
            target, convert, _ = MAPPED[name]
            if target in options and options[target] != convert(value):
                problems.append(f"{name} (sets {target}, which another key sets to {options[target]!r})")
            options[target] = convert(value)
        elif name in known:
            options[name] = value
        else:
            problems.append(f"unknown option {key!r}")
    if "beta" in options and "divergence" not in options:
        options.update(gkd_divergence(float(options.pop("beta"))))
    return options, problems
