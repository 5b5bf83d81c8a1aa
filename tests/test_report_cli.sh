#!/usr/bin/env bash
# tests/test_report_cli.sh: `mixprec report` plots (issue 15 item 10).
# usage: test_report_cli.sh MIXPREC_BINARY
# A mixed_fp16 run with an absurd initial loss scale (overflows at the start)
# and 10 NaN losses (fallback + rollback), then `mixprec report`:
#  - the loss plot draws the validation loss (validation.tsv, from the
#    store's "validation" events) beside the training loss, with numbered
#    log ticks;
#  - rollback and fallback are drawn once each per step, in their own
#    colours, with labels that do not print over each other;
#  - the loss-scale plot keeps a margin around the data (no point on the
#    frame) and names the number of overflow steps;
#  - the grad-health right axis reaches at least 6%, so tiny fractions stay
#    flat instead of becoming full-height bars;
#  - report.md carries every event message whole (a guard message is
#    longer than the old 160-byte cut);
#  - a directory without a run store is a usage error (exit 2) that says so,
#    not "could not write outputs".
. "$(dirname "$0")/cli_lib.sh" "$1"
command -v gnuplot > /dev/null || { echo "SKIP: gnuplot not installed (scripts/install-deps.sh)"; exit 0; }

"$bin" train --quiet output.dir=run checkpoint.enabled=false training.epochs=2 \
  data.trajectories=32 data.episode_length=100 model.hidden=32 model.depth=2 \
  training.batch_size=16 training.precision=mixed_fp16 training.loss_scale.init=1e9 \
  fault.kind=nan fault.layer=1 fault.step=150 fault.count=10 > /dev/null 2> train.err ||
  fail "train exit $?"
"$bin" report run > report.out 2> report.err || fail "report exit $?: $(cat report.err)"
r=run/report
for p in loss loss_scale grad_health step_time; do
  [ "$(head -c 8 $r/$p.png | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "$p.png not a PNG"
done
python3 - "$r" <<'PY' || fail "plot script / report.md"
import re, sys
r = sys.argv[1]
gp = open(r + "/plots.gp").read()
vals = [l.split() for l in open(r + "/validation.tsv") if l.strip()]
assert len(vals) >= 1 and float(vals[-1][1]) > 0, "no validation loss: %s" % vals
assert "validation.tsv" in gp and "validation loss" in gp, "validation loss not plotted"
loss = gp[gp.index("loss.png"):gp.index("loss_scale.png")]
tics = re.search(r"set ytics \(([^)]*)\)", loss)
assert tics and len(tics.group(1).split(",")) >= 3, "loss plot y tics: %s" % (tics and tics.group(0))
arrows = re.findall(r"set arrow from (\d+), graph 0 .* lc rgb '(#[0-9a-f]+)'", loss)
labels = re.findall(r"set label '(\w+) \(step (\d+)\)' at \d+, graph ([0-9.]+)", loss)
kinds = [l[0] for l in labels]
assert kinds.count("rollback") == 1 and kinds.count("fallback") == 1, kinds
assert len({l[2] for l in labels}) == len(labels), "labels print over each other: %s" % labels
assert len({a[1] for a in arrows}) == 2, "rollback and fallback share a colour: %s" % arrows
sc = gp[gp.index("loss_scale.png"):gp.index("grad_health.png")]
assert re.search(r"set offsets graph 0\.0\d+, graph 0\.0\d+, graph 0\.\d+, graph 0\.\d+", sc), "no margin"
assert re.search(r"overflow \(skipped\) steps: \d+ of \d+ steps", sc), "overflow count not in the title"
# issue 30 item 14: the key sat inside the plot (top right, opaque) and hid
# the last level of a growing scale; it goes below the plot area
key = re.findall(r"^set key ([^\n]*)", gp[:gp.index("plot data using 1:3")], re.M)
assert key and ("below" in key[-1] or "outside" in key[-1]), "loss-scale key: %s" % key
gh = gp[gp.index("grad_health.png"):gp.index("step_time.png")]
y2 = float(re.search(r"set y2range \[0:([0-9.e+-]+)\]", gh).group(1))
assert y2 >= 0.06, "right axis %g" % y2
md = open(r + "/report.md").read()
long = [l for l in open(r + "/events.tsv") if len(l) > 200]
assert long, "no long event message to check"
for l in long:
    msg = l.rstrip("\n").split("\t")[3]
    assert msg in md, "report.md cuts: " + msg[:80]
PY

mkdir empty
"$bin" report empty > /dev/null 2> empty.err
rc=$?
[ $rc -eq 2 ] || fail "report of a directory without a store: exit $rc, expected 2"
grep -q "holds no run store" empty.err || fail "no-store message: $(cat empty.err)"
grep -qi "could not write" empty.err && fail "no-store message talks about writing"

if [ $fails -ne 0 ]; then
  echo "test_report_cli: $fails failures"
  exit 1
fi
echo "test_report_cli: ok"
