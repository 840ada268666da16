"""Write the measured tables of the docs from the files in benchmarks/results/.

Every table of figures in docs/benchmarks.md (and the demo table of README.md)
sits between two markers and is produced here from a results file, never
typed by hand:

    <!-- table:loss-cpu -->
    ...generated...
    <!-- /table:loss-cpu -->

    python benchmarks/make_docs.py           # rewrite the tables in place
    python benchmarks/make_docs.py --check   # exit 1 if a doc is not up to date

Adding a table for a new results file takes a function and a marker pair:

    @table("cache-pass", "cache_pass.json")            # name, results file(s)
    def cache_pass(result: dict) -> str:               # one argument per file
        return render_rows(["seq-len", "tok/s"], [[r["seq_len"], r["tps"]] for r in result["rows"]])

then put ``<!-- table:cache-pass -->`` and ``<!-- /table:cache-pass -->`` in
the doc (``doc=`` names another file than docs/benchmarks.md). ``.json`` files
are passed parsed, ``.jsonl`` as a list of records, anything else as text. A
source with a ``*`` is a pattern: its renderer gets a list of ``(path, parsed)``
for the files that match, possibly none (results that a GPU run adds, one
folder per card). A marker without a registered table, or a registered table
without its markers, is an error, so the two cannot drift apart.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from destila.io.json_lines import read_json_lines
from destila.io.markdown import markdown_table

ROOT = Path(__file__).resolve().parent.parent
RESULTS = "benchmarks/results"
GIB = 2 ** 30


@dataclass(frozen=True)
class Table:
    """A generated table: its marker name, the doc it lives in, its results files and its renderer."""

    name: str
    doc: str
    sources: tuple[str, ...]
    render: Callable[..., str]


TABLES: dict[str, Table] = {}


def table(name: str, *sources: str, doc: str = "docs/benchmarks.md") -> Callable:
    """Register ``render(*parsed_sources) -> markdown`` as the table ``name`` of ``doc``."""
    def register(render: Callable[..., str]) -> Callable[..., str]:
        if name in TABLES:
            raise ValueError(f"table {name!r} is registered twice")
        TABLES[name] = Table(name, doc, sources, render)
        return render
    return register


# ---------------------------------------------------------------- helpers

def load(path: Path) -> Any:
    """A results file: ``.json`` parsed, ``.jsonl`` as a list of records, other files as text."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return json.loads(text)
    if path.suffix == ".jsonl":
        return read_json_lines(path)
    return text


def render_rows(header: list[str], rows: list[list[Any]], align: str | None = None) -> str:
    """A markdown table; ``align`` is one character per column, ``l`` or ``r`` (default: first left, rest right).
    The docs' tables keep their spaced rule line (``| --- | ---: |``)."""
    return markdown_table(header, rows, align, spaced_rule=True)


def gib(value: float | None) -> str:
    return "–" if value is None else f"{value / GIB:.2f} GiB"


def machine_line(machine: dict) -> str:
    """One line naming the machine and software that produced a result, from its recorded fields."""
    parts = [machine.get("cpu") or "?", f"{machine.get('cores', '?')} cores"]
    if machine.get("ram_bytes"):
        parts.append(f"{machine['ram_bytes'] / GIB:.0f} GiB RAM")
    if machine.get("gpu"):
        parts.append(str(machine["gpu"]))
    parts.append(f"torch {machine.get('torch', '?')}")
    if machine.get("threads"):
        parts.append(f"{machine['threads']} threads")
    return f"Machine: {', '.join(parts)}."


def command_block(command: str) -> str:
    return f"```bash\n{command}\n```"


def peers_command(recorded: str) -> str:
    """The command that reproduces a peer run today: ``destila bench loss|e2e --peers [LIST] …`` (the peers'
    rows used to be a flag of the package's own benchmark) is ``python -m benchmarks.peers loss|e2e [--peers LIST] …``."""
    words = shlex.split(recorded)
    if words[:2] != ["destila", "bench"] or "--peers" not in words:
        return recorded
    at = words.index("--peers")
    listed = at + 1 < len(words) and not words[at + 1].startswith("-")
    rest = words[2:at] + (words[at:at + 2] if listed else []) + words[at + (2 if listed else 1):]
    return shlex.join(["python", "-m", "benchmarks.peers", *rest])


# ---------------------------------------------------------------- tables

def _fused_against_floor(records: list[dict]) -> list[list]:
    """Each fused row of a loss sweep: its runs and the floor's, timed in the same process, and their ratio."""
    return [[r["seq_len"], ", ".join(f"{t:.2f}" for t in r["times"]), ", ".join(f"{t:.2f}" for t in r["floor_times"]),
             f"{r['seconds']:.2f}", f"{r['floor_seconds']:.2f}", f"**{r['ratio_to_floor']:.3f}**"]
            for r in records if r["impl"] == "fused" and r["status"] == "ok"]


FLOOR_HEADER = ["N", "fused runs (s)", "floor runs (s)", "fused median", "floor median", "fused / floor"]


QUIET_RUNS = ("run1", "run2", "run3")


@table("loss-cpu-quiet", *(f"loss_cpu_quiet_check/{run}.jsonl" for run in QUIET_RUNS))
def loss_cpu_quiet(*runs: list[dict]) -> str:
    """`destila bench loss --impls fused --seq-lens 8K,16K --repeats 3` on quiet cores, every run of the same code."""
    rows = [[name, *row] for name, records in zip(QUIET_RUNS, runs) for row in _fused_against_floor(records)]
    return "\n\n".join([machine_line(runs[0][0]) + " Load: nothing else running.",
                         render_rows(["run", *FLOOR_HEADER], rows, "ll" + "r" * len(FLOOR_HEADER[1:]))])


