"""`destila recipe draft TEACHER -o DRAFT`: a distilled draft that makes the teacher faster with the same text.

Stages, each recorded in ``DRAFT/stages.json`` and skipped when rerun (every
stage's own files are resumable too). A folder holds one run: its settings
go to ``DRAFT/recipe.json``, and a rerun with other ones is refused, naming
each (a skipped stage would keep the old ones); batch sizes may differ.

1. **size**: the cost of one decoding step of drafts cut with 1…8 of the
   teacher's layers, against the teacher's, measured here
   (:mod:`destila.draft.size`); the deepest draft within ``--cost-ratio``
   of the teacher's cost is chosen (or ``--layers``);
2. **answers**: the teacher answers the training prompts greedily
   (``destila generate``): text the teacher itself writes is exactly what a
   draft must predict when it decodes for that teacher; with
   ``--sampled-answers N`` it also writes N sampled answers per prompt;
3. **cache**: one teacher pass caches its top-K on those answers (targets on
   the answers only);
4. **init** and **train**: the draft is cut from the teacher and distilled
   from that cache with ``--divergence`` for ``--tokens`` answer tokens (or
   ``--minutes`` of training);
5. **ranking**: the teacher's tokens ranked by how often its answers use them
   (``draft_vocab.json``, for a narrow draft head);
6. **measure**: ``destila eval TEACHER --draft DRAFT`` on the held-out prompts.

``DRAFT`` ends as a plain Hugging Face model folder (its working files under
``DRAFT/work/``), so ``generate(assistant_model=AutoModelForCausalLM.from_pretrained(DRAFT))``
takes it as it is. Naive equivalent::

    answers = teacher.generate(prompts, do_sample=False)
    cache = build_cache(teacher, answers, loss_on="completion")
    draft = train(cut(teacher, layers), cache, divergence=divergence)
    measure(teacher, draft, held_out_prompts)
"""

from __future__ import annotations

import gc
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from destila.data import DataSpec
from destila.demo.settings import StageSettings
from destila.demo.stages import BATCH_SIZES, StageLog, train_from_cache
from destila.draft.head import VOCAB_FILE, frequent_tokens, write_ranking
from destila.draft.measure import measure_draft, propose_every_step
from destila.draft.prompts import PYDOC, pydoc_prompts
from destila.draft.size import choose_layers, draft_costs
from destila.draft.spec import DraftEvalSpec
from destila.draft.table import print_draft_report
from destila.generation import GenerateSpec, SamplingSpec, generate
from destila.generation.prompts import load_prompts
from destila.io import write_atomic
from destila.io.json_lines import json_lines, read_json_lines
from destila.losses.divergences import divergence_names
from destila.models import load_causal_lm, load_tokenizer
from destila.ranges import check_finite_at_least, check_int_at_least, check_optional_int_at_least
from destila.student.spec import StudentInitSpec

_MODEL_FILES = ("config.json", "generation_config.json", "*.safetensors", "model.safetensors.index.json",
                "tokenizer*", "special_tokens_map.json", "chat_template.jinja", "vocab.json", "merges.txt")
_SIZE_CANDIDATES = (1, 2, 3, 4, 6, 8)
HELD_OUT_FILE = "held_out.jsonl"
"""Under ``DRAFT/work/``: every held-out prompt, for measuring the draft again on more of them."""


