#!/usr/bin/env bash
# The GPU check: one command on a bare GPU machine (no network), its results named after the card.
#
#   make gpu-wheels                                   # here, with the package index: fills .gpu/
#   bash benchmarks/gpu/check.sh [OUT_DIR]            # there, from the checkout root, with .gpu/ carried
#   bash benchmarks/gpu/check.sh --dry-run [OUT_DIR]  # anywhere: checks .gpu/, prints every step, runs nothing
#
# It installs .gpu/wheels (benchmarks/gpu/wheels.txt: what those machines lack) into a folder of its own with
# `pip install --no-index --no-deps --target`, then runs, most important first, each step with its own time
# limit and all within BUDGET_S seconds (default 420: with a machine start, a shorter rerun still fits 15 minutes):
#
#   1. tests: the CUDA oracle tests (float64, float32 and bf16 against the float64 oracle; the Triton row
#      kernels compiled, the fast path's memory), and Liger's and CCE's values against destila's;
#   2. loss: `python -m benchmarks.peers loss` at H 4096, V 131072, K 100, bf16, N 8K / 16K / 32K: the floor,
#      fused (fast), fused-exact and chunked beside Liger's fused linear JSD (β = 0: forward KL), Liger's
#      chunked distillation loss and Cut Cross-Entropy's linear cross-entropy (the CE speed reference);
#   3. loss_256k: `destila bench loss` at 256K rows (floor, fused, fused-exact);
#   4. e2e: `destila bench e2e` at 8K context, offline chunked and fused, a 1B-class random Llama teacher with
#      the embedded teacher's tokenizer (.gpu/tokenizer) and a 2-layer student cut from it;
#   5. precision: each path's error against a float64 reference (benchmarks/loss_precision.py);
#   6. chunk_curve: fused at 32K rows for chunk sizes 512 to 4096 (benchmarks/chunk_curve.py);
#   7. verdicts: the acceptance lines, from the files above (benchmarks/gpu/verdicts.py).
#
# Results, at most 8 files, in OUT_DIR/gpu-CARD/ (CARD from nvidia-smi, e.g. h100): check_CARD.log (every
# step's output and time), loss_CARD.jsonl, loss_CARD.png, loss_256k_CARD.jsonl, e2e_8k_CARD.json,
# precision_CARD.jsonl, chunk_curve_CARD.jsonl, verdicts_CARD.txt. Copy that folder to benchmarks/results/ and
# run `make docs`. A step that fails or runs out of time is written as such and the next step runs; the exit
# code is 1 if any step did not pass.
set -uo pipefail

DRY_RUN=0
if [[ "${1:-}" == "--dry-run" ]]; then DRY_RUN=1; shift; fi
OUT_DIR=${1:-benchmarks/results}
PYTHON=${PYTHON:-python3}
GPU_DIR=${GPU_DIR:-.gpu}
SITE=${SITE:-/tmp/destila-gpu-site}
BUDGET_S=${BUDGET_S:-420}
STARTED=$SECONDS
FAILED=()

cd "$(dirname "$0")/../.." || exit 2
ROOT=$PWD

if [[ $DRY_RUN == 1 ]]; then
    CARD=dry-run
else
    CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 \
           | grep -oiE '(h100|h200|a100|l40s?|b200|gh200|a10g?|l4|rtx ?[0-9]+)' | head -1 | tr -d ' ' \
           | tr '[:upper:]' '[:lower:]')
    CARD=${CARD:-gpu}
fi
RESULTS=$OUT_DIR/gpu-$CARD
WORK=${TMPDIR:-/tmp}/destila-gpu-check
LOG=$RESULTS/check_$CARD.log
if [[ $DRY_RUN == 1 ]]; then LOG=/dev/null; else mkdir -p "$RESULTS" "$WORK" && : > "$LOG"; fi

say() { echo "$*" | tee -a "$LOG"; }

# step NAME CAP_SECONDS COMMAND...: run COMMAND with a limit of min(CAP, what is left of the budget), its output
# in the log; in a dry run, print it instead.
step() {
    local name=$1 cap=$2
    shift 2
    if [[ $DRY_RUN == 1 ]]; then
        printf 'step %s (%ss):' "$name" "$cap"; printf ' %q' "$@"; printf '\n'
        return 0
    fi
    local left=$((BUDGET_S - (SECONDS - STARTED)))
    local limit=$((cap < left ? cap : left))
    if ((limit < 20)); then
        say "== $name: NOT RUN (no time left: ${left}s of the ${BUDGET_S}s budget)"
        FAILED+=("$name")
        return 0
    fi
    say "== $name (limit ${limit}s): $*"
    local began=$SECONDS
    timeout --kill-after=10 "$limit" "$@" >>"$LOG" 2>&1
    local code=$?
    if ((code == 0)); then
        say "== $name: passed in $((SECONDS - began))s"
    else
        say "== $name: FAILED (exit $code$( ((code == 124)) && echo ', out of time')) after $((SECONDS - began))s"
        FAILED+=("$name")
    fi
}