@table("loss-cpu-busy", "loss_cpu_busy_neighbour/before.jsonl", "loss_cpu_busy_neighbour/now.jsonl")
def loss_cpu_busy(before: list[dict], now: list[dict]) -> str:
    """The same fused row beside one busy neighbour process: the blocked first pass, and today's code."""
    rows = [[label, *row] for label, records in (("blocked first pass", before), ("now", now))
            for row in _fused_against_floor(records)]
    return "\n\n".join([machine_line(now[0]) + " Load: one busy neighbour process (2 cores, 3 runnable threads).",
                         render_rows(["code", *FLOOR_HEADER], rows, "ll" + "r" * len(FLOOR_HEADER[1:]))])


@table("loss-cpu", "loss_cpu.jsonl")
def loss_cpu(records: list[dict]) -> str:
    """`destila bench loss` on CPU: peak memory and time of each impl, with the floor timed in the same process."""
    by = {(r["impl"], r["seq_len"]): r for r in records}
    first = records[0]

    def peak(r: dict) -> str:
        if r["status"] == "ok":
            return f"{r['peak_bytes'] / GIB:.2f}"
        predicted = f" (predicted {r['predicted_bytes'] / GIB:.1f} GiB)" if r.get("predicted_bytes") else ""
        return r["status"] + predicted

    def seconds(r: dict) -> str:
        return f"{r['seconds']:.2f}" if r["status"] == "ok" else r["status"]

    def ratio(a: float | None, b: float | None, digits: int) -> str:
        return f"{a / b:.{digits}f}" if a and b else "–"

    rows = []
    for n in sorted({r["seq_len"] for r in records}):
        fused, chunked, dense = by[("fused", n)], by[("chunked", n)], by[("dense", n)]
        ok = {name: r for name, r in (("fused", fused), ("dense", dense)) if r["status"] == "ok"}
        rows.append([
            n, peak(fused), peak(chunked), peak(dense),
            seconds(fused), f"{fused['floor_seconds']:.2f}" if fused["status"] == "ok" else "–",
            seconds(chunked), seconds(dense),
            ratio(fused["seconds"], fused.get("floor_seconds"), 3),
            ratio(ok.get("fused", {}).get("seconds"), ok.get("dense", {}).get("seconds"), 2),
            ratio(ok.get("dense", {}).get("peak_bytes"), ok.get("fused", {}).get("peak_bytes"), 1),
        ])
    header = ["N", "fused peak GiB", "chunked peak GiB", "dense peak GiB", "fused s", "floor s (same process)",
              "chunked s", "dense s", "fused / floor", "fused / dense (time)", "dense / fused (memory)"]
    settings = (f"{first['dtype']}, H {first['hidden']}, V {first['vocab']}, K {first['top_k']}, "
                f"chunk {first['chunk_size']}, device {first['device']}.")
    # Growth of the fused peak with N against the growth of its O(N·(H+K)) inputs and gradients:
    # a term in N·V would show as one float32 N·V array per step.
    fused_ns = sorted(n for (impl, n), r in by.items() if impl == "fused" and r["status"] == "ok")
    growth = []
    for start in sorted({fused_ns[0], 4096} & set(fused_ns[:-1])):
        lo, hi = by[("fused", start)], by[("fused", fused_ns[-1])]
        per_nv = (hi["seq_len"] - lo["seq_len"]) * lo["vocab"] * 4
        growth.append(f"Fused peak from N = {start} to {fused_ns[-1]}: "
                      f"+{(hi['peak_bytes'] - lo['peak_bytes']) / 2**20:.1f} MiB, while its inputs and gradients "
                      f"grow by +{(hi['input_bytes'] - lo['input_bytes']) / 2**20:.1f} MiB; one float32 N·V array "
                      f"would add {per_nv / 2**20:.0f} MiB.")
    return "\n\n".join([command_block(first["command"]), machine_line(first) + " " + settings,
                        render_rows(header, rows), " ".join(growth)])


@table("e2e-cpu", "e2e_cpu.json")
def e2e_cpu(result: dict) -> str:
    """`destila bench e2e`: the paper's table (online vs offline dense / chunked / fused)."""
    names = {"online": "online (teacher every step, full-vocabulary KL)", "dense": "offline dense",
             "chunked": "offline forward-chunked", "fused": "offline fused"}
    rows = []
    for r in result["rows"]:
        if r["status"] != "ok":
            rows.append([names.get(r["method"], r["method"]), r["status"]] + ["–"] * 6)
            continue
        delta = "–" if r["method"] == "online" else f"{r['loss_diff_vs_online']:+.4f}"
        rows.append([names.get(r["method"], r["method"]), gib(r["peak_bytes"]), f"{r['step_seconds']:.2f} s",
                     f"{r['tokens_per_second']:.0f}", f"{r['final_loss']:.6f}", delta,
                     f"{r['memory_vs_online']:.2f}", f"{r['time_vs_online']:.2f}"])
    header = ["method", "peak memory (above baseline)", "step time", "tokens/s", "final loss", "Δ loss vs online",
              "memory vs online", "time vs online"]
    config, cache = result["config"], result["cache"]
    settings = (f"Teacher `{config['teacher']}`, student: {config['student'] or str(config['student_layers']) + '-layer cut'}"
                f", data `{config['data']}`, seq-len {config['seq_len']}, batch {config['batch_size']}, "
                f"{config['steps']} steps ({config['warmup_steps']} warm-up), learning rate {config['learning_rate']}, "
                f"K = {config['top_k']}, seed {config['seed']}, {config['device']} {config['dtype']}.")
    cache_line = (f"Cache build (one-time): {cache['seconds']:.1f} s for {cache['tokens']:,} tokens "
                  f"({cache['teacher_tokens_per_second']:.0f} tokens/s), peak {gib(cache['peak_bytes'])}; "
                  f"it pays for itself after {result['break_even_runs']:.2f} runs of these {config['steps']} steps.")
    offline = [r["final_loss"] for r in result["rows"] if r["status"] == "ok" and r["method"] != "online"]
    spread = (f" The offline methods' final losses agree to {(max(offline) - min(offline)) / min(offline):.0e} "
              "relative." if len(offline) > 1 else "")
    return "\n\n".join([command_block(result["machine"]["command"]), machine_line(result["machine"]) + " " + settings,
                        render_rows(header, rows), cache_line + spread])