@dataclass
class DraftSettings(StageSettings):
    """What ``recipe draft`` trains on, how long, and how its draft is sized and measured."""

    prompts: str = field(default=PYDOC, metadata={
        "help": "prompts the teacher answers: 'pydoc' (questions on Python's documentation), a .txt file (one per "
                "line) or .jsonl/.json/.parquet rows with 'messages' or 'prompt'; every --holdout-every-th is held "
                "out for the measurement"})
    layers: int | None = field(default=None, metadata={
        "help": "the draft's layers (cut evenly from the teacher); default: chosen by measured cost"})
    cost_ratio: float = field(default=0.15, metadata={
        "help": "without --layers: the deepest draft whose decoding step costs at most this fraction of the "
                "teacher's"})
    divergence: str = field(default="forward_kl", metadata={
        "help": "what the draft minimises to the teacher's top-K", "choices": divergence_names()})
    tokens: int = field(default=24576, metadata={"help": "answer tokens the draft trains on"})
    minutes: float | None = field(default=None, metadata={
        "help": "instead of --tokens: minutes of training (the other stages come on top)"})
    answer_tokens: int = field(default=96, metadata={"help": "tokens the teacher writes per answer at most"})
    sampled_answers: int = field(default=0, metadata={
        "help": "besides its greedy answer, the teacher writes this many answers per training prompt sampled at "
                "--sample-temperature; the draft trains on them all (more distinct text for the same --tokens)"})
    sample_temperature: float = field(default=0.7, metadata={"help": "the temperature of --sampled-answers"})
    train_prompts: int | None = field(default=400, metadata={
        "help": "training prompts the teacher answers at most (the answer pass is the slowest stage)"})
    # 8 prompts chose prompt lookup (1.22x against 1.10x) where 48 chose the same draft (1.22x against 1.19x).
    eval_prompts: int = field(default=48, metadata={
        "help": "held-out prompts the measurement answers (fewer: a quicker verdict that moves with which ones)"})
    eval_new_tokens: int = field(default=48, metadata={"help": "tokens per held-out answer in the measurement"})
    draft_vocab: int | None = field(default=8192, metadata={
        "help": "the draft proposes only the teacher's N most frequent tokens (a narrow head, same text); "
                "0 keeps the whole head"})
    generate_batch_size: int = field(default=16, metadata={"help": "prompts per teacher generate call"})
    seed: int = field(default=0, metadata={"help": "training seed"})

    def __post_init__(self):
        super().__post_init__()
        check_optional_int_at_least("layers", self.layers, 1)
        check_finite_at_least("cost_ratio", self.cost_ratio, 0, strict=True)
        for name in ("tokens", "answer_tokens", "eval_prompts", "eval_new_tokens", "generate_batch_size"):
            check_int_at_least(name, getattr(self, name), 1)
        check_optional_int_at_least("train_prompts", self.train_prompts, 1)
        check_int_at_least("sampled_answers", self.sampled_answers, 0, hint="0 trains on the greedy answers alone")
        check_finite_at_least("sample_temperature", self.sample_temperature, 0, strict=True)
        check_optional_int_at_least("draft_vocab", self.draft_vocab, 0)
        if self.minutes is not None:
            check_finite_at_least("minutes", self.minutes, 0, strict=True)
        if self.divergence not in divergence_names():
            raise ValueError(f"divergence: expected one of {', '.join(divergence_names())}, found {self.divergence!r}")

    def steps_for(self, trained_per_sequence: float) -> int:
        """Optimizer steps that train about ``tokens`` answer tokens, at this many per cached sequence."""
        return max(1, math.ceil(self.tokens / (self.batch_size * trained_per_sequence)))


