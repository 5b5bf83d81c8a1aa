#!/usr/bin/env python3
"""bench/gpu_bench_table.py: the side-by-side table of the GPU step benchmark (issue 28 part 5).

usage: gpu_bench_table.py MIXPREC.jsonl TORCH.jsonl

Reads the records of bench/bench_cuda_dstep (mixprec's device step) and of
bench/torch_gpu_step.py (PyTorch on the same GPU, same init file and batch
ring) and prints, like with like:
  env:     the device, driver and CUDA toolkit/runtime of both sides, first;
  times:   per model and precision, the median us/step of mixprec eager and
           graphed and of each torch variant (eager, fused, compile, graph)
           with the batch copied from pinned host memory inside the timed
           step ("batch": "h2d", the terms of mixprec's step, which uploads
           each step's batch); the ratios mixprec / torch of the like pairs
           (eager / eager, graph / graph, and mixprec's fastest / torch's
           fastest; < 1: mixprec is faster; issue 28's goal, mixprec graphed
           1.2x faster than the fastest torch, is a ratio <= 0.83) and the
           samples/s of each side's fastest;
  resident: torch's variants with the batch ring resident on the device
           ("batch": "resident"; mixprec's step has no such mode), for what
           the copy costs torch; never put against mixprec;
  memory, syncs, loss: per mode, the peak device MiB of mixprec eager and
           graph (the plan's bytes) and of torch eager and graph (h2d), the
           host syncs per step of the same four, the loss after N steps of
           mixprec eager and torch eager (h2d) and their relative difference
           when both took the same N steps on the same ring (same init file,
           loss_step and ring; else the table says what differs); each
           side's bf16/fp32 peak memory ratio (the goal: <= 0.6).
Records without "batch" (older runs): mixprec's are h2d, torch's resident.
Only Python's standard library (gpu-check.sh runs it with the device's
python3). Exit 0 (missing records print as "-"), 2 bad usage.
"""
import json
import sys

MODELS = ("wm", "mlp512", "mlp2048")
PRECS = ("fp32", "bf16", "fp16")
VARIANTS = ("eager", "fused", "compile", "graph")


def read(path):
    recs = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        recs.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError as e:
        print("# %s: %s" % (path, e))
    return recs


def ok(r):
    return r is not None and r.get("status") in ("ok", "dry") and "us_per_step" in r


def f(v, spec):
    return "-" if v is None else format(v, spec)


def mib(r):
    return None if not ok(r) or r.get("peak_mem_bytes") is None else r["peak_mem_bytes"] / 2**20


def us(r):
    return r["us_per_step"] if ok(r) else None


def cell(r):
    """us/step of a case, or its status (not-run, error, ...), or -."""
    return f(r["us_per_step"], ".1f") if ok(r) else ((r or {}).get("status") or "-")[:11]


def ratio(a, b):
    return f(us(a) / us(b) if ok(a) and ok(b) else None, ".2f")


def fastest(recs):
    good = [r for r in recs if ok(r)]
    return min(good, key=lambda r: r["us_per_step"]) if good else None


def index(recs, default_batch):
    """{(model, variant, precision, batch): case record}."""
    return {(r["model"], r["variant"], r["precision"], r.get("batch", default_batch)): r
            for r in recs if r.get("kind") == "case"}


def env_lines(mx, th):
    em = next((r for r in mx if r.get("kind") == "env"), {})
    et = next((r for r in th if r.get("kind") == "env"), {})
    return [
        "# device %s (cc %s); driver %s (nvidia-smi) / %s (mixprec's cudaDriverGetVersion); "
        "CUDA toolkit: torch's %s, mixprec's runtime %s, %s" % (
            et.get("device") or em.get("device"), em.get("capability") or et.get("capability"),
            et.get("driver", "-"), em.get("driver", "-"), et.get("cuda"), em.get("cuda"),
            em.get("cublaslt")),
        "# mixprec: warm-up %s + %s timed steps; torch %s: warm-up %s + %s timed steps; "
        "TF32 off on both sides" % (em.get("warmup"), em.get("steps"), et.get("torch"),
                                    et.get("warmup"), et.get("steps")),
    ]


