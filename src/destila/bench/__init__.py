"""Benchmarks: every configuration in its own process, results as JSON lines / CSV / PNG.

- :mod:`destila.bench.isolated`: run a ``module:function`` worker in a fresh
  process and measure its peak memory above baseline (reused by every bench);
- :mod:`destila.bench.loss`: the output-head loss sweep (``destila bench loss``);
- :mod:`destila.bench.e2e`: online vs offline training, and the long-context sweep (``destila bench e2e``);
- :mod:`destila.bench.cache_measure`: the teacher pass and reader measurements (``python -m``);
- :mod:`destila.bench.results`, :mod:`destila.bench.plot`, :mod:`destila.bench.e2e_plot`: files.
"""

from destila.bench.isolated import PeakMeter, active_meter, run_isolated

__all__ = ["run_isolated", "PeakMeter", "active_meter"]
