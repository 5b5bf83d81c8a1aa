#!/usr/bin/env bash
# tests/test_obs_prometheus.sh: mixprec against the real Prometheus tools.
# usage: test_obs_prometheus.sh MIXPREC_BINARY SOURCE_DIR
#  - promtool check rules and promtool test rules on deploy/prometheus;
#  - promtool check metrics on the /metrics text of a running training;
#  - Debian's Prometheus server on loopback scrapes `mixprec train --serve`
#    every second; its HTTP API shows mixprec_training_steps_total
#    increasing, the target up, and the alert rules loaded.
# promtool/prometheus come from Debian's `prometheus` package
# (scripts/install-deps.sh); the test is skipped, saying so, only when
# they are not installed.
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

if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
  echo "SKIP: promtool/prometheus not installed (Debian package prometheus; scripts/install-deps.sh)"
  exit 0
fi
for t in curl python3; do
  command -v $t >/dev/null || { echo "FAIL: $t is required (scripts/install-deps.sh)"; exit 1; }
done

# 1. the rules file
promtool check rules "$src/deploy/prometheus/alerts.yml" >"$work/check.txt" 2>&1 ||
  fail "promtool check rules: $(cat "$work/check.txt")"
(cd "$src/deploy/prometheus" && promtool test rules alerts_test.yml) >"$work/test.txt" 2>&1 ||
  fail "promtool test rules: $(cat "$work/test.txt")"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# 2. a long training with --serve (killed at the end)
cd "$work"
# long runs: no checkpoint every 1000 steps (when this build has checkpoints)
nock=""
"$bin" config show checkpoint.enabled=false >/dev/null 2>&1 && nock=checkpoint.enabled=false
"$bin" train --serve --quiet output.dir=run obs.http.port=0 training.epochs=100000 $nock \
  data.trajectories=16 data.episode_length=100 model.hidden=32 training.batch_size=16 \
  training.precision=mixed_fp16 >train.out 2>train.err &
pids+=($!)
port=""
for _ in $(seq 300); do
  port=$(grep -o 'serving http://127.0.0.1:[0-9]*' train.err | head -1 | sed 's/.*://')
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "FAIL: mixprec did not start serving: $(cat train.err)"; exit 1; }

curl -sf --max-time 10 "http://127.0.0.1:$port/metrics" >metrics.txt || fail "GET /metrics failed"
promtool check metrics <metrics.txt >lint.txt 2>&1 || fail "promtool check metrics: $(cat lint.txt)"
[ -s lint.txt ] && fail "promtool check metrics lint findings: $(cat lint.txt)"

# 3. the Prometheus server
pport=$(free_port)
cat >prometheus.yml <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $src/deploy/prometheus/alerts.yml
scrape_configs:
  - job_name: mixprec
    static_configs:
      - targets: ['127.0.0.1:$port']
EOF
prometheus --config.file=prometheus.yml --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$pport" --log.level=warn >prom.log 2>&1 &
pids+=($!)
ready=0
for _ in $(seq 600); do
  if curl -sf --max-time 2 "http://127.0.0.1:$pport/-/ready" >/dev/null 2>&1; then ready=1; break; fi
  sleep 0.1
done
[ $ready = 1 ] || { echo "FAIL: prometheus not ready: $(tail -5 prom.log)"; exit 1; }

query() { # prints the value of the first sample of an instant query, or nothing
  curl -sf --max-time 5 "http://127.0.0.1:$pport/api/v1/query" --data-urlencode "query=$1" |
    python3 -c 'import json,sys
d=json.load(sys.stdin); r=d["data"]["result"]
print(r[0]["value"][1] if d["status"]=="success" and r else "")'
}
v1=""
for _ in $(seq 300); do
  v1=$(query 'mixprec_training_steps_total{job="mixprec"}')
  [ -n "$v1" ] && break
  sleep 0.1
done
[ -n "$v1" ] || fail "Prometheus never stored mixprec_training_steps_total"
v2="$v1"
for _ in $(seq 300); do
  v2=$(query 'mixprec_training_steps_total{job="mixprec"}')
  [ -n "$v2" ] && python3 -c "import sys; sys.exit(0 if float('$v2') > float('$v1') else 1)" && break
  sleep 0.1
done
[ -n "$v1" ] && python3 -c "import sys; sys.exit(0 if float('$v2') > float('$v1') else 1)" ||
  fail "mixprec_training_steps_total did not increase between scrapes ($v1 -> $v2)"
up=$(query 'up{job="mixprec"}')
[ "$up" = "1" ] || fail "target not up: '$up'"
info=$(query 'mixprec_precision_info{job="mixprec",mode="mixed_fp16"}')
[ "$info" = "1" ] || fail "precision_info{mode=mixed_fp16} = '$info'"
curl -sf --max-time 5 "http://127.0.0.1:$pport/api/v1/rules" >rules.json || fail "GET /api/v1/rules"
python3 - rules.json <<'EOF' || fail "alert rules not loaded by Prometheus: $(head -c 300 rules.json)"
import json, sys
d = json.load(open(sys.argv[1]))
names = {r["name"] for g in d["data"]["groups"] for r in g["rules"]}
need = {"MixprecHighOverflowRate", "MixprecLossDivergence", "MixprecMemoryNotReduced",
        "MixprecNoProgress", "MixprecNonFiniteLoss"}
sys.exit(0 if need <= names else 1)
EOF
echo "prometheus scraped mixprec_training_steps_total $v1 -> $v2"

if [ $fails -ne 0 ]; then
  echo "test_obs_prometheus: $fails failures"
  exit 1
fi
echo "test_obs_prometheus: all checks passed"
