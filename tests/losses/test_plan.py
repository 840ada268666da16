"""How a call runs: the automatic chunk, the precision and kernel choices, and the refusals, each in one line."""

from __future__ import annotations

import pytest
import torch

from destila import distill_loss
from destila.losses import LossOptions, describe_path
from destila.losses.plan import auto_chunk_rows

CPU, CUDA = torch.device("cpu"), torch.device("cuda")  # a device name only: nothing runs on it here
GIB = 2 ** 30


def test_auto_chunk_follows_the_targets_and_the_free_memory():
    # The CPU benchmark's shape: 256 MiB of float32 rows at V = 32768 is 2048 rows, the size it always used.
    assert auto_chunk_rows(65536, 32768, 512, CPU, free=10 * GIB) == 2048
    # The reference head on a GPU: 1 GiB of float32 rows at V = 131072.
    assert auto_chunk_rows(32768, 131072, 4096, CUDA, free=70 * GIB) == 2048
    # Little memory left once the float32 head arrays are counted: the chunk shrinks, down to 64 rows.
    assert auto_chunk_rows(32768, 131072, 4096, CUDA, free=4 * GIB) == 1024
    assert auto_chunk_rows(32768, 131072, 4096, CUDA, free=4 * GIB, head_copies=2) == 64
    assert auto_chunk_rows(100, 32768, 512, CPU, free=10 * GIB) == 100  # never more rows than there are


def test_the_chunk_is_decided_once_and_said():
    hidden, weight = torch.randn(300, 8), torch.randn(50, 8)
    text = describe_path(LossOptions(), hidden, weight)
    assert text.startswith("fused, precision exact") and "row math torch" in text and text.endswith("chunk 300 rows")
    assert describe_path(LossOptions(chunk_size=7), hidden, weight).endswith("chunk 7 rows")
    assert describe_path(LossOptions(impl="dense"), hidden, weight).startswith("dense")


def test_a_named_path_that_cannot_run_is_refused():
    ids, lp = torch.zeros(4, 1, dtype=torch.long), torch.full((4, 1), -0.1)
    with pytest.raises(ValueError, match="precision: 'fast' expects bfloat16 or float32 .* found float16"):
        distill_loss(torch.randn(4, 8).half(), torch.randn(10, 8).half(), ids, lp, precision="fast")
    with pytest.raises(ValueError, match="precision: expected 'auto' with impl='chunked'"):
        LossOptions(impl="chunked", precision="fast")
    with pytest.raises(ValueError, match="kernels: expected 'auto' or 'torch' with impl='dense'"):
        LossOptions(impl="dense", kernels="triton")
    with pytest.raises(ValueError, match="kernels: expected one of 'auto', 'triton', 'torch', found 'cuda'"):
        LossOptions(kernels="cuda")
    with pytest.raises(ValueError, match="chunk_size: expected a positive int .* or None"):
        LossOptions(chunk_size=0)
