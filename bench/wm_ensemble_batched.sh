#!/bin/bash
# bench/wm_ensemble_batched.sh [BUILD_DIR [WORK_DIR]]: issue 29 part 2's
# timing. The training step time of a 5-member PETS-style ensemble (the
# model of wm_ensemble_figures.sh: Gaussian heads, [linear:200, gelu,
# linear:200, gelu, linear], batch 256, on the MuJoCo ant buffer that
# bench_wm_buffer writes) with the layer-major ensemble pass
# (MIXPREC_ENS_BATCHED=1, src/nn/ens_batched.c) and the member-sequential
# pass (MIXPREC_ENS_BATCHED=0), side by side in one invocation: ROUNDS
# rounds, each running both (the order alternating), per precision in
# MODES; prints every run's ms/step and the medians. Wall clock on
# whatever load the machine has: `uptime` is printed beside the figures,
# read them as indicative only.
# Environment: ROUNDS (default 5), EPOCHS (per run, default 3), MODES
# (default "fp32 mixed_bf16"). Needs a build with MuJoCo and python3.
set -eu
B=${1:-build}
W=${2:-$(mktemp -d)}
ROUNDS=${ROUNDS:-5}
EPOCHS=${EPOCHS:-3}
MODES=${MODES:-fp32 mixed_bf16}
mkdir -p "$W"
MX="$B/mixprec"
BUF="$W/ant.safetensors"
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $("$MX" version | head -1); $(nproc) CPUs"
"$B/bench_wm_buffer" "$BUF" ant 100 100 1
common=(data.path="$BUF" model.head=gaussian "model.layers=[linear:200, gelu, linear:200, gelu, linear]"
        training.batch_size=256 training.seed=1 model.ensemble=5 training.epochs="$EPOCHS"
        checkpoint.enabled=false --quiet)
echo "# load before: $(uptime)"
for mode in $MODES; do
  for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then order="1 0"; else order="0 1"; fi
    for v in $order; do
      MIXPREC_ENS_BATCHED=$v "$MX" train "${common[@]}" training.precision="$mode" \
        output.dir="$W/$mode.b$v.r$r" >/dev/null 2>&1
    done
  done
done
echo "# load after: $(uptime)"
python3 - "$W" "$ROUNDS" $MODES <<'PY'
import json, statistics, sys
w, rounds, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
for mode in modes:
    row = {}
    for v, name in (("1", "batched"), ("0", "sequential")):
        ms = []
        for r in range(1, rounds + 1):
            s = json.load(open("%s/%s.b%s.r%d/summary.json" % (w, mode, v, r)))
            ms.append(s["wall_time_s"] / s["training_steps"] * 1e3)
            steps, loss = s["training_steps"], (s["final_train_loss"], s["val_loss"])
        row[name] = statistics.median(ms)
        print("%-10s %-10s %d steps/run, ms/step: %s; median %.2f; final train/val loss %r" % (
            mode, name, steps, " ".join("%.2f" % x for x in ms), row[name], loss))
    print("%-10s batched / sequential (medians): %.3f" % (mode, row["batched"] / row["sequential"]))
PY
