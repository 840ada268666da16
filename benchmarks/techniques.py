"""The techniques compared: KD alone, + hidden states, two-teacher mixture, generated data, progressive, self.

Every row distils the same kind of student (layers cut from the teacher) with
the same number of final training steps, on the same training documents
(every 5th document is held out), for each seed; every trained model is then
evaluated on the held-out documents against the teacher's full distribution
(``destila eval --teacher``). Every step is a ``destila`` command, recorded
beside the results, so any figure can be reproduced by hand.

    python benchmarks/techniques.py --out bench-techniques --steps 40 --seeds 0,1
    # -> bench-techniques/results.jsonl, results.md (the table for docs/techniques.md)

Rows (the student has ``--layers`` layers, the assistant ``--assistant-layers``):

- ``kd``: offline KD from the teacher's cache;
- ``kd+hidden``: the same plus ``--hidden_loss mse`` on the cut layers, from a
  cache that stores the teacher's layer outputs projected to ``--hidden-dim``;
- ``mixture``: KD from a cache of the 0.7/0.3 mixture of the teacher and the
  assistant (the assistant: the teacher's cut to ``--assistant-layers``,
  distilled from the teacher for ``--steps`` steps);
- ``generated+real``: KD from a cache of the training documents mixed with
  teacher-written answers to prompts taken from them (half the tokens each);
- ``progressive``: teacher → assistant → student, the student distilled from
  the assistant's cache;
- ``self``: the ``kd`` student distilled into a copy of itself from its own
  cache (so it has twice the steps in all: said in the table).

Beside the figures, each row's wall time: the seconds of every command it
needs, its preparation once (caches, assistant, generated data; a cache that
several rows share is counted in each) and its training for one seed.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from destila.io.json_lines import append_json_line, json_lines, read_json_lines, write_json_lines
from destila.io.markdown import markdown_table

ROWS = ("kd", "kd+hidden", "mixture", "generated+real", "progressive", "self")


def build_parser() -> argparse.ArgumentParser:
    """The command line this script reads (the commands shown in the docs are parsed with it by the tests)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="work folder (resumable: finished commands are skipped)")
    parser.add_argument("--teacher", default="smollm2")
    parser.add_argument("--data", default="pydoc")
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--assistant-layers", type=int, default=15)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--train-tokens", type=int, default=24576)
    parser.add_argument("--eval-tokens", type=int, default=8192)
    parser.add_argument("--top-k", type=int, default=100)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--hidden-dim", type=int, default=64)
    parser.add_argument("--hidden-weight", type=float, default=1.0)
    parser.add_argument("--prompts", type=int, default=48, help="prompts for the generated data")
    parser.add_argument("--new-tokens", type=int, default=128, help="tokens per generated answer")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--rows", default=",".join(ROWS))
    return parser


class Lab:
    """Runs ``destila`` commands once each (a marker file per finished command), logging them with timings."""

    def __init__(self, out: Path):
        self.out = out
        self.out.mkdir(parents=True, exist_ok=True)
        self.log = out / "commands.jsonl"

    def run(self, command: str, done: Path) -> float:
        """Run ``command`` unless ``done`` was made by an earlier run; its seconds (measured then or now)."""
        marker = done.with_name(done.name + ".done")
        if marker.exists():
            return float(marker.read_text())
        print(f"$ {command}", flush=True)
        start = time.monotonic()
        subprocess.run([sys.executable, "-m", "destila", *shlex.split(command)[1:]], check=True)
        seconds = time.monotonic() - start
        append_json_line(self.log, {"command": command, "seconds": round(seconds, 1)})
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(seconds))
        return seconds


def split_data(data: str, out: Path, prompts: int) -> None:
    """``train.jsonl`` / ``heldout.jsonl`` (every 5th document held out) and ``prompts.txt``."""
    from destila.data import load_texts

    texts = load_texts(data)
    train = [t for i, t in enumerate(texts) if i % 5 != 4]
    held = [t for i, t in enumerate(texts) if i % 5 == 4]
    for name, rows in (("train.jsonl", train), ("heldout.jsonl", held)):
        (out / name).write_text(json_lines({"text": t} for t in rows))
    # A prompt per training document: its first non-empty line, as a question about it.
    lines = [next((line.strip() for line in t.splitlines() if line.strip()), "") for t in train]
    picked = [f"Explain this Python documentation topic: {line[:120]}" for line in lines if line][:prompts]
    (out / "prompts.txt").write_text("\n".join(picked) + "\n")


