"""`destila recipe on-policy TEACHER STUDENT --prompts P -o OUT`: the student learns on its own samples.

A student trained only on fixed text never sees the mistakes it makes when
it writes; on-policy distillation (GKD, Agarwal et al.) trains it on its own
samples, scored by the teacher. Online trainers keep the teacher loaded next
to the student and run it every step. Here each round is three stages, and
each stage loads one model:

1. the current student samples answers to the round's prompts (``destila generate``);
2. one teacher pass caches the teacher's top-K on those answers (``loss_on="completion"``);
3. the student trains on that cache (optionally mixed with a fixed offline cache, ``lmbda``).

After each round the new student answers the held-out prompts, the teacher
scores the answers in a second small pass, and the student's KL to the
teacher, perplexity and agreement on its own answers are recorded (round 0
is the starting student). Every stage is recorded in ``OUT/stages.json``; a
run killed at any moment resumes, with the same command, inside the stage it
was in (the generation file, the cache and the training checkpoints are
resumable themselves), and ends with the weights of an uninterrupted run.

Naive equivalent::

    for r in range(rounds):
        samples = student.generate(prompts, do_sample=True, temperature=T, top_p=P)
        cache = build_cache(teacher, samples, loss_on="completion")
        student = train(student, mix(cache, offline, lmbda), steps=steps_per_round)
"""

from __future__ import annotations

import gc
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from destila.cache import TopKCache, build_cache, inspect_cache
from destila.cache.kinds import target_content, target_width
from destila.data import DataSpec
from destila.eval.run import evaluate_model
from destila.eval.spec import EvalSpec
from destila.generation import GenerateSpec, SamplingSpec, generate
from destila.generation.prompts import load_prompts
from destila.io import write_report_file
from destila.losses.options import LossOptions
from destila.models import load_tokenizer, resolve_source, tokenizer_fingerprint
from destila.ranges import check_int_at_least, check_optional_int_at_least
from destila.recipes.on_policy_report import markdown, table
from destila.targets.spec import TargetSpec
from destila.recipes.on_policy_data import (MixedCache, answer_tokens, check_mixable, round_window, split_prompts,
                                            write_pairs)
from destila.demo.settings import StageSettings
from destila.demo.stages import BATCH_SIZES, StageLog, train_from_cache

# Loss fields the recipe does not take: the data path writes the ignore label, and the round caches are
# built at temperature 1 (a cache's temperature is fixed when it is built).
LOSS_FIELDS_LEFT_OUT = ("ignore_index", "temperature")
WARMUP_STEPS = 5


