#!/usr/bin/env bash
# tests/test_ckpt_cli.sh: checkpoints as a user meets them through the CLI.
# usage: test_ckpt_cli.sh MIXPREC_BINARY SOURCE_DIR
#  - train writes checkpoints; `ckpt verify DIR` passes, `ckpt list` lists;
#  - an independent reader (tests/ckpt_reader.py, Debian python3-numpy)
#    reads them, checks the CRC32Cs and agrees with `ckpt inspect --json`
#    on every tensor; `ckpt export` to bf16/fp16/fp32/fp8 is the rounding
#    of the master weights (checked by the reader); `ckpt diff` exit codes;
#  - `train --resume FILE` reproduces the uninterrupted history.csv rows;
#    resuming a finished run trains nothing;
#  - SIGTERM: the step finishes, a checkpoint and the outputs are written,
#    exit 0, and --resume RUN_DIR then ends with the uninterrupted run's
#    history; a second SIGTERM kills at once without damaging checkpoints;
#  - a truncated or bit-flipped checkpoint fails verify with a clear message;
#  - disk full / read-only filesystem during a save (a 256 KiB tmpfs, when
#    this user may mount one): an error, and the previous checkpoints
#    survive and verify.
set -u
bin=$(realpath "$1")
src=$(realpath "$2")
reader="$src/tests/ckpt_reader.py"
py=/usr/bin/python3
work=$(mktemp -d)
mnt="$work/tmpfs"
cleanup() {
  mountpoint -q "$mnt" 2>/dev/null && umount "$mnt"
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

small="data.trajectories=8 data.episode_length=40 model.hidden=16 training.batch_size=16"

if ! $py -c 'import numpy' 2>/dev/null; then
  fail "$py with numpy is required (Debian python3-numpy; scripts/install-deps.sh)"
fi
$py "$reader" --selftest >/dev/null || fail "reader selftest"

# ---- a run with checkpoints -----------------------------------------------
"$bin" train --quiet $small training.epochs=3 output.dir=A checkpoint.every_steps=10 \
  checkpoint.keep_last=100 >/dev/null 2>A.err || fail "train A: $(cat A.err)"
[ -f A/checkpoints/ckpt-000000000020.safetensors ] || fail "no checkpoint of step 20"
"$bin" ckpt verify A >verify.txt 2>&1 || fail "ckpt verify A: $(cat verify.txt)"
grep -q "shapes match the config" verify.txt || fail "verify did not check shapes: $(cat verify.txt)"
n_ckpt=$("$bin" ckpt list A 2>/dev/null | wc -l)
[ "$n_ckpt" -ge 5 ] || fail "ckpt list shows $n_ckpt checkpoints"
total=$(($(wc -l <A/history.csv) - 1))

f20=A/checkpoints/ckpt-000000000020.safetensors
for f in A/checkpoints/*.safetensors; do
  "$bin" ckpt inspect --json "$f" >ins.json 2>/dev/null || fail "inspect $f"
  $py "$reader" --compare-inspect "$f" ins.json >/dev/null 2>rd.err || fail "reader: $(cat rd.err)"
done
"$bin" ckpt inspect "$f20" >ins.txt 2>&1 || fail "inspect text"
for k in step scaler rng data_position config healthy header_crc32c; do
  grep -q "^$k" ins.txt || fail "inspect lacks $k"
done
for d in bf16 fp16 fp32 f8_e4m3 f8_e5m2; do
  "$bin" ckpt export "$f20" --dtype $d -o "w.$d.safetensors" >/dev/null 2>ex.err ||
    fail "export $d: $(cat ex.err)"
  $py "$reader" --check-export "$f20" "w.$d.safetensors" >/dev/null 2>rd.err ||
    fail "export $d: $(cat rd.err)"
done
"$bin" ckpt diff "$f20" "$f20" >/dev/null 2>&1 || fail "diff of a file with itself is not 0"
"$bin" ckpt diff "$f20" A/checkpoints/ckpt-000000000030.safetensors >diff.txt 2>&1
[ $? -eq 1 ] || fail "diff of two steps did not exit 1"
grep -q "layers.0.weight" diff.txt || fail "diff lacks a per-tensor line"
"$bin" ckpt export "$f20" --dtype int8 -o x.safetensors >/dev/null 2>&1
[ $? -eq 2 ] || fail "export --dtype int8 is not a usage error"

# ---- resume reproduces the history ----------------------------------------
"$bin" train --quiet --resume "$f20" output.dir=B >/dev/null 2>B.err || fail "resume: $(cat B.err)"
tail -n +22 A/history.csv >a.rows
tail -n +2 B/history.csv >b.rows
cmp -s a.rows b.rows || fail "history after resume at 20 differs from the uninterrupted run"
grep -q "\"training_steps\":$total" B/summary.json || fail "resumed run did not end at step $total"
"$bin" train --quiet --resume A >/dev/null 2>C.err || fail "resume finished run: $(cat C.err)"
grep -q "nothing to train" C.err || fail "resuming a finished run: $(cat C.err)"

# ---- hostile files through the CLI ------------------------------------------
size=$(stat -c %s "$f20")
head -c $((size - 7)) "$f20" >trunc.safetensors
"$bin" ckpt verify trunc.safetensors >v.txt 2>&1
[ $? -eq 1 ] || fail "truncated file verified"
grep -q "trunc.safetensors.*truncated" v.txt || fail "truncated: $(cat v.txt)"
cp "$f20" flip.safetensors
printf '\x5a' | dd of=flip.safetensors bs=1 seek=$((size - 11)) conv=notrunc 2>/dev/null
"$bin" ckpt verify flip.safetensors >v.txt 2>&1
[ $? -eq 1 ] || fail "bit-flipped file verified"
grep -q "flip.safetensors.*checksum mismatch" v.txt || fail "flip: $(cat v.txt)"
"$bin" train --quiet --resume trunc.safetensors output.dir=T >/dev/null 2>t.err
[ $? -eq 2 ] || fail "resume from a truncated file did not exit 2"
[ ! -e T ] || fail "resume from a truncated file wrote outputs"

# ---- graceful stop ------------------------------------------------------------
# wide enough that the run is still going when SIGTERM arrives even with the
# fast kernels (about 2 s on the 2-core machine, ~10x that under ASan)
long="$small model.hidden=192 training.epochs=300 checkpoint.every_steps=0"
"$bin" train --quiet $long output.dir=full >/dev/null 2>full.err || fail "full run: $(cat full.err)"
full_total=$(($(wc -l <full/history.csv) - 1))
wait_for() { # wait up to 60 s for a path (a glob may be given)
  for _ in $(seq 1200); do compgen -G "$1" >/dev/null && return 0; sleep 0.05; done
  return 1
}
"$bin" train --quiet $long output.dir=S >/dev/null 2>S.err &
pid=$!
wait_for S/checkpoints || fail "run S never started"
sleep 0.2
kill -TERM $pid
wait $pid
rc=$?
[ $rc -eq 0 ] || fail "SIGTERM: exit $rc: $(tail -3 S.err)"
grep -q "stopped by signal after step" S.err || fail "SIGTERM not reported: $(tail -3 S.err)"
[ -f S/summary.json ] && [ -f S/history.csv ] || fail "SIGTERM: outputs not written"
rows=$(($(wc -l <S/history.csv) - 1))
last=$(ls S/checkpoints | tail -1)
[ "$last" = "$(printf 'ckpt-%012d.safetensors' $rows)" ] ||
  fail "SIGTERM: newest checkpoint $last, $rows steps done"
[ "$rows" -lt "$full_total" ] || echo "note: the run finished before SIGTERM arrived"
"$bin" ckpt verify S >/dev/null 2>&1 || fail "SIGTERM: checkpoints do not verify"
"$bin" train --quiet --resume S >/dev/null 2>S2.err || fail "resume S: $(tail -3 S2.err)"
# the resumed run's history keeps the rows before the checkpoint: the whole
# file equals the uninterrupted run's
cmp -s S/history.csv full/history.csv ||
  fail "history after SIGTERM + resume differs from the uninterrupted run"

"$bin" train --quiet $long checkpoint.every_steps=5 output.dir=K >/dev/null 2>K.err &
pid=$!
wait_for "K/checkpoints/ckpt-*.safetensors" || fail "run K never checkpointed"
kill -TERM $pid
kill -TERM $pid 2>/dev/null
wait $pid
rc=$?
[ $rc -eq 143 ] || [ $rc -eq 0 ] || fail "double SIGTERM: exit $rc"
"$bin" ckpt verify K >/dev/null 2>&1 || fail "double SIGTERM damaged a checkpoint"

# ---- disk full and read-only filesystem ------------------------------------------
mkdir -p "$mnt"
if mount -t tmpfs -o size=256k tmpfs "$mnt" 2>/dev/null; then
  "$bin" train --quiet $small training.epochs=2 output.dir=D checkpoint.every_steps=5 \
    checkpoint.dir="$mnt/ck" >/dev/null 2>D.err || fail "tmpfs run: $(cat D.err)"
  before=$(cd "$mnt/ck" && md5sum ckpt-*.safetensors)
  dd if=/dev/zero of="$mnt/filler" bs=4k 2>/dev/null  # fill the disk
  "$bin" train --quiet --resume "$mnt/ck/$(ls "$mnt/ck" | head -1)" output.dir=D2 \
    checkpoint.every_steps=1 >/dev/null 2>D2.err
  [ $? -eq 1 ] || fail "ENOSPC: training did not fail"
  grep -q "No space left on device" D2.err || fail "ENOSPC message: $(tail -2 D2.err)"
  ls -a "$mnt/ck" | grep -q '\.tmp-' && fail "ENOSPC: temp file left behind"
  [ "$(cd "$mnt/ck" && md5sum ckpt-*.safetensors)" = "$before" ] || fail "ENOSPC changed checkpoints"
  "$bin" ckpt verify "$mnt/ck" >/dev/null 2>&1 || fail "ENOSPC: old checkpoints do not verify"
  rm -f "$mnt/filler"
  mount -o remount,ro "$mnt"
  "$bin" train --quiet --resume "$mnt/ck/$(ls "$mnt/ck" | head -1)" output.dir=D3 \
    checkpoint.every_steps=1 >/dev/null 2>D3.err
  [ $? -ne 0 ] || fail "read-only: training did not fail"
  grep -q "Read-only file system" D3.err || fail "EROFS message: $(tail -2 D3.err)"
  "$bin" ckpt verify "$mnt/ck" >/dev/null 2>&1 || fail "EROFS: old checkpoints do not verify"
  umount "$mnt"
else
  echo "note: cannot mount a tmpfs here; ENOSPC/EROFS covered by test_ckpt's injected faults"
fi

# A run that fell back out of mixed_fp16 with FP16 accumulation on resumes in
# the fallback mode with FP32 accumulation (its checkpoint is mixed_bf16).
"$bin" train --quiet $small training.epochs=1 training.precision=mixed_fp16 \
  training.fp16_accumulate=fp16 fault.kind=nan fault.layer=2 fault.step=3 fault.count=10 \
  checkpoint.every_steps=5 output.dir=FB >/dev/null 2>FB.err || fail "fallback run: $(tail -2 FB.err)"
"$bin" train --quiet --json --resume FB training.epochs=2 >FB2.json 2>FB2.err ||
  fail "resume after fallback: $(tail -2 FB2.err)"
grep -q '"precision":"mixed_bf16"' FB2.json && grep -q '"fp16_accumulate":"fp32"' FB2.json ||
  fail "resume after fallback: $(head -c 300 FB2.json)"
# ... and refuses FP16 accumulation asked for on the command line (exit 2)
"$bin" train --quiet --resume FB training.epochs=2 training.fp16_accumulate=fp16 \
  >/dev/null 2>FB3.err
[ $? -eq 2 ] && grep -q "training.fp16_accumulate" FB3.err || fail "explicit fp16 accumulate on bf16"

if [ $fails -gt 0 ]; then
  echo "test_ckpt_cli: $fails failures"
  exit 1
fi
echo "test_ckpt_cli: all passed ($n_ckpt checkpoints, resume at 20 and after SIGTERM at step $rows)"