def mix_generated(out: Path) -> None:
    """``mixed.jsonl``: generated answers and training documents interleaved (the cache caps the tokens)."""
    real = [r["text"] for r in read_json_lines(out / "train.jsonl")]
    generated = [r["text"] for r in read_json_lines(out / "generated.jsonl")]
    mixed = []
    for i in range(max(len(real), len(generated))):
        mixed += [t for t in (generated[i] if i < len(generated) else None, real[i] if i < len(real) else None) if t]
    (out / "mixed.jsonl").write_text(json_lines({"text": t} for t in mixed))


def main(argv: list[str] | None = None) -> None:
    a = build_parser().parse_args(argv)
    out = Path(a.out).resolve()
    lab = Lab(out)
    rows = a.rows.split(",")
    seeds = [int(s) for s in a.seeds.split(",")]
    if not (out / "train.jsonl").exists():
        split_data(a.data, out, a.prompts)
    t, w = a.teacher, out
    cache = f"--seq-len {a.seq_len} --max-tokens {a.train_tokens} --top-k {a.top_k}"
    # the KL alone (--hard_weight 0), as the table was measured: the techniques differ in their KL terms
    train = f"--max_steps {a.steps} --per_device_train_batch_size {a.batch_size} --save_strategy no --hard_weight 0"
    # seconds of the commands each row needs once (caches, assistant, generation) and per seed (training)
    prep = {row: 0.0 for row in rows}
    per_seed: dict[str, list[float]] = {row: [] for row in rows}

    def charge(seconds: float, *charged: str) -> None:
        for row in charged:
            if row in prep:
                prep[row] += seconds

    lab.run(f"destila student init {t} -o {w}/student --layers {a.layers}", w / "student")
    charge(lab.run(f"destila cache build {t} {w}/train.jsonl -o {w}/cache {cache}", w / "cache"),
           "kd", "mixture", "progressive", "self")
    needs_assistant = {"mixture", "progressive"} & set(rows)
    if needs_assistant:
        lab.run(f"destila student init {t} -o {w}/assistant-init --layers {a.assistant_layers}", w / "assistant-init")
        charge(lab.run(f"destila train {w}/assistant-init --cache {w}/cache -o {w}/assistant {train} --seed 0",
                       w / "assistant"), "mixture", "progressive")
    if "progressive" in rows:
        charge(lab.run(f"destila cache build {w}/assistant {w}/train.jsonl -o {w}/cache-assistant {cache}",
                       w / "cache-assistant"), "progressive")
        lab.run(f"destila student init {w}/assistant -o {w}/student-from-assistant --layers {a.layers}",
                w / "student-from-assistant")
    if "kd+hidden" in rows:
        from destila.student import evenly_spaced_layers
        from transformers import AutoConfig

        from destila.models import resolve_source

        total = AutoConfig.from_pretrained(resolve_source(t)[0]).num_hidden_layers
        kept = ",".join(map(str, evenly_spaced_layers(total, a.layers)))
        charge(lab.run(f"destila cache build {t} {w}/train.jsonl -o {w}/cache-hidden {cache} --hidden-layers {kept} "
                       f"--hidden-dim {a.hidden_dim}", w / "cache-hidden"), "kd+hidden")
    if "mixture" in rows:
        charge(lab.run(f"destila cache build {t} {w}/assistant {w}/train.jsonl -o {w}/cache-mixture {cache} "
                       "--teacher-weights 0.7,0.3", w / "cache-mixture"), "mixture")
    if "generated+real" in rows:
        charge(lab.run(f"destila generate {t} {w}/prompts.txt -o {w}/generated.jsonl --max-new-tokens {a.new_tokens} "
                       "--temperature 0.7 --top-p 0.9 --seed 0", w / "generated"), "generated+real")
        mix_generated(out)
        charge(lab.run(f"destila cache build {t} {w}/mixed.jsonl -o {w}/cache-generated {cache}",
                       w / "cache-generated"), "generated+real")

    trained: dict[str, list[str]] = {row: [] for row in rows}
    for seed in seeds:
        s = f"--seed {seed}"
        runs = {
            "kd": f"destila train {w}/student --cache {w}/cache -o {w}/kd-{seed} {train} {s}",
            "kd+hidden": f"destila train {w}/student --cache {w}/cache-hidden -o {w}/hidden-{seed} {train} {s} "
                         f"--hidden_loss mse --hidden_weight {a.hidden_weight}",
            "mixture": f"destila train {w}/student --cache {w}/cache-mixture -o {w}/mixture-{seed} {train} {s}",
            "generated+real": f"destila train {w}/student --cache {w}/cache-generated -o {w}/generated-{seed} {train} {s}",
            "progressive": f"destila train {w}/student-from-assistant --cache {w}/cache-assistant "
                           f"-o {w}/progressive-{seed} {train} {s}",
        }
        for row, command in runs.items():
            if row in rows:
                per_seed[row].append(lab.run(command, w / command.split(" -o ")[1].split()[0]))
                trained[row].append(command.split(" -o ")[1].split()[0])
        if "self" in rows:
            seconds = lab.run(f"destila train {w}/student --cache {w}/cache -o {w}/kd-{seed} {train} {s}",
                              w / f"kd-{seed}")
            seconds += lab.run(f"destila cache build {w}/kd-{seed} {w}/train.jsonl -o {w}/cache-kd-{seed} {cache}",
                               w / f"cache-kd-{seed}")
            lab.run(f"destila student init {w}/kd-{seed} -o {w}/self-init-{seed} --layers {a.layers}",
                    w / f"self-init-{seed}")
            seconds += lab.run(f"destila train {w}/self-init-{seed} --cache {w}/cache-kd-{seed} -o {w}/self-{seed} "
                               f"{train} {s}", w / f"self-{seed}")
            per_seed["self"].append(seconds)
            trained["self"].append(f"{w}/self-{seed}")
    steps = {row: a.steps * (2 if row == "self" else 1) for row in rows}
    wall = {row: prep[row] + statistics.fmean(per_seed[row]) for row in rows}
    evaluate(lab, a, out, trained, steps, wall)