@table("loss-gpu", "gpu-check/loss_32k.jsonl", "gpu-check/loss_256k.jsonl", doc="docs/gpu.md")
def loss_gpu(*sweeps: list[dict]) -> str:
    """`destila bench loss` as `benchmarks/gpu/check.sh` runs it: each impl's peak and time against the floor."""
    records = [r for sweep in sweeps for r in sweep]
    first = records[0]
    rows = [[r["seq_len"], r["impl"], r["status"],
             f"{r['peak_bytes'] / GIB:.2f}" if r["status"] == "ok" else "–",
             f"{r['seconds']:.3f}" if r["status"] == "ok" else "–",
             f"{r['seconds'] / r['floor_seconds']:.2f}" if r["status"] == "ok" and r["impl"] != "floor" else "–"]
            for r in records]
    by = {(r["impl"], r["seq_len"]): r for r in records if r["status"] == "ok"}
    notes = []
    for n in sorted({r["seq_len"] for r in records}):
        fused, dense = by.get(("fused", n)), by.get(("dense", n))
        if fused and dense:
            notes.append(f"At N = {n:,}: dense / fused memory {dense['peak_bytes'] / fused['peak_bytes']:.1f}, "
                         f"fused / dense time {fused['seconds'] / dense['seconds']:.2f}.")
    settings = (f"{first['dtype']}, H {first['hidden']}, V {first['vocab']}, K {first['top_k']}, "
                f"chunk {first['chunk_size']}; each impl's floor is timed in its own process; times are the median of "
                "3.")
    return "\n\n".join([machine_line(first) + " " + settings,
                         render_rows(["N", "impl", "status", "peak GiB", "seconds", "× floor"], rows),
                         " ".join(notes)])


@table("e2e-gpu", "gpu-check/e2e_8k.json", doc="docs/gpu.md")
def e2e_gpu(result: dict) -> str:
    """`destila bench e2e` at 8K as `benchmarks/gpu/check.sh` runs it (the command names temporary folders)."""
    config = {**result["config"], "teacher": "1B-class random Llama (16 layers)", "student": "2-layer cut (layers 0, 15)"}
    return e2e_cpu({**result, "config": config}).split("\n\n", 1)[1]


@table("student-quality", "student_quality.jsonl")
def student_quality(records: list[dict]) -> str:
    """`benchmarks/student_quality.py table`: each row and budget over its seeds, then the data-efficiency lines."""
    if str(ROOT) not in sys.path:  # run as a script, only benchmarks/ itself is on the path
        sys.path.insert(0, str(ROOT))
    from benchmarks.student_quality import table as quality_table

    return quality_table(records)


@table("student-quality-long", "student_quality_long.jsonl")
def student_quality_long(records: list[dict]) -> str:
    return student_quality(records)


@table("student-quality-epochs", "student_quality_epochs.jsonl")
def student_quality_epochs(records: list[dict]) -> str:
    return student_quality(records)


@table("student-quality-fresh", "student_quality_fresh.jsonl")
def student_quality_fresh(records: list[dict]) -> str:
    """`benchmarks/student_quality.py table` on the fresh-token runs: rows, budgets, data efficiency."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks.quality_fresh import fresh_table

    return fresh_table(records)

@table("student-quality-fresh-task", "student_quality_fresh_task.jsonl")
def student_quality_fresh_task(records: list[dict]) -> str:
    """`benchmarks/student_quality.py fresh-task`: the 600-question tasks on each row's final students."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks.quality_fresh import task_table

    return task_table(records)


@table("e2e-long-context-cpu", "e2e_long_context_cpu.json")
def e2e_long_context_cpu(result: dict) -> str:
    """`destila bench e2e --long-context`: one training step per loss and length under a memory budget."""
    impls = ["dense", "chunked", "fused"]
    by = {(r["impl"], r["seq_len"]): r for r in result["rows"]}
    lengths = sorted({r["seq_len"] for r in result["rows"]})

    def cell(r: dict | None) -> str:
        if r is None or r["status"] == "skipped":
            return "–"
        if r["status"] == "ok":
            return f"{gib(r['peak_bytes'])}, {r['seconds']:.1f} s"
        return f"**{r['status']}** ({r['error']})"

    rows = [[f"{n:,}"] + [cell(by.get((impl, n))) for impl in impls] for n in lengths]
    longest, fit = [], {}
    for impl in impls:
        fits = [n for n in lengths if by.get((impl, n), {}).get("status") == "ok"]
        fit[impl] = max(fits) if fits else None
        longest.append(f"{impl} {max(fits):,}" if fits else f"{impl} none")
    if fit["dense"] and fit["fused"]:
        longest[-1] += f" (fused reaches {fit['fused'] / fit['dense']:g} × dense's longest"
        longest[-1] += ", the longest length tried)" if fit["fused"] == lengths[-1] else ")"
    budget = result["rows"][0]["memory_budget"]
    return "\n\n".join([
        command_block(result["machine"]["command"]), machine_line(result["machine"]) +
        f" Memory budget {gib(budget)} above the process baseline.",
        render_rows(["tokens", "dense", "forward-chunked", "fused"], rows),
        "Longest sequence that fits: " + ", ".join(longest) + " tokens."])


@table("offline-vs-online", "offline_vs_online_eval.json", "offline_vs_online_offline_log.jsonl",
       "offline_vs_online_online_log.jsonl", "offline_vs_online.txt")
