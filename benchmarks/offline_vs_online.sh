#!/usr/bin/env bash
# Offline fused distillation from the cache vs online dense distillation (issue #4's acceptance run).
#
# SmolLM2-135M-Instruct teacher -> 6-layer student cut from it; all of pydoc packed at 512 tokens
# (220 sequences, 10% held out);
# the same sequences, held-out split, seed and number of steps for both; then the held-out
# full-vocabulary KL of both students to the teacher with `destila eval --teacher`.
# Peak memory: the maximum resident set of each `destila train` process (GNU time).
#
# usage: benchmarks/offline_vs_online.sh [WORKDIR] [STEPS]     (needs `make install` first)
set -euo pipefail
WORK=${1:-bench-offline-online}
STEPS=${2:-40}
DESTILA=${DESTILA:-.venv/bin/destila}
COMMON=(--max-steps "$STEPS" --batch-size 4 --lr 5e-4 --lr-scheduler constant_with_warmup --warmup-steps 5
        --eval-fraction 0.1 --logging-steps 1 --save-steps 100000 --seed 0)
mkdir -p "$WORK"

[ -f "$WORK/student/config.json" ] || "$DESTILA" student init smollm2 -o "$WORK/student" --layers 6
"$DESTILA" cache build smollm2 pydoc -o "$WORK/cache" --seq-len 512 --top-k 100 --quiet

/usr/bin/time -f "max_rss_kib %M wall_s %e" -o "$WORK/offline.time" \
  "$DESTILA" train "$WORK/student" --cache "$WORK/cache" -o "$WORK/offline-fused" --loss-impl fused "${COMMON[@]}"
/usr/bin/time -f "max_rss_kib %M wall_s %e" -o "$WORK/online.time" \
  "$DESTILA" train "$WORK/student" --teacher smollm2 --data pydoc --seq-len 512 \
  -o "$WORK/online-dense" --online-loss dense "${COMMON[@]}"

"$DESTILA" eval "$WORK/offline-fused" "$WORK/online-dense" --cache "$WORK/cache" --eval-fraction 0.1 \
  --teacher smollm2 --max-tokens 65536 --json "$WORK/eval.json"
for run in offline online; do echo "$run: $(cat "$WORK/$run.time")"; done
python3 - "$WORK" <<'PY'
# Step time: median gap between consecutive per-step log records (the first step, a warm-up, excluded).
import json, statistics, sys
from pathlib import Path
work = Path(sys.argv[1])
rows = {}
for name, folder, timing in (("offline fused", "offline-fused", "offline"), ("online dense", "online-dense", "online")):
    log = [json.loads(line) for line in (work / folder / "log.jsonl").read_text().splitlines()]
    times = [r["time"] for r in log if "loss" in r]
    step = statistics.median(b - a for a, b in zip(times, times[1:]))
    rss = int((work / f"{timing}.time").read_text().split()[1]) * 1024
    rows[name] = (step, rss)
    print(f"{name}: {len(times)} steps, median step {step:.2f} s, max RSS {rss / 2**30:.2f} GiB")
(off_step, off_rss), (on_step, on_rss) = rows.values()
print(f"offline/online: step time {off_step / on_step:.2f}, peak memory {off_rss / on_rss:.2f}")
PY
