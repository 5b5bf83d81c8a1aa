#!/usr/bin/python3
"""bench/bench_train_vs_torch.py: mixprec vs PyTorch, side by side, one invocation.

For each configuration, thread count and precision pair it runs, in fresh
processes and interleaved (mixprec, torch, mixprec, torch, ...), the mixprec
step benchmark (bench_train_step, built by CMake from bench/bench_train_step.c)
and bench/torch_mlp.py on the same MLP, batch and optimizer, --reps times
each. It prints the median over repetitions of each run's median step time,
the best (minimum) step seen, samples/s, and the ratio torch / mixprec (> 1:
mixprec is faster). Method and recorded results: docs/benchmarks.md.

Precision pairs: fp32 <-> torch fp32; mixed_bf16 <-> torch autocast(bf16).
--extra adds mixprec-only rows (mixed_fp16, bf16, fp16, and mixed_fp16+acc16:
mixed_fp16 with training.fp16_accumulate=fp16, k = 16) without a peer.

PyTorch environments (--torch-env):
  installed  as Debian installs it: torch.set_num_threads(t), nothing else;
  tuned      OMP_NUM_THREADS / OPENBLAS_NUM_THREADS / MKL_NUM_THREADS = t, and,
             when OpenBLAS is found (system openblas-pthread directory or
             --openblas-dir), LD_LIBRARY_PATH to it and
             OPENBLAS_CORETYPE=SkylakeX (OpenBLAS 0.3.21 misdetects Zen 4).

Example (from the repository root, after cmake --build build):
  /usr/bin/python3 bench/bench_train_vs_torch.py --bench build/bench_train_step \\
      --configs wm,wm-big,tiny,base --threads 1,2 --reps 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CONFIGS = {
    # name: (in, hidden, depth, out, batch, steps, warmup)
    "wm": (4, 256, 3, 4, 32, 300, 30),          # default world model (README)
    "wm-big": (4, 2048, 3, 4, 32, 40, 5),       # world model with hidden 2048
    "tiny": (72, 128, 2, 65, 32, 300, 30),      # issue 3 end-to-end shapes
    "base": (72, 512, 3, 65, 256, 60, 8),
    "big": (72, 2048, 3, 65, 512, 8, 2),
}
PAIRS = [("fp32", "fp32"), ("mixed_bf16", "bf16")]
EXTRA = ["mixed_fp16", "bf16", "fp16", "mixed_fp16+acc16"]


def mx_args(mode):
    """bench_train_step's arguments for a mixprec row: MODE, or MODE+accK
    (the FP16 fast-accumulate GEMM with promotion every K products)."""
    if "+acc" in mode:
        prec, k = mode.split("+acc")
        return ["--precision", prec, "--fp16-accumulate", k]
    return ["--precision", mode]
SYSTEM_OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-pthread"
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "MIXPREC_NUM_THREADS", "OPENBLAS_CORETYPE")


def run_json(cmd, env):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def clean_env():
    env = dict(os.environ)
    for v in THREAD_VARS:
        env.pop(v, None)
    return env


def torch_env(kind, threads, openblas_dir):
    env = clean_env()
    if kind == "tuned":
        for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[v] = str(threads)
        if openblas_dir:
            env["LD_LIBRARY_PATH"] = openblas_dir + (
                ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
            env["OPENBLAS_CORETYPE"] = "SkylakeX"
    return env


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


PROBE = """
import torch
print(torch.__version__)
try:
    with torch.autocast("cpu", dtype=torch.float16):
        torch.nn.Linear(4, 4)(torch.randn(2, 4))
    print("fp16 autocast: runs")
except RuntimeError as e:
    print("fp16 autocast: refused (" + str(e).strip() + ")")
