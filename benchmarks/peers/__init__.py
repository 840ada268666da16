"""destila beside the losses and trainers users would pick instead (torchtune, TRL, Liger), measured alike.

Run from a checkout, after ``pip install 'destila[peers]'`` (``peers-gpu`` adds Liger)::

    python -m benchmarks.peers loss --seq-lens 8K,16K --impls fused
    python -m benchmarks.peers e2e --steps 4

- :mod:`benchmarks.peers.loss`: each peer's loss as it ships, and its rows in ``destila bench loss``'s sweep;
- :mod:`benchmarks.peers.worker`: the process that measures one peer configuration;
- :mod:`benchmarks.peers.e2e`: TRL's trainer beside destila's, and every student's held-out full KL;
- :mod:`benchmarks.peers.report`: the tables, verdicts and plot;
- :mod:`benchmarks.peers.run`: the command line (flags from the same configs as ``destila bench``).
"""
