"""`destila generate`: teacher-written answers to prompts, as conversations on disk.

Sequence-level distillation trains the student on text the teacher wrote;
mixed with real text it is data augmentation. This module runs the teacher's
``generate`` over a prompt file and appends one conversation per answer to a
JSON-lines file::

    {"messages": [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": ANSWER}],
     "text": RENDERED_PROMPT + ANSWER, "prompt_index": 3, "sample": 0}

``messages`` is what the conversation data path reads (``--messages-field
messages``); ``text`` is the same example as plain text, for readers of text.

Resumable and reproducible. Every sample row draws its noise from its own
generator seeded by ``(seed, prompt_index, sample)``, so a prompt's random
draws depend neither on the prompts that share its batch nor on where an
earlier run was killed. Batches are fixed slices of the prompt list
(``batch_size`` prompts each), so a batch cut off mid-write is recomputed
whole, padded exactly as in an uninterrupted run, and only its missing
prompts are written: the finished file is byte-identical. A batch's lines go to the file in one ``write`` and
are flushed to disk before the next batch starts; on restart the file is cut
back to its last whole prompt and the prompts already answered are skipped.
A sidecar ``OUT.generate.json`` records the teacher, the prompts and the
sampling settings; resuming with different ones is refused.

Naive equivalent (one process, no resume, global random state)::

    for i, prompt in enumerate(prompts):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)
        out = model.generate(ids, do_sample=True, temperature=T, top_p=P, max_new_tokens=M)
        write({"messages": [..., {"role": "assistant", "content": tokenizer.decode(out[len(ids):])}]})
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from destila.generation.prompts import Prompt, load_prompts
from destila.io import names_user_path, output_lock, write_atomic
from destila.io.json_lines import json_lines
from destila.io.progress import progress_bar
from destila.models import MODEL_HELP, load_causal_lm, load_tokenizer, resolve_source
from destila.ranges import check_finite_at_least, check_int_at_least


@dataclass(frozen=True)
class SamplingSpec:
    """How answers are sampled; recorded next to the output and checked on resume."""

    max_new_tokens: int = field(default=256, metadata={"help": "tokens generated per answer at most"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature; 0 means greedy"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling: keep the smallest set of tokens "
                                                        "whose probability reaches top_p (1 keeps all)"})
    num_return_sequences: int = field(default=1, metadata={"help": "answers per prompt"})
    seed: int = field(default=0, metadata={"help": "seed of every answer's own random stream"})
    chat_template: str = field(default="auto", metadata={
        "choices": ("auto", "always", "never"),
        "help": "auto (apply the tokenizer's chat template when it has one), always, or never "
                "(text prompts are continued as raw text)"})

    def __post_init__(self):
        check_int_at_least("max_new_tokens", self.max_new_tokens, 1)
        check_finite_at_least("temperature", self.temperature, 0, hint="0 means greedy decoding")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p: expected a number in (0, 1], found {self.top_p}")
        check_int_at_least("num_return_sequences", self.num_return_sequences, 1)
        if self.temperature == 0 and self.num_return_sequences > 1:
            raise ValueError("num_return_sequences: greedy decoding (temperature 0) gives one answer per prompt; "
                             "pass --temperature > 0 or --num-return-sequences 1")
        if self.temperature == 0 and self.top_p < 1:
            raise ValueError(f"top_p: greedy decoding (temperature 0) takes the most likely token and would ignore "
                             f"--top-p {self.top_p}; pass --temperature > 0 to sample, or drop --top-p")
        if self.chat_template not in ("auto", "always", "never"):
            raise ValueError(f"chat_template: expected auto, always or never, found {self.chat_template!r}")


@dataclass(frozen=True)
class GenerateSpec:
    """What one ``destila generate`` run is asked for: the teacher, its prompts, the output and how to sample.

    The command fills one from its flags; Python callers pass the same object to :func:`generate`::

        generate(GenerateSpec("smollm2", "prompts.txt", "answers.jsonl", SamplingSpec(temperature=0.7)))
    """

    teacher: str = field(metadata={"help": MODEL_HELP, "metavar": "TEACHER"})
    prompts: str | Path | list = field(metadata={
        "help": ".txt (one prompt per line), .jsonl, .json or .parquet (from Python also a list)",
        "metavar": "PROMPTS"})
    output: str | Path = field(metadata={
        "help": "JSON-lines file (created, or resumed)", "metavar": "OUT", "aliases": ["-o"]})
    sampling: SamplingSpec = field(default_factory=SamplingSpec, metadata={
        "help": "how answers are sampled (its own flags)"})
    prompt_field: str = field(default="prompt", metadata={"help": "field of text prompts"})
    messages_field: str = field(default="messages", metadata={"help": "field of conversations"})
    gguf_file: str | None = field(default=None, metadata={"help": "GGUF file name inside the TEACHER folder"})
    batch_size: int = field(default=8, metadata={"help": "prompts per generate call"})
    device: str = field(default="cpu", metadata={"help": "cpu, cuda, cuda:1, …"})
    progress: bool = field(default=True, metadata={"help": "progress bar (--quiet: none)", "aliases": ["--quiet"]})

    def __post_init__(self):
        if not isinstance(self.sampling, SamplingSpec):
            raise ValueError(f"sampling: expected a SamplingSpec, found {type(self.sampling).__name__}")
        check_int_at_least("batch_size", self.batch_size, 1)
        object.__setattr__(self, "output", Path(self.output).expanduser())


@dataclass
class GenerateReport:
    """What one call of :func:`generate` did."""

    path: Path
    prompts: int
    already_done: int
    written_prompts: int
    lines: int


def sidecar_path(out: Path) -> Path:
    return out.with_name(out.name + ".generate.json")


def _fingerprint(prompts: list[Prompt]) -> str:
    digest = hashlib.sha256()
    for prompt in prompts:
        raw = json.dumps(prompt.messages if prompt.messages is not None else prompt.text, sort_keys=True).encode()
        digest.update(len(raw).to_bytes(8, "little") + raw)
    return digest.hexdigest()[:16]


def _agree_with_sidecar(out: Path, record: dict) -> None:
    """Write the sidecar for a new output; refuse to append to an output made differently."""
    side = sidecar_path(out)
    if out.exists() and out.stat().st_size > 0 and not side.exists():
        raise FileExistsError(
            f"output: {out} exists and was not written by destila generate (no {side.name} next to it); "
            "choose another -o or remove the file"
        )
    if side.exists():
        try:
            old = json.loads(side.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as err:
            old = err
        if not isinstance(old, dict):
            raise ValueError(f"output: {side}, the record of how {out} was generated, is damaged or not destila's "
                             f"({old if isinstance(old, Exception) else 'a JSON ' + type(old).__name__}); move both "
                             "files away to start again, or choose another -o")
        differences = [f"{k}: {old.get(k)!r} before, {v!r} now" for k, v in record.items() if old.get(k) != v]
        if differences:
            raise ValueError(
                f"output: {out} was generated with other settings ({'; '.join(differences)}); run the same "
                "command to resume it, or choose another -o"
            )
        return
    with names_user_path(out):  # the user's output, not the sidecar's temporary
        write_atomic(side, json.dumps(record, indent=2))


def finished_prompts(out: Path, per_prompt: int, prompt_count: int | None = None) -> set[int]:
    """Indices of the prompts whose ``per_prompt`` lines are all in ``out``; cuts off anything after them.

    A kill can leave a half-written last line, or (in principle) only some of
    a prompt's samples; both are removed so that the rerun writes them whole.
    A whole line that this command cannot have written (not an answer of
    ours, a prompt index beyond ``prompt_count``, a sample written twice) is
    someone else's: refused, naming the line, never cut away or counted as answered.
    """
    if not out.exists():
        return set()
    data = out.read_bytes()
    good_end, done, pending, position, seen = 0, set(), {}, 0, set()
    for number, raw in enumerate(data.splitlines(keepends=True), start=1):
        position += len(raw)
        if not raw.endswith(b"\n"):
            break  # the half-written end of a batch: a kill
        index, sample = _answer_key(raw, per_prompt, prompt_count, seen)
        if index is None:
            raise ValueError(f"output: {out}, line {number}: {sample}; destila generate did not write it for these "
                             "prompts: remove the line, or choose another -o")
        seen.add((index, sample))
        pending.setdefault(index, set()).add(sample)
        if len(pending[index]) == per_prompt:
            done.add(index)
            del pending[index]
            if not pending:
                good_end = position
    if good_end < len(data):
        with open(out, "r+b") as handle:
            handle.truncate(good_end)
            os.fsync(handle.fileno())
        # Indices whose lines lay after the cut are no longer there.
        done = {int(json.loads(line)["prompt_index"]) for line in data[:good_end].splitlines()}
    return done


def _answer_key(raw: bytes, per_prompt: int, prompt_count: int | None, seen: set) -> tuple:
    """``(prompt_index, sample)`` of one whole output line, or ``(None, why it is not one of ours)``."""
    try:
        record = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None, "not a JSON object"
    if not isinstance(record, dict) or not isinstance(record.get("messages"), list):
        return None, "not an answer (no messages)"
    index, sample = record.get("prompt_index"), record.get("sample")
    if type(index) is not int or type(sample) is not int:
        return None, "an answer without an integer prompt_index and sample"
    if not 0 <= sample < per_prompt or index < 0 or (prompt_count is not None and index >= prompt_count):
        return None, f"prompt_index {index}, sample {sample}: outside these prompts and samples"
    if (index, sample) in seen:
        return None, f"prompt_index {index}, sample {sample} a second time"
    return index, sample


def generate(spec: GenerateSpec) -> GenerateReport:
    """Answer every prompt of ``spec.prompts`` with ``spec.teacher``; append conversations to ``spec.output``
    (JSON lines).

    ``prompts`` is anything :func:`destila.generation.prompts.load_prompts`
    accepts. Resumes an interrupted run of the same settings; the finished
    file does not depend on where (or whether) earlier runs were killed.
    """
    out = spec.output
    if out.is_dir():
        raise IsADirectoryError(f"output: {out} is a folder; expected a JSON-lines file to create or resume")
    items = load_prompts(spec.prompts, prompt_field=spec.prompt_field, messages_field=spec.messages_field)
    with output_lock(out, "generate"):  # two runs appending to one file would write every answer twice
        return _generate_locked(spec.teacher, items, out, spec.sampling, spec.gguf_file, spec.batch_size,
                                spec.device, spec.progress)


def _generate_locked(teacher, items, out: Path, spec: SamplingSpec, gguf_file, batch_size, device,
                     progress) -> GenerateReport:
    tokenizer = load_tokenizer(teacher, gguf_file)
    use_template = use_chat_template(tokenizer, items, spec.chat_template)
    path, gguf = resolve_source(teacher, gguf_file)
    _agree_with_sidecar(out, {
        "teacher": str(teacher), "teacher_path": path, "teacher_gguf_file": gguf,
        "prompts": len(items), "prompts_fingerprint": _fingerprint(items), "chat_template_applied": use_template,
        **asdict(spec),
    })
    done = finished_prompts(out, spec.num_return_sequences, len(items))
    todo = [i for i in range(len(items)) if i not in done]
    report = GenerateReport(out, len(items), len(done), 0, 0)
    if not todo:
        return report
    model = load_causal_lm(teacher, gguf_file=gguf_file, device=device)
    bar = progress_bar(len(items), initial=len(done), unit="prompt", desc="generate", show=progress)
    with names_user_path(out):  # a full disk: os.write names no file, the user's output is the one to name
        _write_answers(model, tokenizer, items, out, spec, use_template, batch_size, done, report, bar)
    return report


def _write_answers(model, tokenizer, items, out: Path, spec, use_template, batch_size, done, report, bar) -> None:
    from destila.generation.sampling import answer_batch  # heavy: transformers' generation

    descriptor = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        for start in range(0, len(items), batch_size):
            batch = list(range(start, min(start + batch_size, len(items))))
            missing = [i for i in batch if i not in done]
            if not missing:
                continue
            answers = answer_batch(model, tokenizer, [items[i] for i in batch], batch, spec, use_template)
            answers = [a for a in answers if a["prompt_index"] not in done]
            payload = json_lines(answers, ensure_ascii=False).encode()
            # One write per batch, then fsync: a kill leaves whole batches plus at most a cut-off tail.
            os.write(descriptor, payload)
            os.fsync(descriptor)
            report.written_prompts += len(missing)
            report.lines += len(answers)
            bar.update(len(missing))
    finally:
        os.close(descriptor)
        bar.close()


def use_chat_template(tokenizer, items: list[Prompt], choice: str) -> bool:
    has_template = bool(getattr(tokenizer, "chat_template", None))
    conversations = any(p.messages is not None for p in items)
    if (choice == "always" or conversations) and not has_template:
        raise ValueError(
            "prompts: conversations need the teacher tokenizer's chat template, and this tokenizer has none; "
            "give plain text prompts (continued as raw text), or a teacher whose tokenizer has a chat template"
        )
    if choice == "never" and conversations:
        raise ValueError("chat_template: 'never' applies to text prompts only, but the prompts hold conversations")
    return has_template and choice != "never"
