#!/usr/bin/env bash
# tests/test_cli_json.sh: machine-readable output, exit codes and messages
# (issue 15 items 11 and 12).
# usage: test_cli_json.sh MIXPREC_BINARY
#  - `--json` on doctor, config show, ckpt list|verify|inspect and bench
#    kernels prints one JSON object with a versioned "schema" and typed
#    numbers (checked with Python's json module, an independent parser);
#  - a failing --json verb prints a mixprec.error/1 object on stdout with
#    its exit code; --log-format json makes error lines JSON lines;
#  - a typo'd verb gets "did you mean";
#  - exit codes: port in use = 2 with the obs.http.port=0 hint and no run
#    recorded; precision_fp32_layers with pure bf16 = 2; bad loss scales
#    name the key / environment variable (exit 2);
#  - ckpt verify: a non-safetensors file says so; `ckpt export` output
#    verifies;
#  - help texts: train's usage has --resume, ckpt export lists the FP8
#    dtypes, no literal "%%", model.depth states its range.
. "$(dirname "$0")/cli_lib.sh" "$1"
small="data.trajectories=16 data.episode_length=50 model.hidden=16 model.depth=2 training.batch_size=16 training.epochs=1"
py() { /usr/bin/python3 - "$@"; }

"$bin" doctor --json > doctor.json 2> doctor.err || fail "doctor --json exit $?"
py doctor.json <<'PY' || fail "doctor --json"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["schema"] == "mixprec.doctor/1", d.get("schema")
assert isinstance(d["cpu_features"]["avx2"], bool)
assert {p["precision"] for p in d["precisions"]} >= {"fp32", "mixed_bf16", "mixed_fp16", "fp8"}
assert [p for p in d["precisions"] if p["precision"] == "fp8"][0]["support"] == "emulated"
PY

FP16_LOSS_SCALE=131072 "$bin" config show --json training.lr=3e-4 > config.json || fail "config show --json exit $?"
py config.json <<'PY' || fail "config show --json"
import json, sys
k = json.load(open(sys.argv[1]))["keys"]
assert k["training.lr"] == {"value": 0.0003, "source": "cli"}, k["training.lr"]
assert k["training.epochs"]["value"] == 3 and isinstance(k["training.epochs"]["value"], int)
assert k["guard.enabled"]["value"] is True
assert k["training.loss_scale.init"]["value"] == 131072 and k["training.loss_scale.init"]["source"] == "env"
assert isinstance(k["output.dir"]["value"], str)
PY