@dataclass
class OnPolicySettings(StageSettings):
    """The rounds, the sampling and the training of :class:`OnPolicyRecipe`, beside the sizes every recipe
    shares (:class:`~destila.demo.settings.StageSettings`: ``seq_len``, ``top_k`` of the round caches, ...)."""

    rounds: int = field(default=3, metadata={"help": "rounds of sample → teacher pass → train"})
    samples_per_prompt: int = field(default=1, metadata={"help": "answers the student samples per prompt"})
    prompts_per_round: int | None = field(default=None, metadata={
        "help": "training prompts each round samples (the next ones in order, wrapping around); default: all"})
    steps_per_round: int = field(default=20, metadata={"help": "optimizer steps of each round's training"})
    max_new_tokens: int = field(default=64, metadata={"help": "tokens the student writes per answer at most"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature of the student (> 0)"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling of the student (1 keeps all tokens)"})
    chat_template: str = field(default="auto", metadata={
        "choices": ("auto", "always", "never"),
        "help": "prompts through the tokenizer's chat template: auto (when it has one), always or never"})
    mix_offline: str | None = field(default=None, metadata={
        "help": "a cache of the teacher (on teacher-written or dataset text) mixed into every round's training",
        "metavar": "CACHE"})
    lmbda: float = field(default=1.0, metadata={
        "help": "fraction of each round's training sequences that are the student's own samples (GKD's lmbda); "
                "below 1 needs --mix-offline, which supplies the rest"})
    save_steps: int = field(default=10, metadata={"help": "training checkpoint every N steps (a kill loses less)"})
    generate_batch_size: int = field(default=8, metadata={"help": "prompts per generate call"})
    shard_size: int = field(default=32, metadata={"help": "sequences per cache shard file (a kill loses less)"})
    device: str = field(default="auto", metadata={"help": "auto (CUDA when present, else CPU), cpu, cuda, cuda:1, …"})
    seed: int = field(default=0, metadata={"help": "seed of the sampling and of the training"})

    def __post_init__(self):
        super().__post_init__()
        for name in ("rounds", "samples_per_prompt", "steps_per_round", "max_new_tokens", "save_steps",
                     "generate_batch_size", "shard_size"):
            check_int_at_least(name, getattr(self, name), 1)
        check_optional_int_at_least("prompts_per_round", self.prompts_per_round, 1)
        if not 0 < self.temperature < math.inf:
            raise ValueError(f"temperature: expected a finite number > 0 (on-policy rounds sample), found "
                             f"{self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p: expected a number in (0, 1], found {self.top_p}")
        if not 0 < self.lmbda <= 1:
            raise ValueError(f"lmbda: expected a number in (0, 1], found {self.lmbda}; lmbda 0 (offline data only) "
                             "is `destila train --cache`")
        if self.mix_offline is None and self.lmbda < 1:
            raise ValueError(f"lmbda: {self.lmbda} leaves {1 - self.lmbda:g} of each round to offline data, but no "
                             "--mix-offline cache is given; pass one, or drop --lmbda")
        if self.mix_offline is not None and self.lmbda == 1:
            raise ValueError("mix_offline: with lmbda 1 every training sequence is on-policy and the offline cache "
                             "would be unused; pass --lmbda below 1, or drop --mix-offline")


