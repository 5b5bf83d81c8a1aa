#!/usr/bin/env python3
"""bench/gpu_bench_table.py: the side-by-side table of the GPU step benchmark (issue 28 part 5).

usage: gpu_bench_table.py MIXPREC.jsonl TORCH.jsonl

Reads the records of bench/bench_cuda_dstep (mixprec's device step) and of
bench/torch_gpu_step.py (PyTorch on the same GPU, same init file) and
prints, per model and precision:
  times:   mixprec's median us/step (its fastest variant, m.var: eager
           today, graph once the device step has one), each torch variant's (eager, fused,
           compile, graph), the fastest torch variant, and
           ratio = fastest torch us/step / mixprec us/step (> 1: mixprec
           is faster; issue 28's goal for mixprec graphed is >= 1.2);
  memory:  peak device MiB of mixprec (the plan's bytes) and of torch eager
           and graph (max_memory_allocated over the case), and each side's
           bf16/fp32 ratio (the goal: mixed_bf16 <= 0.6 x fp32);
  syncs:   host syncs per step, mixprec and torch eager / graph;
  loss:    the loss after N steps on both sides (same weights, batch and N
           when both ran with the same --warmup/--steps: loss_step says)
           and their relative difference (fp32: FP32 sum order only).
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


def render(mx, th):
    out = []
    env_m = next((r for r in mx if r.get("kind") == "env"), {})
    env_t = next((r for r in th if r.get("kind") == "env"), {})
    out.append("# mixprec: device %s (cc %s), driver %s, CUDA runtime %s, %s; warm-up %s + %s "
               "timed steps" % (env_m.get("device"), env_m.get("capability"),
                                env_m.get("driver"), env_m.get("cuda"), env_m.get("cublaslt"),
                                env_m.get("warmup"), env_m.get("steps")))
    out.append("# torch %s: device %s, driver %s, CUDA %s; warm-up %s + %s timed steps" % (
        env_t.get("torch"), env_t.get("device"), env_t.get("driver"), env_t.get("cuda"),
        env_t.get("warmup"), env_t.get("steps")))
    m = {}  # mixprec's fastest variant per model and precision (eager; graph once it exists)
    for r in (r for r in mx if r.get("kind") == "case"):
        k, old = (r["model"], r["precision"]), m.get((r["model"], r["precision"]))
        if old is None or (ok(r) and (not ok(old) or r["us_per_step"] < old["us_per_step"])):
            m[k] = r
    t = {(r["model"], r["variant"], r["precision"]): r for r in th if r.get("kind") == "case"}
    out.append("")
    out.append("%-8s %-5s %-6s %11s %11s %11s %11s %11s %-8s %7s" % (
        "model", "prec", "m.var", "mixprec", "t.eager", "t.fused", "t.compile", "t.graph",
        "fastest", "ratio"))
    for mo in MODELS:
        for p in PRECS:
            r = m.get((mo, p))
            tv = {v: t.get((mo, v, p)) for v in VARIANTS}
            if r is None and not any(tv.values()):
                continue
            good = [(x["us_per_step"], v) for v, x in tv.items() if ok(x)]
            best = min(good) if good else None
            mine = r["us_per_step"] if ok(r) else None
            out.append("%-8s %-5s %-6s %11s %11s %11s %11s %11s %-8s %7s" % (
                mo, p, (r or {}).get("variant", "-"),
                f(mine, ".1f") if r is None or ok(r) else r.get("status"),
                *[f(x["us_per_step"], ".1f") if ok(x) else (x or {}).get("status", "-")[:11]
                  for x in tv.values()],
                best[1] if best else "-",
                f(best[0] / mine if best and mine else None, ".2f")))
    out.append("# us/step: median of CUDA-event step times; ratio = fastest torch / mixprec "
               "(> 1: mixprec faster)")
    for mo in MODELS:  # both sides must have trained from the same file
        srcs = {(r.get("init") or {}).get("source", "").split(";")[0]
                for r in list(m.values()) + list(t.values())
                if r.get("model") == mo and ok(r)} - {""}
        if srcs:
            out.append("# %s init: %s" % (mo, "the same file on both sides (%s)" % srcs.pop()
                                          if len(srcs) == 1 else
                                          "DIFFERENT inputs, losses not comparable: " +
                                          "; ".join(sorted(srcs))))
    out.append("")
    out.append("%-8s %-5s %9s %9s %9s %6s %6s %6s %14s %14s %9s" % (
        "model", "prec", "mxp MiB", "t.eagerMiB", "t.graphMiB", "mxpSy", "t.eSy", "t.gSy",
        "mxp loss@N", "t.eager loss@N", "rel"))
    for mo in MODELS:
        for p in PRECS:
            r, te, tg = m.get((mo, p)), t.get((mo, "eager", p)), t.get((mo, "graph", p))
            if r is None and te is None:
                continue
            lm = r.get("loss") if ok(r) else None
            lt = te.get("loss") if ok(te) else None
            same_n = ok(r) and ok(te) and r.get("loss_step") == te.get("loss_step")
            rel = abs(lm - lt) / abs(lt) if same_n and lt else None
            out.append("%-8s %-5s %9s %9s %9s %6s %6s %6s %14s %14s %9s" % (
                mo, p, f(mib(r), ".1f"), f(mib(te), ".1f"), f(mib(tg), ".1f"),
                f(r.get("syncs_per_step") if ok(r) else None, ".1f"),
                f(te.get("syncs_per_step") if ok(te) else None, ".1f"),
                f(tg.get("syncs_per_step") if ok(tg) else None, ".1f"),
                f(lm, ".7g") + ("@%d" % r["loss_step"] if lm is not None else ""),
                f(lt, ".7g") + ("@%d" % te["loss_step"] if lt is not None else ""),
                f(rel, ".1e") if same_n else "-" if lm is None or lt is None else "N differs"))
    for mo in MODELS:
        ratios = []
        for name, get in (("mixprec", lambda p: m.get((mo, p))),
                          ("torch eager", lambda p: t.get((mo, "eager", p)))):
            a, b = mib(get("bf16")), mib(get("fp32"))
            if a is not None and b:
                ratios.append("%s %.2f" % (name, a / b))
        if ratios:
            out.append("# %s peak memory bf16 / fp32: %s" % (mo, ", ".join(ratios)))
    out.append("# MiB: peak device memory of the case (mixprec: every byte its plan allocated; "
               "torch: max_memory_allocated less what was allocated before the case); Sy: host "
               "syncs per step; rel: |mixprec - torch| / torch of the loss after the same N steps")
    return "\n".join(out) + "\n"


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    sys.stdout.write(render(read(argv[0]), read(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
