#!/usr/bin/env bash
# tests/test_progress_width.sh: the progress bar fits the terminal and never
# cuts a field (issue 30 item 12). usage: test_progress_width.sh MIXPREC_BINARY
#  - on terminals of 60, 80, 120 and 200 columns (script(1) and stty) every
#    bar line is narrower than the terminal; the step counter, percent, the
#    loss and the precision are always there (before: no loss at 80
#    columns, a number cut in half at 120);
#  - every field shown at a narrow width is whole: the deterministic ones
#    (step, epoch, loss, lr, precision, scale) read exactly as on the
#    200-column bar of the same run;
#  - rates read as 14.4k or 987, never in e-notation (before: 1.3e+03
#    steps/s), on the bar and in the plain log lines;
#  - training on a user file says "loading FILE", not "preparing the
#    pendulum data" (before: the pendulum line).
. "$(dirname "$0")/cli_lib.sh" "$1"
command -v script > /dev/null || { echo "test_progress_width: no script(1): skipped"; exit 0; }
small="data.trajectories=32 data.episode_length=100 model.hidden=32 model.depth=2 training.batch_size=16 training.epochs=2 checkpoint.enabled=false obs.store.enabled=false training.precision=mixed_fp16"
for cols in 60 80 120 200; do
  script -qec "stty cols $cols 2>/dev/null; $bin train $small output.dir=w$cols" /dev/null \
    > "tty$cols.raw" 2>&1 < /dev/null || fail "train on a $cols-column terminal: exit $?"
done
"$bin" train $small output.dir=plain > plain.out 2> plain.err || fail "plain train: exit $?"
python3 - <<'PY' || fail "bar widths and fields"
import re
def bars(cols):
    raw = open("tty%d.raw" % cols, "rb").read().decode("utf-8", "replace")
    lines = [re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", part) for part in re.split(r"[\r\n]", raw)]
    return [ln for ln in lines if re.match(r"\[[#.]+\] +\d+% step \d+/\d+", ln)]
def fields(line):
    head, _, rest = line.partition("  ")
    out = {"step": re.search(r"step (\d+/\d+)", head).group(1)}
    m = re.search(r"epoch (\d+/\d+)", head)
    if m:
        out["epoch"] = m.group(1)
    for f in rest.split("  ") if rest else []:
        k, _, v = f.rpartition(" ")
        if v in ("steps/s", "samples/s"):
            k, v = v, k
        out[k or "precision"] = v
    return out
wide = fields(bars(200)[-1])
for key in ("epoch", "loss", "lr", "precision", "scale", "ETA", "steps/s", "samples/s", "elapsed"):
    assert key in wide, (key, wide)
for cols in (60, 80, 120):
    bl = bars(cols)
    assert bl, "no bar at %d columns" % cols
    for ln in bl:
        assert len(ln) <= cols - 1, "%d columns: a bar line of %d: %r" % (cols, len(ln), ln)
    last = fields(bl[-1])
    for key in ("loss", "precision"):
        assert key in last, "%d columns: no %s: %r" % (cols, key, bl[-1])
    for key in ("step", "epoch", "loss", "lr", "precision", "scale"):
        if key in last:
            assert last[key] == wide[key], (cols, key, last[key], wide[key])
for cols in (60, 80, 120, 200):
    for ln in bars(cols):
        assert "e+" not in ln and "e-0" not in ln.split("loss")[0], ln
plain = [ln for ln in open("plain.err") if ln.startswith("step ")]
assert plain, "no plain progress lines"
for ln in plain:
    assert not re.search(r"\de[+-]\d+ (steps|samples)/s", ln), ln
    assert re.search(r" (\d+(\.\d+)?[kMG]?) steps/s", ln), ln
PY

# a user file: the status line names it (NumPy writes it: Debian's python3)
if /usr/bin/python3 -c "
import numpy as np; r = np.random.default_rng(1); x = r.normal(size=(256, 5)).astype('f4')
np.savez('reg.npz', x=x, y=np.tanh(x[:, :2]))" 2> /dev/null; then
script -qec "$bin train data.path=reg.npz model.workload=regressor training.epochs=1 output.dir=u" \
  /dev/null > user.raw 2>&1 < /dev/null || fail "train on reg.npz: exit $?"
grep -q "loading reg.npz" user.raw || fail "no 'loading reg.npz' status line"
grep -q "pendulum" user.raw && fail "training on reg.npz mentions the pendulum"
else
  echo "test_progress_width: no NumPy in /usr/bin/python3: the data.path status line is not checked"
fi

if [ $fails -ne 0 ]; then
  echo "test_progress_width: $fails failures"
  exit 1
fi
echo "test_progress_width: ok"
