#!/bin/bash
# scripts/ckpt-identity.sh OLD_CLI NEW_CLI [MODE...]: are the checkpoints
# and losses of two builds bit-identical? For each mode (default: fp32
# mixed_bf16 mixed_fp16 bf16) both CLIs train the default world model into
# the same output.dir (one after the other, checkpoint.every_steps=1000),
# then every checkpoint pair is compared:
#   - the tensor data region with `cmp` (byte for byte: every weight and
#     optimizer moment),
#   - the header's tensor table (names, dtypes, shapes, offsets) and the
#     metadata, of which only the volatile run_id, saved_at and the header
#     checksum over them may differ (two runs of one build differ there);
# and history.csv's step, epoch, loss, scale, grad_norm, skipped and
# precision columns with `cmp`. Extra key=value arguments after `--` go to
# both runs (e.g. -- model.workload=classifier training.epochs=1).
# Exit 0 when everything matches, 1 otherwise. Needs bash, cmp, python3.
set -u
[ $# -ge 2 ] || { echo "usage: $0 OLD_CLI NEW_CLI [MODE...] [-- key=value...]" >&2; exit 2; }
old=$1 new=$2
shift 2
modes=() extra=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then shift; extra=("$@"); break; fi
  modes+=("$1"); shift
done
[ ${#modes[@]} -gt 0 ] || modes=(fp32 mixed_bf16 mixed_fp16 bf16)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

header_len() { python3 -c "import struct,sys;print(8+struct.unpack('<Q',open(sys.argv[1],'rb').read(8))[0])" "$1"; }
same_header() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
def head(p):
    b = open(p, "rb").read()
    h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
    return h.pop("__metadata__", {}), h
(ma, ta), (mb, tb) = head(sys.argv[1]), head(sys.argv[2])
diff = sorted(k for k in set(ma) | set(mb) if ma.get(k) != mb.get(k))
bad = [k for k in diff if k not in ("run_id", "saved_at", "header_crc32c")]
if ta != tb: print("  tensor tables differ")
if bad: print("  metadata differs: " + ", ".join(bad))
sys.exit(1 if ta != tb or bad else 0)
PY
}

rc=0
for mode in "${modes[@]}"; do
  for who in old new; do
    bin=$old; [ $who = new ] && bin=$new
    rm -rf "$work/run"
    if ! nice "$bin" train --quiet output.dir="$work/run" training.precision="$mode" \
        checkpoint.every_steps=1000 "${extra[@]}" >"$work/$who-$mode.log" 2>&1; then
      echo "$mode: $who build's run failed (exit $?): $(tail -n 3 "$work/$who-$mode.log")"; rc=1
    fi
    mv "$work/run" "$work/$who-$mode"
  done
  n=0
  for f in "$work/old-$mode"/checkpoints/*.safetensors; do
    [ -f "$f" ] || { echo "$mode: no checkpoint written"; rc=1; break; }
    g="$work/new-$mode/checkpoints/$(basename "$f")"
    [ -f "$g" ] || { echo "$mode: $(basename "$f") missing in the new run"; rc=1; continue; }
    if ! cmp -s -i "$(header_len "$f"):$(header_len "$g")" "$f" "$g"; then
      echo "$mode: $(basename "$f"): tensor data differs"; rc=1
    elif ! same_header "$f" "$g"; then
      echo "$mode: $(basename "$f"): header differs"; rc=1
    else
      n=$((n + 1))
    fi
  done
  if cmp -s <(cut -d, -f1-7 "$work/old-$mode/history.csv") <(cut -d, -f1-7 "$work/new-$mode/history.csv"); then
    echo "$mode: $n checkpoints identical (tensor bytes, table, metadata but run_id/saved_at); history identical ($(($(wc -l < "$work/new-$mode/history.csv") - 1)) steps)"
  else
    echo "$mode: history.csv differs"; rc=1
  fi
done
exit $rc
