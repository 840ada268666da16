"""Benchmarks: every configuration in its own process, results as JSON lines / CSV / PNG.

- :mod:`destila.bench.harness`: **the measurement method** (fresh process per configuration, peak memory
  above its baseline, time against the floor timed in the same process, step clocks);
- :mod:`destila.bench.loss`: the output-head loss sweep (``destila bench loss``);
- :mod:`destila.bench.e2e`: online vs offline training, and the long-context sweep (``destila bench e2e``);
- :mod:`destila.bench.tables`: what the commands print; :mod:`destila.bench.parsing`: how their flags read;
- :mod:`destila.bench.results`, :mod:`destila.bench.plot`, :mod:`destila.bench.e2e_plot`: files.

Other libraries' losses and trainers (torchtune, TRL, Liger, Cut Cross-Entropy) are measured beside these
by ``benchmarks/peers`` in a checkout, and the lab scripts of ``benchmarks/`` measure with the same method;
they import only the public names below (``from destila.bench import run_isolated, ...``), and nothing
here imports them. Names load lazily, so ``destila --help`` imports no torch.
"""

from importlib import import_module

_PUBLIC = {
    # the measurement method
    "run_isolated": "harness", "PeakMeter": "harness", "active_meter": "harness",
    "time_against_floor": "harness", "floor_step": "harness", "make_loss_inputs": "harness",
    "step_clock": "harness", "synchronize": "harness",
    # the loss sweep
    "LossBenchConfig": "loss", "OtherRows": "loss", "run_loss_sweep": "loss", "summarise": "loss",
    "DTYPE_BYTES": "loss", "IMPLS": "loss",
    "fused_chunk_rows": "loss", "most_chunk_rows": "loss",
    # end to end
    "E2EConfig": "e2e", "LongContextConfig": "e2e", "run_e2e": "e2e", "run_long_context": "e2e",
    "prepare_student": "e2e", "method_row": "e2e", "train_worker": "e2e", "save_json": "e2e",
    # files, printed lines, flag readers
    "OutputFiles": "results", "machine_info": "results", "write_csv": "results", "write_jsonl": "results",
    "row_printer": "results", "failed_rows_code": "results",
    "LOSS_HEADER": "tables", "loss_row_line": "tables", "e2e_row_line": "tables",
    "name_list": "parsing", "int_list": "parsing", "gib": "parsing",
}

__all__ = list(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(import_module(f"destila.bench.{_PUBLIC[name]}"), name)
    raise AttributeError(f"module 'destila.bench' has no attribute {name!r}")
