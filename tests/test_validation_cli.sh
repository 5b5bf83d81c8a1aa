#!/usr/bin/env bash
# tests/test_validation_cli.sh: validation during training in `mixprec train`
# (docs/run.md "Validation during training").
# usage: test_validation_cli.sh MIXPREC_BINARY
#  - training.eval_every=1 with early stopping: exit 0; history.csv has a
#    val_loss on the last row of each epoch and nowhere else; the stop epoch
#    and the best epoch recomputed here from those losses (the documented
#    rule) are the run's (the last history row, summary.json "validation");
#    best.safetensors verifies; the store has a validation event per
#    validation; the log names the reason;
#  - --resume of the early-stopped run trains nothing, changes nothing;
#  - training.eval_every=2: val_loss at epochs 2 and 4 only, no early stop;
#    the open-loop error columns (k = 1, 5, 10) on the same rows only, and
#    in summary.json; training.eval_every_steps=7: val_loss on the rows of
#    steps 7, 14, ...;
#  - training.early_stop.patience without training.eval_every: exit 2, the
#    message names both keys.
. "$(dirname "$0")/cli_lib.sh" "$1"
small="data.trajectories=12 data.episode_length=40 model.hidden=16 model.depth=1 training.batch_size=32 checkpoint.every_steps=0"

"$bin" train $small output.dir=es training.epochs=12 training.eval_every=1 \
  training.early_stop.patience=2 training.early_stop.min_delta=0.0005 training.lr=0.01 \
  training.lr_schedule=constant > es.out 2> es.err || fail "early-stopped run: exit $?"
grep -q "early stopping after epoch" es.err || fail "no early-stopping log line"
/usr/bin/python3 - es <<'PY' || fail "early stopping against history.csv"
import csv, json, sqlite3, sys
d = sys.argv[1]
rows = list(csv.DictReader(open(d + "/history.csv")))
assert rows and "val_loss" in rows[0], "no val_loss column"
last_of_epoch = {}
for r in rows:
    last_of_epoch[int(r["epoch"])] = r
val = [(int(r["epoch"]), float(r["val_loss"])) for r in rows if r["val_loss"] != ""]
assert [e for e, _ in val] == sorted(last_of_epoch), ("val rows", [e for e, _ in val])
for e, _ in val:
    assert last_of_epoch[e]["val_loss"] != "", e
best, best_epoch, since, stop = None, 0, 0, 0
for e, v in val:
    if best is None or v < best - 0.0005:
        best, best_epoch, since = v, e, 0
    else:
        since += 1
        if since >= 2:
            stop = e
            break
assert stop > 0, "the run did not stop early: %s" % val
assert int(rows[-1]["epoch"]) == stop, ("last epoch trained", rows[-1]["epoch"], stop)
s = json.load(open(d + "/summary.json"))["validation"]
assert s["early_stopped"] is True and s["best_epoch"] == best_epoch, s
assert abs(s["best_val_loss"] - best) <= 1e-8 * abs(best), (s["best_val_loss"], best)
assert s["evaluations"] == len(val) and s["stop_reason"].startswith("early_stop"), s
assert s["best_checkpoint"].endswith("best.safetensors"), s
db = sqlite3.connect(d + "/metrics.db")
n = db.execute("select count(*) from events where kind='validation'").fetchone()[0]
assert n >= len(val), ("validation events", n, len(val))
PY
"$bin" ckpt verify es/best.safetensors > /dev/null 2>&1 || fail "best.safetensors does not verify"
cp es/history.csv es.history
"$bin" train --resume es > re.out 2> re.err || fail "resume of an early-stopped run: exit $?"
grep -q "already complete" re.err || fail "resume of an early-stopped run trained: $(cat re.err)"
cmp -s es/history.csv es.history || fail "resume of an early-stopped run changed history.csv"

"$bin" train $small output.dir=e2 training.epochs=4 training.eval_every=2 > /dev/null 2>&1 ||
  fail "eval_every=2: exit $?"
/usr/bin/python3 - e2 <<'PY' || fail "eval_every=2 rows"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1] + "/history.csv")))
val = [int(r["epoch"]) for r in rows if r["val_loss"] != ""]
assert val == [2, 4], val
assert rows[-1]["val_loss"] != "" and int(rows[-1]["epoch"]) == 4
s = json.load(open(sys.argv[1] + "/summary.json"))["validation"]
assert s["evaluations"] == 2 and s["early_stopped"] is False and s["eval_every"] == 2, s
# the world model's open-loop errors beside val_loss: on the val rows only,
# positive; the final evaluation's in summary.json
ks = ("val_open_loop_k1", "val_open_loop_k5", "val_open_loop_k10")
for r in rows:
    cells = [r[k] for k in ks]
    assert (cells == ["", "", ""]) == (r["val_loss"] == ""), r
    assert r["val_loss"] == "" or all(float(c) > 0 for c in cells), r
full = json.load(open(sys.argv[1] + "/summary.json"))
assert all(full[k] > 0 for k in ks), full
PY

"$bin" train $small output.dir=s7 training.epochs=2 training.eval_every_steps=7 > /dev/null 2>&1 ||
  fail "eval_every_steps=7: exit $?"
/usr/bin/python3 - s7 <<'PY' || fail "eval_every_steps=7 rows"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1] + "/history.csv")))
val = [int(r["step"]) for r in rows if r["val_loss"] != ""]
assert val == list(range(7, len(rows) + 1, 7)), (val, len(rows))
s = json.load(open(sys.argv[1] + "/summary.json"))["validation"]
assert s["evaluations"] == len(val) and s["eval_every_steps"] == 7, s
PY

"$bin" train $small output.dir=bad training.early_stop.patience=2 > bad.out 2> bad.err
rc=$?
[ $rc -eq 2 ] || fail "patience without eval_every: exit $rc, want 2"
grep -q "training.early_stop.patience" bad.err && grep -q "training.eval_every" bad.err ||
  fail "patience without eval_every: message $(cat bad.err)"
[ ! -e bad ] || fail "a config error wrote output.dir"
exit $((fails > 0))
