"""Choosing a student's layers by greedy skip-KL: the raced search against the reference loop.

Measures what ``destila student init TEACHER --layers N --select importance
--data DATA`` spends choosing the layers: the same calibration text (the
command's default 4,096 tokens of DATA, a quarter held out), the same greedy
search, timed, with every forward counted (decoder-layer forwards and
output-head forwards, one calibration row of 256 tokens each), so the saving
can be stated apart from the machine's load. The load average is recorded
before and after, and the CPU seconds of the process beside the wall-clock
seconds: on a shared machine, CPU seconds with ``--threads 1`` move far less
with the load than the wall clock does.

    python benchmarks/student_select.py OUT.jsonl                       # the raced search (the default)
    python benchmarks/student_select.py OUT.jsonl --impl reference      # the plain loop (about 4× the work)
    python benchmarks/student_select.py OUT.jsonl --impl raced --no-race   # every candidate on every row

One JSON line per run is appended to OUT.jsonl: the kept layers, the drops
with their KL, the first round's scores, the counts, the seconds and the
load.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from destila.io.json_lines import append_json_line


def run(teacher: str, data: str, layers: int, tokens: int, impl: str, race: bool, threads: int | None,
        workers: int | None = None) -> dict:
    import torch

    if threads:
        torch.set_num_threads(threads)

    from destila.bench import machine_info
    from destila.models import load_causal_lm, load_tokenizer
    from destila.student.greedy_search import GreedySearch, counting_forwards, plain_loop_work
    from destila.student.importance import greedy_cut
    from destila.student import calibration as calib
    from destila.student.running import STARTS_FROM_EMBEDS

    model = load_causal_lm(teacher)
    calibration = calib.from_data(data, load_tokenizer(teacher), tokens)
    selection, _ = calibration.split()  # as init_student: layers are chosen on the rows not held out
    load_before = os.getloadavg()
    started, cpu_started = time.perf_counter(), time.process_time()
    with counting_forwards(model) as counts:
        if impl == "raced":
            path = GreedySearch(model, selection, race=race, workers=workers).run(layers, progress=True)
        else:
            path = greedy_cut(model, selection, layers, progress=True, impl="reference")
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    return {
        "impl": impl if race or impl == "reference" else "raced, no racing", "teacher": teacher, "data": data,
        "layers": layers, "calibration_tokens": tokens, "selection_rows": int(selection.input_ids.shape[0]),
        "kept": path["kept"], "dropped": path["dropped"], "first_round": path["first_round"],
        "rounds": path.get("rounds"), "screen": path.get("screen"), "closest_bound": path.get("closest_bound"),
        "workers": path.get("workers"),
        "layer_tokens": counts.layer_tokens, "head_tokens": counts.head_tokens,
        # What the plain loop runs on the same rows (from its loop; the tests check it against a count).
        "plain_loop": plain_loop_work(model.config.num_hidden_layers, layers, selection.input_ids.numel(),
                                      from_embeds=model.config.model_type in STARTS_FROM_EMBEDS),
        "seconds": seconds, "cpu_seconds": cpu_seconds, "load_before": load_before, "load_after": os.getloadavg(),
        "threads": torch.get_num_threads(), "machine": machine_info(),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="JSON-lines file the result is appended to")
    parser.add_argument("--teacher", default="smollm2")
    parser.add_argument("--data", default="pydoc")
    parser.add_argument("--layers", type=int, default=11)
    parser.add_argument("--calibration-tokens", type=int, default=4096)
    parser.add_argument("--impl", choices=("raced", "reference"), default="raced")
    parser.add_argument("--no-race", action="store_true", help="raced path, but every candidate on every row")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's own choice)")
    parser.add_argument("--workers", type=int, help="candidates measured at once (default: 2 on a CPU with 2 threads)")
    return parser


def main() -> None:
    args = build_parser().parse_args()
    result = run(args.teacher, args.data, args.layers, args.calibration_tokens, args.impl, not args.no_race,
                 args.threads, args.workers)
    append_json_line(args.out, result)
    print(json.dumps({k: result[k] for k in ("impl", "kept", "layer_tokens", "head_tokens", "plain_loop", "seconds",
                                             "cpu_seconds", "workers", "load_before", "load_after")}))


if __name__ == "__main__":
    main()