"$bin" train --quiet $small output.dir=run checkpoint.every_steps=10 > /dev/null 2>&1 || fail "train exit $?"
"$bin" ckpt list run --json > list.json || fail "ckpt list --json exit $?"
"$bin" ckpt verify run --json > verify.json || fail "ckpt verify --json exit $?"
ck=$(ls run/checkpoints/*.safetensors | tail -1)
"$bin" ckpt inspect "$ck" --json > inspect.json || fail "ckpt inspect --json exit $?"
"$bin" ckpt export "$ck" --dtype bf16 -o w.safetensors > /dev/null || fail "ckpt export exit $?"
"$bin" ckpt verify w.safetensors > wv.txt 2>&1 || fail "ckpt verify of an export: exit $?: $(cat wv.txt)"
py list.json verify.json inspect.json <<'PY' || fail "ckpt --json"
import json, sys
l = json.load(open(sys.argv[1])); v = json.load(open(sys.argv[2])); i = json.load(open(sys.argv[3]))
assert l["schema"] == "mixprec.ckpt_list/1" and len(l["checkpoints"]) >= 1
assert all(isinstance(c["step"], int) and isinstance(c["bytes"], int) for c in l["checkpoints"])
assert v["schema"] == "mixprec.ckpt_verify/1" and v["ok"] is True and v["failed"] == 0
assert v["checked"] == len(v["checkpoints"]) >= 1
m = i["metadata"]
assert i["schema"] == "mixprec.ckpt_inspect/1"
assert isinstance(m["step"], int) and isinstance(m["healthy"], bool), (m["step"], m["healthy"])
assert isinstance(m["lr"], float) and isinstance(m["config"], dict), type(m["config"])
PY

"$bin" bench kernels --quick --reps 1 --no-generic --no-peers --json > bench.json 2> bench.err ||
  fail "bench kernels --json exit $?"
py bench.json <<'PY' || fail "bench kernels --json"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["schema"] == "mixprec.bench_kernels/1" and d["ok"] is True
assert d["rows"] and all(isinstance(r["value"], (int, float)) for r in d["rows"])
assert {r["section"] for r in d["rows"]} >= {"peak", "gemm", "bandwidth"}
PY

"$bin" bench kernels --shapes nope --no-peers > /dev/null 2> shapes.err
rc=$?
[ $rc -eq 2 ] && grep -q 'accepted: core, training, all' shapes.err ||
  fail "bench kernels --shapes nope: exit $rc, $(cat shapes.err)"

# failures under --json: a JSON error object on stdout
"$bin" ckpt inspect nothing.safetensors --json > e1.json 2> /dev/null
rc=$?
[ $rc -eq 1 ] || fail "inspect of a missing file: exit $rc"
"$bin" train --json model.depth=99 output.dir=e2 > e2.json 2> /dev/null
rc=$?
[ $rc -eq 2 ] || fail "train --json with a bad key: exit $rc"
py e1.json e2.json <<'PY' || fail "JSON error objects"
import json, sys
for f, code in ((sys.argv[1], 1), (sys.argv[2], 2)):
    d = json.load(open(f))
    assert d["schema"] == "mixprec.error/1" and d["error"]["exit_code"] == code, d
    assert d["error"]["message"], d
PY
"$bin" train --log-format json model.depth=99 output.dir=e3 > /dev/null 2> e3.err
py e3.err <<'PY' || fail "--log-format json error line: $(cat e3.err)"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert any(l["level"] == "error" and "model.depth" in l["msg"] for l in lines), lines
PY

"$bin" trian > /dev/null 2> dym.err
[ $? -eq 2 ] || fail "typo'd verb: exit code"
grep -q "did you mean 'train'" dym.err || fail "no did-you-mean: $(cat dym.err)"

# exit codes and messages
py "$bin" <<'PY' || fail "port in use"
import socket, subprocess, sqlite3, sys, os
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1); port = s.getsockname()[1]
r = subprocess.run([sys.argv[1], "train", "--serve", "obs.http.port=%d" % port, "output.dir=pu",
                    "data.trajectories=16", "training.epochs=1", "checkpoint.enabled=false"],
                   capture_output=True, text=True, timeout=120)
assert r.returncode == 2, (r.returncode, r.stderr[-300:])
assert "obs.http.port=0" in r.stderr, r.stderr[-300:]
if os.path.exists("pu/metrics.db"):
    n = sqlite3.connect("pu/metrics.db").execute("select count(*) from runs").fetchone()[0]
    assert n == 0, "a failed run was recorded"
PY
"$bin" train $small training.precision=bf16 training.precision_fp32_layers=first output.dir=c1 > /dev/null 2> c1.err
[ $? -eq 2 ] || fail "bf16 + fp32 layers: not exit 2: $(cat c1.err)"
[ -e c1 ] && fail "bf16 + fp32 layers wrote outputs"
"$bin" train $small training.loss_scale.init=1e-50 output.dir=c2 > /dev/null 2> c2.err
[ $? -eq 2 ] || fail "loss_scale.init=1e-50: not exit 2"
grep -q "training.loss_scale.init=1e-50" c2.err || fail "key not named: $(cat c2.err)"
FP16_LOSS_SCALE=1e-45 "$bin" train $small output.dir=c3 > /dev/null 2> c3.err
[ $? -eq 2 ] || fail "FP16_LOSS_SCALE=1e-45: not exit 2"
grep -q "FP16_LOSS_SCALE" c3.err || fail "variable not named: $(cat c3.err)"
head -c 400 /etc/os-release > notst.safetensors 2>/dev/null || echo "hello, this is text not tensors" > notst.safetensors
"$bin" ckpt verify notst.safetensors > nv.txt 2>&1
[ $? -eq 1 ] || fail "verify of a text file: exit code"
grep -q "not a safetensors file" nv.txt || fail "verify of a text file: $(cat nv.txt)"

# help texts
"$bin" train --help | head -3 | grep -q -- "--resume" || fail "train usage lacks --resume"
"$bin" ckpt --help > ckh.txt
grep -q "f8_e4m3" ckh.txt || fail "ckpt help: export dtypes"
grep -q "%%" ckh.txt && fail "ckpt help prints a literal %%"
"$bin" config show --keys | grep "^model.depth " | grep -q "1\.\.31" || fail "model.depth range not in its help"

if [ $fails -ne 0 ]; then
  echo "test_cli_json: $fails failures"
  exit 1
fi
echo "test_cli_json: ok"
