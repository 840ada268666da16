"""How far each path of the fused loss is from a float64 reference, on bf16 inputs of a realistic spread.

    python benchmarks/loss_precision.py --json benchmarks/results/precision_cpu.jsonl      # CPU: exact, fast emulated
    python benchmarks/loss_precision.py --device cuda --json precision_gpu.jsonl          # what the GPU check runs

One case (N rows of hidden states, a head ``[V, H]``, a peaked teacher top-K with its exact tail, every
fifth row's label ignored), rounded to bf16. The reference is the float64 maths of the same bf16 values,
written here with torch autograd (full logits, the rest bucket as a masked logsumexp), independent of
``destila.losses``. For each path (precision × row kernels, as ``describe_path`` names it) the row holds
the relative error ``max |x − ref| / max |ref|`` of the loss, dh and dW, and, for scale, that of a plain
bf16 computation of the same loss (what a model computing the loss in bf16 gets).
"""

from __future__ import annotations

import argparse
import shlex
import math
import sys

import torch

from destila.bench import machine_info, write_jsonl
from destila.losses import LossOptions, describe_path, distill_loss
from destila.losses.row_kernels import interpreting


def make_case(n: int, h: int, v: int, k: int, device: str, seed: int = 0) -> dict:
    gen = torch.Generator().manual_seed(seed)
    teacher = torch.log_softmax(3.0 * torch.randn(n, v, generator=gen, dtype=torch.float64), dim=1)
    lp, ids = teacher.topk(k, dim=1)
    rest = torch.ones(n, v, dtype=torch.bool).scatter_(1, ids, False)
    tail = torch.logsumexp(teacher.masked_fill(~rest, -math.inf), dim=1)
    labels = torch.randint(0, v, (n,), generator=gen)
    labels[::5] = -100
    return {"hidden": torch.randn(n, h, generator=gen).bfloat16().to(device),
            "weight": (torch.randn(v, h, generator=gen) / math.sqrt(h)).bfloat16().to(device),
            "ids": ids.to(device), "lp": lp.half().to(device), "tail": tail.float().to(device),
            "labels": labels.to(device)}


def reference_loss(c: dict, hidden, weight, dtype, temperature: float, hard_weight: float):
    """Forward KL over the K+1 buckets plus the hard CE, in ``dtype`` (float64: the reference; bf16: naive)."""
    z = hidden.to(dtype) @ weight.to(dtype).T
    keep = c["labels"] != -100
    log_q = torch.log_softmax(z / temperature, dim=1)
    rest = torch.ones_like(z, dtype=torch.bool).scatter_(1, c["ids"], False)
    lq = torch.cat([log_q.gather(1, c["ids"]), torch.logsumexp(log_q.masked_fill(~rest, -math.inf), 1, True)], 1)
    lp = torch.cat([c["lp"].to(dtype), c["tail"].to(dtype)[:, None]], 1)
    soft = (lp.exp() * (lp - lq)).sum(1)
    ce = torch.logsumexp(z, 1) - z.gather(1, c["labels"].clamp(min=0)[:, None]).squeeze(1)
    rows = temperature ** 2 * soft + hard_weight * ce
    return torch.where(keep, rows, 0).sum() / keep.sum()


def gradients(loss_fn, c: dict, dtype=None):
    hidden = c["hidden"].detach().clone().requires_grad_(True)
    weight = c["weight"].detach().clone().requires_grad_(True)
    if dtype is not None:  # the reference sees the bf16 values as float64 leaves
        hidden = c["hidden"].to(dtype).requires_grad_(True)
        weight = c["weight"].to(dtype).requires_grad_(True)
    loss = loss_fn(hidden, weight)
    loss.backward()
    return loss.detach(), hidden.grad, weight.grad


def rel(found, want) -> float:
    return float((found.double() - want.double()).abs().max() / want.double().abs().max())


def paths(device: str) -> list[dict]:
    # On CPU the Triton kernels run only under the interpreter (TRITON_INTERPRET=1), slowly but the same maths.
    fast_kernels = ["triton", "torch"] if device.startswith("cuda") or interpreting() else ["torch"]
    found = [{"precision": "exact", "kernels": k} for k in fast_kernels]
    found += [{"precision": "fast", "kernels": k} for k in fast_kernels]
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python benchmarks/loss_precision.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=16384)
    parser.add_argument("--top-k", type=int, default=100)
    parser.add_argument("--json", required=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    machine = {**machine_info(), "command": shlex.join(["python", "benchmarks/loss_precision.py", *sys.argv[1:]])}
    c = make_case(args.rows, args.hidden, args.vocab, args.top_k, args.device)
    out = []
    for temperature, hard in ((1.0, 0.5), (2.0, 0.0)):
        ref = gradients(lambda h, w: reference_loss(c, h, w, torch.float64, temperature, hard), c, torch.float64)
        naive = gradients(lambda h, w: reference_loss(c, h, w, torch.bfloat16, temperature, hard), c)
        base = {"rows": args.rows, "hidden": args.hidden, "vocab": args.vocab, "top_k": args.top_k,
                "temperature": temperature, "hard_weight": hard, "device": args.device, **machine}
        out.append({**base, "path": "naive bf16 (logits, softmax and autograd in bfloat16)",
                    **{f"{name}_error": rel(x, r) for name, x, r in zip(("loss", "dh", "dw"), naive, ref)}})
        for choice in paths(args.device):
            options = dict(temperature=temperature, hard_weight=hard, chunk_size=256, **choice)
            text = describe_path(LossOptions(**options), c["hidden"], c["weight"])
            got = gradients(lambda h, w: distill_loss(h, w, c["ids"], c["lp"], c["tail"], c["labels"], **options), c)
            row = {**base, "path": text, **choice,
                   **{f"{name}_error": rel(x, r) for name, x, r in zip(("loss", "dh", "dw"), got, ref)}}
            out.append(row)
            print(f"T={temperature} hard={hard}  {text}: loss {row['loss_error']:.2e}  dh {row['dh_error']:.2e}  "
                  f"dW {row['dw_error']:.2e}", flush=True)
    write_jsonl(out, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
