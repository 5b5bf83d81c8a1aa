#!/usr/bin/env bash
# tests/test_ckpt_inspect_dir.sh: `mixprec ckpt inspect DIR` on a run
# directory and on a checkpoint directory (docs/checkpoints.md).
# usage: test_ckpt_inspect_dir.sh MIXPREC_BINARY SOURCE_DIR
#  - a run with 4 checkpoints: `ckpt inspect RUN` and `ckpt inspect
#    RUN/checkpoints` inspect the newest one by step (the last of `ckpt list
#    --json`), and say which: the text output names "latest of 4
#    checkpoints in RUN/checkpoints:" and the file; --json gives `file`,
#    `dir` and `dir_checkpoints`, and otherwise exactly what `ckpt inspect
#    --json FILE` gives for that file; the independent reader
#    (tests/ckpt_reader.py) agrees with it on every tensor;
#  - a newer checkpoint that is corrupt is still the one inspected (the
#    integrity line says it fails), as inspect FILE would show it;
#  - a directory without checkpoints: exit 1, the message names the
#    directory and what is accepted; a missing path still fails as before.
# Negative control: before this change `ckpt inspect RUN` failed reading a
# directory as a safetensors file, so the first check failed (run by hand).
# Exit 77 without /usr/bin/python3 + numpy (the reader needs them).
set -u
src=$(realpath "$2")
. "$(dirname "$0")/cli_lib.sh" "$1"
py=/usr/bin/python3
$py -c 'import numpy' 2>/dev/null || { echo "SKIP: no /usr/bin/python3 with numpy"; exit 77; }
reader="$src/tests/ckpt_reader.py"

"$bin" train --quiet data.trajectories=8 data.episode_length=40 model.hidden=16 \
  training.batch_size=16 training.epochs=2 output.dir=R checkpoint.every_steps=10 \
  checkpoint.keep_last=100 >/dev/null 2>R.err || fail "train: $(cat R.err)"
"$bin" ckpt list R --json >list.json 2>/dev/null || fail "ckpt list"
latest=$($py -c 'import json,sys; print(json.load(open("list.json"))["checkpoints"][-1]["path"])')
n=$($py -c 'import json,sys; print(len(json.load(open("list.json"))["checkpoints"]))')
[ "$n" -ge 2 ] || fail "the run wrote $n checkpoints; want at least 2"

for d in R R/checkpoints; do
  "$bin" ckpt inspect "$d" >t.txt 2>t.err || fail "ckpt inspect $d: exit $?: $(cat t.err)"
  head -1 t.txt | grep -qx "latest of $n checkpoints in R/checkpoints:" ||
    fail "inspect $d does not say which: $(head -2 t.txt)"
  sed -n 2p t.txt | grep -q "^file: $latest (" || fail "inspect $d: not $latest: $(head -2 t.txt)"
  grep -q "^integrity: ok" t.txt || fail "inspect $d: integrity: $(grep integrity t.txt)"
  "$bin" ckpt inspect "$d" --json >d.json 2>/dev/null || fail "inspect $d --json"
  "$bin" ckpt inspect "$latest" --json >f.json 2>/dev/null || fail "inspect $latest --json"
  $py - "$latest" "$n" <<'EOF' || fail "inspect $d --json differs from inspect FILE --json"
import json, sys
d, f = json.load(open("d.json")), json.load(open("f.json"))
ok = d.pop("dir") == "R/checkpoints" and d.pop("dir_checkpoints") == int(sys.argv[2])
ok = ok and d["file"] == sys.argv[1] and d == f and "dir" not in f
sys.exit(0 if ok else 1)
EOF
  $py "$reader" --compare-inspect "$latest" d.json >/dev/null 2>rd.err ||
    fail "reader on $d: $(cat rd.err)"
done

# a newer checkpoint that is corrupt: still the latest, and inspect says so
newest=R/checkpoints/ckpt-000000099999.safetensors
cp "$latest" "$newest"
printf '\x01' | dd of="$newest" bs=1 seek=$(($(stat -c %s "$newest") - 3)) conv=notrunc \
  2>/dev/null
"$bin" ckpt inspect R >c.txt 2>&1 || fail "inspect with a corrupt newest: exit $?: $(cat c.txt)"
head -2 c.txt | grep -q "latest of $((n + 1)) checkpoints" || fail "count: $(head -1 c.txt)"
sed -n 2p c.txt | grep -q "^file: $newest (" || fail "not the corrupt newest: $(head -2 c.txt)"
grep -q "^integrity: ok" c.txt && fail "the corrupt newest reads as intact"

# no checkpoints
mkdir -p empty/checkpoints
"$bin" ckpt inspect empty >e.txt 2>&1
rc=$?
[ $rc -eq 1 ] || fail "inspect of a run without checkpoints: exit $rc (want 1)"
grep -q "empty/checkpoints holds no checkpoint (ckpt-<step>.safetensors); accepted: a checkpoint file, or a run directory or checkpoint directory holding one" e.txt ||
  fail "no-checkpoint message: $(cat e.txt)"
"$bin" ckpt inspect nothing.safetensors >m.txt 2>&1 && fail "a missing file inspected"
exit $((fails > 0))
