"""`DistillationTrainer`: a `transformers.Trainer` whose loss is the distillation loss.

The student runs its ordinary forward, and its output head, instead of
logits, returns :func:`destila.distill_loss` of the hidden states it is given
against its own weight (and bias) (:mod:`destila.training.head_loss`), so
with the default ``impl="fused"`` the ``[B, T, V]`` student logits never
exist and sharded engines gather the head's weight as for any forward. Targets
come from the batch (a cache) or from an :class:`OnlineTeacher`.

Normalisation: the Trainer counts the valid labels of the whole accumulated
batch (``num_items_in_batch``, summed over processes); every micro-batch
divides its loss sum by that count, so micro-batch 1 × accumulation 4 and
micro-batch 4 × accumulation 1 give the same gradient.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from pathlib import Path

import torch
from transformers import Trainer, TrainerCallback
from transformers.trainer_pt_utils import nested_concat
from transformers.trainer_utils import (PREFIX_CHECKPOINT_DIR, EvalPrediction, PredictionOutput, get_last_checkpoint,
                                        speed_metrics)

from destila.cache.dataset import StreamedCache, is_cache_dataset, open_cache
from destila.cache.settings_match import settings_problems
from destila.constants import IGNORE_INDEX
from destila.data import collate, dataset_source
from destila.data.collate import hf_labels
from destila.data.sources import in_memory_records
from destila.losses.divergences import get_divergence
from destila.models import check_plain_head
from destila.losses.full_vocab import full_vocab_loss
from destila.targets.online import OnlineTeacher
from destila.targets.truncate import check_top_k, check_top_p, with_top_k, with_top_p
from destila.training.datasets import Subset, split_indices
from destila.training.engines import enable_cpu_fsdp
from destila.training.finite import FiniteGradients, check_loss, check_weights
from destila.training.head_loss import distill_through_forward
from destila.training.hidden_distillation import hidden_term
from destila.training.sharing import check_push, write_model_card
from destila.training.student_model import student_model as _student
from destila.training.teacher_model import loaded_teacher, teacher_of
from destila.training.trl_args import as_distillation_arguments, trl_data_options
from destila.training.trl_defaults import describe_objective

_STATS = ("soft", "hard", "rows", "agree")
# The held-out yardstick, the same for runs of every objective: forward KL over the cache's K buckets, student at T = 1.
_YARDSTICK = dict(divergence="forward_kl", tail="bucket", temperature=1.0, soft_weight=1.0, hard_weight=0.0)


def _cpu(value):
    """Tensors (or nested tuples of them) on the CPU, float logits widened: what compute_metrics is given."""
    if isinstance(value, (tuple, list)):
        return type(value)(_cpu(v) for v in value)
    value = value.detach().cpu()
    return value.float() if value.is_floating_point() else value


def _numpy(value):
    if isinstance(value, (tuple, list)):
        return type(value)(_numpy(v) for v in value)
    return value.numpy()


def _layout(inputs: dict) -> dict:
    """Position ids (restarting per packed document) and attention mask (padding), where the batch has them."""
    return {key: inputs[key] for key in ("position_ids", "attention_mask") if key in inputs}


def _empty(dataset) -> bool:
    """A dataset given with no rows (a streamed one cannot tell before it is read)."""
    if dataset is None or isinstance(dataset, torch.utils.data.IterableDataset) or not hasattr(dataset, "__len__"):
        return False
    return not hasattr(dataset, "n_shards") and len(dataset) == 0  # datasets.IterableDataset has n_shards


def _named(label: str, read, *args, **kwargs):
    """``read(*args, **kwargs)``, its refusal (an empty or unreadable dataset) naming the dataset as passed."""
    try:
        return read(*args, **kwargs)
    except ValueError as err:
        raise ValueError(f"DistillationTrainer: {label}: {err}") from err


def _with_data(kwargs: dict, cache, data_spec, model, args, has_teacher: bool, trl_data: dict | None = None) -> dict:
    """Trainer keyword arguments with the cache as training set, raw datasets tokenised, the held-out
    split of ``args.eval_fraction`` taken and the default collator. ``trl_data`` (``{option: (TRL key, value)}``,
    a TRL config's ``max_length`` and friends) tokenises raw datasets, and must equal a cache's settings."""
    # heavy: datasets, only for raw datasets (transformers' Trainer loads it when installed)
    import datasets

    kwargs, trl_data = dict(kwargs), trl_data or {}
    if cache is not None:
        cache = open_cache(cache)  # a folder, an export, a hub id, a datasets.Dataset of cache rows
        if kwargs.get("train_dataset") not in (None, cache):
            raise ValueError("DistillationTrainer: with a cache, the cache's sequences are the training set; "
                             "pass train_dataset=None (or the cache itself)")
        kwargs["train_dataset"] = cache
    if trl_data and data_spec is not None:
        differ = [f"{key} {value!r} (data_spec has {option} {getattr(data_spec, option, None)!r})"
                  for option, (key, value) in trl_data.items() if getattr(data_spec, option, None) != value]
        if differ:
            raise ValueError(f"args: {'; '.join(differ)}; give each data option once, in args or in data_spec")
    tokenizer = kwargs.get("processing_class")
    # Where each dataset sits: (its name in messages, the mapping holding it, its key there); a dict of eval
    # datasets (the Trainer evaluates each under eval_NAME_) gives one place per dataset.
    places = [("train_dataset", kwargs, "train_dataset")]
    if isinstance(kwargs.get("eval_dataset"), dict):
        kwargs["eval_dataset"] = dict(kwargs["eval_dataset"])
        places += [(f"eval_dataset[{name!r}]", kwargs["eval_dataset"], name) for name in kwargs["eval_dataset"]]
    else:
        places.append(("eval_dataset", kwargs, "eval_dataset"))
    for label, holder, key in places:
        dataset = holder.get(key)
        if _empty(dataset):  # torch's sampler would refuse it later, naming neither the dataset nor its place
            raise ValueError(f"DistillationTrainer: {label} is empty (0 rows); "
                             f"{'pass rows to train on' if label == 'train_dataset' else 'pass rows or leave it out'}")
        if isinstance(dataset, list) and dataset and all(isinstance(row, dict) for row in dataset):
            dataset = holder[key] = in_memory_records(dataset)  # rows given as a list of dicts: a Dataset
        if isinstance(dataset, (datasets.Dataset, datasets.IterableDataset)) and is_cache_dataset(dataset):
            holder[key] = _named(label, open_cache, dataset)  # cache rows (an export's, or Axolotl's): the targets
        elif isinstance(dataset, (datasets.Dataset, datasets.IterableDataset)):
            if not has_teacher:
                raise ValueError(f"DistillationTrainer: {label} is a datasets.Dataset, which holds no teacher targets "
                                 "(no topk_ids or target_token_ids columns), and no teacher_model is given; pass a cache "
                                 "or its export as eval_dataset, eval_fraction to hold out part of the cache, or "
                                 "teacher_model= to score it online")
            if tokenizer is None:
                raise ValueError(f"DistillationTrainer: {label} is a datasets.Dataset; pass processing_class="
                                 "the teacher's tokenizer so it can be tokenised")
            if data_spec is not None:
                holder[key] = _named(label, dataset_source, dataset, tokenizer, data_spec)
            else:
                context = getattr(getattr(model, "config", None), "max_position_embeddings", None) or 1024
                options = {"seq_len": min(1024, context), **{o: v for o, (_, v) in trl_data.items()}}
                holder[key] = _named(label, dataset_source, dataset, tokenizer, **options)
    for label, holder, key in places:
        source = _cache_of(holder.get(key))
        problems = settings_problems(trl_data, source.manifest, label) if source is not None and trl_data else []
        if problems:
            raise ValueError(f"args: {'; '.join(problems)}. A cache already holds its rows: the data options of "
                             "args must equal its settings")
    head_rows = model.get_output_embeddings().weight.shape[0] if hasattr(model, "get_output_embeddings") else None
    for _, holder, key in places:
        if getattr(holder.get(key), "vocab_size", 0) is None and head_rows:  # rows that do not record it
            holder[key].assume_vocab_size(head_rows)
    train = kwargs.get("train_dataset")
    if isinstance(train, StreamedCache) and train.shuffle is None:
        # A cache is read in the order of the Trainer's seeded sampler; a stream has no sampler: shuffle it too.
        kwargs["train_dataset"] = train.shuffled(seed=args.data_seed if args.data_seed is not None else args.seed)
    kwargs.update(_held_out(kwargs.get("train_dataset"), kwargs.get("eval_dataset"), args.eval_fraction))
    if kwargs.get("data_collator") is None:
        pad = getattr(tokenizer, "pad_token_id", None)
        kwargs["data_collator"] = functools.partial(collate, pad_token_id=pad if pad is not None else 0)
    return kwargs


def _held_out(train, held, eval_fraction: float) -> dict:
    """``{"train_dataset", "eval_dataset"}`` split by :func:`split_indices` (the split ``destila eval
    --eval-fraction`` scores), or ``{}`` when ``eval_fraction`` is 0."""
    if eval_fraction <= 0:
        return {}
    if held is not None:
        raise ValueError(f"eval_fraction: {eval_fraction} holds out part of the training data, and an eval_dataset "
                         "is given too; give one of them")
    if train is None or not hasattr(train, "__len__"):
        raise ValueError("eval_fraction: needs a training set of known length (a cache, or a datasets.Dataset "
                         "that is not streamed); pass eval_dataset instead")
    train_ids, eval_ids = split_indices(len(train), eval_fraction)
    return {"train_dataset": Subset(train, train_ids), "eval_dataset": Subset(train, eval_ids)}


def _cache_of(dataset):
    """The cache behind ``dataset`` (a reader of :func:`~destila.cache.dataset.open_cache`, or a :class:`Subset`
    of one), else None."""
    dataset = getattr(dataset, "source", dataset) if isinstance(dataset, Subset) else dataset
    return dataset if hasattr(dataset, "manifest") else None


class _SaveProjections(TrainerCallback):
    """Writes the hidden-state projections (``--hidden_loss``) into each checkpoint the Trainer has just saved;
    they are checkpointed so that a resumed run continues them, and never saved with the student."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_save(self, args, state, control, **kwargs):
        if self.trainer.hidden is not None and args.should_save:
            self.trainer.hidden.save(Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")


def _cache_behind(dataset):
    """The cache whose targets ``dataset`` serves: :func:`_cache_of`, or the teacher's cache behind its items read
    in another tokenizer's tokens (:func:`destila.crosstok.training.training_items`: the same K entries per row,
    descending, which ``top_k`` and ``top_p`` cut as they cut the cache's)."""
    dataset = getattr(dataset, "source", dataset) if isinstance(dataset, Subset) else dataset
    cache = _cache_of(dataset)
    return cache if cache is not None else _cache_of(getattr(dataset, "cache", None))


class DistillationTrainer(Trainer):
    """Trainer for ``DistillationArguments``, shaped like TRL's trainers::

        DistillationTrainer(model=student, args=DistillationArguments(...), train_dataset=ds,
                            processing_class=tokenizer, teacher_model=teacher)      # online
        DistillationTrainer(model=student, args=..., cache=TopKCache("cache/"))      # offline

    ``train_dataset``/``eval_dataset`` may be a ``datasets.Dataset`` of
    ``text``, ``messages`` or ``prompt``/``completion`` rows, tokenised here
    with ``processing_class`` (see :func:`destila.data.dataset_source`; pass
    ``data_spec`` to choose fields, sequence length, packing or loss positions),
    or any dataset of token items. The default collator is
    :func:`destila.data.collate`. ``teacher_model`` may also be an
    :class:`~destila.targets.online.OnlineTeacher` (the teacher with its own
    target spec). Built from the args, checked before the Trainer's own
    construction: the online teacher, K′ against the cache, the hidden-state
    term (``--hidden_loss``), LoRA adapters and frozen embeddings.

    It overrides public Trainer methods only: ``compute_loss`` (the
    distillation loss) and ``training_step`` (a non-finite loss stops the
    run); ``evaluate``, ``predict`` and ``log`` (the objective's metrics; ``predict`` returns the Trainer's
    ``PredictionOutput``); ``create_optimizer``
    (the hidden-state projections join it); ``save_model`` (non-finite weights
    are never saved); ``train`` (the objective line, and a checkpoint's
    projections loaded on resume); ``create_model_card`` and ``push_to_hub``
    (destila's card, an offline Hub refused in one line);
    ``create_accelerator_and_postprocess`` (FSDP on a CPU-only machine). The
    projections are written into each checkpoint by a callback. One private
    attribute is set, ``_loss_shifts_labels`` (below).
    """

    # compute_loss divides by num_items_in_batch itself: the Trainer must not
    # divide again by the accumulation steps.
    loss_is_scaled_for_ga = True

    def __init__(self, *args, teacher_model=None, cache=None, data_spec=None, **kwargs):
        if teacher_model is not None and cache is not None:
            raise ValueError("DistillationTrainer: give one source of targets: teacher_model or cache")
        if len(args) > 2:
            raise TypeError("DistillationTrainer: pass model and args positionally, everything else by name")
        model, arguments = (list(args) + [None, None])[:2]
        model, arguments = kwargs.pop("model", model), kwargs.pop("args", arguments)
        if arguments is None:
            raise ValueError("DistillationTrainer: args= is required (a DistillationArguments)")
        trl_data = trl_data_options(arguments)  # a TRL config's max_length, packing, ...: the data's
        teacher_model = teacher_of(arguments, teacher_model, cache)  # a TRL config may name it
        arguments = as_distillation_arguments(arguments)  # a TrainingArguments or a TRL config, in TRL's meaning
        teacher_model = loaded_teacher(teacher_model)  # a path or hub id, as TRL's GKDTrainer takes it
        check_push(arguments)  # before the Trainer creates the Hub repository
        if getattr(arguments, "label_smoothing_factor", 0):  # the Trainer's own loss would apply it; ours does not
            raise ValueError(f"label_smoothing_factor: {arguments.label_smoothing_factor} smooths the labels of a "
                             "cross-entropy Trainer, and destila's loss has no smoothed labels: its soft term already "
                             "trains on the teacher's distribution. Drop it (0); --hard_weight adds the labels' plain "
                             "cross-entropy")
        if getattr(arguments, "batch_eval_metrics", False):
            raise ValueError("batch_eval_metrics: compute_metrics is called once, on every held-out batch's logits "
                             "and labels; drop --batch_eval_metrics")
        model, kwargs = _student(model, arguments, kwargs)
        kwargs = _with_data(kwargs, cache, data_spec, model, arguments, teacher_model is not None, trl_data)
        # Everything that can refuse the run is checked before the Trainer's own construction, which
        # creates the output folder: a refusal leaves nothing behind.
        behind = _cache_behind(kwargs.get("train_dataset"))
        if behind is not None:
            check_top_k(arguments.top_k, behind)
            check_top_p(arguments.top_p, behind)
        elif arguments.top_p is not None:
            raise ValueError("top_p: cuts the entries of a top-K cache; this run has no cache (online targets). "
                             "Build a cache with `destila cache build` and train from it, or drop --top_p")
        teacher = teacher_model
        if teacher is not None and not isinstance(teacher, OnlineTeacher):
            teacher = OnlineTeacher(teacher, arguments.online_loss, arguments.target_spec())
        hidden = hidden_term(arguments.hidden_options(), model,
                             teacher_model=teacher.model if teacher is not None else None,
                             source=kwargs.get("train_dataset"))
        if hidden is not None and arguments.world_size > 1:
            # Its projections live outside the (DDP-wrapped) model, so their gradients would not be averaged.
            raise ValueError("hidden_loss: hidden-state distillation runs in one process only; launch without "
                             "torchrun, or drop --hidden_loss")
        super().__init__(model, arguments, **kwargs)
        self.add_callback(FiniteGradients())  # never an optimizer step on NaN gradients
        self.add_callback(_SaveProjections(self))  # checkpoints carry the hidden-state projections
        check_plain_head(self.model)
        self.teacher = teacher.to(self.args.device) if teacher is not None else None
        self.hidden = hidden.to(self.args.device) if hidden is not None else None
        self._hidden_window = torch.zeros(2, dtype=torch.float64)
        # Count valid labels for num_items_in_batch (the Trainer only does so
        # for models that "accept loss kwargs"); collate's labels are position-aligned already, counted as they are.
        # No public hook says so: the Trainer would drop each row's first label from its count (a causal LM's loss
        # shifts labels), and get_batch_samples, which it would take to override, gathers counts across processes.
        self.model_accepts_loss_kwargs = True
        self._loss_shifts_labels = False
        self._window = torch.zeros(len(_STATS), dtype=torch.float64)
        self.loss_path: str | None = None  # how the loss runs, once a training step has run it
        self._schedule_checked = False  # whether the run's length was checked against the weight schedule

    def train(self, resume_from_checkpoint: str | bool | None = None, *args, **kwargs):
        """The Trainer's ``train``, after one line saying what the run trains towards and how that compares with
        TRL's ``GKDConfig`` (:func:`~destila.training.trl_defaults.describe_objective`); a resumed run first
        loads what its checkpoint holds beside the model (:meth:`load_checkpoint_extras`)."""
        if self.is_world_process_zero():
            print(describe_objective(self.args), flush=True)
        if resume_from_checkpoint is True:  # the Trainer's own meaning: the output folder's last checkpoint
            resume_from_checkpoint = get_last_checkpoint(self.args.output_dir) or True
        if isinstance(resume_from_checkpoint, (str, Path)):
            self.load_checkpoint_extras(resume_from_checkpoint)
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def create_model_card(self, model_name: str | None = None, **_hf_card_fields) -> None:
        """destila's card (:mod:`destila.training.sharing`: teacher, cache, data fingerprints, objective,
        held-out figures) instead of the Trainer's generic one; ``push_to_hub`` uploads it."""
        if self.is_world_process_zero():
            write_model_card(self, model_name=model_name)

    def push_to_hub(self, *args, **kwargs):
        """The Trainer's upload, refused first in one line when the Hub cannot be reached (as ``--push_to_hub``
        is), instead of the Hub client's own error."""
        check_push(self.args, asked=True)
        return super().push_to_hub(*args, **kwargs)

    def create_accelerator_and_postprocess(self):
        super().create_accelerator_and_postprocess()
        enable_cpu_fsdp(self)  # a requested FSDP on a CPU-only machine really shards

    # -- loss -----------------------------------------------------------------

    def _targets(self, inputs: dict) -> dict:
        if "topk_ids" in inputs or "teacher_logits" in inputs:
            return inputs
        if self.teacher is None:
            raise ValueError("batch: expected the cache's top-K fields or an online teacher, found neither")
        layers = self.hidden.teacher_layers if self.hidden is not None else ()
        return {**inputs, **self.teacher.targets(inputs["input_ids"], layers=layers, **_layout(inputs))}

    def _distill(self, model, inputs: dict, num_items=None, **overrides):
        """``(loss, stats)`` for one batch, plus the hidden-state term when training with one."""
        inputs = self._targets(inputs)  # labels at t are for token t+1, as the teacher's targets
        if self.hidden is None or overrides:  # evaluation measures the KL alone
            return self._kd(model, inputs, num_items, **overrides)
        with self.hidden.capture(model) as captured:
            loss, stats = self._kd(model, inputs, num_items)
        extra = self.hidden.loss(captured, inputs, inputs["labels"] != IGNORE_INDEX, num_items)
        stats["hidden"] = extra.detach()
        return loss + extra, stats

    def _kd(self, model, inputs: dict, num_items=None, **overrides):
        """``(loss, stats)`` of the distillation loss, with the args' loss options updated by ``overrides``."""
        options = self.args.loss_options()
        options = dataclasses.replace(options, **{**self._scheduled_weights(options), **overrides})
        labels = inputs["labels"]
        if "teacher_logits" in inputs:  # online dense: the paper's full-vocabulary baseline
            logits = model(input_ids=inputs["input_ids"], use_cache=False, **_layout(inputs)).logits
            keep = {k: getattr(options, k) for k in ("divergence", "beta", "temperature", "soft_weight",
                                                     "hard_weight")}
            self.loss_path = "dense: the online teacher's full-vocabulary logits beside the student's"
            return full_vocab_loss(
                logits.flatten(0, 1), inputs["teacher_logits"].flatten(0, 1), labels.flatten(),
                num_items=num_items, **keep,
            )
        # The head computes the loss inside its own forward, where sharded
        # engines (FSDP, ZeRO-3) have gathered its weight.
        path = {} if self.loss_path is None and model.training else None  # said once, from a training step
        result = distill_through_forward(model, inputs, options, num_items, path=path, **_layout(inputs))
        if path:
            self.loss_path = path["path"]
        return result

    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        check_loss(loss, self.state, self.args)  # the Trainer would leave a NaN out of its logs and go on
        return loss

    def _scheduled_weights(self, options) -> dict:
        """This step's ``soft_weight`` / ``hard_weight`` under ``--soft_weight_schedule`` (``{}``: constant); at
        the first training step, a warning when the run is too short for the schedule to reach its weight."""
        schedule = self.args.weight_schedule()
        if self.model.training and not self._schedule_checked:
            self._schedule_checked = True
            note = schedule.shortfall(options.soft_weight, self.state.max_steps)
            if note and self.is_world_process_zero():
                print(note, flush=True)
        return schedule.weights(options.soft_weight, options.hard_weight, self.state.global_step,
                                self.state.max_steps)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        # Training reads K′ entries of a larger cache; evaluation keeps the cache's K, a yardstick
        # shared by runs of any K′.
        inputs = with_top_p(with_top_k(inputs, self.args.top_k), self.args.top_p)
        loss, stats = self._distill(model, inputs, num_items_in_batch)
        if model.training:
            self._window += torch.stack([stats[k].double().cpu() for k in _STATS])
            if "hidden" in stats:
                self._hidden_window += torch.tensor([stats["hidden"].item(), 1.0], dtype=torch.float64)
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            # num_items_in_batch counts every process's rows, and DDP averages
            # gradients over processes: scale back up to a global sum / count.
            loss = loss * self.accelerator.num_processes
        return (loss, {"stats": stats}) if return_outputs else loss

    # -- the hidden-state projections: optimised, checkpointed, never saved with the student --

    def create_optimizer(self, model=None):
        optimizer = super().create_optimizer(model)
        if self.hidden is not None and self.hidden.parameters():
            known = {id(p) for group in optimizer.param_groups for p in group["params"]}
            if not known & {id(p) for p in self.hidden.parameters()}:
                optimizer.add_param_group({"params": self.hidden.parameters(), "weight_decay": 0.0})
        return optimizer

    def save_model(self, output_dir: str | None = None, *args, **kwargs) -> None:
        """The Trainer's save (of a checkpoint's model too), refused first when a weight is non-finite."""
        check_weights(self.model, self.state, self.args, Path(output_dir or self.args.output_dir).name)
        super().save_model(output_dir, *args, **kwargs)

    def load_checkpoint_extras(self, checkpoint: str | Path) -> None:
        """Load what a checkpoint holds beside the model: the hidden-state projections (``--hidden_loss``)."""
        if self.hidden is not None and not self.hidden.load(checkpoint):
            raise ValueError(f"resume: {checkpoint} holds no hidden-state projections; it was not "
                             "trained with --hidden_loss. Resume with the options it was trained with")

    # -- logging and evaluation -------------------------------------------------

    def _reduce(self, sums: torch.Tensor) -> torch.Tensor:
        if self.accelerator.num_processes > 1:
            sums = self.accelerator.reduce(sums.to(self.args.device), reduction="sum").cpu()
        return sums

    @staticmethod
    def _metrics(sums: torch.Tensor, prefix: str = "", divergence: str = "forward_kl") -> dict:
        soft, hard, rows, agree = sums.tolist()
        rows = max(rows, 1.0)
        ce = hard / rows
        return {
            f"{prefix}{get_divergence(divergence).metric}": soft / rows,  # "kl" for forward KL, "jsd" for JSD
            f"{prefix}ce": ce,
            f"{prefix}ppl": math.exp(min(ce, 50.0)),
            f"{prefix}top1_agreement": agree / rows,
        }

    def log(self, logs: dict, *args, **kwargs) -> None:
        """Add the training window's divergence, CE, perplexity and top-1 agreement to each training log."""
        if "loss" in logs and self._window[2] > 0:
            logs = {**logs, **self._metrics(self._reduce(self._window), divergence=self.args.divergence)}
            self._window.zero_()
        if "loss" in logs:  # the weights of the step just done, when a schedule moves them
            done = max(self.state.global_step - 1, 0)
            logs.update(self.args.weight_schedule().weights(self.args.soft_weight, self.args.hard_weight, done,
                                                            self.state.max_steps))
        if "loss" in logs and self._hidden_window[1] > 0:
            # Each micro-batch's term is its share of its step's (÷ the whole accumulated batch's positions).
            steps = self._hidden_window[1] / self.args.gradient_accumulation_steps
            logs["hidden_loss"] = (self._hidden_window[0] / steps).item()
            self._hidden_window.zero_()
        super().log(logs, *args, **kwargs)

    @torch.no_grad()
    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict:
        """Held-out metrics summed over every process. ``eval_loss`` is the training objective (the loss
        options, K′ and the hidden-state term, as trained), so ``metric_for_best_model="loss"`` keeps the
        student best at what it is trained for; beside it, under their own names, the yardstick shared by runs
        of any objective: ``eval_kl`` (forward KL over the cache's K buckets with the student at T = 1; over the
        full vocabulary for online dense), ``eval_ce``, ``eval_ppl`` and ``eval_top1_agreement``. With
        ``compute_metrics``, it is called as the Trainer calls it: once, on an ``EvalPrediction`` of every held-out
        batch's logits (through ``preprocess_logits_for_metrics`` when given) and labels."""
        held = eval_dataset if eval_dataset is not None else self.eval_dataset
        if isinstance(held, dict):  # as the Trainer does: each set evaluated on its own, under eval_NAME_
            metrics = {}
            for name, dataset in held.items():
                metrics.update(self.evaluate(dataset, ignore_keys, f"{metric_key_prefix}_{name}"))
            return metrics
        with_logits = self.compute_metrics is not None and not self.args.prediction_loss_only
        metrics, _, _ = self._score(self.get_eval_dataloader(eval_dataset), metric_key_prefix, with_logits)
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    @torch.no_grad()
    def predict(self, test_dataset, ignore_keys=None, metric_key_prefix: str = "test"):
        """The Trainer's ``PredictionOutput`` for ``test_dataset``: ``predictions`` the student's logits
        ``[sequences, L, V]`` as a numpy array (through ``preprocess_logits_for_metrics`` when given; None with
        ``prediction_loss_only``), ``label_ids`` Hugging Face's labels ``[sequences, L]`` (``labels[t]`` is token
        t, -100 where no loss is taken) and ``metrics`` those of :meth:`evaluate` under ``test_``
        (``test_loss``, ``test_kl``, ``test_ce``, ``test_ppl``, ``test_top1_agreement``, the timing keys, and
        ``compute_metrics``' results). Naive equivalent: ``evaluate(test_dataset, metric_key_prefix="test")``
        beside ``model(input_ids).logits`` of each batch."""
        with_logits = not self.args.prediction_loss_only
        metrics, predictions, label_ids = self._score(self.get_test_dataloader(test_dataset), metric_key_prefix,
                                                      with_logits)
        self.control = self.callback_handler.on_predict(self.args, self.state, self.control, metrics)
        return PredictionOutput(predictions=None if predictions is None else _numpy(predictions),
                                label_ids=None if label_ids is None else _numpy(label_ids), metrics=metrics)

    def _score(self, batches_of, prefix: str, with_logits: bool):
        """``(metrics, logits, labels)`` of one pass over the ``batches_of`` loader: the objective and the
        yardstick under ``prefix``, the timing keys, ``compute_metrics``' results; the logits and Hugging Face
        labels of every batch (gathered over processes, concatenated, padded with -100) when ``with_logits``."""
        start, batches, samples = time.time(), 0, 0
        # The wrapped model: under FSDP the unwrapped one holds only shards.
        model = self.model_wrapped if self.model_wrapped is not None else self.model
        was_training = model.training
        model.eval()
        options = self.args.loss_options()
        # The objective is the yardstick itself: one pass gives both.
        same = (all(getattr(options, k) == v for k, v in _YARDSTICK.items()) and self.args.top_k is None
                and self.args.top_p is None and not self.args.weight_schedule().active and self.hidden is None)
        sums = torch.zeros(len(_STATS), dtype=torch.float64)
        objective = torch.zeros(2, dtype=torch.float64)  # loss summed over rows, rows
        predictions = label_ids = None
        for inputs in batches_of:
            inputs = self._targets(self._prepare_inputs(inputs))  # an online teacher runs once per batch
            batches, samples = batches + 1, samples + len(inputs["input_ids"])
            _, stats = self._distill(model, inputs, **_YARDSTICK)
            sums += torch.stack([stats[k].double().cpu() for k in _STATS])
            rows = float((inputs["labels"] != IGNORE_INDEX).sum())
            if same:
                loss = stats["soft"].double().cpu()
            else:
                truncated = with_top_p(with_top_k(inputs, self.args.top_k), self.args.top_p)
                loss = self._distill(model, truncated)[0].double().cpu() * rows
            objective += torch.tensor([float(loss), rows], dtype=torch.float64)
            if with_logits:  # Hugging Face's convention there: labels[t] is token t, the metrics shift them
                logits = model(input_ids=inputs["input_ids"], use_cache=False, **_layout(inputs)).logits
                labels = hf_labels(inputs["labels"])
                if self.preprocess_logits_for_metrics is not None:
                    logits = self.preprocess_logits_for_metrics(logits, labels)
                gathered = self.accelerator.gather_for_metrics((logits, labels))
                logits, labels = _cpu(gathered[0]), _cpu(gathered[1])
                predictions = logits if predictions is None else nested_concat(predictions, logits, padding_index=-100)
                label_ids = labels if label_ids is None else nested_concat(label_ids, labels, padding_index=-100)
        model.train(was_training)
        metrics = self._metrics(self._reduce(sums), f"{prefix}_")
        loss_sum, rows = self._reduce(objective).tolist()
        metrics[f"{prefix}_loss"] = loss_sum / max(rows, 1.0)
        if self.compute_metrics is not None and predictions is not None:
            computed = self.compute_metrics(EvalPrediction(predictions=_numpy(predictions), label_ids=_numpy(label_ids)))
            metrics.update({(k if k.startswith(f"{prefix}_") else f"{prefix}_{k}"): v
                            for k, v in (computed or {}).items()})
        # The Trainer's timing keys (eval_runtime, eval_samples_per_second, ...), this process's batches.
        metrics.update(speed_metrics(prefix, start, num_samples=samples, num_steps=batches))
        return metrics, predictions, label_ids
