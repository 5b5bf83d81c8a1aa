#!/usr/bin/env bash
# tests/test_guard_obs.sh: guard firings reach the observability event log.
# usage: test_guard_obs.sh MIXPREC_BINARY SOURCE_DIR
#  A run in mixed_fp16 with 10 NaN forward outputs of layer 2 (steps 5..14)
#  fires nonfinite_loss (P0, fallback+rollback) at step 14; an --serve run
#  lingers so /api/training/events can be read after it. The same firing
#  must appear, with rule, severity, value, threshold, action taken,
#  precision before/after and the provenance (forward pass, layer 2), in:
#    - GET /api/training/events (the observer's event ring),
#    - OUTPUT_DIR/events.jsonl (one JSON object per line),
#    - the SQLite events table of OUTPUT_DIR.
#  and mixprec_guard_events_total{rule="nonfinite_loss",severity="P0"} is 1.
#  The classifier and GPT workloads put the same firing in their
#  events.jsonl and SQLite store.
set -u
bin=$(realpath "$1")
work=$(mktemp -d)
pid=""
cleanup() {
  [ -n "$pid" ] && { kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
for t in curl python3 sqlite3; do
  command -v $t >/dev/null || { echo "FAIL: $t is required (scripts/install-deps.sh)"; exit 1; }
done
small="data.trajectories=16 data.episode_length=50 model.hidden=32 model.depth=2 training.batch_size=16 checkpoint.enabled=false"
fault="training.precision=mixed_fp16 fault.kind=nan fault.layer=2 fault.step=5 fault.count=10"

"$bin" train --quiet --serve $small $fault training.epochs=1 output.dir=run obs.http.port=0 \
  obs.http.linger_s=30 > run.out 2> run.err &
pid=$!
port=""
for _ in $(seq 600); do
  port=$(grep -o 'serving http://127.0.0.1:[0-9]*' run.err | head -1 | sed 's/.*://')
  [ -n "$port" ] && grep -q "run ended" run.err && break
  sleep 0.1
done
[ -n "$port" ] || { echo "FAIL: no server: $(cat run.err)"; exit 1; }
grep -q "run ended" run.err || fail "run did not end within 60 s: $(tail -5 run.err)"
base="http://127.0.0.1:$port"
curl -sf --max-time 10 "$base/api/training/events?limit=256" > events.json || fail "GET events"
curl -sf --max-time 10 "$base/metrics" > metrics.txt || fail "GET /metrics"
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
pid=""

# one checker for the three sources: a list of events as dicts with
# kind, severity, step and detail (a dict)
check() { # SOURCE-NAME, python expression giving the event list from f
  python3 - "$1" <<PY || fail "$1: guard event missing or incomplete"
import json, sys
src = sys.argv[1]
def events():
$2
evs = [e for e in events() if e["kind"] == "guard"]
assert evs, (src, "no guard events")
nf = [e for e in evs if e["detail"]["rule"] == "nonfinite_loss"]
assert len(nf) == 1, (src, evs)
e = nf[0]
d = e["detail"]
assert e["severity"] == "P0" and d["severity"] == "P0", e
assert e["step"] == 14, e
assert d["value"] == 10 and d["threshold"] == 10, d
assert d["configured_action"] == "fallback+rollback", d
assert "fallback" in d["action"] and "rollback" in d["action"], d
assert d["precision_from"] == "mixed_fp16" and d["precision_to"] == "mixed_bf16", d
assert d["site"]["pass"] == "forward" and d["site"]["layer"] == 2, d
for x in evs: # every firing carries rule, severity, value, action
    for k in ("rule", "severity", "value", "threshold", "window", "action"):
        assert k in x["detail"], (k, x)
PY
}

check api '    d = json.load(open("events.json"))
    for e in d["events"]:
        if isinstance(e.get("detail"), str): e["detail"] = json.loads(e["detail"])
    return [e for e in d["events"] if e.get("detail") is not None]'

check jsonl '    out = []
    for line in open("run/events.jsonl"):
        e = json.loads(line)
        if isinstance(e.get("detail"), str): e["detail"] = json.loads(e["detail"])
        if e.get("detail") is not None: out.append(e)
    return out'

db=run/metrics.db
[ -f "$db" ] || db=""
[ -n "$db" ] || fail "no SQLite store in run/: $(ls run)"
if [ -n "$db" ]; then
  sqlite3 -json "$db" "SELECT kind, severity, step, detail FROM events WHERE kind='guard'" \
    > sql.json || fail "sqlite3 query"
  check sqlite '    out = json.load(open("sql.json"))
    for e in out: e["detail"] = json.loads(e["detail"])
    return out'
fi

grep -qE '^mixprec_guard_events_total\{rule="nonfinite_loss",severity="P0"\} 1$' metrics.txt ||
  fail "guard_events_total: $(grep guard_events metrics.txt)"

# The classifier and the GPT report through the same observer: the same
# injected NaNs (layer 1, steps 3..12) fire nonfinite_loss with fallback to
# mixed_bf16 and a rollback; the run finishes and the store holds its steps.
fmnist=/usr/share/datasets/fashion-mnist
for wl in classifier gpt; do
  case $wl in
    classifier) [ -d "$fmnist" ] || { fail "$fmnist missing (dataset-fashion-mnist)"; continue; }
                args="model.workload=classifier data.train_subset=1024 data.test_subset=256 model.hidden=32 model.depth=2" ;;
    gpt) args="model.workload=gpt data.train_subset=640 data.test_subset=64 gpt.embd=32 gpt.layers=1" ;;
  esac
  "$bin" train --quiet $args training.batch_size=16 training.epochs=1 training.precision=mixed_fp16 \
    fault.kind=nan fault.layer=1 fault.step=3 fault.count=10 output.dir=$wl > $wl.out 2> $wl.err ||
    fail "$wl run exited $?: $(tail -3 $wl.err)"
  python3 - $wl <<'PY' || fail "$wl: guard event missing from events.jsonl"
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1] + "/events.jsonl")]
g = [e for e in evs if e["kind"] == "guard"]
d = [e["detail"] if isinstance(e["detail"], dict) else json.loads(e["detail"]) for e in g]
nf = [x for x in d if x["rule"] == "nonfinite_loss"]
assert len(nf) == 1 and nf[0]["precision_to"] == "mixed_bf16", d
assert "rollback" in nf[0]["action"] and nf[0]["site"]["layer"] == 1, nf
PY
  n=$(sqlite3 $wl/metrics.db "SELECT count(*) FROM events WHERE kind='guard' AND detail LIKE '%nonfinite_loss%'")
  [ "$n" = 1 ] || fail "$wl: $n nonfinite_loss rows in the store"
  st=$(sqlite3 $wl/metrics.db "SELECT state FROM runs")
  [ "$st" = finished ] || fail "$wl: run state '$st'"
  steps=$(sqlite3 $wl/metrics.db "SELECT count(*) FROM steps")
  [ "$steps" -gt 20 ] || fail "$wl: $steps steps in the store"
done

if [ $fails -ne 0 ]; then
  echo "test_guard_obs: $fails failures"
  exit 1
fi
echo "test_guard_obs: ok"