def offline_vs_online(evaluation: list[dict], offline_log: list[dict], online_log: list[dict], console: str) -> str:
    """benchmarks/offline_vs_online.sh: held-out quality, step time and peak RSS of offline fused vs online dense."""
    def median_step(log: list[dict]) -> float:
        # The script's own definition: median gap between consecutive per-step records.
        times = [r["time"] for r in log if "loss" in r]
        return statistics.median(b - a for a, b in zip(times, times[1:]))

    timed = {m.group(1): (int(m.group(2)) * 1024, float(m.group(3)))
             for m in re.finditer(r"^(offline|online): max_rss_kib (\d+) wall_s ([\d.]+)$", console, re.M)}
    off, on = evaluation
    off_step, on_step = median_step(offline_log), median_step(online_log)
    (off_rss, off_wall), (on_rss, on_wall) = timed["offline"], timed["online"]
    steps = sum(1 for r in offline_log if "loss" in r)
    rows = [
        ["held-out KL to the teacher, full vocabulary (nats/token)", f"{off['kl_to_teacher']:.4f}",
         f"{on['kl_to_teacher']:.4f}", f"{off['kl_to_teacher'] / on['kl_to_teacher']:.4f}"],
        ["held-out top-1 agreement with the teacher", f"{off['top1_agreement']:.1%}", f"{on['top1_agreement']:.1%}", ""],
        ["held-out perplexity", f"{off['perplexity']:.1f}", f"{on['perplexity']:.1f}", ""],
        ["median step time (s)", f"{off_step:.2f}", f"{on_step:.2f}", f"{off_step / on_step:.2f}"],
        ["peak memory: max RSS of the training process (GiB)", f"{off_rss / GIB:.2f}", f"{on_rss / GIB:.2f}",
         f"{off_rss / on_rss:.2f}"],
        [f"wall time of the {steps}-step run, loading and saving included (s)", f"{off_wall:.0f}", f"{on_wall:.0f}",
         f"{off_wall / on_wall:.2f}"],
    ]
    return render_rows(["", "offline fused (cache)", "online dense", "offline / online"], rows)


@table("loss-peers-cpu", "loss_peers_cpu.jsonl", "loss_peers_cpu_load.txt", "loss_peers_16k_cpu.jsonl",
       "loss_peers_16k_cpu_load.txt")
def loss_peers_cpu(records: list[dict], load: str, records_16k: list[dict], load_16k: str) -> str:
    """`python -m benchmarks.peers loss`: the 8K + 16K sweep, then 16K again for the peers it skipped by the
    budget estimate (each run with its own fused row: every ratio is within one run)."""
    return "\n\n".join([_peers_sweep(records, load), "The peers skipped at 16K above, measured in a second run "
                         "(with its own floor and fused rows):", _peers_sweep(records_16k, load_16k)])


def _peers_sweep(records: list[dict], load: str) -> str:
    """One `python -m benchmarks.peers loss` run: every row beside destila fused at the same N."""
    fused = {r["seq_len"]: r for r in records if r["impl"] == "fused" and r["status"] == "ok"}
    rows = []
    for r in records:
        if r["impl"] == "floor":
            continue
        base = fused.get(r["seq_len"])
        ran = r["status"] == "ok" and base is not None
        over_floor = ran and r.get("ratio_to_floor") and base.get("ratio_to_floor")
        rows.append([
            r["seq_len"], r.get("peer") or r["impl"], r.get("inputs") or "", r.get("divergence") or "",
            f"{r['peak_bytes'] / GIB:.2f}" if r["status"] == "ok" else f"{r['status']}: {r['error']}",
            f"{r['peak_bytes'] / base['peak_bytes']:.1f}" if ran else "–",
            f"{r['seconds']:.1f}" if r["status"] == "ok" else "–",
            f"{r['ratio_to_floor']:.2f}" if r["status"] == "ok" else "–",
            f"{r['ratio_to_floor'] / base['ratio_to_floor']:.2f}" if over_floor else "–",
        ])
    header = ["N", "loss (package: what is called)", "teacher input it needs (built and counted)", "divergence",
              "peak GiB", "memory ÷ fused", "fwd+bwd s", "÷ floor (same process)", "÷ fused's (time)"]
    first = records[0]
    settings = (f"{first['dtype']}, H {first['hidden']}, V {first['vocab']}, K {first['top_k']}, "
                f"chunk {first['chunk_size']} rows, device {first['device']}.")
    return "\n\n".join([command_block(peers_command(first["command"])), machine_line(first) + " " + settings,
                        render_rows(header, rows, align="llll" + "r" * 5),
                        "Machine load (`uptime`) at the start and the end of the sweep:\n\n"
                        + f"```text\n{load.strip()}\n```"])


@table("e2e-peers-cpu", "e2e_peers_cpu.json", "e2e_peers_cpu_load.txt")
def e2e_peers_cpu(result: dict, load: str) -> str:
    """`python -m benchmarks.peers e2e`: TRL's GKD trainer beside destila online and offline fused, held-out full KL."""
    names = {"online": "destila online (teacher every step, full-vocabulary KL)",
             "fused": "destila offline fused (top-K cache)"}
    rows = []
    for r in result["rows"]:
        name = r.get("trainer") or names.get(r["method"], r["method"])
        if r["status"] != "ok":
            rows.append([name, f"{r['status']}: {r['error']}"] + ["–"] * 6)
            continue
        kl_gap = r.get("heldout_kl_vs_trl-gkd")
        rows.append([name, gib(r["peak_bytes"]), f"{r['step_seconds']:.1f} s",
                     f"{r['heldout_kl']:.4f}" if r.get("heldout_kl") is not None else r.get("heldout_error", "–"),
                     f"{r['memory_vs_trl-gkd']:.2f}" if r.get("memory_vs_trl-gkd") else "–",
                     f"{r['time_vs_trl-gkd']:.2f}" if r.get("time_vs_trl-gkd") else "–",
                     f"{100 * kl_gap:+.2f}%" if kl_gap is not None else "–",
                     " ".join(f"{x:.4f}" for x in r["losses"])])
    header = ["trainer", "peak memory (above baseline)", "step time (median)", "held-out full KL (nats/token)",
              "memory ÷ TRL", "time ÷ TRL", "held-out KL vs TRL", "training loss per step"]
    config = result["config"]
    settings = (f"Teacher `{config['teacher']}`, student: "
                f"{config['student'] or str(config['student_layers']) + '-layer cut'}, data `{config['data']}`, "
                f"seq-len {config['seq_len']}, batch {config['batch_size']}, {config['steps']} steps "
                f"({config['warmup_steps']} warm-up, not in the median), learning rate {config['learning_rate']}, "
                f"seed {config['seed']}, {config['device']} {config['dtype']}; held-out KL over the "
                f"{result['heldout_tokens']:,} tokens after the trained ones.")
    return "\n\n".join([command_block(peers_command(result["machine"]["command"])),
                        machine_line(result["machine"]) + " " + settings,
                        render_rows(header, rows, align="l" + "r" * 7),
                        "Machine load (`uptime`) at the start and the end of the run:\n\n"
                        + f"```text\n{load.strip()}\n```"])


