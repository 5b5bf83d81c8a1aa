#!/bin/bash
# bench/wm_gauss_step_ab.sh OLD_BUILD NEW_BUILD [ROUNDS [EPOCHS [WORK_DIR]]]:
# the training step of a PETS-style ensemble (5 members, Gaussian heads,
# [linear:200, gelu, linear:200, gelu, linear], batch 256, fp32, no
# checkpoints) on MuJoCo's ant buffer (bench_wm_buffer: 100 episodes x 100
# steps, obs 29, actions 8: K = 30 targets), with the `mixprec` CLI of two
# builds alternating in one invocation (docs/benchmarks.md: peers side by
# side), ROUNDS (default 4) runs each of EPOCHS (default 3) epochs. Per run
# it prints the median and mean of the per-step durations the run's store
# recorded (metrics.db, steps.duration_s: the step itself, not the start-up
# nor the final evaluation), then per side the median of the run medians
# and new/old. Wall clock on whatever load the machine has: `uptime` is
# printed before and after; read the figures as indicative only. Needs a
# build with MuJoCo and python3 (sqlite3 module).
set -euo pipefail
old=$1 new=$2 rounds=${3:-4} epochs=${4:-3}
W=${5:-$(mktemp -d)}
mkdir -p "$W"
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) old=$old new=$new rounds=$rounds epochs=$epochs"
echo "# $(grep -m1 'model name' /proc/cpuinfo)"
echo "# load before: $(uptime)"
"$new/bench_wm_buffer" "$W/ant.safetensors" ant 100 100 1
for r in $(seq "$rounds"); do
  for side in old new; do
    b=$old; [ "$side" = new ] && b=$new
    d="$W/${side}_$r"
    "$b/mixprec" train data.path="$W/ant.safetensors" model.head=gaussian model.ensemble=5 \
      "model.layers=[linear:200, gelu, linear:200, gelu, linear]" training.batch_size=256 \
      training.seed=1 training.precision=fp32 training.epochs="$epochs" \
      checkpoint.enabled=false output.dir="$d" --quiet >/dev/null 2>"$d.log"
    python3 - "$d/metrics.db" "$side" "$r" <<'PY'
import sqlite3, statistics, sys
d = [r[0] for r in sqlite3.connect(sys.argv[1]).execute(
    "select duration_s from steps order by step")]
print("%s %s steps %d median_ms %.3f mean_ms %.3f" % (
    sys.argv[2], sys.argv[3], len(d), 1e3 * statistics.median(d), 1e3 * statistics.mean(d)))
PY
  done
done | tee "$W/rows.txt"
echo "# load after: $(uptime)"
python3 - "$W/rows.txt" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {s: statistics.median(float(r[5]) for r in rows if r[0] == s) for s in ("old", "new")}
print("median of run medians: old %.3f ms, new %.3f ms, new/old %.3f"
      % (med["old"], med["new"], med["new"] / med["old"]))
PY
