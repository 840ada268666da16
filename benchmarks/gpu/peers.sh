#!/usr/bin/env bash
# destila beside its peers on one GPU (Liger runs only here: its losses are Triton kernels).
#
#   1. the cross-check tests, Liger's included (they skip without a GPU elsewhere);
#   2. `python -m benchmarks.peers loss` at the paper's head shape: hidden 4096, vocab 131072,
#      8K / 16K / 32K rows, bfloat16 — destila fused and chunked beside torchtune, TRL (GKD's
#      generalized JSD, DistillationTrainer's chunked loss) and Liger (fused linear JSD, and
#      its fused linear distillation base). A configuration that does not fit is reported
#      `oom` and the sweep goes on;
#   3. `python -m benchmarks.peers e2e`: SmolLM2 -> 6-layer student, 2K tokens per sequence,
#      TRL's GKD trainer (lmbda=0, beta=0) beside destila online and offline fused, bf16.
#
# Prerequisite: `make install` on the GPU machine (it installs destila[peers,peers-gpu] when
# nvidia-smi is present). Usage, from the repository root:
#
#   bash benchmarks/gpu/peers.sh                 # results under benchmarks/results/gpu/
#   OUT=/tmp/out STEPS=10 bash benchmarks/gpu/peers.sh
set -euo pipefail

VENV=${VENV:-.venv}
OUT=${OUT:-benchmarks/results/gpu}
STEPS=${STEPS:-20}
SEQ_LENS=${SEQ_LENS:-8K,16K,32K}
PEERS=("$VENV/bin/python" -m benchmarks.peers)

if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "peers.sh: error: no nvidia-smi: this script measures on a CUDA GPU; on CPU run" \
         "'python -m benchmarks.peers loss' and 'python -m benchmarks.peers e2e' instead" >&2
    exit 2
fi
mkdir -p "$OUT"
{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    "$VENV/bin/python" -c 'import torch, trl, liger_kernel; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    "$VENV/bin/pip" freeze | grep -Ei '^(torch|trl|torchtune|torchao|liger.kernel|triton|transformers)==' || true
} | tee "$OUT/peers_machine.txt"

echo "== cross-check: each peer's value equals destila's where both compute the same quantity"
"$VENV/bin/python" -m pytest tests/bench/test_peers_loss.py -q -rs | tee "$OUT/peers_crosscheck.txt" \
    || echo "peers.sh: the cross-check FAILED (see $OUT/peers_crosscheck.txt); measuring anyway"

echo "== loss: H 4096, V 131072, N $SEQ_LENS, bfloat16"
"${PEERS[@]}" loss --device cuda --dtype bfloat16 --hidden 4096 --vocab 131072 --top-k 100 \
    --seq-lens "$SEQ_LENS" --impls fused,chunked --repeats 5 --max-seconds 60 \
    --json "$OUT/loss_peers_gpu.jsonl" --csv "$OUT/loss_peers_gpu.csv" --plot "$OUT/loss_peers_gpu.png" \
    | tee "$OUT/loss_peers_gpu.txt"

echo "== e2e: SmolLM2 -> 6-layer student, seq-len 2048, $STEPS steps, bfloat16"
"${PEERS[@]}" e2e --device cuda --dtype bfloat16 --steps "$STEPS" --seq-len 2048 \
    --workdir "${WORKDIR:-/tmp/destila-peers-e2e}" \
    --json "$OUT/e2e_peers_gpu.json" --csv "$OUT/e2e_peers_gpu.csv" | tee "$OUT/e2e_peers_gpu.txt"