@table("targets-caches", "targets_caches.jsonl")
def targets_caches(records: list[dict]) -> str:
    """benchmarks/targets_compare.py caches: bytes, build time, reader speed and decode KL of each target cache."""
    latest = {r["config"]: r for r in records if r.get("stage") == "caches"}  # a rerun replaces a config's record
    fp16 = latest.get("topk100-plain-fp16")
    rows = []
    for name, r in latest.items():
        kind = r["targets"]
        targets = f"top-{kind['top_k']}" if kind["kind"] == "topk" else f"sampled S = {kind['samples']}"
        dtype = f" {r['logprob_dtype']}" if r["encoding"] == "plain" and kind["kind"] == "topk" else ""
        share = f"{r['bytes_per_token'] / fp16['bytes_per_token']:.3f}" if fp16 else "–"
        kl = (f"{r['decode_kl_mean']:.2e} / {r['decode_kl_max']:.2e}" if "decode_kl_mean" in r
              else ("reference" if name.endswith("fp32") else "–"))
        rows.append([f"{targets}, {r['encoding']}{dtype}", f"{r['bytes_per_token']:.1f}", f"{r['bytes_per_entry']:.3f}",
                     share, f"{r['build_seconds']:.0f}", f"{r['reader_tokens_per_s']:,}", kl])
    first = next(iter(latest.values()))
    header = ["targets, encoding", "bytes / token", "bytes / entry", "of plain fp16", "build (s)",
              "reader (tok/s)", "decode KL mean / max (nats)"]
    commands = list(dict.fromkeys("python " + r["command"] for r in latest.values()))
    return (render_rows(header, rows) + f"\n\n{first['tokens']:,} tokens of `{first['data']}` "
            f"(seq-len {first['seq_len']}), teacher `{first['teacher']}`; {first['cpus']} CPUs, torch {first['torch']}, "
            f"{first['torch_threads']} thread. The runs that made these records:\n\n"
            + command_block("\n".join(commands)))


@table("targets-students", "targets_students.jsonl", "targets_caches.jsonl")
def targets_students(records: list[dict], cache_records: list[dict]) -> str:
    """benchmarks/targets_compare.py students: each student's held-out quality and step time, beside its cache."""
    latest = {r["config"]: r for r in records if r.get("stage") == "students"}
    caches = {r["config"]: r for r in cache_records if r.get("stage") == "caches"}
    online = latest.get("online")
    rows = []
    for name, r in latest.items():
        cache = caches.get(name)
        ratio = f"{r['heldout_kl_to_teacher'] / online['heldout_kl_to_teacher']:.4f}" if online else "–"
        rows.append([name, f"{cache['bytes_per_token']:.1f}" if cache else "–",
                     f"{cache['build_seconds']:.0f}" if cache else "–", f"{r['step_seconds_median']:.2f}",
                     f"{r['heldout_kl_to_teacher']:.4f}", ratio, f"{r['heldout_perplexity']:.1f}",
                     f"{100 * r['heldout_top1_agreement']:.1f}%"])
    first = next(iter(latest.values()))
    header = ["student trained from", "cache bytes / token", "cache build (s)", "median step (s)",
              "held-out KL to the teacher (nats/token)", "of online", "held-out perplexity", "top-1 agreement"]
    return (render_rows(header, rows) + f"\n\n{first['student_layers']}-layer student cut from the teacher, "
            f"{first['steps']} steps of {first['train_batch_size']} × {first['seq_len']} tokens, learning rate "
            f"{first['learning_rate']}, seed 0; {first['heldout_tokens']:,} held-out tokens; {first['cpus']} CPUs, "
            f"torch {first['torch']}, {first['torch_threads']} threads. Every student reads the same "
            f"{first.get('train_tokens', 0):,} cached tokens in the same order; online, the teacher runs on every batch "
            "over the full vocabulary (no cache). The runs that made these records:\n\n"
            + command_block("\n".join(dict.fromkeys("python " + r["command"] for r in latest.values()))))