"""


def probe_torch(python):
    """(torch version, what FP16 CPU autocast does), or None when torch is absent."""
    try:
        r = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = r.stdout.strip().splitlines()
    return (lines[0], lines[1]) if r.returncode == 0 and len(lines) == 2 else None


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bench", default="build/bench_train_step", help="bench_train_step binary")
    p.add_argument("--python", default="/usr/bin/python3", help="interpreter with torch")
    p.add_argument("--configs", default="wm,wm-big,tiny,base",
                   help="comma list of " + ",".join(CONFIGS) + " or all")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--steps-scale", type=float, default=1.0, help="multiply step counts")
    p.add_argument("--torch-env", choices=["installed", "tuned", "both"], default="both")
    p.add_argument("--openblas-dir", default=None,
                   help="directory holding OpenBLAS's libblas.so.3 (default: the system one)")
    p.add_argument("--extra", action="store_true", help="also time mixprec-only modes")
    p.add_argument("--json-out", default=None, help="write every raw record here (JSON lines)")
    a = p.parse_args()
    names = list(CONFIGS) if a.configs == "all" else a.configs.split(",")
    for n in names:
        if n not in CONFIGS:
            p.error(f"unknown config {n!r}; accepted: {', '.join(CONFIGS)}, all")
    threads = [int(t) for t in a.threads.split(",")]
    if not os.access(a.bench, os.X_OK):
        p.error(f"{a.bench} is not an executable; build it: cmake --build build "
                "--target bench_train_step")
    openblas = a.openblas_dir or (SYSTEM_OPENBLAS if os.path.exists(
        os.path.join(SYSTEM_OPENBLAS, "libblas.so.3")) else None)
    envs = ["installed", "tuned"] if a.torch_env == "both" else [a.torch_env]
    torch_script = os.path.join(here, "torch_mlp.py")
    raw = open(a.json_out, "w") if a.json_out else None

    probe = probe_torch(a.python)
    if probe is None:
        print(f"# skipped: {a.python} cannot import torch (Debian: apt-get install python3-torch)")
        return 0
    print(f"# mixprec vs PyTorch, {a.reps} repetitions each, load average at start {loadavg()}")
    print(f"# torch {probe[0]} on CPU: {probe[1]}; so mixed_fp16 has no PyTorch peer")
    print(f"# OpenBLAS for tuned torch: {openblas or 'not found (tuned = thread variables only)'}")
    hdr = (f"{'config':8} {'thr':>3} {'mixprec':11} {'peer':21} {'mixprec ms':>11} "
           f"{'(best)':>9} {'peer ms':>10} {'(best)':>9} {'mx samples/s':>13} "
           f"{'peer samples/s':>15} {'peer/mixprec':>12}")
    print(hdr)
    t_start = time.time()
    for name in names:
        inp, hid, depth, out, batch, steps, warm = CONFIGS[name]
        steps = max(3, int(steps * a.steps_scale))
        shape = ["--in", str(inp), "--hidden", str(hid), "--depth", str(depth), "--out", str(out),
                 "--batch", str(batch), "--steps", str(steps), "--warmup", str(warm)]
        for t in threads:
            rows = [(m, tm) for m, tm in PAIRS] + ([(m, None) for m in EXTRA] if a.extra else [])
            for mx_mode, t_mode in rows:
                mx_env = clean_env()
                mx_env["MIXPREC_NUM_THREADS"] = str(t)
                peers = envs if t_mode else [None]
                res = {"mx": []}
                for e in peers:
                    res[e] = []
                for _ in range(a.reps):
                    r = run_json([a.bench, *shape, *mx_args(mx_mode), "--json"], mx_env)
                    res["mx"].append(r)
                    if raw:
                        raw.write(json.dumps({"config": name, **r}) + "\n")
                    for e in peers:
                        if e is None:
                            continue
                        r = run_json([a.python, torch_script, *shape, "--mode", t_mode,
                                      "--threads", str(t), "--json"], torch_env(e, t, openblas))
                        r["env"] = e
                        res[e].append(r)
                        if raw:
                            raw.write(json.dumps({"config": name, **r}) + "\n")
                mx_ms = statistics.median(r["median_ms"] for r in res["mx"])
                mx_best = min(r["min_ms"] for r in res["mx"])
                for e in peers:
                    if e is None:
                        print(f"{name:8} {t:>3} {mx_mode:11} {'-':21} {mx_ms:>11.4f} "
                              f"{mx_best:>9.4f} {'':>10} {'':>9} {batch / mx_ms * 1e3:>13.0f}")
                        continue
                    pk_ms = statistics.median(r["median_ms"] for r in res[e])
                    pk_best = min(r["min_ms"] for r in res[e])
                    peer = f"torch {t_mode} {e}"
                    print(f"{name:8} {t:>3} {mx_mode:11} {peer:21} {mx_ms:>11.4f} "
                          f"{mx_best:>9.4f} {pk_ms:>10.4f} {pk_best:>9.4f} "
                          f"{batch / mx_ms * 1e3:>13.0f} {batch / pk_ms * 1e3:>15.0f} "
                          f"{pk_ms / mx_ms:>11.2f}x")
                sys.stdout.flush()
    print(f"# done in {time.time() - t_start:.0f} s, load average at end {loadavg()}")
    if raw:
        raw.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
