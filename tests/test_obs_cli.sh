#!/usr/bin/env bash
# tests/test_obs_cli.sh: observability of `mixprec train` end to end.
# usage: test_obs_cli.sh MIXPREC_BINARY SOURCE_DIR
#  A. a long --serve run: the JSON endpoints parse (python3) and carry the
#     documented fields; export pages are contiguous; /metrics holds every
#     metric the issue names (promtool check metrics when installed);
#     401 without / with a wrong token, 404, 405, 413, 400, and training
#     keeps stepping through all of it; POST {"mode":"fp32"} switches at a
#     step boundary (history rows up to the event's step are mixed_fp16,
#     after it fp32) and logs the runbook lines; then SIGKILL: the SQLite
#     store (sqlite3 CLI) is WAL, holds steps 1..N without gaps with N at
#     least the last scraped step count minus one flush batch, answers the
#     runbook's fp16_stats query; events.jsonl lines parse.
#  B. a finished run: steps/overflow rows equal summary.json, runs row
#     finished; SIGTERM on a second run loses at most one flush batch;
#     `mixprec report` writes four PNGs and report.md linking them.
#  C. --log-format json: every stderr line is a JSON object; the kill
#     switch and fp16_enabled lines appear verbatim.
#     The next run in the same directory marks the SIGKILLed run 'killed'.
#  D. bad token file mode, a FIFO as token file, bad --log-format, report
#     without a store.
set -u
bin=$1
src=$2
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
for t in curl python3 sqlite3; do
  command -v $t >/dev/null || { echo "FAIL: $t is required (scripts/install-deps.sh)"; exit 1; }
done
cd "$work"
# long runs: no checkpoint every 1000 steps (when this build has checkpoints)
nock=""
"$bin" config show checkpoint.enabled=false >/dev/null 2>&1 && nock=checkpoint.enabled=false
tiny="data.trajectories=16 data.episode_length=100 model.hidden=32 training.batch_size=16"
printf 'tok-%s\n' "$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')" >token
chmod 600 token
tok=$(cat token)

wait_port() { # FILE -> prints the port mixprec serves on
  local p=""
  for _ in $(seq 300); do
    p=$(grep -o 'serving http://127.0.0.1:[0-9]*' "$1" | head -1 | sed 's/.*://')
    [ -n "$p" ] && break
    sleep 0.1
  done
  echo "$p"
}
steps_total() { # scrape the step counter
  curl -sf --max-time 5 "http://127.0.0.1:$1/metrics" | sed -n 's/^mixprec_training_steps_total //p'
}
code() { curl -s --max-time 10 -o /dev/null -w '%{http_code}' "$@"; }
pyjson() { python3 -c "import json,sys
d=json.load(open(sys.argv[1]))
$2" "$3"; }

# ---- A ----------------------------------------------------------------------
flush=50
"$bin" train --serve --quiet output.dir=runA obs.http.port=0 obs.http.token_file=token \
  obs.store.flush_steps=$flush obs.store.flush_seconds=3600 obs.history_max=4000000 \
  training.epochs=100000 $nock training.precision=mixed_fp16 $tiny >A.out 2>A.err &
pidA=$!
pids+=($pidA)
port=$(wait_port A.err)
[ -n "$port" ] || { echo "FAIL: run A did not serve: $(cat A.err)"; exit 1; }
base="http://127.0.0.1:$port"

for _ in $(seq 100); do # until a few hundred steps are in
  [ "$(steps_total "$port")" -ge 300 ] 2>/dev/null && break
  sleep 0.1
done
curl -sf --max-time 5 "$base/api/training/status" >status.json || fail "GET status"
pyjson status.json 'assert d["state"] == "running", d
assert d["precision"] == "mixed_fp16" and d["fp16_enabled_runtime"] is True, d
assert d["run_id"] and isinstance(d["step"], int) and d["last_event"]["kind"], d' \
  status.json || fail "status JSON: $(cat status.json)"
curl -sf --max-time 5 "$base/api/training/stats" >stats.json || fail "GET stats"
pyjson stats.json 'for k in ("training_steps","optimizer_steps","skipped_steps","overflow_rate",
          "current_scale","precision","fp16_enabled_runtime","epoch","guard"):
    assert k in d, k
