#!/usr/bin/env bash
# bench/step_before_after.sh OLD_BENCH NEW_BENCH [ROUNDS]: bench_train_step
# of two builds, alternating, on the default world model (in 4, 256 x 3,
# batch 32) and the 512 x 3 batch-256 MLP, in fp32, mixed_bf16 and
# mixed_fp16; prints "config mode side round median_ms" rows, then the
# medians over the rounds and new/old. Both builds run on this machine in
# one invocation (docs/benchmarks.md: peers side by side).
set -euo pipefail
old=$1 new=$2 rounds=${3:-5}
echo "# $(date -u) $(uptime)"
echo "# $(grep -m1 'model name' /proc/cpuinfo)"
for cfg in "wm:--in 4 --hidden 256 --depth 3 --out 4 --batch 32 --steps 400 --warmup 50" \
           "mlp512:--in 72 --hidden 512 --depth 3 --out 65 --batch 256 --steps 40 --warmup 5"; do
  name=${cfg%%:*} a=${cfg#*:}
  for p in fp32 mixed_bf16 mixed_fp16; do
    for r in $(seq "$rounds"); do
      for side in old new; do
        b=$old; [ "$side" = new ] && b=$new
        # shellcheck disable=SC2086 # options split on purpose
        m=$("$b" $a --precision "$p" --json | sed -E 's/.*"median_ms":([0-9.]+).*/\1/')
        echo "$name $p $side $r $m"
      done
    done
  done
done | tee /dev/stderr | sort -k1,1 -k2,2 -k3,3 -k5,5g | awk '
  { k = $1 " " $2 " " $3; n[k]++; x[k, n[k]] = $5 }
  END { for (k in n) med[k] = x[k, int((n[k] + 1) / 2)]
        for (k in med) if (k ~ / old$/) { c = substr(k, 1, length(k) - 4)
          printf "%-20s old %.4f new %.4f new/old %.3f\n", c, med[k], med[c " new"], med[c " new"] / med[k] } }'
