#!/usr/bin/env bash
# tests/test_bench_train.sh: `mixprec bench train` end to end.
# usage: bash test_bench_train.sh <mixprec binary> <source dir>
#
# Runs a reduced bench (--quick, world model + classifier; MIXPREC_TEST_QUICK
# keeps only the world model and skips the steps section) into a temp dir
# and checks, independently of
# the bench's own arithmetic: bench.csv has one ok row per mode x cell; the
# numeric columns parse; every fp32 row has speedup exactly 1 and
# degradation 0; speedup = fp32 median time / cell median time (recomputed
# here from the CSV's own median_wall_s); the memory total is the sum of
# its parts and equals summary.json's memory_bytes of the cell's run; the
# child's summary.json precision matches the row; bench.md and steps.csv
# exist; bad options exit 2 naming the option; `mixprec report DIR` draws
# the PNGs when gnuplot is installed.
set -u
BIN=$1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# ---- bad options: exit 2 with a message naming the option ----
for args in "--runs 0" "--runs x" "--only bogus" "--workloads world_model,nope" "--frobnicate"; do
    # shellcheck disable=SC2086
    "$BIN" bench train $args --out "$TMP/bad" >"$TMP/bad.out" 2>"$TMP/bad.err"
    rc=$?
    [ $rc -eq 2 ] || fail "bench train $args: exit $rc, expected 2"
    opt=${args%% *}
    grep -q -- "$opt" "$TMP/bad.err" || fail "bench train $args: message does not name $opt: $(cat "$TMP/bad.err")"
    grep -q "accepted" "$TMP/bad.err" || fail "bench train $args: message lists no accepted values"
done
"$BIN" bench train --help | grep -q -- "--workloads" || fail "bench train --help"

# ---- a reduced quick bench ----
WL=world_model,classifier
[ "${MIXPREC_TEST_QUICK:-0}" = 1 ] && WL=world_model
OUT=$TMP/bench
# key=value overrides shrink the world model (hidden 128, 10-step episodes) to
# keep the test short; the scenarios' trajectories and epochs stay the seeds'
"$BIN" bench train --quick --workloads "$WL" --only scenarios --out "$OUT" \
    model.hidden=128 data.episode_length=10 >"$TMP/run.out" 2>&1
rc=$?
[ $rc -eq 0 ] || { tail -40 "$TMP/run.out"; fail "bench train --quick exited $rc"; }
[ -s "$OUT/bench.csv" ] || fail "no bench.csv"
[ -s "$OUT/bench.md" ] || fail "no bench.md"
grep -q "| Scenario | Trajectories | Epochs | FP32 Time | mixed_bf16 Time | Speedup" "$OUT/bench.md" \
    || fail "bench.md has no seeds-shaped table"
grep -q "Target" "$OUT/bench.md" || fail "bench.md has no target line"
grep -q "AVX-512F" "$OUT/bench.md" || fail "bench.md has no hardware block"
grep -q "## Seeds' scenarios" "$TMP/run.out" || fail "the markdown was not printed to stdout"

python3 - "$OUT" "$WL" <<'EOF' || fail "bench.csv checks"
import csv, json, math, os, sys
out, wls = sys.argv[1], sys.argv[2].split(",")
rows = list(csv.DictReader(open(os.path.join(out, "bench.csv"))))
modes = ["fp32", "mixed_bf16", "mixed_fp16", "bf16", "fp16", "fp8"]
cells = {"world_model": ["warmup", "standard", "stress"], "classifier": ["default"]}
# the world model also has the variants "mixed_bf16 (fp32 first/last)" and
# "mixed_bf16 (fp32 first)" (training.precision_fp32_layers=first,last / first)
# and, on a CPU with AVX512-FP16 (cpuid 7.0 EDX bit 23, as /proc/cpuinfo's
# avx512_fp16) on the AVX-512 table, "mixed_fp16 (fp16 accumulate)"
# (training.fp16_accumulate=fp16):
# the label tells them apart; run directory suffix, mode, the layers the child
# kept and the summary's fp16_accumulate
fp16 = ("avx512_fp16" in open("/proc/cpuinfo").read().split()
        and os.environ.get("MIXPREC_FORCE_ISA") != "generic")