@table("techniques", "techniques/results.jsonl", doc="docs/techniques.md")
def techniques(rows: list[dict]) -> str:
    """benchmarks/techniques.py: held-out quality of each technique's student, mean ± standard deviation over seeds."""
    def spread(runs: list[dict], key: str, scale: float = 1.0, digits: int = 3) -> str:
        values = [r[key] * scale for r in runs]
        deviation = statistics.stdev(values) if len(values) > 1 else 0.0
        return f"{statistics.fmean(values):.{digits}f} ± {deviation:.{digits}f}"

    table = [[r["row"], spread(r["runs"], "kl_to_teacher"), spread(r["runs"], "perplexity", digits=1),
              spread(r["runs"], "top1_agreement", 100, 1) + "%", str(r["steps"]), f"{r['wall_seconds'] / 60:.1f}",
              str(len(r["runs"]))] for r in rows]
    header = ["technique", "held-out KL to the teacher (nats/token)", "perplexity", "top-1 agreement (%)",
              "steps", "wall (min)", "seeds"]
    first = rows[0]["runs"][0]
    return (render_rows(header, table) + f"\n\nMean ± standard deviation over the seeds; {first['tokens']:,} "
            "held-out tokens, full-vocabulary KL and agreement against the teacher (`destila eval --teacher`). "
            "Wall: every command the row needs, its preparation once and its training for one seed, on 2 CPU "
            "cores. The run (each `destila` command it ran, with its seconds, is in "
            f"`{RESULTS}/techniques/commands.jsonl`):\n\n" + command_block("python " + rows[0]["command"]))


@table("draft-models", "draft_models.jsonl", "draft_models_costs.json", doc="docs/draft.md")
def draft_models(records: list[dict], costs: dict) -> str:
    """`benchmarks/draft_models.py`: every draft's acceptance and speedup over its seeds, and what a step costs."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks.draft_models import costs_line, table as draft_table

    loads = [r["load_average_start"] for r in records] + [r["load_average_end"] for r in records]
    prompts, tokens = records[0]["prompts"], records[0]["max_new_tokens"]
    return (draft_table(records) + "\n\nproposals: tokens proposed before every teacher forward (adaptive: "
            "transformers' default schedule); products: `timed`, each small CPU product the faster of two ways, "
            "chosen once for every row, or `torch`, torch's own. "
            "decoding: greedy (the text must be the teacher's own), or speculative sampling at temperature T "
            "(distributed as the teacher's; seeded, so no identity is checked). "
            f"{prompts} held-out prompts, at most {tokens} new tokens each, "
            f"{records[0]['threads']} threads; load average during the measurement {min(loads):.2f} to "
            f"{max(loads):.2f}. " + costs_line(costs) + "\n\n" + command_block(
                "python benchmarks/draft_models.py train WORK\n"
                "python benchmarks/draft_models.py measure WORK --out benchmarks/results/draft_models.jsonl"))


def _draft_agreement():
    """``benchmarks/draft_agreement.py`` as a module: its tables are rendered by its own functions."""
    if str(ROOT) not in sys.path:  # run as a script, only benchmarks/ itself is on the path
        sys.path.insert(0, str(ROOT))
    import benchmarks.draft_agreement

    return benchmarks.draft_agreement


@table("draft-agreement", "draft_agreement.jsonl", doc="docs/draft.md")
def draft_agreement(records: list[dict]) -> str:
    """`benchmarks/draft_agreement.py`: each draft's acceptance estimated on more prompts, without timing."""
    first = records[0]
    return (_draft_agreement().table(records) + f"\n\n{first['prompts']} held-out prompts, "
            f"{first['positions']:,} answer positions (the teacher's greedy answers, at most 48 tokens); each "
            "draft's whole head. greedy: how often the draft's top token is the teacher's; sampling: Σ min(p, q) "
            "at temperature 1, the probability that speculative sampling keeps a proposal.\n\n" + command_block(
                "python benchmarks/draft_agreement.py WORK --out benchmarks/results/draft_agreement.jsonl"))


@table("draft-agreement-by-step", "draft_recipe/xeon_agreement_by_step.jsonl", doc="docs/draft.md")
def draft_agreement_by_step(records: list[dict]) -> str:
    """`benchmarks/draft_agreement.py --drafts`: the long runs' checkpoints, agreement by optimizer step."""
    first = records[0]
    return (_draft_agreement().drafts_table(records) + "\n\nEach cell: greedy top-1 agreement / Σ min(p, q) at "
            f"temperature 1, over {first['positions']:,} answer positions of the teacher's greedy answers to "
            f"{first['prompts']} held-out prompts (at most 48 tokens); each draft's whole head. kd-long: KD on "
            "greedy and sampled answers, checkpoints 500 to 1,500 and 1,893 those of the 1,893-step runs it went "
            "on from; ce-long: cross-entropy on the same answers, trained the same way.\n\n" + command_block(
                "python benchmarks/draft_agreement.py --held-out held48.jsonl --out "
                "benchmarks/results/draft_recipe/xeon_agreement_by_step.jsonl \\\n"
                "    --drafts kd-long-s1/checkpoint-500 kd-long-s1/checkpoint-1000 kd-long-s1/checkpoint-3786"))


