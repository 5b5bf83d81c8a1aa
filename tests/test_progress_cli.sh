#!/usr/bin/env bash
# tests/test_progress_cli.sh: what `mixprec train` shows while it runs
# (issue 15 item 8).
# usage: test_progress_cli.sh MIXPREC_BINARY
#  - on a terminal (script(1) gives one) the bar carries percent, elapsed,
#    ETA, steps/s, samples/s, lr and the precision; a log line printed
#    during the run (a skipped step) starts on a cleared line, never after
#    bar text, and the bar is redrawn after it;
#  - a status line says what happens before the first step (data);
#  - the plain log lines carry the same fields;
#  - one epoch numbering: history.csv, log lines and the bar count from 1.
. "$(dirname "$0")/cli_lib.sh" "$1"
small="data.trajectories=32 data.episode_length=100 model.hidden=32 model.depth=2 training.batch_size=16 training.epochs=2 checkpoint.enabled=false obs.store.enabled=false"
run="$bin train $small training.precision=mixed_fp16 fault.kind=nan fault.step=150 fault.count=1 output.dir=tty"

command -v script > /dev/null || { echo "test_progress_cli: no script(1): skipped"; exit 0; }
script -qec "stty cols 200 2>/dev/null; $run" /dev/null > tty.raw 2>&1 < /dev/null ||
  fail "train on a terminal: exit $?"
python3 - tty.raw <<'PY' || fail "terminal output"
import re, sys
raw = open(sys.argv[1], "rb").read().decode("utf-8", "replace")
bars = re.findall(r"\[[#.]{20}\] +(\d+)% step (\d+)/(\d+) epoch (\d+)/(\d+) +([^\r\n\x1b]*)", raw)
assert bars, "no bar: " + raw[:400]
last = bars[-1]
assert last[0] == "100" and last[1] == last[2], last
for key in ("elapsed ", "ETA ", "steps/s", "samples/s", " lr ", "mixed_fp16"):
    assert key in last[5], (key, last[5])
assert {b[3] for b in bars} == {"1", "2"}, "epochs on the bar: %s" % sorted({b[3] for b in bars})
# every log line starts at column 0 of a cleared line: after a newline or
# "\r\x1b[K", never after bar text
logs = [m.start() for m in re.finditer(r"\[mixprec (info|warn|error)\]", raw)]
assert logs, "no log lines"
for at in logs:
    before = raw[max(0, at - 4):at]
    assert before.endswith("\n") or before.endswith("\r\x1b[K"), "log line on the bar: %r" % raw[at - 60:at + 30]
skip = raw.find("step 150 skipped")
assert skip > 0, "no skipped-step line"
assert re.search(r"\[[#.]{20}\]", raw[skip:]), "bar not redrawn after a log line"
assert "preparing the pendulum data" in raw, "no data status line"
PY

"$bin" train $small output.dir=plain > plain.out 2> plain.err || fail "plain train exit $?"
grep -qE "^step [0-9]+/[0-9]+ \([0-9]+%\) epoch 2/2 .*elapsed .*ETA .*steps/s .*samples/s .*lr .* fp32" plain.err ||
  fail "plain progress line: $(grep '^step' plain.err | tail -1)"
python3 - plain/history.csv <<'PY' || fail "history.csv epochs"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
eps = [int(r["epoch"]) for r in rows]
assert eps[0] == 1 and eps[-1] == 2 and sorted(set(eps)) == [1, 2], sorted(set(eps))
PY

if [ $fails -ne 0 ]; then
  echo "test_progress_cli: $fails failures"
  exit 1
fi
echo "test_progress_cli: ok"