KEEP = {"mixed_bf16 (fp32 first/last)": ("-fp32fl", "mixed_bf16", [0, 6]),
        "mixed_bf16 (fp32 first)": ("-fp32f", "mixed_bf16", [0])}
if fp16:
    KEEP["mixed_fp16 (fp16 accumulate)"] = ("-f16acc", "mixed_fp16", [])
label = lambda m: "fp8 (emulated)" if m == "fp8" else m
want = {(w, s, label(m)) for w in wls for s in cells[w] for m in modes}
want |= {("world_model", s, k) for s in cells["world_model"] for k in KEEP
         if "world_model" in wls}
got = {(r["workload"], r["scenario"], r["label"]) for r in rows}
assert got == want, f"cells: missing {want - got}, extra {got - want}"
assert len(rows) == len(want), "duplicate rows"
scen = {"warmup": (128, 1), "standard": (256, 3), "stress": (512, 5)}
for r in rows:
    key = (r["workload"], r["scenario"], r["precision"])
    assert r["status"] == "ok", f"{key}: {r['status']} {r['note']}"
    for c in ["median_wall_s", "min_wall_s", "speedup", "overflow_rate", "final_train_loss",
              "eval_loss", "degradation", "train_degradation_pct", "mem_params", "mem_grads",
              "mem_master", "mem_optimizer", "mem_activations", "mem_total",
              "mem_reduction_pct", "peak_rss_kb", "steps"]:
        v = float(r[c])  # raises when it does not parse
        assert math.isfinite(v), f"{key} {c} = {r[c]}"
    assert float(r["median_wall_s"]) > 0 and int(r["peak_rss_kb"]) > 1000, key
    if r["workload"] == "world_model":
        assert (int(r["trajectories"]), int(r["epochs"])) == scen[r["scenario"]], key
        assert int(r["hidden"]) == 128, f"{key}: the override model.hidden=128 was not applied"
    if r["workload"] == "classifier":
        assert 0.0 < float(r["test_accuracy"]) <= 1.0, key
    assert (r["label"] == "fp8 (emulated)") == (r["precision"] == "fp8"), key
    parts = sum(int(r[c]) for c in ["mem_params", "mem_grads", "mem_master", "mem_optimizer",
                                    "mem_activations"])
    assert parts == int(r["mem_total"]), f"{key}: memory total"
    # the child's own summary.json is the oracle for what the row reports
    suffix, mode, kept = KEEP.get(r["label"], ("", r["precision"], []))
    assert r["precision"] == mode, key
    d = os.path.join(out, "cells", f"{r['workload']}-{r['scenario']}-{r['precision']}{suffix}-r1")
    s = json.load(open(os.path.join(d, "summary.json")))
    if r["workload"] == "world_model":  # first and last linear layers of depth 3: 0 and 6
        assert s["fp32_layers_kept"] == kept, f"{key}: {s['fp32_layers_kept']}"
    assert s["precision"] == r["end_precision"], key
    if r["workload"] == "world_model":
        acc = "fp16 (vfmadd231ph), k=16" if suffix == "-f16acc" else "fp32"
        assert s["fp16_accumulate"] == acc, f"{key}: {s['fp16_accumulate']}"
    assert s["emulated"] == (r["precision"] == "fp8"), key
    mb = s["memory_bytes"]
    for k in ["params", "grads", "master", "optimizer", "activations"]:
        assert mb[k] == int(r["mem_" + k]), f"{key}: memory_bytes.{k}"
    # AdamW: m and v in FP32 = 8 bytes per parameter; FP32 grads = 4 per parameter
    assert mb["optimizer"] == 2 * mb["grads"], f"{key}: optimizer bytes"
    assert abs(float(r["median_wall_s"]) - s["wall_time_s"]) <= 1e-6 * max(1, s["wall_time_s"]), key
