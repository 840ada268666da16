#!/usr/bin/env bash
# One-command GPU check for destila on one large GPU (written for one H200; about 8 minutes).
#
#   benchmarks/gpu/check.sh [RESULTS_DIR]        # default: benchmarks/results/gpu-check
#
# 1. a 1B-class Llama teacher built from a config with random weights (bf16), its tokenizer taken from the
#    embedded SmolLM2 (vocabulary 49152); a 2-layer student cut from it; a cache of 64K tokens on the GPU;
# 2. training smoke in bf16 with the fused loss: torchrun with 1 process as DDP, then FSDP full-shard;
#    each must log the engine it really ran, finite losses, and save a model;
# 3. `destila bench loss` at the reference head shape (hidden 4096, vocab 131072): 32K tokens for
#    fused, chunked and dense; 256K tokens for fused;
# 4. `destila bench e2e` at 8K context with the 1B-class teacher (online, dense, chunked, fused).
#
# Any failing step stops the script with a non-zero exit and a line naming the step.
# TOKENIZER=DIR takes the tokenizer from DIR instead (a machine without the embedded teacher's package:
# save it elsewhere with AutoTokenizer.from_pretrained(embedded_teacher_dir()).save_pretrained(DIR)).
set -euo pipefail

RESULTS=${1:-benchmarks/results/gpu-check}
PYTHON=${PYTHON:-python}
DESTILA=("$PYTHON" -m destila)
TORCHRUN=("$PYTHON" -m torch.distributed.run)
STEP="setup"
trap 'echo "gpu check FAILED during: $STEP (exit $?)" >&2' ERR

mkdir -p "$RESULTS"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/destila-gpu-check.XXXXXX")
echo "work folder: $WORK; results: $RESULTS"

STEP="GPU present"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$RESULTS/gpu.txt"
"$PYTHON" -c "import torch; assert torch.cuda.is_available(), 'torch sees no CUDA device'; print(torch.__version__, torch.version.cuda)"

STEP="1B-class random teacher"
"$PYTHON" - "$WORK/teacher" "${TOKENIZER:-}" <<'PY'
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

from destila.models import embedded_teacher_dir

out = sys.argv[1]
tokenizer = AutoTokenizer.from_pretrained(sys.argv[2] or embedded_teacher_dir())
config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                     num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                     tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
torch.manual_seed(0)
with torch.device("cuda"):
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
print(f"teacher: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters")
model.save_pretrained(out)
tokenizer.save_pretrained(out)
PY

STEP="student and cache"
"${DESTILA[@]}" student init "$WORK/teacher" -o "$WORK/student" --layers 2
"${DESTILA[@]}" cache build "$WORK/teacher" pydoc -o "$WORK/cache" --seq-len 1024 --max-tokens 65536 \
    --device cuda --quiet

check_run() {  # OUT ENGINE: the run logged ENGINE, finite losses, and saved a model
    "$PYTHON" - "$1" "$2" <<'PY'
import json, math, pathlib, sys

out, engine = pathlib.Path(sys.argv[1]), sys.argv[2]
records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
ran = [r for r in records if "engine" in r]
losses = [r["loss"] for r in records if "loss" in r]
assert ran and ran[0]["engine"] == engine, f"expected engine {engine}, the log says {ran}"
assert losses and all(math.isfinite(x) for x in losses), losses
assert (out / "model.safetensors").is_file() or any(out.glob("model-*.safetensors")), "no saved model"
print(f"{out.name}: {engine}, {len(losses)} logged steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}")
PY
}

TRAIN=(-m destila train "$WORK/student" --cache "$WORK/cache" --bf16 --max_steps 20 --logging_steps 5
       --per_device_train_batch_size 4 --save_strategy no)
STEP="DDP smoke (torchrun, 1 GPU, bf16, fused loss)"
"${TORCHRUN[@]}" --standalone --nproc-per-node 1 "${TRAIN[@]}" -o "$WORK/ddp"
check_run "$WORK/ddp" single
STEP="FSDP full-shard smoke (torchrun, 1 GPU, bf16, fused loss)"
"${TORCHRUN[@]}" --standalone --nproc-per-node 1 "${TRAIN[@]}" -o "$WORK/fsdp" --fsdp full_shard
check_run "$WORK/fsdp" fsdp2

STEP="bench loss at 32K (hidden 4096, vocab 131072, bf16)"
"${DESTILA[@]}" bench loss --device cuda --dtype bfloat16 --hidden 4096 --vocab 131072 --seq-lens 32K \
    --impls fused,chunked,dense --repeats 3 --max-seconds 20 \
    --json "$RESULTS/loss_32k.jsonl" --csv "$RESULTS/loss_32k.csv"
STEP="bench loss at 256K (fused)"
"${DESTILA[@]}" bench loss --device cuda --dtype bfloat16 --hidden 4096 --vocab 131072 --seq-lens 256K \
    --impls fused --repeats 3 --max-seconds 30 \
    --json "$RESULTS/loss_256k.jsonl" --csv "$RESULTS/loss_256k.csv"

STEP="bench e2e at 8K with the 1B-class teacher"
"${DESTILA[@]}" bench e2e --device cuda --dtype bfloat16 --teacher "$WORK/teacher" --student "$WORK/student" \
    --data pydoc --seq-len 8192 --batch-size 1 --steps 4 --methods online,dense,chunked,fused \
    --gradient-checkpointing --workdir "$WORK/e2e" \
    --json "$RESULTS/e2e_8k.json" --csv "$RESULTS/e2e_8k.csv" --plot "$RESULTS/e2e_8k.png"

STEP="done"
rm -rf "$WORK"
echo "gpu check passed; results in $RESULTS"
