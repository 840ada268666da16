"""Benchmarks: every configuration in its own process, results as JSON lines / CSV / PNG.

- :mod:`destila.bench.loss`: the output-head loss sweep (``destila bench loss``);
- :mod:`destila.bench.e2e`: online vs offline training, and the long-context sweep (``destila bench e2e``);
- :mod:`destila.bench.tables`: what the commands print; :mod:`destila.bench.parsing`: how their flags read;
- :mod:`destila.bench.results`, :mod:`destila.bench.plot`, :mod:`destila.bench.e2e_plot`: files.

Every configuration runs through :func:`destila.measure.run_isolated`, in a fresh process.
Other libraries' losses and trainers (torchtune, TRL, Liger) are measured beside these by
``benchmarks/peers`` in a checkout; nothing here imports them.
"""