@table("demo", "demo/report.json", doc="README.md")
def demo(report: dict) -> str:
    """`destila demo`: teacher, distilled and cross-entropy-only students on held-out documents."""
    models = {r["model"]: r for r in report["results"]}
    order = [name for name in ("teacher", "distilled", "baseline") if name in models]
    metrics = [
        ("perplexity", lambda r: f"{r['perplexity']:.1f}"),
        ("next-token accuracy", lambda r: f"{r['accuracy']:.1%}"),
        ("top-1 agreement with the teacher", lambda r: f"{r['top1_agreement']:.1%}"),
        ("KL to the teacher (top-K bucket, nats/token)", lambda r: f"{max(r['kl_to_teacher'], 0.0):.2f}"),
        ("parameters", lambda r: f"{r['parameters'] / 1e6:.1f} M"),
        ("forward tokens/s / generated tokens/s", lambda r: f"{r['forward_tokens_per_second']:.0f} / "
                                                             f"{r['generate_tokens_per_second']:.1f}"),
        ("peak memory (MB)", lambda r: f"{r['peak_bytes'] / 1e6:,.0f}"),
    ]
    rows = [[label] + [fmt(models[name]) for name in order] for label, fmt in metrics]
    settings, stages = report["settings"], report["stages"]
    stage_line = ", ".join(f"{name} {info['seconds']:.0f} s" for name, info in stages.items())
    tokens = models[order[0]]["tokens"]
    if "trained" in report:  # the report of the budgeted demo: steps and tokens per student
        steps = ", ".join(f"{name} {info['steps']} ({info['tokens']:,} tokens)"
                          for name, info in report["trained"].items())
        cached = report["cache"]["train_tokens"]
    else:
        steps = ", ".join(f"{name} {sum('loss' in r for r in log)}"
                          for name, log in report.get("training", {}).items())
        cached = settings["train_tokens"]
    layers = settings["student_layers"]
    layers = "student with all the teacher's layers" if layers is None else \
        f"{len(layers)}-layer student (teacher layers {layers})" if isinstance(layers, list) else \
        f"{layers}-layer student"
    if settings.get("student_width"):
        layers += ", pruned to " + ", ".join(f"{k} {v}" for k, v in settings["student_width"].items())
    precisions = sorted({info.get("precision", "float32") for info in report.get("trained", {}).values()})
    trained_in = f"trained in {' and '.join(precisions)}, " if precisions else ""
    # A report from before the training cache could hold sampled targets has top-K in every cache.
    targets = (f"training targets {settings['samples']} samples per position, held-out top-{settings['top_k']}"
               if settings.get("train_targets") == "sampled" else f"K = {settings['top_k']}")
    return "\n\n".join([
        render_rows(["held-out, " + f"{tokens:,} tokens"] + order, rows),
        (f"Training steps: {steps}. " if steps else "") +
        f"Settings: seq-len {settings['seq_len']}, {cached:,} cached training tokens, "
        f"{targets}, {layers}, {trained_in}batch {settings['batch_size']}, "
        f"learning rate {settings['learning_rate']}, {settings['minutes']:g}-minute budget. "
        f"Time per stage: {stage_line}."])


def _precision_rows(records: list[dict]) -> list[list]:
    return [[f"{r['temperature']:g}", f"{r['hard_weight']:g}", r["path"], f"{r['loss_error']:.1e}",
             f"{r['dh_error']:.1e}", f"{r['dw_error']:.1e}"] for r in records]


PRECISION_HEADER = ["T", "hard weight", "path", "loss", "dh", "dW"]


@table("precision-cpu", "precision_cpu.jsonl", doc="docs/loss.md")
def precision_cpu(records: list[dict]) -> str:
    """Each path's relative error against the float64 reference (benchmarks/loss_precision.py)."""
    first = records[0]
    return "\n\n".join([
        machine_line(first) + f" bf16 inputs: N {first['rows']}, H {first['hidden']}, V {first['vocab']}, "
        f"K {first['top_k']}; error = max |x − reference| / max |reference|.",
        render_rows(PRECISION_HEADER, _precision_rows(records), "rrlrrr")])


def _curve_rows(records: list[dict]) -> list[list]:
    return [[str(r.get("chunk_requested")), r["chunk_size"], r["impl"], r["status"],
             f"{r['seconds']:.3f}" if r["status"] == "ok" else "–",
             f"{r['ratio_to_floor']:.3f}" if r["status"] == "ok" and r["impl"] != "floor" else "–",
             f"{r['peak_bytes'] / GIB:.2f}" if r["status"] == "ok" else "–"] for r in records]


CURVE_HEADER = ["chunk asked", "rows", "row", "status", "seconds", "× floor", "peak GiB"]


@table("chunk-curve-cpu", "chunk_curve_cpu.jsonl", "chunk_curve_cpu_load.txt", doc="docs/loss.md")
def chunk_curve_cpu(records: list[dict], load_text: str) -> str:
    """The fused loss against its chunk size on CPU (benchmarks/chunk_curve.py)."""
    first = records[0]
    return "\n\n".join([
        command_block(first["command"]),
        machine_line(first) + f" {first['dtype']}, N {first['seq_len']}, H {first['hidden']}, V {first['vocab']}, "
        f"K {first['top_k']}; times are medians, × floor against the floor timed in the same process. "
        f"Load while it ran: {load_text.strip()}",
        render_rows(CURVE_HEADER, _curve_rows(records))])


@table("gpu-check", "gpu-*/verdicts_*.txt", "gpu-*/loss_*.jsonl", "gpu-*/precision_*.jsonl",
       "gpu-*/chunk_curve_*.jsonl", "gpu-*/e2e_8k_*.json", "gpu-*/main_job_*.json", doc="docs/gpu.md")
