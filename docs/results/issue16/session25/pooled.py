"""Pooled medians of the scenario cells of several `mixprec bench train`
invocations: python3 pooled.py OUT_DIR [OUT_DIR ...] (each with cells/)."""
import glob, json, os, statistics, sys

walls = {}
for out in sys.argv[1:]:
    for d in glob.glob(os.path.join(out, "cells", "world_model-*-r*")):
        name = os.path.basename(d).rsplit("-r", 1)[0]
        try:
            with open(os.path.join(d, "summary.json")) as f:
                walls.setdefault(name, []).append(json.load(f)["wall_time_s"])
        except (OSError, KeyError, ValueError):
            pass
for scen in ("warmup", "standard", "stress"):
    base = statistics.median(walls["world_model-%s-fp32" % scen])
    row = []
    for mode in ("mixed_bf16", "mixed_bf16-fp32f", "mixed_bf16-fp32fl"):
        w = walls.get("world_model-%s-%s" % (scen, mode))
        if w:
            row.append("%s %.2fx (n=%d)" % (mode, base / statistics.median(w), len(w)))
    print("%-8s fp32 %.3f s (n=%d): %s" % (scen, base, len(walls["world_model-%s-fp32" % scen]),
                                          ", ".join(row)))
