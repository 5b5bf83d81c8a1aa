"""Overhead of the Python binding: the same training through the CLI and
through mixprec.Run, interleaved (CLI, Python, CLI, Python, ...), medians.

    /usr/bin/python3 bench/bench_python_overhead.py [--reps 3] [key=value ...]

Needs a build in build/ (or $MIXPREC_LIB and $MIXPREC_CLI). Both sides run
the same config (default world model unless key=value overrides; checkpoints
and the run store off on both sides) as a fresh process;
it reports per side the median process wall time and the median of the
run's own training wall time (CLI: summary.json wall_time_s; Python:
stats["wall_s"]), and checks the two give the same final loss. Timing only:
run it on a quiet machine, or say how loaded it was.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.environ.get("MIXPREC_CLI", os.path.join(ROOT, "build", "mixprec"))
LIB = os.environ.get("MIXPREC_LIB", os.path.join(ROOT, "build", "libmixprec.so"))

PY = r"""
import json, sys, mixprec
kv = dict(a.split("=", 1) for a in sys.argv[1:])
run = mixprec.Run(mixprec.Config(**kv), checkpoints=False)
st = run.train()
print(json.dumps({"wall_s": st["wall_s"], "last_loss": st["last_loss"],
                  "epoch_mean_loss": st["epoch_mean_loss"], "steps": st["total_steps"]}))
"""


def main():
    reps, extra = 3, []
    args = sys.argv[1:]
    while args:
        a = args.pop(0)
        if a == "--reps":
            reps = int(args.pop(0))
        else:
            extra.append(a)
    base = ["checkpoint.enabled=false", "obs.store.enabled=false"] + extra
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), MIXPREC_LIB=LIB)
    res = {"cli": [], "python": []}
    for i in range(reps):
        for side in ("cli", "python"):
            out = tempfile.mkdtemp(prefix="mixprec-overhead-")
            kv = base + ["output.dir=" + out]
            t0 = time.perf_counter()
            if side == "cli":
                r = subprocess.run([CLI, "train", "--quiet"] + kv, capture_output=True,
                                   text=True, env=env)
                wall = time.perf_counter() - t0
                if r.returncode:
                    sys.exit("cli failed: " + r.stderr[-2000:])
                with open(os.path.join(out, "summary.json")) as f:
                    s = json.load(f)
                train_s, loss = s["wall_time_s"], s["final_train_loss"]
            else:
                r = subprocess.run([sys.executable, "-c", PY] + kv, capture_output=True,
                                   text=True, env=env)
                wall = time.perf_counter() - t0
                if r.returncode:
                    sys.exit("python failed: " + r.stderr[-2000:])
                s = json.loads(r.stdout.strip().splitlines()[-1])
                train_s, loss = s["wall_s"], s["epoch_mean_loss"]
            res[side].append((wall, train_s, loss))
            print("rep %d %-6s process %.3f s  training %.3f s  final train loss %.9g" %
                  (i + 1, side, wall, train_s, loss), flush=True)
    med = {k: (statistics.median(w for w, _, _ in v), statistics.median(t for _, t, _ in v))
           for k, v in res.items()}
    print("median process wall: cli %.3f s, python %.3f s (python/cli %.3f)" %
          (med["cli"][0], med["python"][0], med["python"][0] / med["cli"][0]))
    print("median training wall: cli %.3f s, python %.3f s (python/cli %.3f)" %
          (med["cli"][1], med["python"][1], med["python"][1] / med["cli"][1]))
    same = len({"%.9g" % l for v in res.values() for _, _, l in v}) == 1
    print("final train loss equal (to summary.json's 9 digits) on every run and side: %s" % same)
    print("load average at the end: %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