def gpu_check(verdicts, losses, precisions, curves, e2es, main_jobs=()) -> str:
    """What `benchmarks/gpu/check.sh` wrote, one section per card folder `benchmarks/results/gpu-CARD/`."""
    # gpu-check/ holds an earlier check's files, rendered by their own tables below; gpu-rehearsal/ is a CPU
    # rehearsal's (`check.sh --rehearse`), whose figures are no GPU's.
    verdicts, losses, precisions, curves, e2es, main_jobs = (
        [(path, data) for path, data in found if not path.startswith(("gpu-check/", "gpu-rehearsal/"))]
        for found in (verdicts, losses, precisions, curves, e2es, main_jobs))
    if not verdicts and not losses:
        return ("Not measured yet: no `benchmarks/results/gpu-CARD/` folder. Run the check above on a GPU machine "
                "and copy its folder there; `make docs` then fills this section.")
    parts = []
    for card in sorted({path.split("/")[0] for path, _ in [*verdicts, *losses]}):
        mine = lambda found: [data for path, data in found if path.startswith(card + "/")]  # noqa: E731
        parts.append(f"**{card}**")
        for text in mine(verdicts):
            parts.append("\n".join(f"- {line}" for line in text.strip().splitlines()))
        records = [r for sweep in mine(losses) for r in sweep]
        if records:
            parts.append(machine_line(records[0]) + f" {records[0]['dtype']}, H {records[0]['hidden']}, "
                         f"V {records[0]['vocab']}, K {records[0]['top_k']}; each row's floor timed in its own process.")
            parts.append(render_rows(
                ["N", "row", "status", "peak GiB", "seconds", "× floor", "chunk"],
                [[r["seq_len"], r.get("peer") or r["impl"], r["status"] if r["status"] == "ok" else
                  f"{r['status']} ({r['error']})", f"{r['peak_bytes'] / GIB:.2f}" if r["status"] == "ok" else "–",
                  f"{r['seconds']:.3f}" if r["status"] == "ok" else "–",
                  f"{r['ratio_to_floor']:.2f}" if r["status"] == "ok" and r["impl"] != "floor" else "–",
                  r.get("chunk_size") or "–"] for r in records]))
        for record in mine(main_jobs):
            p, st, e = record["teacher_pass"], record["student"], record["eval"]
            parts.append(f"The main job: SmolLM2-135M's architecture ({record['teacher_weights']} weights) over "
                         f"{p['tokens']} tokens of {record['data']}, seq-len {record['seq_len']}, {record['dtype']}; "
                         f"a {st['student_layers']}-layer student, {st['steps']} steps.")
            parts.append(render_rows(["stage", "time", "beside", "ratio"], [
                ["teacher pass", f"{p['pass_tokens_per_s']:.0f} tokens/s",
                 f"bare forward {p['bare_tokens_per_s']:.0f} tokens/s", f"{p['pass_over_bare']:.2f}× its time"],
                ["KD step (fused)", f"{st['kd_step_seconds']:.3f} s", f"plain CE step {st['ce_step_seconds']:.3f} s",
                 f"{st['kd_over_ce']:.2f}×"],
                ["eval", f"{e['seconds']:.1f} s", f"{e['tokens']} tokens", "–"]]))
        for found in mine(precisions):
            parts.append(render_rows(PRECISION_HEADER, _precision_rows(found), "rrlrrr"))
        for found in mine(curves):
            parts.append(render_rows(CURVE_HEADER, _curve_rows(found)))
        for result in mine(e2es):
            config = result["config"]
            parts.append(f"End to end: seq-len {config['seq_len']}, {config['steps']} steps ({config['warmup_steps']} "
                         f"warm-up), 1B-class random Llama teacher, 2-layer student, {config['dtype']}.")
            parts.append(render_rows(["method", "status", "peak memory", "step time", "tokens/s", "final loss"], [
                [r["method"], r["status"], gib(r["peak_bytes"]),
                 f"{r['step_seconds']:.3f} s" if r["status"] == "ok" else "–",
                 f"{r['tokens_per_second']:.0f}" if r["status"] == "ok" else "–",
                 f"{r['final_loss']:.6f}" if r["status"] == "ok" else "–"] for r in result["rows"]]))
    return "\n\n".join(parts)


@table("trl-keys", doc="docs/training.md")
def trl_keys_table() -> str:
    """Every TRL key and what `destila train` makes of it, from the mapping itself."""
    from destila.training.trl_keys import markdown_table

    return markdown_table()


# ---------------------------------------------------------------- driver

_MARKER = re.compile(r"<!-- table:([a-z0-9-]+) -->\n.*?<!-- /table:\1 -->", re.S)


def render_docs(root: Path = ROOT) -> dict[Path, str]:
    """The text every doc with generated tables should have, keyed by its path (nothing is written)."""
    texts = {doc: (root / doc).read_text(encoding="utf-8") for doc in sorted({t.doc for t in TABLES.values()})}
    for doc, text in texts.items():
        found = set(re.findall(r"<!-- table:([a-z0-9-]+) -->", text))
        wanted = {name for name, t in TABLES.items() if t.doc == doc}
        if found != wanted:
            raise ValueError(f"{doc}: expected table markers for {sorted(wanted)}, found {sorted(found)}; "
                             "add the missing `<!-- table:NAME -->` / `<!-- /table:NAME -->` pairs "
                             "or register the table in benchmarks/make_docs.py")
        if len(_MARKER.findall(text)) != len(found):
            raise ValueError(f"{doc}: a `<!-- table:NAME -->` marker has no matching `<!-- /table:NAME -->`")
    missing = [f"{RESULTS}/{source} (table {t.name} of {t.doc})" for t in TABLES.values() for source in t.sources
               if "*" not in source and not (root / RESULTS / source).is_file()]
    if missing:
        raise FileNotFoundError("no results file " + "; ".join(missing) +
                                ": commit the benchmark's results (or unregister the table)")

    def fill(match: re.Match) -> str:
        spec = TABLES[match.group(1)]
        parsed = [[(path.relative_to(root / RESULTS).as_posix(), load(path))
                   for path in sorted((root / RESULTS).glob(source))] if "*" in source
                  else load(root / RESULTS / source) for source in spec.sources]
        sources = ", ".join(f"`{RESULTS}/{source}`" for source in spec.sources) or "the code it renders"
        body = spec.render(*parsed).strip()
        return (f"<!-- table:{spec.name} -->\n"
                f"<!-- generated by benchmarks/make_docs.py from {sources}; edit that file, not this table -->\n"
                f"{body}\n<!-- /table:{spec.name} -->")

    return {root / doc: _MARKER.sub(fill, text) for doc, text in texts.items()}


def build_parser() -> argparse.ArgumentParser:
    """The command line this script reads (the commands shown in the docs are parsed with it by the tests)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report docs that are not up to date (exit 1)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    stale = []
    try:
        docs = render_docs()
    except (ValueError, FileNotFoundError) as error:
        print(f"make_docs.py: error: {error}", file=sys.stderr)
        return 2
    for path, text in docs.items():
        if path.read_text(encoding="utf-8") != text:
            stale.append(path)
            if not args.check:
                path.write_text(text, encoding="utf-8")
    for path in stale:
        print(f"{'stale' if args.check else 'updated'}: {path.relative_to(ROOT)}")
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
