#!/bin/bash
# bench/wm_ensemble_figures.sh [BUILD_DIR [WORK_DIR]]: issue 29's MuJoCo
# figures. Writes one flat replay buffer from MuJoCo's ant (random
# actions, bench_wm_buffer: 100 episodes x 100 steps = 10,000 transitions,
# obs 29, actions 8), trains a PETS-style ensemble on it (5 members,
# Gaussian heads, [linear:200, gelu, linear:200, gelu, linear], batch 256,
# data.path = the buffer, validation split by episode) in fp32,
# mixed_bf16 and mixed_fp16, and prints per mode the final validation NLL
# (val_loss: mean over the members, docs/world_models.md), the MSE of the
# ensemble mean and the 1/5/10-step open-loop errors; then the training
# step time of the 5-member ensemble (fp32, no validation, no checkpoints)
# against 5 separate single-model runs of the same epochs (seeds 1..5):
# the same total work. Timings are wall clock on whatever load the machine
# has: print `uptime` beside them and read them as indicative only.
# Environment: EPOCHS (training epochs, default 100), TIME_EPOCHS (timing
# runs, default 20). Needs a build with MuJoCo (Debian libmujoco-dev,
# libmujoco-samples) and python3 for the table. Takes a few minutes.
set -eu
B=${1:-build}
W=${2:-$(mktemp -d)}
EPOCHS=${EPOCHS:-100}
TIME_EPOCHS=${TIME_EPOCHS:-20}
mkdir -p "$W"
MX="$B/mixprec"
LAYERS="model.layers=[linear:200, gelu, linear:200, gelu, linear]"
BUF="$W/ant.safetensors"

echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $("$MX" version | head -1)"
echo "# load before: $(uptime)"
"$B/bench_wm_buffer" "$BUF" ant 100 100 1

common=(data.path="$BUF" model.head=gaussian "$LAYERS" training.batch_size=256
        training.seed=1 --quiet)
for mode in fp32 mixed_bf16 mixed_fp16; do
  "$MX" train "${common[@]}" model.ensemble=5 training.precision=$mode \
    training.epochs="$EPOCHS" training.eval_every=10 output.dir="$W/ens_$mode" >/dev/null 2>"$W/ens_$mode.log"
done
echo "# 5-member Gaussian ensemble, $EPOCHS epochs, final weights on the validation episodes"
python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]
print("%-11s %10s %10s %11s %11s %11s %8s  %s" % ("mode", "val_nll", "val_mse", "open_k1",
      "open_k5", "open_k10", "steps", "member val NLL (best of each)"))
for mode in ("fp32", "mixed_bf16", "mixed_fp16"):
    s = json.load(open("%s/ens_%s/summary.json" % (w, mode)))
    v = s["validation"]
    print("%-11s %10.5f %10.5f %11.5g %11.5g %11.5g %8d  %s" % (
        mode, s["val_loss"], s["val_mse"], s["val_open_loop_k1"], s["val_open_loop_k5"],
        s["val_open_loop_k10"], s["training_steps"],
        " ".join("-" if x is None else "%.4f" % x for x in v.get("member_best_val_loss") or [])))
PY

echo "# step time: fp32, $TIME_EPOCHS epochs, no validation, no checkpoints"
echo "# load before timing: $(uptime)"
timing=("${common[@]}" training.precision=fp32 training.epochs="$TIME_EPOCHS"
        checkpoint.enabled=false)
"$MX" train "${timing[@]}" model.ensemble=5 output.dir="$W/time_ens" >/dev/null 2>&1
for s in 1 2 3 4 5; do
  "$MX" train "${timing[@]}" training.seed=$s model.ensemble=1 output.dir="$W/time_one_$s" \
    >/dev/null 2>&1
done
echo "# load after timing: $(uptime)"
python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]
ens = json.load(open("%s/time_ens/summary.json" % w))
ones = [json.load(open("%s/time_one_%d/summary.json" % (w, s))) for s in range(1, 6)]
es = ens["wall_time_s"] / ens["training_steps"] * 1e3
print("ensemble of 5: %d steps, %.2f s, %.2f ms/step" % (ens["training_steps"],
                                                         ens["wall_time_s"], es))
tot = sum(o["wall_time_s"] for o in ones)
per = [o["wall_time_s"] / o["training_steps"] * 1e3 for o in ones]
print("5 single runs: %d steps each, %.2f s in all, %s ms/step (sum %.2f ms per step of all 5)"
      % (ones[0]["training_steps"], tot, " ".join("%.2f" % p for p in per), sum(per)))
print("ensemble / 5 singles: %.2f" % (ens["wall_time_s"] / tot))
PY