assert d["training_steps"] == d["optimizer_steps"] + d["skipped_steps"], d' \
  stats.json || fail "stats JSON: $(cat stats.json)"
curl -sf --max-time 5 "$base/api/metrics/export?offset=0&limit=100" >p1.json || fail "export p1"
curl -sf --max-time 5 "$base/api/metrics/export?offset=100&limit=50" >p2.json || fail "export p2"
python3 - p1.json p2.json <<'EOF' || fail "export pages"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert [r["step"] for r in a["rows"]] == list(range(1, 101)), a["rows"][:3]
assert a["next_offset"] == 100 and a["total"] >= 150
assert [r["step"] for r in b["rows"]] == list(range(101, 151))
for r in a["rows"] + b["rows"]:
    assert r["precision"] == "mixed_fp16" and isinstance(r["overflow"], bool)
    assert r["scale"] > 0 and r["duration_s"] >= 0
EOF
curl -sf --max-time 5 "$base/metrics" >metrics.txt || fail "GET /metrics"
for m in mixprec_training_steps_total mixprec_optimizer_steps_total mixprec_overflow_steps_total \
         mixprec_samples_total mixprec_loss_scale mixprec_training_loss mixprec_validation_loss \
         mixprec_grad_norm mixprec_grad_zero_fraction mixprec_grad_near_overflow_fraction \
         mixprec_fp32_divergence_ratio mixprec_precision_fallbacks_total mixprec_rollbacks_total; do
  grep -q "^# TYPE $m " metrics.txt || fail "metric $m missing"
done
grep -q '^# TYPE mixprec_step_duration_seconds histogram' metrics.txt || fail "histogram TYPE"
grep -q '^mixprec_step_duration_seconds_bucket{le="+Inf"} ' metrics.txt || fail "+Inf bucket"
grep -q '^mixprec_step_duration_seconds_sum ' metrics.txt || fail "_sum"
grep -q '^mixprec_step_duration_seconds_count ' metrics.txt || fail "_count"
for k in params grads master optimizer activations; do
  grep -q "^mixprec_memory_bytes{kind=\"$k\"} " metrics.txt || fail "memory kind $k"
done
grep -q '^mixprec_precision_info{mode="mixed_fp16"} 1$' metrics.txt || fail "precision_info"
grep -q '^# TYPE mixprec_guard_events_total counter' metrics.txt || fail "guard_events_total"
if command -v promtool >/dev/null; then
  promtool check metrics <metrics.txt >lint.txt 2>&1 || fail "promtool: $(cat lint.txt)"
else
  echo "note: promtool not installed; /metrics lint skipped (Debian package prometheus)"
fi

# hostile and unauthorised requests; training goes on
s1=$(steps_total "$port")
[ "$(code -X POST "$base/api/training/precision" -d '{"mode":"fp32"}')" = 401 ] || fail "no token"
[ "$(code -X POST -H 'Authorization: Bearer wrong-token-xyz' "$base/api/training/precision" \
      -d '{"mode":"fp32"}')" = 401 ] || fail "wrong token"
[ "$(code "$base/nope")" = 404 ] || fail "unknown path"
[ "$(code -X PUT "$base/metrics")" = 405 ] || fail "PUT /metrics"
[ "$(code -X POST -H "Authorization: Bearer $tok" "$base/api/training/precision" -d '{mode')" = 400 ] ||
  fail "malformed JSON"
head -c 20000 /dev/zero | tr '\0' ' ' >big.txt
[ "$(code -X POST -H "Authorization: Bearer $tok" --data-binary @big.txt \
      "$base/api/training/precision")" = 413 ] || fail "oversized body"