class DraftRecipe:
    """The stages of :mod:`destila.draft.recipe`; :meth:`run` returns the measurement's report."""

    def __init__(self, teacher: str, out: str | Path, settings: DraftSettings | None = None, console=None):
        self.teacher, self.out = teacher, Path(out)
        self.settings = settings or DraftSettings()
        self.work = self.out / "work"
        self.log = StageLog(self.out, console)
        self.console = self.log.console

    def prompts(self) -> tuple[list, list]:
        """``(training prompts, every held-out prompt)``: pydoc's split by topic, or every --holdout-every-th of a
        file; the measurement answers the first ``--eval-prompts`` held-out ones."""
        # destila.recipes imports the cache package (pyarrow): only when the prompts are read
        from destila.recipes.on_policy_data import split_prompts

        s = self.settings
        if s.prompts == PYDOC:
            train, held = (load_prompts(part) for part in pydoc_prompts(s.holdout_every))
        else:
            train, held = split_prompts(load_prompts(s.prompts), s.holdout_every)
        if not held:
            raise ValueError(f"prompts: {s.prompts} leaves no prompt held out (every {s.holdout_every}th is); give "
                             "more prompts or a smaller --holdout-every")
        if s.train_prompts is not None and len(train) > s.train_prompts:  # evenly over every topic, not the first
            train = [train[i * len(train) // s.train_prompts] for i in range(s.train_prompts)]
        return train, held

    def run(self) -> dict:
        s, log = self.settings, self.log
        train, held = self.prompts()  # bad prompts are refused before any stage writes
        self.log.hold_one_run(self.describe(), "a draft run", may_differ=BATCH_SIZES)
        self.write_held_out(held)
        held = held[: s.eval_prompts]
        size = log.run("size", "draft size: cost per token against the teacher's", self.size)
        sampled = f", and {s.sampled_answers} sampled each (T = {s.sample_temperature})" if s.sampled_answers else ""
        answers = log.run("answers", f"the teacher answers {len(train)} prompts (greedy{sampled})",
                          lambda: self.answers(train))
        cache = log.run("cache", "one teacher pass over its answers", lambda: self.cache(answers))
        init = log.run("init", f"the draft: {size['layers']} layers cut from the teacher",
                       lambda: self.init(size["layers"]))
        trained = log.run("train", f"distil the draft ({s.divergence})", lambda: self.train(init["path"], cache))
        log.run("ranking", "the teacher's tokens by frequency", lambda: self.ranking(answers["path"]))
        self.publish(trained["path"], self.work / VOCAB_FILE)
        report = log.run("measure", f"measure: {len(held)} held-out prompts, three ways", lambda: self.measure(held))
        return report

    # -- stages ---------------------------------------------------------------------

    def _teacher_ids(self):
        tokenizer = load_tokenizer(self.teacher)
        model = load_causal_lm(self.teacher)
        text = "The for statement is used to iterate over the elements of a sequence such as a list. " * 4
        return model, tokenizer(text, return_tensors="pt")["input_ids"]

    def write_held_out(self, held: list) -> None:
        """Every held-out prompt to ``DRAFT/work/held_out.jsonl`` (``prompt`` or ``messages`` rows): never trained
        on, so ``destila eval TEACHER --draft DRAFT --prompts`` can measure the draft again on more of them."""
        rows = [{"prompt": p.text} if p.messages is None else {"messages": p.conversation()} for p in held]
        self.work.mkdir(parents=True, exist_ok=True)
        write_atomic(self.work / HELD_OUT_FILE, json_lines(rows, ensure_ascii=False))

    def size(self) -> dict:
        s = self.settings
        teacher, ids = self._teacher_ids()
        total = teacher.config.num_hidden_layers
        if s.layers is not None:
            if s.layers >= total:
                raise ValueError(f"layers: the draft must have fewer layers than the teacher's {total}, found "
                                 f"{s.layers}")
            return {"layers": s.layers, "chosen_by": "--layers"}
        # The head is narrowed by id order here: its cost depends on the rows kept, not on which.
        vocab = s.draft_vocab or None
        ranking = list(range(teacher.get_output_embeddings().weight.shape[0])) if vocab else None
        candidates = [n for n in _SIZE_CANDIDATES if n < total]
        costs = draft_costs(teacher, ids, candidates, ranking, vocab)
        del teacher
        gc.collect()
        layers = choose_layers(costs, s.cost_ratio)
        self.console.print(f"teacher {costs['teacher_ms']:.1f} ms per token; a draft {costs['fixed_ms']:.1f} ms + "
                           f"{costs['per_layer_ms']:.2f} ms per layer (measured: " + ", ".join(
                               f"{row['layers']} layers {row['ms']:.1f}" for row in costs["drafts"]) + ")")
        return {"layers": layers, "chosen_by": f"cost ratio ≤ {s.cost_ratio}", **costs}

    def answers(self, train: list) -> dict:
        """The teacher's greedy answers (``answers.jsonl``) and, with ``--sampled-answers N``, N sampled ones per
        prompt (``sampled.jsonl``, seed 0)."""
        s = self.settings
        self.work.mkdir(parents=True, exist_ok=True)
        path = self.work / "answers.jsonl"
        sampling = SamplingSpec(max_new_tokens=s.answer_tokens, temperature=0.0)
        items = [p.messages if p.messages is not None else p.text for p in train]
        report = generate(GenerateSpec(self.teacher, items, path, sampling, batch_size=s.generate_batch_size))
        result = {"path": str(path), "answers": report.prompts}
        if s.sampled_answers:
            sampled = self.work / "sampled.jsonl"
            sampling = SamplingSpec(max_new_tokens=s.answer_tokens, temperature=s.sample_temperature,
                                    num_return_sequences=s.sampled_answers)
            done = generate(GenerateSpec(self.teacher, items, sampled, sampling, batch_size=s.generate_batch_size))
            result.update(sampled_path=str(sampled), sampled=done.prompts * s.sampled_answers)
        return result

    def cache(self, answers: dict) -> dict:
        # the cache package and destila.recipes import pyarrow: only when this stage runs
        from destila.cache import build_cache, inspect_cache
        from destila.recipes.on_policy_data import write_pairs

        s = self.settings
        pairs = self.work / "pairs.jsonl"
        write_pairs(answers["path"], pairs)
        if "sampled_path" in answers:  # the sampled answers' pairs after the greedy ones, in one file
            sampled = self.work / "sampled_pairs.jsonl"
            write_pairs(answers["sampled_path"], sampled)
            write_atomic(pairs, pairs.read_bytes() + sampled.read_bytes())
        folder = self.work / "cache"
        data = DataSpec(str(pairs), prompt_field="prompt", completion_field="completion", seq_len=s.seq_len)
        build_cache(self.teacher, data, folder, top_k=s.top_k, batch_size=s.cache_batch_size)
        summary = inspect_cache(folder)
        return {"path": str(folder), "sequences": summary["sequences"], "tokens": summary["tokens"],
                "trained_positions": summary["trained_positions"]}

    def init(self, layers: int) -> dict:
        # destila.student.init imports the cache package (pyarrow): only when this stage runs
        from destila.student import init_student

        path = self.work / "init"
        if not (path / "config.json").exists():  # else written by a run killed before it recorded the stage
            init_student(StudentInitSpec(self.teacher, path, layers=layers))
        return {"path": str(path)}

    def train(self, student: str, cache: dict) -> dict:
        s = self.settings
        per_sequence = cache["trained_positions"] / cache["sequences"]
        steps = s.steps_for(per_sequence) if s.minutes is None else 10 ** 6
        budget = None if s.minutes is None else s.minutes * 60
        result = train_from_cache(student, self.work / "train", cache["path"], max_steps=steps,
                                  batch_size=s.batch_size, learning_rate=s.learning_rate, seed=s.seed, budget=budget,
                                  soft_weight=1.0, hard_weight=0.0, divergence=s.divergence)
        result["trained_tokens"] = round(result["steps"] * s.batch_size * per_sequence)
        return result

    def ranking(self, answers: str) -> dict:
        tokenizer = load_tokenizer(self.teacher)
        texts = [record["messages"][-1]["content"] for record in read_json_lines(Path(answers))]
        ranking = frequent_tokens([tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts],
                                  len(tokenizer))
        write_ranking(self.work, ranking)
        return {"counted_tokens": ranking["counted_tokens"]}

    def publish(self, trained: str, ranking: Path) -> None:
        """The trained draft's model files (and its token ranking) copied to ``DRAFT/``, each by atomic rename; its
        generation config says how many tokens to propose per step, as measured."""
        # transformers takes seconds to import: only when the draft is published
        from transformers import GenerationConfig

        for pattern in _MODEL_FILES:
            for source in sorted(Path(trained).glob(pattern)):
                if source.name != "generation_config.json":
                    write_atomic(self.out / source.name, source.read_bytes())
        write_atomic(self.out / ranking.name, ranking.read_bytes())
        # generate(assistant_model=DRAFT) reads its proposals per step from here: the settings it was measured with
        config = GenerationConfig.from_pretrained(trained) if (Path(trained) / "generation_config.json").is_file() \
            else GenerationConfig()
        propose_every_step(config, DraftEvalSpec.__dataclass_fields__["draft_tokens"].default)
        write_atomic(self.out / "generation_config.json", config.to_json_string())

    def measure(self, held: list) -> dict:
        s = self.settings
        items = [p.messages if p.messages is not None else p.text for p in held]
        spec = DraftEvalSpec(self.teacher, str(self.out), items, max_new_tokens=s.eval_new_tokens,
                             draft_vocab=s.draft_vocab or None)
        report = measure_draft(spec)
        print_draft_report(self.console, report)
        if report["errors"]:
            raise RuntimeError("; ".join(report["errors"]))
        return report

    def describe(self) -> dict:
        return {"teacher": self.teacher, **asdict(self.settings)}