# -- setup: the carried wheels and tokenizer ----------------------------------------------------------------
"$PYTHON" - "$GPU_DIR/wheels" <<'PY' || { echo "gpu check: $GPU_DIR is not ready: run 'make gpu-wheels' where pip reaches the package index, and carry $GPU_DIR" >&2; exit 2; }
import sys
sys.path.insert(0, "benchmarks/gpu")
from pathlib import Path
from prepare import wheel_problems
problems = wheel_problems(Path(sys.argv[1]))
for line in problems:
    print(f"gpu check: {line}", file=sys.stderr)
sys.exit(1 if problems else 0)
PY
[[ -f $GPU_DIR/tokenizer/tokenizer_config.json ]] || { echo "gpu check: no tokenizer in $GPU_DIR/tokenizer: run 'make gpu-wheels'" >&2; exit 2; }

if [[ $DRY_RUN == 0 ]]; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
        "$GPU_DIR"/wheels/*.whl >>"$LOG" 2>&1 || { say "gpu check: installing the wheels failed (see $LOG)"; exit 2; }
fi
export PYTHONPATH=$SITE:$ROOT/src:$ROOT${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false USE_HUB_KERNELS=NO

if [[ $DRY_RUN == 0 ]]; then
    {
        date -u +%Y-%m-%dT%H:%M:%SZ
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
        "$PYTHON" -c 'import importlib.metadata as m, sys
for n in ("torch", "triton", "transformers", "accelerate", "datasets", "pyarrow", "fsspec", "huggingface-hub",
          "liger-kernel", "trl", "cut-cross-entropy", "zstandard", "gguf"):
    try: print(n, m.version(n))
    except m.PackageNotFoundError: print(n, "MISSING")
import torch, destila, destila.losses, datasets, zstandard, gguf
from destila.losses.plan import bf16_gemm_to_float32
print("cuda", torch.version.cuda, "bf16 GEMM writing float32:", bf16_gemm_to_float32(torch.device("cuda")))'
    } 2>&1 | tee -a "$LOG"
fi

# -- the steps, most important first ---------------------------------------------------------------------
HEAD=(--device cuda --dtype bfloat16 --hidden 4096 --vocab 131072 --top-k 100)

step tests 120 "$PYTHON" -m pytest -q -n 4 -p no:randomly tests/losses/test_cuda.py tests/losses/test_triton_rows.py \
    tests/bench/test_peers_loss.py::test_liger_equals_destila \
    tests/bench/test_peers_loss.py::test_cce_equals_destila_cross_entropy_on_gpu

step loss 200 "$PYTHON" -m benchmarks.peers loss "${HEAD[@]}" --seq-lens 8K,16K,32K \
    --impls fused,fused-exact,chunked --peers liger-fljsd,liger-distill,cce --repeats 3 --max-seconds 10 \
    --timeout 120 --json "$RESULTS/loss_$CARD.jsonl" --plot "$RESULTS/loss_$CARD.png"

step loss_256k 70 "$PYTHON" -m destila bench loss "${HEAD[@]}" --seq-lens 256K --impls fused,fused-exact \
    --repeats 2 --max-seconds 10 --timeout 60 --json "$RESULTS/loss_256k_$CARD.jsonl"

step teacher 40 "$PYTHON" benchmarks/gpu/random_teacher.py "$WORK/teacher" "$GPU_DIR/tokenizer"
step student 30 "$PYTHON" -m destila student init "$WORK/teacher" -o "$WORK/student" --layers 2
step e2e 110 "$PYTHON" -m destila bench e2e --device cuda --dtype bfloat16 --teacher "$WORK/teacher" \
    --student "$WORK/student" --data pydoc --seq-len 8192 --batch-size 1 --steps 4 --methods chunked,fused \
    --gradient-checkpointing --workdir "$WORK/e2e" --json "$RESULTS/e2e_8k_$CARD.json"

step precision 40 "$PYTHON" benchmarks/loss_precision.py --device cuda --json "$RESULTS/precision_$CARD.jsonl"

step chunk_curve 80 "$PYTHON" benchmarks/chunk_curve.py "${HEAD[@]}" --seq-len 32K --chunk-sizes 512,1024,2048,4096 \
    --repeats 2 --max-seconds 5 --json "$RESULTS/chunk_curve_$CARD.jsonl"

step verdicts 20 "$PYTHON" benchmarks/gpu/verdicts.py "$RESULTS" "$CARD"

if [[ $DRY_RUN == 1 ]]; then
    echo "dry run: $GPU_DIR is ready; results would go to $RESULTS"
    exit 0
fi
rm -rf "$WORK"
say "gpu check: $((SECONDS - STARTED))s; results in $RESULTS; ${#FAILED[@]} step(s) not passed: ${FAILED[*]:-none}"
((${#FAILED[@]} == 0))
