"""TRL's own ``DistillationConfig`` (TRL 1.16, ``trl.DistillationConfig``) read by `destila train`.

TRL's ``DistillationTrainer`` is on-policy: the student writes completions to
prompts and learns the teacher's next-token distribution on them, under the
generalised JSD of ``beta`` (0 forward KL, 1 reverse KL, between them the JSD
with mixture ``m = βp + (1 − β)q``, p the teacher) at ``temperature``, which
tempers both sampling and the loss. `destila train` trains on fixed
sequences (a cache, or a teacher on data) and samples nothing, so a
``DistillationConfig`` carries over as:

- ``beta``: the divergence, as GKD's ``beta`` does (its default 1.0 is
  ``reverse_kl``);
- ``temperature``: the loss's temperature (a cache's must equal it);
- ``learning_rate`` (1e-6 by default) and every other ``TrainingArguments``
  field: as given;
- what it leaves out: :data:`DISTILLATION_CONFIG_DEFAULTS` (TRL's loss is the
  divergence alone: no cross-entropy);
- its sampling, vLLM and logging keys: accepted at TRL's defaults (nothing is
  sampled, so they cannot matter), refused otherwise (:data:`DISTILLATION_REFUSED`);
- ``top_k``, ``top_p`` (sampling there, destila's K′ and nucleus truncation of
  a cache here) and ``shuffle_dataset`` (the order of prompts there):
  :data:`DISTILLATION_MEANINGS`, read in a config that is a ``DistillationConfig``
  (:func:`is_distillation_config`).

Naive equivalent::

    options = {"divergence": {0: "forward_kl", 1: "reverse_kl"}.get(beta, "jsd"), "temperature": temperature}
"""

from __future__ import annotations

# What nothing sampled makes of a key that shapes the student's own samples.
_SAMPLES = "`destila train` samples nothing (on-policy rounds: `destila recipe on-policy`)"
_VLLM = "vLLM for on-policy samples; " + _SAMPLES

# DistillationConfig's keys of its own (neither TrainingArguments', nor GKDConfig's, SFTConfig's or ModelConfig's):
# (values that leave them without effect here, TRL's default among them; why any other value is refused). A config
# holding any of them is a DistillationConfig (is_distillation_config).
DISTILLATION_REFUSED = {
    "teacher_model_revision": ((), "a hub teacher is read at its main revision; download another revision to a "
                                   "folder and pass the folder"),
    "max_completion_length": ((512,), "the length of the student's on-policy completions; " + _SAMPLES),
    "ds3_gather_for_generation": ((True,), "DeepSpeed ZeRO-3 gathering for on-policy generation; " + _SAMPLES),
    "min_p": ((), "sampling's min-p; " + _SAMPLES),
    "generation_kwargs": (({},), "sampling options; " + _SAMPLES),
    "chat_template_kwargs": (({},), "chat template options of on-policy prompts; the chat template is the teacher "
                                    "tokenizer's, applied when the data is read"),
    "repetition_penalty": ((1.0,), "sampling's repetition penalty; " + _SAMPLES),
    "cache_implementation": ((), "the generation cache of on-policy sampling; " + _SAMPLES),
    "use_vllm": ((False,), _VLLM),
    "vllm_mode": (("colocate",), _VLLM),
    "vllm_model_impl": (("vllm",), _VLLM),
    "vllm_enable_sleep_mode": ((False,), _VLLM),
    "vllm_structured_outputs_regex": ((), _VLLM),
    "vllm_server_base_url": ((), _VLLM),
    "vllm_server_host": (("0.0.0.0",), _VLLM),
    "vllm_server_port": ((8000,), _VLLM),
    "vllm_server_timeout": ((240.0,), _VLLM),
    "vllm_group_port": ((51216,), _VLLM),
    "vllm_gpu_memory_utilization": ((0.3,), _VLLM),
    "vllm_max_model_length": ((), _VLLM),
    "vllm_tensor_parallel_size": ((1,), _VLLM),
    "max_tool_calling_iterations": ((), "tool calls in on-policy completions; " + _SAMPLES),
    "log_completions": ((False,), "logs the student's on-policy completions; " + _SAMPLES),
    "num_completions_to_print": ((), "prints the student's on-policy completions; " + _SAMPLES),
    "log_unique_prompts": ((False,), "logs the prompts of on-policy completions; " + _SAMPLES),
}

# Keys a DistillationConfig shares with destila or with SFTConfig under another meaning: in a DistillationConfig
# they take this entry (values without effect here; why another is refused).
DISTILLATION_MEANINGS = {
    "top_k": ((0,), "in TRL's DistillationConfig the top-k of the student's on-policy samples; " + _SAMPLES
                    + ". destila's --top_k, the teacher tokens per position the loss compares, goes on the command "
                      "line"),
    "top_p": ((1.0,), "in TRL's DistillationConfig the top-p of the student's on-policy samples; " + _SAMPLES
                      + ". destila's --top_p, nucleus truncation of a cache, goes on the command line"),
    "shuffle_dataset": ((True,), "in TRL's DistillationConfig, false keeps the prompts in order; the Trainer draws "
                                 "the sequences shuffled (--seed), as TRL's true does"),
}

# DistillationConfig's objective and schedule for what a config leaves out (TRL 1.16): beta 1.0 is reverse KL, its
# temperature 1.0 tempers the loss, the loss is the divergence alone (hard_weight 0); learning_rate is its own,
# lr_scheduler_type and warmup_steps the Trainer's.
DISTILLATION_CONFIG_DEFAULTS = {
    "divergence": "reverse_kl",
    "temperature": 1.0,
    "hard_weight": 0.0,
    "learning_rate": 1e-6,
    "lr_scheduler_type": "linear",
    "warmup_steps": 0,
}


def is_distillation_config(keys) -> bool:
    """Whether ``keys`` (a config's, the flags given, a config class's fields) hold a key only TRL's
    ``DistillationConfig`` has (``max_completion_length``, ``use_vllm``, ...)."""
    return any(str(key).lstrip("-").replace("-", "_") in DISTILLATION_REFUSED for key in keys)