fp32 = {(r["workload"], r["scenario"]): r for r in rows if r["precision"] == "fp32"}
for r in rows:
    b = fp32[(r["workload"], r["scenario"])]
    if r is b:
        assert r["speedup"] == "1.0000", f"fp32 speedup {r['speedup']}"
        assert float(r["degradation"]) == 0.0 and float(r["mem_reduction_pct"]) == 0.0
        assert int(r["mem_master"]) == 0
        continue
    sp = float(b["median_wall_s"]) / float(r["median_wall_s"])
    assert abs(sp - float(r["speedup"])) <= 1e-3 * sp + 1e-4, f"speedup {r['speedup']} vs {sp}"
    tot = 1 - int(r["mem_total"]) / int(b["mem_total"])
    assert abs(100 * tot - float(r["mem_reduction_pct"])) < 0.01, "memory reduction"
    if r["workload"] == "classifier":
        dg = 100 * (float(b["test_accuracy"]) - float(r["test_accuracy"]))
    else:
        dg = 100 * (float(r["eval_loss"]) - float(b["eval_loss"])) / float(b["eval_loss"])
    assert abs(dg - float(r["degradation"])) < 1e-3, f"degradation {r['degradation']} vs {dg}"
print(f"bench.csv: {len(rows)} cells ok")
EOF

# ---- runs go in rounds: run 1 of every cell before run 2 of any ----
"$BIN" bench train --quick --workloads classifier --runs 2 --only scenarios --out "$TMP/rounds" \
    >"$TMP/rounds.out" 2>&1 || { tail -20 "$TMP/rounds.out"; fail "bench train --runs 2"; }
order=$(grep -o "run [12]/2" "$TMP/rounds.out" | cut -c5 | tr -d '\n')
[ "$order" = 111111222222 ] || fail "runs not in rounds: $order"

# ---- steps section (its big configuration is slow in a sanitizer build:
# not under MIXPREC_TEST_QUICK) ----
if [ "${MIXPREC_TEST_QUICK:-0}" != 1 ]; then
    "$BIN" bench train --quick --only steps --out "$OUT" >"$TMP/steps.out" 2>&1 \
        || { tail -20 "$TMP/steps.out"; fail "bench train --only steps"; }
    python3 - "$OUT/steps.csv" <<'EOF' || fail "steps.csv checks"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
want = {(c, m) for c in ["tiny", "base", "big"]
        for m in ["fp32", "mixed_bf16", "mixed_fp16", "bf16", "fp16", "fp8"]}
assert {(r["config"], r["precision"]) for r in rows} == want
for r in rows:
    assert r["status"] == "ok", r
    ph = [float(r[c]) for c in ["ms_forward", "ms_backward", "ms_safety", "ms_optimizer"]]
    assert all(p >= 0 for p in ph) and float(r["ms_step"]) > 0, r
    assert sum(ph) <= float(r["ms_step"]) * 1.5 + 0.01, r
    assert r["in"] == "72" and r["out"] == "65", r
    # roofline: GEMM flops of forward + backward, recomputed from the shape
    B, h, d = int(r["batch"]), int(r["hidden"]), int(r["depth"])
    fwd = 2 * B * (72 * h + (d - 1) * h * h + h * 65)
    want_gf = (3 * fwd - 2 * B * 72 * h) / 1e9
    assert abs(float(r["gflop_step"]) - want_gf) <= 1e-6 * want_gf, (r, want_gf)
    gfs = want_gf / (float(r["ms_step"]) * 1e-3)
    assert abs(float(r["gflops"]) - gfs) <= 1e-3 * gfs + 1e-3, (r, gfs)
    # BF16 dot products only for BF16 operands (FP32 FMA elsewhere, and
    # everywhere on the generic table or without AVX512-BF16)
    if "vdpbf16ps" in r["peak_kind"]:
        assert r["precision"] in ("mixed_bf16", "bf16"), r
    else:
        assert "vfmadd231ps" in r["peak_kind"], r
    pk = float(r["peak_gflops"] or "nan")
    if pk > 0:  # nan where this CPU cannot run the peak loop
        assert abs(float(r["pct_of_peak"]) - 100 * gfs / pk) <= 0.01 + 1e-3 * gfs, r
print(f"steps.csv: {len(rows)} rows ok")
EOF
fi

# ---- plots ----
if command -v gnuplot >/dev/null 2>&1; then
    "$BIN" report "$OUT" -o "$TMP/plots" >"$TMP/report.out" 2>&1 \
        || { cat "$TMP/report.out"; fail "mixprec report on a bench dir"; }
    for p in speedup memory degradation; do
        f="$TMP/plots/$p.png"
        [ -s "$f" ] || fail "no $p.png"
        head -c 8 "$f" | od -An -c | grep -q "P   N   G" || fail "$p.png is not a PNG"
    done
else
    echo "note: gnuplot not installed; plots not checked"
fi
echo "PASS"
