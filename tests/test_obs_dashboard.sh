#!/usr/bin/env bash
# tests/test_obs_dashboard.sh: the dashboard page in Debian's headless
# Chromium, against a running `mixprec train --serve`.
# usage: test_obs_dashboard.sh MIXPREC_BINARY SOURCE_DIR
#  - the page served at / references nothing outside the server (no
#    http(s):// scripts, styles or images: the machine has no internet);
#  - the page is built from src/obs/web at build time and draws with the
#    vendored uPlot (its code is in the page, no hand-made canvas drawer);
#  - after the page's scripts ran (virtual time), the DOM shows
#    data-ready="1", each of the eight charts (training loss, validation
#    loss, loss scale, learning rate, grad norm, grad fractions,
#    throughput, step time) drew rows (data-points > 0) as uPlot charts
#    with axis titles and numbered y ticks, the header shows the run's
#    precision and a step no larger than the planned total, the guard
#    panel is a table of rules (not raw JSON), the event list is not empty;
#  - after a run with a rollback: /api/training/stats and /metrics report
#    the same optimizer steps, and status step <= total_steps, progress <= 1;
#  - a screenshot is written (kept in $MIXPREC_OBS_ARTIFACTS when set).
# Chromium comes from Debian's `chromium` package (scripts/install-deps.sh);
# the test is skipped, saying so, only when it is not installed.
set -u
bin=$1
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

chrome=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chrome" ]; then
  echo "SKIP: chromium not installed (Debian package chromium; scripts/install-deps.sh)"
  exit 0
fi
command -v curl >/dev/null || { echo "FAIL: curl is required (scripts/install-deps.sh)"; exit 1; }

cd "$work"
# long runs: no checkpoint every 1000 steps (when this build has checkpoints)
nock=""
"$bin" config show checkpoint.enabled=false >/dev/null 2>&1 && nock=checkpoint.enabled=false
# Large loss scale first: overflow steps to mark on the scale chart.
"$bin" train --serve --quiet output.dir=run obs.http.port=0 training.epochs=100000 $nock \
  data.trajectories=16 data.episode_length=100 model.hidden=32 training.batch_size=16 \
  training.precision=mixed_fp16 training.loss_scale.init=1e12 >train.out 2>train.err &
pids+=($!)
port=""
for _ in $(seq 300); do
  port=$(grep -o 'serving http://127.0.0.1:[0-9]*' train.err | head -1 | sed 's/.*://')
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "FAIL: mixprec did not start serving: $(cat train.err)"; exit 1; }
url="http://127.0.0.1:$port/"

curl -sf --max-time 10 "$url" >page.html || fail "GET / failed"
grep -qiE '(src|href)="(https?:)?//' page.html && fail "the page loads something from outside"
grep -q 'id="chart-loss"' page.html || fail "no loss chart in the page"
grep -q 'uPlot' page.html || fail "the page does not carry uPlot"
grep -q 'src/obs/web/dashboard.js' page.html || fail "the page is not built from src/obs/web"

flags=(--headless --no-sandbox --disable-gpu --disable-quic --no-first-run
       --disable-background-networking --disable-component-update --disable-sync
       --user-data-dir="$work/profile" --window-size=1400,1000 --virtual-time-budget=5000)
timeout 90 "$chrome" "${flags[@]}" --dump-dom "$url" >dom.html 2>chrome.err ||
  fail "chromium --dump-dom failed: $(tail -3 chrome.err)"
grep -q 'data-ready="1"' dom.html || fail "the page never refreshed (data-ready != 1)"
# validation loss: the finished run below (a running run has none yet)
for c in chart-loss chart-scale chart-lr chart-grad chart-gfrac chart-tput chart-time; do
  n=$(grep -o "id=\"$c\"[^>]*data-points=\"[0-9]*\"" dom.html | sed 's/.*data-points="//; s/"//')
  [ -n "$n" ] && [ "$n" -gt 0 ] || fail "$c drew no data (data-points='$n')"
done
python3 - dom.html <<'PY' || fail "dashboard DOM"
import re, sys
d = open(sys.argv[1]).read()
assert d.count('class="uplot') >= 8, "uPlot charts: %d" % d.count('class="uplot')
for t in ("loss (log)", "validation loss (log)", "loss scale (log2)", "learning rate",
          "global grad norm (log)", "samples/s", "ms per step", ">step<"):
    assert t in d, "axis title missing: " + t