def _release() -> None:
    """Free the stage's model before the next stage loads another: one model set resident at a time."""
    # heavy: torch
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class OnPolicyRecipe:
    """Rounds of (student samples → teacher top-K pass → training), resumable, with per-round metrics."""

    title = "on-policy distillation"

    def __init__(self, teacher: str, student: str, prompts, out: str | Path, settings: OnPolicySettings | None = None,
                 loss: LossOptions | None = None, console=None):
        self.teacher, self.student, self.prompts = teacher, student, prompts
        self.out = Path(out).expanduser()
        self.settings = settings or OnPolicySettings()
        self.loss = loss or LossOptions()
        if self.loss.temperature != 1.0:
            raise ValueError(f"temperature: the round caches are built at temperature 1; the loss temperature must "
                             f"be 1 too, found {self.loss.temperature}")
        self.log = StageLog(self.out, console)
        self.console = self.log.console

    # -- checks before any model is loaded ------------------------------------------------

    def describe(self) -> dict:
        loss = {k: v for k, v in asdict(self.loss).items() if k not in LOSS_FIELDS_LEFT_OUT}
        return {"teacher": str(self.teacher), "student": str(self.student),
                "prompts": self.prompts if isinstance(self.prompts, str) else f"{len(self.prompts)} prompts",
                **asdict(self.settings), "loss": loss}

    def _check_models(self) -> None:

        teacher, student = tokenizer_fingerprint(load_tokenizer(self.teacher)), tokenizer_fingerprint(
            load_tokenizer(self.student))
        if teacher != student:
            raise ValueError(
                f"student: its tokenizer (fingerprint {student}) differs from the teacher's ({teacher}); the teacher "
                "scores the student's answers token by token, so both must share one tokenizer (make the student "
                "with `destila student init TEACHER`)")
        if self.settings.mix_offline is not None:

            offline = TopKCache(self.settings.mix_offline)
            m = offline.manifest
            if m.tokenizer_fingerprint != teacher:
                raise ValueError(f"mix_offline: {self.settings.mix_offline} was built with another tokenizer "
                                 f"({m.tokenizer_fingerprint}) than the teacher's ({teacher}); build it with the "
                                 "recipe's teacher")
            rounds = self.round_targets()  # what every round cache is built with
            if target_content(m.target_spec) != target_content(rounds):
                raise ValueError(
                    f"mix_offline: {self.settings.mix_offline} holds {m.target_kind} targets, K = {offline.top_k}, "
                    f"temperature {m.temperature:g}; the round caches hold {rounds.kind} targets, K = "
                    f"{target_width(rounds)}, temperature {rounds.temperature:g}; pass --top-k {offline.top_k} or "
                    "rebuild the offline cache to match")

    def round_targets(self) -> TargetSpec:
        """The targets of every round's cache: the teacher's top-K at temperature 1."""
        return TargetSpec(top_k=self.settings.top_k)

    def device(self) -> str:
        # heavy: torch
        import torch

        if self.settings.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        return self.settings.device

    # -- the stages -------------------------------------------------------------------------

    def _stage(self, name: str, title: str, work) -> dict:
        result = self.log.run(name, title, work)
        _release()
        return result

    def sample(self, model: str, prompts: list, path: Path, seed: int) -> dict:
        """``model`` answers ``prompts`` into ``path`` (resumable); tokens written and the speed of this call."""

        s = self.settings
        sampling = SamplingSpec(max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p,
                                num_return_sequences=s.samples_per_prompt, seed=seed, chat_template=s.chat_template)
        path.parent.mkdir(parents=True, exist_ok=True)
        before = _answered(path)
        start = time.monotonic()
        report = generate(GenerateSpec(model, [p.messages if p.messages is not None else p.text for p in prompts],
                                       path, sampling, batch_size=s.generate_batch_size, device=self.device(),
                                       progress=False))
        seconds = time.monotonic() - start
        tokenizer = load_tokenizer(model)
        new = answer_tokens(path, tokenizer, skip=before)
        return {"path": str(path), "samples": report.prompts * s.samples_per_prompt,
                "tokens": answer_tokens(path, tokenizer), "tokens_per_second": new / seconds if new else None,
                "resumed": report.already_done > 0}

    def teacher_pass(self, teacher: str, samples: str, folder: Path) -> dict:
        """The teacher's top-K on the answers of ``samples`` (prompt tokens untrained), cached in ``folder``."""

        s = self.settings
        folder.mkdir(parents=True, exist_ok=True)
        pairs = folder.with_name(folder.name + "-pairs.jsonl")
        counts = write_pairs(samples, pairs)
        data = DataSpec(str(pairs), prompt_field="prompt", completion_field="completion", seq_len=s.seq_len)
        build_cache(teacher, data, folder, targets=self.round_targets(), batch_size=s.cache_batch_size,
                    shard_size=s.shard_size, device=self.device(), progress=False)
        summary = inspect_cache(folder)
        if summary["trained_positions"] == 0:  # every answer cut off: training or scoring it would teach nothing
            raise ValueError(
                f"{folder}: no answer token fits in seq_len {s.seq_len}: every prompt of {samples} takes the "
                f"whole sequence before its answer starts; raise --seq-len above the prompts' length plus "
                f"--max-new-tokens ({s.max_new_tokens}), or shorten the prompts")
        return {"path": str(folder), "sequences": summary["sequences"], "tokens": summary["tokens"],
                "trained_positions": summary["trained_positions"], "answers": counts["samples"],
                "finished_answers": counts["finished"]}

    def train(self, student: str, cache: str, folder: Path, round_number: int) -> dict:

        s = self.settings
        source, mixed = cache, None
        if s.mix_offline is not None:
            on_policy, offline = TopKCache(cache), TopKCache(s.mix_offline)
            check_mixable(on_policy, offline, s.mix_offline)
            source = mixed = MixedCache(on_policy, offline, lmbda=s.lmbda, round_number=round_number, seed=s.seed,
                                        offline_path=s.mix_offline)
        loss = {k: v for k, v in asdict(self.loss).items() if k not in LOSS_FIELDS_LEFT_OUT}
        # The learning rate warms up once, in round 1: later rounds continue the same training (a warm-up per
        # round would keep a round of few steps below the learning rate it asks for).
        warmup = min(WARMUP_STEPS, s.steps_per_round) if round_number == 1 else 0
        result = train_from_cache(student, folder, source, max_steps=s.steps_per_round, batch_size=s.batch_size,
                                  learning_rate=s.learning_rate, seed=s.seed, save_steps=s.save_steps,
                                  warmup_steps=warmup, use_cpu=self.device() == "cpu", **loss)
        if mixed is not None:
            result.update(on_policy_sequences=len(mixed.on_policy), offline_sequences=len(mixed.offline_indices))
        return result

    def evaluate(self, student: str, cache: str) -> dict:
        """The student on its own held-out answers: KL to the teacher (top-K buckets), perplexity, agreement."""

        result = evaluate_model(EvalSpec([student], cache=cache, max_tokens=None, new_tokens=8, device=self.device()))
        keep = ("kl_to_teacher", "perplexity", "top1_agreement", "tokens")
        return {k: result[k] for k in keep if k in result}

    def _held_out_metrics(self, where: str, label: str, student: str, teacher: str, held: list) -> dict:
        folder = self.out / where
        answers = self._stage(f"{where}-heldout-sample", f"{label}: the student answers the held-out prompts",
                              lambda: self.sample(student, held, folder / "heldout-samples.jsonl",
                                                  seed=self.settings.seed + 1_000_003))
        cache = self._stage(f"{where}-heldout-teacher", f"{label}: the teacher scores the held-out answers",
                            lambda: self.teacher_pass(teacher, answers["path"], folder / "heldout-cache"))
        metrics = self._stage(f"{where}-eval", f"{label}: held-out metrics on the student's own answers",
                              lambda: self.evaluate(student, cache["path"]))
        return {**{k: v for k, v in metrics.items() if k != "seconds"}, "eval_seconds": metrics["seconds"]}

    def run(self) -> dict:

        s = self.settings
        prompts = load_prompts(self.prompts)
        train, held = split_prompts(prompts, s.holdout_every)
        self._check_models()
        self.log.hold_one_run(self.describe(), "an on-policy run", may_differ=BATCH_SIZES)
        teacher, student = resolve_source(self.teacher)[0], resolve_source(self.student)[0]
        rounds = [{"round": 0, **self._held_out_metrics("round0", "round 0", student, teacher, held)}]
        for r in range(1, s.rounds + 1):
            label, folder = f"round {r}/{s.rounds}", self.out / f"round{r}"
            chosen = [train[i] for i in round_window(len(train), s.prompts_per_round, r)]
            samples = self._stage(f"round{r}-sample", f"{label}: the student samples {len(chosen)} prompts",
                                  lambda: self.sample(student, chosen, folder / "samples.jsonl", seed=s.seed + r))
            cache = self._stage(f"round{r}-teacher", f"{label}: one teacher pass over the student's answers",
                                lambda: self.teacher_pass(teacher, samples["path"], folder / "cache"))
            trained = self._stage(f"round{r}-train", f"{label}: the student trains on the teacher's targets",
                                  lambda: self.train(student, cache["path"], folder / "student", r))
            student = trained["path"]
            metrics = self._held_out_metrics(f"round{r}", label, student, teacher, held)
            rounds.append({
                "round": r, **metrics, "samples": samples["samples"], "generated_tokens": samples["tokens"],
                "generate_tokens_per_second": samples["tokens_per_second"], "sample_seconds": samples["seconds"],
                "teacher_seconds": cache["seconds"], "cache_sequences": cache["sequences"],
                "train_seconds": trained["seconds"], "steps": trained["steps"],
            })
        report = {"title": self.title, "settings": self.describe(), "student": student, "rounds": rounds}
        self._report(report)
        return report

    def _report(self, report: dict) -> None:

        write_report_file(self.out / "report.json", json.dumps(report, indent=2))
        write_report_file(self.out / "report.md", markdown(report))
        self.console.print(table(report["rounds"], self.title))
        self.console.print(f"student: {report['student']}\nreport: {self.out / 'report.md'}")


def _answered(path: Path) -> set[tuple[int, int]]:
    """``(prompt_index, sample)`` of the whole lines already in a generation file."""
    if not path.exists():
        return set()
    done = set()
    for line in path.read_bytes().splitlines(keepends=True):
        try:
            record = json.loads(line)
            done.add((int(record["prompt_index"]), int(record["sample"])))
        except (ValueError, KeyError, TypeError):
            break
    return done
