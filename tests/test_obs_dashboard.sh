#!/usr/bin/env bash
# tests/test_obs_dashboard.sh: the dashboard page in Debian's headless
# Chromium, against a running `mixprec train --serve`.
# usage: test_obs_dashboard.sh MIXPREC_BINARY SOURCE_DIR
#  - the page served at / references nothing outside the server (no
#    http(s):// scripts, styles or images: the machine has no internet);
#  - after the page's scripts ran (virtual time), the DOM shows
#    data-ready="1", each of the four charts drew rows (data-points > 0),
#    the header shows the run's precision, the event list is not empty;
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

flags=(--headless --no-sandbox --disable-gpu --disable-quic --no-first-run
       --disable-background-networking --disable-component-update --disable-sync
       --user-data-dir="$work/profile" --window-size=1400,1000 --virtual-time-budget=5000)
timeout 90 "$chrome" "${flags[@]}" --dump-dom "$url" >dom.html 2>chrome.err ||
  fail "chromium --dump-dom failed: $(tail -3 chrome.err)"
grep -q 'data-ready="1"' dom.html || fail "the page never refreshed (data-ready != 1)"
for c in chart-loss chart-scale chart-grad chart-time; do
  n=$(grep -o "id=\"$c\"[^>]*data-points=\"[0-9]*\"" dom.html | sed 's/.*data-points="//; s/"//')
  [ -n "$n" ] && [ "$n" -gt 0 ] || fail "$c drew no data (data-points='$n')"
done
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

if [ $fails -ne 0 ]; then
  echo "test_obs_dashboard: $fails failures"
  exit 1
fi
echo "test_obs_dashboard: all checks passed"