# the training-loss chart's y axis carries numbers, not only powers of ten
m = re.search(r'id="chart-loss".*?</section>', d, re.S)
assert m, "no loss chart"
t = re.search(r'id="chart-loss"[^>]*data-yticks="([^"]*)"', d)
assert t and len(t.group(1).split()) >= 2, "loss chart y ticks: %s" % (t.group(1) if t else None)
g = re.search(r'<div id="guard">(.*?)</section>', d, re.S).group(1)
assert "<table>" in g and "nonfinite_loss" in g and '"rules"' not in g, "guard panel: " + g[:200]
s = re.search(r'<b id="step">(\d+) / (\d+)', d)
assert s and int(s.group(1)) <= int(s.group(2)), "header step: %s" % (s.group(0) if s else None)
PY
grep -q '<b id="precision">mixed_fp16</b>' dom.html || fail "precision not shown"
grep -q '<b id="state" class="running">running</b>' dom.html || fail "state not shown"
ev=$(grep -o 'id="events" data-count="[0-9]*"' dom.html | sed 's/.*data-count="//; s/"//')
[ -n "$ev" ] && [ "$ev" -gt 0 ] || fail "event list empty ('$ev')"

timeout 90 "$chrome" "${flags[@]}" --screenshot="$work/dashboard.png" "$url" >/dev/null 2>>chrome.err ||
  fail "chromium --screenshot failed: $(tail -3 chrome.err)"
[ "$(head -c 8 dashboard.png | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] ||
  fail "screenshot is not a PNG"
[ "$(stat -c %s dashboard.png)" -gt 20000 ] || fail "screenshot suspiciously small"
if [ -n "${MIXPREC_OBS_ARTIFACTS:-}" ]; then
  mkdir -p "$MIXPREC_OBS_ARTIFACTS" && cp dashboard.png dom.html "$MIXPREC_OBS_ARTIFACTS/"
fi

# A finished run with a rollback (10 NaN losses: fallback + rollback),
# kept serving: one count of optimizer steps, a step header within plan.
"$bin" train --serve --quiet output.dir=rb obs.http.port=0 obs.http.linger_s=300 $nock \
  training.epochs=1 data.trajectories=16 data.episode_length=100 model.hidden=32 \
  training.batch_size=16 training.precision=mixed_fp16 fault.kind=nan fault.layer=1 \
  fault.step=40 fault.count=10 >rb.out 2>rb.err &
pids+=($!)
port2=""
for _ in $(seq 1200); do
  port2=$(grep -o 'serving http://127.0.0.1:[0-9]*' rb.err | head -1 | sed 's/.*://')
  grep -q "run ended; serving" rb.err && break
  sleep 0.1
done
grep -q "run ended; serving" rb.err || fail "rollback run did not finish: $(tail -3 rb.err)"
u2="http://127.0.0.1:$port2"
curl -sf --max-time 10 "$u2/api/training/stats" > rb_stats.json || fail "stats"
curl -sf --max-time 10 "$u2/api/training/status" > rb_status.json || fail "status"
curl -sf --max-time 10 "$u2/metrics" > rb_metrics.txt || fail "metrics"
python3 - rb_stats.json rb_status.json rb_metrics.txt <<'PY' || fail "one count after a rollback"
import json, re, sys
st = json.load(open(sys.argv[1])); ss = json.load(open(sys.argv[2])); m = open(sys.argv[3]).read()
assert st["rollbacks"] >= 1, "no rollback happened: %s" % st
prom = float(re.search(r"^mixprec_optimizer_steps_total(\{[^}]*\})? (\S+)$", m, re.M).group(2))
assert prom == st["optimizer_steps"], "/metrics %s vs stats %s" % (prom, st["optimizer_steps"])
assert ss["step"] <= ss["total_steps"] and ss["progress"] <= 1.0, ss
assert ss["training_steps"] > ss["step"], "replayed steps not counted: %s" % ss
PY
timeout 90 "$chrome" "${flags[@]}" --dump-dom "$u2/" >rb_dom.html 2>>chrome.err ||
  fail "chromium --dump-dom (rollback run) failed"
grep -qE 'id="chart-val" data-points="[1-9]' rb_dom.html || fail "finished run: no validation loss drawn"
# the whole page, guard panel and events included
timeout 90 "$chrome" "${flags[@]}" --window-size=1400,1900 --screenshot="$work/dashboard_rollback.png" "$u2/" >/dev/null 2>>chrome.err ||
  fail "chromium --screenshot (rollback run) failed: $(tail -3 chrome.err)"
[ -n "${MIXPREC_OBS_ARTIFACTS:-}" ] && cp dashboard_rollback.png "$MIXPREC_OBS_ARTIFACTS/"

if [ $fails -ne 0 ]; then
  echo "test_obs_dashboard: $fails failures"
  exit 1
fi
echo "test_obs_dashboard: all checks passed"
