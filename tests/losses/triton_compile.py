"""Compile the Triton row kernels to GPU machine code here, with no GPU: ``python triton_compile.py ARCH...``.

Triton's own compiler (TTIR → TTGIR → LLVM → PTX → ``ptxas`` → cubin, for a
target named by hand) runs without a device. The interpreter tests check the
kernels' values on CPU tensors; they do not lower the kernels, so a kernel the
interpreter accepts could still fail to compile for a real card. This script
compiles every specialisation :mod:`destila.losses.row_kernels` launches, for
each compute capability given (90 = H100/H200, 80 = A100), and prints one JSON
line per compile: ``{"kernel", "arch", "case", "ok", "cubin_bytes"|"error"}``.
``--planted`` compiles instead a kernel that the interpreter runs but that
cannot be lowered for an A100 (a float8 e4m3 store, which needs sm_89 or
newer), to show that a kernel failing to lower is reported as failing.

Run in a process of its own with ``TRITON_INTERPRET`` unset: under the
interpreter ``triton.jit`` gives functions that cannot be compiled.
"""

from __future__ import annotations

import itertools
import json
import os
import sys

# The specialisations the loss launches (see chunk_math._chunk_loss_triton_): the buffer's dtype; G in place
# (same dtype) or as bf16 over the float32 buffer's rows (the fast path); with and without the T-scaled pass
# and the label term; a vocabulary that loops over blocks (the GPU benchmark's) and one that fits one block.
BUFFERS = ("float32", "float64")
GRAD_OUTS = [("float32", "float32"), ("float32", "bfloat16"), ("float64", "float64")]
VOCABS = [131072, 1000]
TRITON_TYPES = {"float32": "fp32", "float64": "fp64", "bfloat16": "bf16"}


def _signature(fn, pointers: dict[str, str], constexprs: dict) -> dict[str, str]:
    """Triton types of ``fn``'s arguments: named pointers, ``*_stride`` as i32 (what the JIT gives a stride
    below 2³¹), the rest constexpr. An argument neither named nor a stride fails here, not silently."""
    types = {}
    for name in fn.arg_names:
        if name in constexprs:
            types[name] = "constexpr"
        elif name.endswith("_stride"):
            types[name] = "i32"
        else:
            types[name] = pointers[name]
    return types


def cases():
    """(kernel name, case label, pointer types, constexprs, num_warps) for every launch the loss makes."""
    from destila.losses.row_kernels import _launch_shape

    for vocab in VOCABS:
        block, warps = _launch_shape(vocab)
        for buffer, need_t in itertools.product(BUFFERS, (False, True)):
            t = TRITON_TYPES[buffer]
            pointers = {n: f"*{t}" for n in ("s_ptr", "t_ptr", "max_ptr", "sum_ptr", "max_t_ptr", "sum_t_ptr")}
            yield ("rest_stats", f"{buffer} need_t={need_t} V={vocab}", pointers,
                   {"NEED_T": need_t, "VOCAB": vocab, "BLOCK": block}, warps)
        for (buffer, out), need_t, has_label in itertools.product(GRAD_OUTS, (False, True), (False, True)):
            t = TRITON_TYPES[buffer]
            pointers = {n: f"*{t}" for n in ("s_ptr", "shift_ptr", "a_ptr", "t_ptr", "lse_t_ptr", "b_ptr", "beta_ptr")}
            pointers |= {"g_ptr": f"*{TRITON_TYPES[out]}", "label_ptr": "*i64"}
            aliased = out != buffer
            yield ("write_grad", f"{buffer}->{out} need_t={need_t} label={has_label} V={vocab}", pointers,
                   {"NEED_T": need_t, "HAS_LABEL": has_label, "ALIASED": aliased, "VOCAB": vocab, "BLOCK": block},
                   warps)


def planted_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def to_float8_kernel(x_ptr, y_ptr, N: tl.constexpr):
        cols = tl.arange(0, N)
        tl.store(y_ptr + cols, tl.load(x_ptr + cols).to(tl.float8e4nv))

    return to_float8_kernel


def _compile(fn, pointers: dict[str, str], constexprs: dict, warps: int, arch: int) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    try:
        source = ASTSource(fn=fn, signature=_signature(fn, pointers, constexprs), constexprs=constexprs)
        compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32), options={"num_warps": warps})
        return {"ok": True, "cubin_bytes": len(compiled.asm["cubin"])}
    except Exception as error:  # noqa: BLE001 - every failure is reported, with its message
        return {"ok": False, "error": f"{type(error).__name__}: {error}"[:2000]}


def main(archs: list[int], planted: bool = False) -> int:
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("triton_compile: unset TRITON_INTERPRET (interpreted kernels cannot be compiled)", file=sys.stderr)
        return 2
    import triton

    from destila.losses.row_kernels import _kernels

    if planted:
        row = _compile(planted_kernel(), {"x_ptr": "*fp32", "y_ptr": "*fp8e4nv"}, {"N": 16}, 4, archs[0])
        print(json.dumps({"kernel": "planted", "arch": archs[0], "case": "float8 e4m3 store"} | row), flush=True)
        return 0 if row["ok"] else 1
    kernels = dict(zip(("rest_stats", "write_grad"), _kernels()))
    failed = 0
    for arch in archs:
        for name, label, pointers, constexprs, warps in cases():
            row = {"kernel": name, "arch": arch, "case": label, "triton": triton.__version__}
            row |= _compile(kernels[name], pointers, constexprs, warps, arch)
            failed += not row["ok"]
            print(json.dumps(row), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(main([int(a) for a in args if a != "--planted"] or [90], planted="--planted" in args))