def evaluate(lab: Lab, a, out: Path, trained: dict[str, list[str]], steps: dict[str, int],
             wall: dict[str, float]) -> None:
    """Every row's models on the held-out documents; ``results.jsonl`` and the table ``results.md``.

    ``steps``: the optimizer steps behind a row's final student (self-distillation's are its own plus
    the KD student's); ``wall``: the seconds of every command a row needs, its shared preparation
    (caches, assistant, generation) once and its training for one seed.
    """
    results, table = {}, []
    for row, models in trained.items():
        path = out / f"eval-{row.replace('+', '-')}.json"
        lab.run(f"destila eval {' '.join(models)} --data {out}/heldout.jsonl --seq-len {a.seq_len} "
                f"--max-tokens {a.eval_tokens} --teacher {a.teacher} --new-tokens 8 --json {path}", path)
        results[row] = json.loads(path.read_text())
    write_json_lines(out / "results.jsonl", ({"row": row, "steps": steps[row], "wall_seconds": round(wall[row], 1),
                                              "runs": runs, "command": shlex.join(sys.argv)}
                                             for row, runs in results.items()))
    for row, runs in results.items():
        def spread(key, scale=1.0, digits=3):
            values = [r[key] * scale for r in runs]
            mean = statistics.fmean(values)
            dev = statistics.stdev(values) if len(values) > 1 else 0.0
            return f"{mean:.{digits}f} ± {dev:.{digits}f}"
        # With --teacher, eval's kl_to_teacher and top1_agreement are over the full vocabulary.
        table.append((row, spread("kl_to_teacher"), spread("perplexity", digits=1),
                      f"{spread('top1_agreement', 100, 1)}%", steps[row], f"{wall[row]:.0f}", len(runs)))
    text = markdown_table(["technique", "held-out full KL to the teacher", "perplexity", "top-1 agreement", "steps",
                           "wall (s)", "seeds"], table)
    (out / "results.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
