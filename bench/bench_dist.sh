#!/usr/bin/env bash
# bench/bench_dist.sh: data-parallel scaling of the world model on one
# machine (a benchmark, not a test).
#
# usage: bench/bench_dist.sh [MIXPREC_BINARY [REPEATS]]
#        (default build/mixprec, 3 repeats; medians are reported)
#
# For the base (hidden 256 x 3) and big (hidden 2048 x 3) world models at
# the same GLOBAL batch of 32, compares
#   1 rank  x 1 thread            (MIXPREC_NUM_THREADS=1)
#   1 rank  x 2 threads           (MIXPREC_NUM_THREADS=2)
#   2 ranks x 1 thread, fp32 all-reduce  (mpirun -np 2, batch 16 per rank)
#   2 ranks x 1 thread, bf16 all-reduce
# and prints per configuration: median step time (wall time / steps),
# the fraction of it spent inside collectives on rank 0 (waiting for the
# other rank included), bytes sent per step by rank 0 as counted at the
# communicator (mxp_comm_stats), and the parameter count.
# Checkpoints and the run store are off so only training is timed.
# BENCH_MPI_ARGS adds mpirun flags, e.g. "--mca mpi_yield_when_idle 1" on a
# loaded machine (waiting ranks then yield their core instead of polling).
set -euo pipefail
bin=$(realpath "${1:-build/mixprec}")
reps=${2:-3}
command -v mpirun >/dev/null || { echo "bench_dist: needs mpirun (openmpi-bin)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
MPI=(mpirun --oversubscribe --allow-run-as-root -np 2 -x MIXPREC_NUM_THREADS=1 ${BENCH_MPI_ARGS:-})
common="training.epochs=1 checkpoint.enabled=false obs.store.enabled=false log.level=warn"

# run NAME THREADS RANKS EXTRA... : one run, prints its summary JSON path
run() {
  local name=$1 threads=$2 ranks=$3; shift 3
  local out="$work/$name"
  if [ "$ranks" = 1 ]; then
    MIXPREC_NUM_THREADS=$threads "$bin" train --json output.dir="$out" $common "$@" \
      >"$out.json" 2>"$out.err"
  else
    "${MPI[@]}" "$bin" train --json output.dir="$out" $common "$@" >"$out.json" 2>"$out.err"
  fi
  echo "$out.json"
}

# median over REPEATS runs of: step_ms comm_fraction bytes_per_step
measure() {
  local files=()
  for i in $(seq 1 "$reps"); do files+=("$(run "$1-$i" "${@:2}")"); done
  python3 - "${files[@]}" <<'EOF'
import json, statistics, sys
rows = [json.loads(open(f).read().strip().splitlines()[-1]) for f in sys.argv[1:]]
step = [r["wall_time_s"] / r["training_steps"] * 1e3 for r in rows]
frac = [r.get("comm_seconds", 0) / r["wall_time_s"] for r in rows]
byts = [r.get("comm_bytes_sent", 0) / r["training_steps"] for r in rows]
print(f"{statistics.median(step):.3f} {statistics.median(frac):.3f} {statistics.median(byts):.0f} "
      f"{rows[0]['training_steps']}")
EOF
}

params() { # hidden depth in out -> parameter count of the MLP
  python3 -c "h,d,i,o=$1,$2,$3,$4; print(i*h+h + (d-1)*(h*h+h) + h*o+o)"
}

echo "bench_dist: $(nproc) cores, $reps repeats, medians; $(date -u +%FT%TZ)"
echo "machine load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-6s %-26s %10s %10s %14s %8s\n" model config step_ms comm_frac bytes/step steps
for model in base big; do
  if [ $model = base ]; then
    m="model.hidden=256 model.depth=3 data.trajectories=64"; h=256
  else
    m="model.hidden=2048 model.depth=3 data.trajectories=16"; h=2048
  fi
  P=$(params $h 3 4 4) # pendulum: 3 state + 1 action in, 3 delta + 1 reward out
  for cfg in "1r x 1t|1 1 training.batch_size=32" "1r x 2t|2 1 training.batch_size=32" \
             "2r x 1t fp32|1 2 training.batch_size=16" \
             "2r x 1t bf16|1 2 training.batch_size=16 dist.allreduce_dtype=bf16"; do
    label=${cfg%%|*}
    read -r threads ranks extra <<<"${cfg#*|}"
    read -r step frac bytes steps <<<"$(measure "$model-${label// /_}" "$threads" "$ranks" \
      $m $extra)"
    printf "%-6s %-26s %10s %10s %14s %8s\n" "$model" "$label" "$step" "$frac" "$bytes" "$steps"
  done
  echo "       parameters: $P ($((P * 4)) bytes in FP32)"
done