[ "$(code "$base/api/metrics/export?limit=999999")" = 400 ] || fail "limit out of range"
s2=$(steps_total "$port")
[ -n "$s1" ] && [ -n "$s2" ] && [ "$s2" -gt "$s1" ] || fail "training stalled ($s1 -> $s2)"
grep -q "mixed_fp16" status.json || true

# the precision switch
curl -s --max-time 10 -X POST -H "Authorization: Bearer $tok" -H 'Content-Type: application/json' \
  -d '{"mode":"fp32"}' "$base/api/training/precision" >post.json
pyjson post.json 'assert d["accepted"] is True and d["mode"] == "fp32", d' post.json ||
  fail "POST precision: $(cat post.json)"
switched=0
for _ in $(seq 100); do
  curl -sf --max-time 5 "$base/api/training/status" >st2.json &&
    pyjson st2.json 'assert d["precision"] == "fp32" and d["fp16_enabled_runtime"] is False' st2.json \
      2>/dev/null && { switched=1; break; }
  sleep 0.1
done
[ $switched = 1 ] || fail "precision did not switch: $(cat st2.json)"
curl -sf --max-time 5 "$base/api/training/events?limit=50" >events.json || fail "GET events"
ev_step=$(pyjson events.json 'e=[x for x in d["events"] if x["kind"]=="precision_change"]
assert len(e) == 1 and e[0]["detail"]["to"] == "fp32", e
print(e[0]["step"])' events.json) || fail "precision_change event: $(cat events.json)"
after=$(pyjson post.json 'print(d["after_step"])' post.json)
if [ -n "$ev_step" ]; then
  [ "$ev_step" -ge "$after" ] || fail "switch at step $ev_step before the request ($after)"
  off=$((ev_step > 5 ? ev_step - 5 : 0))
  curl -sf --max-time 5 "$base/api/metrics/export?offset=$off&limit=10" >around.json
  python3 - around.json "$ev_step" <<'EOF' || fail "rows around the switch: $(cat around.json)"
import json, sys
d = json.load(open(sys.argv[1])); e = int(sys.argv[2])
rows = d["rows"]
assert len(rows) == 10, len(rows)
for r in rows:
    want = "mixed_fp16" if r["step"] <= e else "fp32"
    assert r["precision"] == want, (r["step"], r["precision"], e)
EOF
fi
grep -q 'FP16 training disabled - using FP32' A.err || fail "runbook line missing after the switch"
grep -q 'fp16_enabled: True' A.err || fail "'fp16_enabled: True' missing at start"
grep -q 'fp16_enabled: False' A.err || fail "'fp16_enabled: False' missing after the switch"

# SIGKILL, then the store
sk=$(steps_total "$port")
kill -9 $pidA
wait $pidA 2>/dev/null
db=runA/metrics.db
[ "$(sqlite3 $db 'PRAGMA journal_mode')" = wal ] || fail "store not in WAL mode"
[ "$(sqlite3 $db 'PRAGMA integrity_check')" = ok ] || fail "integrity_check"
read -r n lo hi <<<"$(sqlite3 -separator ' ' $db 'SELECT count(*), min(step), max(step) FROM steps')"
[ "$lo" = 1 ] && [ "$n" = "$hi" ] || fail "steps rows not contiguous: count $n, $lo..$hi"
[ -n "$sk" ] && [ "$hi" -ge $((sk - flush)) ] || fail "lost more than a flush batch: $hi rows, $sk scraped"
fp32_first=$(sqlite3 $db "SELECT min(step) FROM steps WHERE precision='fp32'")
[ "$fp32_first" = $((ev_step + 1)) ] || fail "first fp32 row $fp32_first, event at $ev_step"
nstats=$(sqlite3 $db "SELECT count(*) FROM fp16_stats WHERE timestamp > datetime('now', '-24 hours')")
[ "$nstats" -ge 1 ] || fail "runbook fp16_stats query returned nothing"
sqlite3 $db "SELECT * FROM fp16_stats WHERE timestamp > datetime('now', '-24 hours')" >/dev/null ||
  fail "runbook query failed"
[ "$(sqlite3 $db "SELECT count(*) FROM events WHERE kind='precision_change'")" = 1 ] ||
  fail "events table lacks the switch"
[ "$(sqlite3 $db "SELECT state FROM runs")" = running ] || fail "killed run state"
# the next run in the same store marks it killed (its pid is gone): issue 15, item 6
idA=$(sqlite3 $db "SELECT run_id FROM runs")
"$bin" train --quiet output.dir=runA training.epochs=1 $nock $tiny >A2.out 2>A2.err ||
  fail "second run in runA: $(tail -2 A2.err)"
[ "$(sqlite3 $db "SELECT state FROM runs WHERE run_id='$idA'")" = killed ] ||
  fail "SIGKILLed run not marked killed: $(sqlite3 $db 'SELECT run_id, state, message FROM runs')"
sqlite3 $db "SELECT message FROM runs WHERE run_id='$idA'" | grep -q "process $pidA ended" ||
  fail "killed run message: $(sqlite3 $db "SELECT message FROM runs WHERE run_id='$idA'")"
[ "$(sqlite3 $db "SELECT ended_at = (SELECT max(timestamp) FROM steps WHERE run_id='$idA')
                  FROM runs WHERE run_id='$idA'")" = 1 ] || fail "killed run ended_at"
[ "$(sqlite3 $db "SELECT count(*) FROM runs WHERE state='finished'")" = 1 ] ||
  fail "the second run is not finished"
python3 - runA/events.jsonl <<'EOF' || fail "events.jsonl"
import json, sys
kinds = [json.loads(l)["kind"] for l in open(sys.argv[1])]
assert kinds[0] == "run_start" and "precision_change" in kinds, kinds
EOF

# ---- B ----------------------------------------------------------------------
"$bin" train --json output.dir=runB training.epochs=3 training.precision=mixed_fp16 \
  training.loss_scale.init=1e9 $tiny >B.json 2>B.err || fail "run B failed: $(cat B.err)"
dbB=runB/metrics.db
tr=$(pyjson B.json 'print(d["training_steps"], d["skipped_steps"])' B.json)
read -r want_n want_sk <<<"$tr"
[ "$(sqlite3 $dbB 'SELECT count(*) FROM steps')" = "$want_n" ] || fail "B steps rows != $want_n"
[ "$(sqlite3 $dbB 'SELECT sum(overflow) FROM steps')" = "$want_sk" ] || fail "B overflow rows != $want_sk"
[ "$want_sk" -gt 0 ] || fail "B had no overflow steps to mark"
[ "$(sqlite3 $dbB "SELECT state FROM runs")" = finished ] || fail "B run state"
[ -n "$(sqlite3 $dbB "SELECT ended_at FROM runs")" ] || fail "B ended_at"
[ "$(sqlite3 $dbB 'SELECT training_steps FROM fp16_stats ORDER BY id DESC LIMIT 1')" = "$want_n" ] ||
  fail "B last fp16_stats row"
"$bin" report runB >report.out 2>report.err || fail "report failed: $(cat report.err)"
for p in loss loss_scale grad_health step_time; do
  f=runB/report/$p.png
  [ "$(head -c 8 $f 2>/dev/null | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "$f is not a PNG"
  grep -q "($p.png)" runB/report/report.md || fail "report.md does not link $p.png"
done
grep -q "skipped on overflow: $want_sk" runB/report/report.md || fail "report.md overflow count"
if [ -n "${MIXPREC_OBS_ARTIFACTS:-}" ]; then
  mkdir -p "$MIXPREC_OBS_ARTIFACTS" && cp runB/report/*.png runB/report/report.md "$MIXPREC_OBS_ARTIFACTS/"
fi

# SIGTERM: at most one flush batch lost (none with a graceful stop)
"$bin" train --serve --quiet output.dir=runT obs.http.port=0 obs.store.flush_steps=$flush \
  obs.store.flush_seconds=3600 training.epochs=100000 $nock $tiny >T.out 2>T.err &
pidT=$!
pids+=($pidT)
portT=$(wait_port T.err)
sleep 0.5
st=$(steps_total "$portT")
kill -TERM $pidT
wait $pidT
rcT=$?
read -r n lo hi <<<"$(sqlite3 -separator ' ' runT/metrics.db 'SELECT count(*), min(step), max(step) FROM steps')"
[ "$lo" = 1 ] && [ "$n" = "$hi" ] || fail "SIGTERM: rows not contiguous ($n, $lo..$hi)"
[ -n "$st" ] && [ "$hi" -ge $((st - flush)) ] || fail "SIGTERM: $hi rows, $st scraped"
if [ $rcT = 0 ]; then # graceful stop (checkpoint module): nothing lost, run closed
  last=$(sqlite3 runT/metrics.db 'SELECT training_steps FROM fp16_stats ORDER BY id DESC LIMIT 1')
  [ "$last" = "$hi" ] || fail "graceful stop lost rows: $hi rows, $last steps"
  [ "$(sqlite3 runT/metrics.db 'SELECT state FROM runs')" = finished ] || fail "stopped run state"
else
  echo "note: SIGTERM ended the run uncleanly (exit $rcT): at most one batch may be lost"
fi

# ---- C ----------------------------------------------------------------------
ENABLE_FP16_TRAINING=false "$bin" train --log-format json --quiet output.dir=runC \
  training.epochs=1 training.precision=mixed_fp16 $tiny >C.out 2>C.err || fail "run C failed"
python3 - C.err <<'EOF' || fail "JSON logs: $(head -5 C.err)"
import json, sys
msgs = []
for line in open(sys.argv[1]):
    d = json.loads(line)
    assert set(d) == {"ts", "level", "msg"}, d
    msgs.append(d["msg"])
assert "FP16 training disabled - using FP32" in msgs, msgs
assert "fp16_enabled: False" in msgs, msgs
EOF
"$bin" train --log-format json --quiet output.dir=runC2 training.epochs=1 \
  training.precision=mixed_fp16 $tiny >C2.out 2>C2.err || fail "run C2 failed"
grep -q '"msg":"fp16_enabled: True"' C2.err || fail "fp16_enabled: True missing in JSON logs"
python3 -c 'import json,sys
[json.loads(l) for l in open(sys.argv[1])]' C2.err || fail "C2 logs not JSON"

# ---- D ----------------------------------------------------------------------
mkfifo tokfifo # a FIFO as the token file is refused at once (issue 15, item 4)
timeout 20 "$bin" train --serve output.dir=runF obs.http.port=0 obs.http.token_file=tokfifo \
  training.epochs=1 $tiny >F.out 2>F.err
rc=$?
[ $rc = 2 ] && grep -q "FIFO" F.err || fail "token file FIFO: exit $rc: $(tail -2 F.err)"
chmod 644 token
"$bin" train --serve output.dir=runD obs.http.port=0 obs.http.token_file=token training.epochs=1 \
  $tiny >D.out 2>D.err
[ $? = 2 ] || fail "token file mode 0644 accepted"
grep -q '0600' D.err || fail "token mode error does not say 0600: $(cat D.err)"
"$bin" train --log-format xml output.dir=runD2 $tiny >/dev/null 2>D2.err
[ $? = 2 ] || fail "--log-format xml accepted"
"$bin" report "$work/nothing-here" >/dev/null 2>R.err
[ $? = 2 ] || fail "report without a store: exit $?, expected 2 (a wrong input)"

if [ $fails -ne 0 ]; then
  echo "test_obs_cli: $fails failures"
  exit 1
fi
echo "test_obs_cli: all checks passed"
