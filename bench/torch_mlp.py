#!/usr/bin/python3
"""bench/torch_mlp.py: the PyTorch side of the side-by-side training benchmark.

Trains the same MLP as bench/bench_train_step.c with the same loop: depth x
(Linear(hidden) -> GELU(exact)), then Linear(out); MSE loss; AdamW(lr 1e-3,
betas 0.9/0.999, eps 1e-8, weight_decay 0); no clipping; one fixed random
batch x, y ~ N(0, 1). One timed step = zero_grad(set_to_none=True),
forward, loss, backward, optimizer.step(). Prints the median step time over
--steps timed steps after --warmup steps.

--mode fp32 runs in FP32; --mode bf16 runs forward and loss under
torch.autocast('cpu', dtype=torch.bfloat16) (PyTorch's CPU mixed precision:
bf16 matmuls, FP32 weights and optimizer), the peer of mixprec mixed_bf16.

Run with Debian's interpreter (torch 1.13, CPU): /usr/bin/python3
bench/torch_mlp.py --threads 2 --json. Thread and BLAS environment
variables (OMP_NUM_THREADS, OPENBLAS_CORETYPE, ...) must be set by the
caller before the interpreter starts (bench/bench_train_vs_torch.py does).
Method and results: docs/benchmarks.md.
"""
import argparse
import json
import statistics
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--in", dest="inp", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--out", type=int, default=4)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave)")
    p.add_argument("--mode", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    for name in ("inp", "hidden", "depth", "out", "batch", "steps"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be >= 1")

    import torch

    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    layers = []
    width = a.inp
    for _ in range(a.depth):
        layers += [torch.nn.Linear(width, a.hidden), torch.nn.GELU()]
        width = a.hidden
    layers.append(torch.nn.Linear(width, a.out))
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.0)
    g = torch.Generator().manual_seed(42)
    x = torch.randn(a.batch, a.inp, generator=g)
    y = torch.randn(a.batch, a.out, generator=g)
    loss_fn = torch.nn.MSELoss()

    def step():
        opt.zero_grad(set_to_none=True)
        if a.mode == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                pred = model(x)
            loss = loss_fn(pred.float(), y)
        else:
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    times = []
    loss = None
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        loss = step()
        dt = time.perf_counter() - t0
        if s >= a.warmup:
            times.append(dt * 1e3)
    med = statistics.median(times)
    rec = {
        "framework": "torch",
        "torch": torch.__version__,
        "precision": a.mode,
        "in": a.inp, "hidden": a.hidden, "depth": a.depth, "out": a.out, "batch": a.batch,
        "steps": a.steps,
        "median_ms": med,
        "min_ms": min(times),
        "samples_per_s": a.batch / (med * 1e-3),
        "final_loss": float(loss),
        "threads": torch.get_num_threads(),
    }
    if a.json:
        print(json.dumps(rec))
    else:
        print(f"torch {a.mode} in={a.inp} hidden={a.hidden}x{a.depth} out={a.out} "
              f"batch={a.batch}: median {med:.4f} ms/step (min {min(times):.4f}), "
              f"{rec['samples_per_s']:.0f} samples/s, threads {rec['threads']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
