#!/bin/sh
# scripts/alert_matrix.sh: guard alerts on healthy runs, per workload x
# precision x seed (issue 15 item 7). Prints one CSV row per run:
#   workload,precision,seed,steps,alerts,ended_in,rules
# where alerts counts the guard's "[P0|P1|P2]" log lines (every firing is
# one) and rules names the rules that fired with their counts.
#
# usage: scripts/alert_matrix.sh [MIXPREC_BINARY] [SEEDS] [WORKLOADS] [MODES]
#   defaults: build/mixprec, "1 2 3 4 5", "world_model classifier gpt",
#   "fp32 mixed_bf16 mixed_fp16".
# Sizes: world_model is the default run (3 epochs, 4311 steps); classifier
# 1 epoch of 19200 images (600 steps at batch 32); gpt 1 epoch of 6400
# windows (200 steps at batch 32), so the whole matrix runs in minutes.
set -eu
BIN=${1:-build/mixprec}
SEEDS=${2:-"1 2 3 4 5"}
WORKLOADS=${3:-"world_model classifier gpt"}
MODES=${4:-"fp32 mixed_bf16 mixed_fp16"}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "workload,precision,seed,steps,alerts,ended_in,rules"
for w in $WORKLOADS; do
    case $w in
    world_model) size="" ;;
    classifier) size="training.epochs=1 data.train_subset=19200 data.test_subset=1000" ;;
    gpt) size="training.epochs=1 data.train_subset=6400 data.test_subset=256" ;;
    *) echo "unknown workload $w" >&2; exit 2 ;;
    esac
    for m in $MODES; do
        for s in $SEEDS; do
            # shellcheck disable=SC2086
            "$BIN" train --json checkpoint.enabled=false model.workload=$w \
                training.precision=$m training.seed=$s $size output.dir="$TMP/run" \
                >"$TMP/out.json" 2>"$TMP/err.log" || {
                echo "$w,$m,$s,FAILED,,,"; continue; }
            /usr/bin/python3 - "$w" "$m" "$s" "$TMP/out.json" "$TMP/err.log" <<'EOF'
import json, re, sys, collections
w, m, s, out, err = sys.argv[1:]
d = json.load(open(out))
rules = collections.Counter(re.findall(r"guard \[P[012]\] (\w+)", open(err).read()))
print("%s,%s,%s,%d,%d,%s,%s" % (w, m, s, d["training_steps"], sum(rules.values()),
      d["precision"], " ".join("%s=%d" % kv for kv in sorted(rules.items()))))
EOF
        done
    done
done