def times(m, t):
    out = ["", "== us/step (median, CUDA events), batch h2d on both sides; ratios mixprec / "
           "torch (< 1: mixprec faster)",
           "%-8s %-5s %9s %9s %9s %9s %9s %9s %7s %7s %7s %-8s %10s %10s" % (
               "model", "prec", "m.eager", "m.graph", "t.eager", "t.fused", "t.compile",
               "t.graph", "e/e", "g/g", "best", "t.best", "m.samp/s", "t.samp/s")]
    for mo in MODELS:
        for p in PRECS:
            me, mg = m.get((mo, "eager", p, "h2d")), m.get((mo, "graph", p, "h2d"))
            tv = [t.get((mo, v, p, "h2d")) for v in VARIANTS]
            if me is None and mg is None and not any(tv):
                continue
            mb, tb = fastest([me, mg]), fastest(tv)
            out.append("%-8s %-5s %9s %9s %9s %9s %9s %9s %7s %7s %7s %-8s %10s %10s" % (
                mo, p, cell(me), cell(mg), *[cell(x) for x in tv], ratio(me, tv[0]),
                ratio(mg, tv[3]), ratio(mb, tb), tb["variant"] if tb else "-",
                f(mb["samples_per_s"] if mb else None, ".0f"),
                f(tb["samples_per_s"] if tb else None, ".0f")))
    out.append("# e/e: mixprec eager / torch eager; g/g: mixprec graph / torch graph (CUDA "
               "graph, capturable AdamW); best: the faster mixprec / the fastest torch")
    rows = []
    for mo in MODELS:
        for p in PRECS:
            tv = [t.get((mo, v, p, "resident")) for v in VARIANTS]
            if any(tv):
                rows.append("%-8s %-5s %9s %9s %9s %9s" % (mo, p, *[cell(x) for x in tv]))
    if rows:
        out += ["", "== torch with the batch ring resident on the device (not compared with "
                "mixprec, whose step uploads its batch)",
                "%-8s %-5s %9s %9s %9s %9s" % ("model", "prec", "t.eager", "t.fused",
                                               "t.compile", "t.graph")] + rows
    return out


def same_problem(r, te):
    """Why the losses of r and te are not comparable, or None."""
    if r.get("loss_step") != te.get("loss_step"):
        return "N differs"
    if r.get("ring") != te.get("ring"):
        return "ring differs"
    src = [(x.get("init") or {}).get("source", "").split(";")[0] for x in (r, te)]
    return None if src[0] == src[1] and src[0].startswith("file ") else "init differs"


def memory_loss(m, t):
    out = ["", "== peak device MiB, host syncs per step, loss after N steps (batch h2d)",
           "%-8s %-5s %8s %8s %8s %8s %5s %5s %5s %5s %15s %15s %9s" % (
               "model", "prec", "m.e MiB", "m.g MiB", "t.e MiB", "t.g MiB", "m.eSy", "m.gSy",
               "t.eSy", "t.gSy", "mxp loss@N", "torch loss@N", "rel")]
    for mo in MODELS:
        for p in PRECS:
            four = [m.get((mo, "eager", p, "h2d")), m.get((mo, "graph", p, "h2d")),
                    t.get((mo, "eager", p, "h2d")), t.get((mo, "graph", p, "h2d"))]
            if not any(four):
                continue
            r, te = four[0], four[2]
            why = same_problem(r, te) if ok(r) and ok(te) else "-"
            rel = abs(r["loss"] - te["loss"]) / abs(te["loss"]) if why is None and \
                te["loss"] else None
            out.append("%-8s %-5s %8s %8s %8s %8s %5s %5s %5s %5s %15s %15s %9s" % (
                mo, p, *[f(mib(x), ".1f") for x in four],
                *[f(x.get("syncs_per_step") if ok(x) else None, ".1f") for x in four],
                *[f(x["loss"], ".7g") + "@%d" % x["loss_step"] if ok(x) else "-"
                  for x in (r, te)],
                f(rel, ".1e") if why is None else why))
    for mo in MODELS:
        ratios = []
        for name, k, tab in (("mixprec eager", "eager", m), ("mixprec graph", "graph", m),
                             ("torch eager", "eager", t)):
            a, b = mib(tab.get((mo, k, "bf16", "h2d"))), mib(tab.get((mo, k, "fp32", "h2d")))
            if a is not None and b:
                ratios.append("%s %.2f" % (name, a / b))
        if ratios:
            out.append("# %s peak memory bf16 / fp32: %s" % (mo, ", ".join(ratios)))
    out.append("# MiB: peak device memory of the case (mixprec: every byte its plan allocated; "
               "torch: max_memory_allocated less what was allocated before the case); Sy: host "
               "syncs per step; rel: |mixprec - torch| / torch of the loss after the same N "
               "steps on the same ring from the same init file")
    return out


def render(mx, th):
    m, t = index(mx, "h2d"), index(th, "resident")
    return "\n".join(env_lines(mx, th) + times(m, t) + memory_loss(m, t)) + "\n"


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    sys.stdout.write(render(read(argv[0]), read(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
