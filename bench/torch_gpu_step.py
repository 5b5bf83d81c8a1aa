#!/usr/bin/python3
"""bench/torch_gpu_step.py: the PyTorch side of the GPU training-step benchmark (issue 28 part 5).

Times one training step of PyTorch on a GPU for the models of issue 28's
table, so that mixprec's device step has a baseline measured on the same
machine in the same call (scripts/gpu-check.sh runs it; docs/gpu.md).

Models (bench/bench_train_step.c's MLP: depth x (Linear(hidden) -> GELU
exact erf form), then Linear(out); MSE loss; AdamW lr 1e-3, betas
0.9/0.999, eps 1e-8, weight_decay 0, no clipping; a ring of R distinct
batches x, y ~ N(0, 1), step k (1-based, warm-up included) on batch
(k - 1) mod R, as mixprec's side):
  wm       4-256x3-4,    batch 32   (the default world model, "wm" of
                                     bench/bench_train_vs_torch.py)
  mlp512   72-512x3-65,  batch 256
  mlp2048  72-2048x3-65, batch 512
Variants:
  eager    eager step, AdamW(foreach=True)
  fused    eager step, AdamW(fused=True)
  compile  torch.compile (default mode) of forward + loss, AdamW fused on
           CUDA (foreach elsewhere); run in a child process under its own
           time cap (--compile-cap-s): what does not finish is recorded as
           unavailable with the reason
  graph    the whole step (forward, loss, backward, GradScaler, AdamW)
           captured in one CUDA graph and replayed: AdamW(capturable=True),
           fused too where the AdamW has fused= (fp16 needs it: GradScaler
           only avoids its host sync with a fused optimizer); warm-up of 3
           steps on a side stream, static input tensors, autocast with
           cache_enabled=False (PyTorch's "whole network capture")
Precisions:
  fp32     TF32 off (torch.backends.cuda.matmul.allow_tf32 = False,
           torch.backends.cudnn.allow_tf32 = False,
           torch.set_float32_matmul_precision("highest"))
  bf16     torch.autocast(dtype=bfloat16), FP32 weights and optimizer
  fp16     torch.autocast(dtype=float16) + GradScaler (torch.amp.GradScaler
           ("cuda") on torch >= 2.3, torch.cuda.amp.GradScaler before)

Batch modes (--batch, a list run in its order, default h2d,resident; the
record's "batch"):
  h2d       the ring in page-locked host memory; each step copies its batch
            into static device buffers (copy_, non_blocking=True) inside the
            timed step: the terms of mixprec's device step, which uploads
            each step's batch from its page-locked staging
  resident  the ring on the device; the eager variants read their slot,
            the graph copies it into its static input (device to device)
One step: its batch (above), zero_grad(set_to_none=True), forward, loss,
backward (scaled for fp16), optimizer step (through the scaler for fp16),
scaler update. Every case starts from the same initial weights and batch
ring (per model): generated on the CPU from --seed (torch.manual_seed;
nn.Linear's default init) and torch.Generator(42) for the ring (--ring R,
default 8; per slot x_r then y_r), or read from
--init-dir/<model>.safetensors (tensors layers.<i>.weight [out, in] /
layers.<i>.bias with i the index in [linear, gelu, linear, gelu, ...,
linear] as mixprec's `ckpt export --torch`, optional x [R, batch, in] and
y [R, batch, out], or an older file's x [batch, in], y [batch, out]: a ring
of 1; read and written with
python/mixprec/_ckpt.py, which needs NumPy; `bench_cuda_dstep --write-init
DIR` writes these files for mixprec's side of the benchmark, which reads
the same ones: scripts/gpu-check.sh passes them to both). Each record
carries the SHA-256 of the initial weights and batch.

Per case it reports: the median (and min, p90) of the per-step times of
--steps timed steps after --warmup steps, timed with CUDA events around
each step (time.perf_counter on the CPU); the host wall time per step of the
timed loop; samples/s = batch / median; the peak device memory of the case
(torch.cuda.max_memory_allocated after reset_peak_memory_stats, less what
was allocated before the case: weights, gradients, AdamW moments,
activations, the graph's pool); host syncs per step, counted as the
"called a synchronizing CUDA operation" warnings of
torch.cuda.set_sync_debug_mode("warn") over the last warm-up steps (it
sees the syncs that go through PyTorch's CUDA calls: .item(), device-to-
host copies, stream and device synchronisation; not measured on the CPU);
the loss of the last step (its forward, before its update) after warmup +
steps steps; with --loss-trace also "losses", the loss of every step
(1..warmup + steps; a detached copy per step, read after the timed loop,
so no extra host sync: tests/test_torch_gpu_step.sh compares them with
mixprec's CPU trainer from the same init file). The first record (kind "env") names the device, driver, CUDA,
cuDNN and torch versions and the TF32 state.

Outputs (--out-dir): torch_gpu_step.jsonl (one JSON object per line,
written as each case ends, so a killed run keeps what it measured) and
torch_gpu_step.txt (the readable table, also printed). --table FILE.jsonl
re-renders the table of an earlier run.

--device cpu --dry-run: every path that needs no CUDA, on tiny shapes and a
few steps (tests/test_torch_gpu_step.sh runs it under Debian's torch 1.13);
on the CPU the fused and graph variants are recorded as unavailable with
the reason (the graph variant still runs its code through an eager stand-in
for the capture, status "dry"), fp16 runs with the scaler disabled and, when
the CPU autocast refuses float16, without autocast (status "dry").

usage: torch_gpu_step.py --out-dir DIR [--device cuda|cpu] [--dry-run]
       [--models wm,mlp512,mlp2048] [--variants eager,fused,compile,graph]
       [--precisions fp32,bf16,fp16] [--warmup 20] [--steps 100]
       [--budget-s 170] [--compile-cap-s 80] [--init-dir DIR [--save-init]]
       [--seed 1234] [--ring 8] [--batch h2d,resident] [--loss-trace]
       torch_gpu_step.py --table FILE.jsonl
Exit: 0 when it ran (cases that failed are recorded as errors), 1 when
nothing could be measured (no torch, no CUDA device for --device cuda), 2
bad arguments.
"""
import argparse
import gc
import hashlib
import inspect
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = {  # name: (in, hidden, depth, out, batch)
    "wm": (4, 256, 3, 4, 32),
    "mlp512": (72, 512, 3, 65, 256),
    "mlp2048": (72, 2048, 3, 65, 512),
}
VARIANTS = ("eager", "fused", "compile", "graph")
PRECISIONS = ("fp32", "bf16", "fp16")
BATCH_MODES = ("h2d", "resident")
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
GRAPH_SIDE_WARMUP = 3  # eager steps on a side stream before the capture
SYNC_STEPS = 5  # warm-up steps whose host syncs are counted
JSONL, TABLE = "torch_gpu_step.jsonl", "torch_gpu_step.txt"


class Unavailable(Exception):
    """A case that cannot run in this environment (the reason is recorded)."""


# ---------------------------------------------------------------- helpers

def emit(path, rec):
    """Append one record to the JSON lines file, flushed at once."""
    with open(path, "a") as f:
        f.write(json.dumps(rec, sort_keys=True) + "\n")


def shape_of(name, dry):
    """(in, hidden, depth, out, batch) of a model; --dry-run shrinks hidden
    to 16 and the batch to 8."""
    i, h, d, o, b = MODELS[name]
    return (i, min(h, 16), d, o, min(b, 8)) if dry else (i, h, d, o, b)


def layers_spec(shape):
    """The export's layer list of the MLP: [linear:H, gelu, ..., linear:O]."""
    _, h, d, o, _ = shape
    return "[" + ", ".join(["linear:%d, gelu" % h] * d + ["linear:%d" % o]) + "]"


def build_mlp(torch, shape):
    """nn.Sequential: depth x (Linear(hidden), GELU('none')), Linear(out);
    its state_dict names are layers' indices (0, 2, 4, ...) as the export."""
    i, h, d, o, _ = shape
    mods, width = [], i
    for _ in range(d):
        mods += [torch.nn.Linear(width, h), torch.nn.GELU()]
        width = h
    mods.append(torch.nn.Linear(width, o))
    return torch.nn.Sequential(*mods)


def ckpt_module():
    """python/mixprec/_ckpt.py (the repository's safetensors reader and
    writer; NumPy needed), or raise Unavailable naming why not."""
    pkg = os.path.join(os.path.dirname(HERE), "python")
    if pkg not in sys.path:
        sys.path.insert(0, pkg)
    try:
        from mixprec import _ckpt
    except Exception as e:  # ImportError (NumPy) or the package's own checks
        raise Unavailable("the safetensors reader python/mixprec/_ckpt.py cannot be "
                          "imported: %s" % e) from None
    return _ckpt


def initial_state(torch, name, shape, a):
    """(state_dict on the CPU, x [R, batch, in], y [R, batch, out],
    description) of a model: from --init-dir/<name>.safetensors when it
    exists (an older file's x [batch, in], y [batch, out] is a ring of 1),
    else from --seed and --ring (written there when --save-init)."""
    path = os.path.join(a.init_dir, name + ".safetensors") if a.init_dir else None
    i, _, _, o, b = shape
    if path and os.path.exists(path):
        ref = build_mlp(torch, shape)
        tensors, _ = ckpt_module().read_checked(path)
        sd = {}
        for k, v in ref.state_dict().items():
            fk = "layers." + k  # the export's names
            if fk not in tensors or tuple(tensors[fk].shape) != tuple(v.shape):
                raise ValueError("%s: needs %s of shape %s (layers %s); has %s" % (
                    path, fk, list(v.shape), layers_spec(shape),
                    list(tensors[fk].shape) if fk in tensors else "none"))
            sd[k] = torch.from_numpy(tensors[fk].astype("float32"))
        x = torch.from_numpy(tensors["x"].astype("float32")) if "x" in tensors else None
        y = torch.from_numpy(tensors["y"].astype("float32")) if "y" in tensors else None
        if x is not None and y is not None and x.dim() == 2 and y.dim() == 2:
            x, y = x.unsqueeze(0), y.unsqueeze(0)  # an older one-batch file: a ring of 1
        src = "file " + path
    else:
        torch.manual_seed(a.seed)
        sd = {k: v.detach().clone() for k, v in build_mlp(torch, shape).state_dict().items()}
        x = y = None
        src = "seed %d (torch.manual_seed, nn.Linear default init, CPU)" % a.seed
    if x is None or y is None:
        g = torch.Generator().manual_seed(42)
        xs, ys = [], []
        for _ in range(a.ring):  # per slot: x_r, then y_r
            xs.append(torch.randn(b, i, generator=g))
            ys.append(torch.randn(b, o, generator=g))
        x, y = torch.stack(xs), torch.stack(ys)
        src += "; batch ring of %d, torch.Generator(42) randn" % a.ring
    if x.dim() != 3 or tuple(x.shape[1:]) != (b, i) or tuple(y.shape) != (x.shape[0], b, o) \
            or x.shape[0] < 1:
        raise ValueError("%s: x %s / y %s; accepted: x [R, %d, %d], y [R, %d, %d] (R >= 1), "
                         "or an older file's x [%d, %d], y [%d, %d]" % (
                             path, list(x.shape), list(y.shape), b, i, b, o, b, i, b, o))
    if path and a.save_init and not os.path.exists(path):
        _ckpt = ckpt_module()
        arrays = {"layers." + k: v.numpy() for k, v in sd.items()}
        arrays.update(x=x.numpy(), y=y.numpy())
        os.makedirs(a.init_dir, exist_ok=True)
        _ckpt.write_safetensors(path, arrays, {"format": "mixprec-bench-init",
                                               "layers": layers_spec(shape),
                                               "writer": "bench/torch_gpu_step.py",
                                               "seed": str(a.seed),
                                               "ring": str(int(x.shape[0]))})
        src += "; written to " + path
    return sd, x, y, {"source": src, "sha256": init_sha256(sd, x, y)}


def init_sha256(sd, x, y):
    """SHA-256 over name, NUL, little-endian FP32 bytes of each tensor (the
    file's names layers.<i>.weight/.bias sorted as strings, then x, y);
    needs NumPy."""
    try:
        h = hashlib.sha256()
        for k in sorted("layers." + k for k in sd) + ["x", "y"]:
            t = x if k == "x" else y if k == "y" else sd[k[len("layers."):]]
            h.update(k.encode() + b"\0")
            h.update(t.detach().contiguous().float().numpy().astype("<f4").tobytes())
        return h.hexdigest()
    except Exception as e:  # no NumPy
        return "not computed: %s" % e


def set_fp32_flags(torch):
    """TF32 off for cuBLAS and cuDNN, matmul precision "highest"; returns
    the state read back (or why it could not be read)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    state = {}
    for key, get in (("matmul.allow_tf32", lambda: torch.backends.cuda.matmul.allow_tf32),
                     ("cudnn.allow_tf32", lambda: torch.backends.cudnn.allow_tf32),
                     ("float32_matmul_precision", torch.get_float32_matmul_precision)):
        try:
            state[key] = get()
        except Exception as e:  # torch >= 2.9 may refuse to read a mixed legacy/new state
            state[key] = "unreadable: %s" % e
    return state


def adamw(torch, params, fused=False, foreach=False, capturable=False):
    """torch.optim.AdamW with the benchmark's hyper-parameters; Unavailable
    when this torch's AdamW lacks the keyword."""
    accepted = inspect.signature(torch.optim.AdamW.__init__).parameters
    kw = dict(ADAMW)
    for key, on in (("fused", fused), ("foreach", foreach), ("capturable", capturable)):
        if on:
            if key not in accepted:
                raise Unavailable("torch %s: AdamW has no %s= keyword" % (torch.__version__, key))
            kw[key] = True
    return torch.optim.AdamW(params, **kw), "AdamW(%s)" % ", ".join(
        "%s=True" % k for k in ("fused", "foreach", "capturable") if kw.get(k))


def grad_scaler(torch, device, enabled):
    """(GradScaler, its name): torch.amp.GradScaler(device) where it exists
    (torch >= 2.3), else torch.cuda.amp.GradScaler."""
    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, "GradScaler"):
        return amp.GradScaler(device, enabled=enabled), "torch.amp.GradScaler(%r)" % device
    return torch.cuda.amp.GradScaler(enabled=enabled), "torch.cuda.amp.GradScaler()"


def count_syncs(torch, fn, k):
    """(host syncs per call of fn over k calls, how), with
    torch.cuda.set_sync_debug_mode("warn") counting PyTorch's warnings."""
    if not hasattr(torch.cuda, "set_sync_debug_mode"):
        for _ in range(k):
            fn()
        return None, "not measured (no torch.cuda.set_sync_debug_mode)"
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(k):
                fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    n = sum(1 for m in w if "synchroniz" in str(m.message))
    return n / k, "set_sync_debug_mode('warn') warnings over %d warm-up steps" % k


# ---------------------------------------------------------------- one case

def run_case(torch, a, name, variant, precision, a_batch, init):
    """One (model, variant, precision) case: returns its record (status ok
    or dry), or raises Unavailable / another exception."""
    dev = a.device
    cuda = dev == "cuda"
    shape = shape_of(name, a.dry_run)
    sd, x0, y0, init_desc = init
    rec = {"note": []}
    if variant == "fused" and not cuda:
        raise Unavailable("fused AdamW is timed on CUDA only (CPU dry run)")
    if variant == "compile" and not hasattr(torch, "compile"):
        raise Unavailable("torch.compile needs torch >= 2.0 (this is %s)" % torch.__version__)
    if precision == "fp16" and not cuda:
        try:  # torch 1.13 warns and disables itself; later ones may raise
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                with torch.autocast(dev, dtype=torch.float16):
                    torch.nn.Linear(2, 2)(torch.ones(1, 2))
            ac_prec = precision
        except (RuntimeError, UserWarning) as e:
            ac_prec = "fp32"
            rec["note"].append("CPU autocast refuses float16 (%s): fp16 path ran without "
                               "autocast, scaler disabled" % str(e).strip().split("\n")[0])
    else:
        ac_prec = precision
    if cuda:
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    model = build_mlp(torch, shape)
    model.load_state_dict(sd)
    model.to(dev)
    ring = int(x0.shape[0])
    # The batch ring: step k (0-based, warm-up included) trains on slot
    # k mod R. "h2d": the ring in page-locked host memory (pinned on CUDA),
    # each step copies its batch into the static device buffers x, y
    # (non_blocking) inside the timed step, as mixprec's step uploads it;
    # "resident": the ring on the device, eager variants read their slot,
    # the graph copies it into x, y (device to device) before the replay.
    if a_batch == "h2d":
        src_x = x0.pin_memory() if cuda else x0.clone()
        src_y = y0.pin_memory() if cuda else y0.clone()
    else:
        src_x, src_y = x0.to(dev), y0.to(dev)
    x, y = torch.empty_like(src_x[0], device=dev), torch.empty_like(src_y[0], device=dev)
    x.copy_(src_x[0])
    y.copy_(src_y[0])
    static_in = variant == "graph" or a_batch == "h2d"
    slot = [0]  # the next step's index

    def batch():
        """The next step's (x, y), per the ring rule above."""
        k = slot[0] % ring
        slot[0] += 1
        if not static_in:
            return src_x[k], src_y[k]
        x.copy_(src_x[k], non_blocking=True)
        y.copy_(src_y[k], non_blocking=True)
        return x, y
    params = list(model.parameters())
    if variant == "eager":
        opt, opt_name = adamw(torch, params, foreach=True)
    elif variant == "fused":
        opt, opt_name = adamw(torch, params, fused=True)
    elif variant == "compile":
        opt, opt_name = adamw(torch, params, fused=cuda, foreach=not cuda)
    else:  # graph: capturable; fused where there is one (fp16's scaler needs it)
        want_fused = cuda and "fused" in inspect.signature(
            torch.optim.AdamW.__init__).parameters
        if cuda and precision == "fp16" and not want_fused:
            raise Unavailable("GradScaler.step syncs the host (found_inf.item()) unless "
                              "the optimizer is fused; this AdamW has no fused=")
        opt, opt_name = adamw(torch, params, fused=want_fused, foreach=not want_fused,
                              capturable=cuda)
    scaler, scaler_name = None, None
    if precision == "fp16":
        scaler, scaler_name = grad_scaler(torch, dev, enabled=cuda)
    mse = torch.nn.functional.mse_loss
    cache = variant != "graph"  # autocast's weight cache must be off in a capture

    if ac_prec == "fp32":  # no context manager at all inside what torch.compile traces
        def fwd_loss(xb, yb):
            return mse(model(xb), yb)
    else:
        ac_dtype = torch.bfloat16 if ac_prec == "bf16" else torch.float16

        def fwd_loss(xb, yb):
            with torch.autocast(dev, dtype=ac_dtype, cache_enabled=cache):
                pred = model(xb)
            return mse(pred.float(), yb)

    t_compile = None
    if variant == "compile":
        dynamo = getattr(getattr(torch, "_dynamo", None), "reset", None)
        if dynamo:  # a fresh cache: no recompile limit reached across cases
            dynamo()
        fwd = torch.compile(fwd_loss)
        if os.environ.get("MXP_TORCH_FAKE_COMPILE"):
            rec["note"].append("torch.compile replaced by the identity (test hook "
                               "MXP_TORCH_FAKE_COMPILE)")
    else:
        fwd = fwd_loss

    def body(xb, yb):  # the step without zero_grad
        loss = fwd(xb, yb)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss

    trace = [] if a.loss_trace else None  # --loss-trace: every step's loss, no sync

    def step():
        xb, yb = batch()
        opt.zero_grad(set_to_none=True)
        loss = body(xb, yb)
        if trace is not None:
            trace.append(loss.detach().clone())
        return loss

    total = a.warmup + a.steps
    done = 0
    if variant == "graph":
        t0 = time.perf_counter()
        if cuda:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(GRAPH_SIDE_WARMUP):
                    step()
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            opt.zero_grad(set_to_none=True)  # the capture allocates the grads
            with torch.cuda.graph(g):
                static_loss = body(x, y)  # reads the static buffers batch() fills
            torch.cuda.synchronize()

            def run():
                batch()
                g.replay()
                if trace is not None:
                    trace.append(static_loss.detach().clone())
                return static_loss
        else:  # dry run: the same code path, the capture replaced by eager calls
            for _ in range(GRAPH_SIDE_WARMUP):
                step()
            run = step
            rec["note"].append("CUDA graphs need CUDA: capture emulated eagerly, "
                               "capturable=False")
        rec["capture_s"] = time.perf_counter() - t0
        done = GRAPH_SIDE_WARMUP
    else:
        run = step
        if variant == "compile":
            t0 = time.perf_counter()
            run()
            if cuda:
                torch.cuda.synchronize()
            t_compile = time.perf_counter() - t0
            done = 1
    k = min(SYNC_STEPS, a.warmup - done - 1)
    while done < a.warmup - max(k, 0):
        run()
        done += 1
    if cuda and k > 0:
        rec["syncs_per_step"], rec["syncs_how"] = count_syncs(torch, run, k)
        done += k
    else:
        rec["syncs_per_step"], rec["syncs_how"] = None, "not measured (%s)" % (
            "CPU" if not cuda else "too few warm-up steps")
    while done < a.warmup:
        run()
        done += 1
    n = a.steps
    if cuda:
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(n)]
        torch.cuda.synchronize()
        h0 = time.perf_counter()
        for s0, s1 in ev:
            s0.record()
            loss = run()
            s1.record()
        torch.cuda.synchronize()
        host = time.perf_counter() - h0
        us = [s0.elapsed_time(s1) * 1e3 for s0, s1 in ev]
        timer = "CUDA events around each step"
    else:
        us = []
        h0 = time.perf_counter()
        for _ in range(n):
            t0 = time.perf_counter()
            loss = run()
            us.append((time.perf_counter() - t0) * 1e6)
        host = time.perf_counter() - h0
        timer = "time.perf_counter around each step (CPU)"
    done += n
    assert done == total, (done, total)
    med = statistics.median(us)
    srt = sorted(us)
    rec.update({
        "status": "ok" if cuda and not rec["note"] else "dry",
        "optimizer": opt_name, "scaler": scaler_name, "timer": timer,
        "us_per_step": med, "us_min": srt[0], "us_p90": srt[min(n - 1, int(0.9 * n))],
        "host_us_per_step": host / n * 1e6, "samples_per_s": shape[4] / (med * 1e-6),
        "loss": float(loss), "loss_step": total, "init": init_desc, "ring": ring,
        "batch_how": ("pinned host ring, copied to the device (non_blocking) in each timed "
                      "step" if cuda else "host ring copied into static buffers in each step "
                      "(CPU: nothing pinned)") if a_batch == "h2d" else
                     "ring resident on the device" + (
                         ", copied into the graph's static input in each step"
                         if variant == "graph" else ""),
    })
    assert slot[0] == total, (slot[0], total)  # one batch per step, the ring rule
    if t_compile is not None:
        rec["compile_s"] = t_compile
    if trace is not None:  # the side warm-up's steps included: one per step
        rec["losses"] = [float(v) for v in trace]
    if scaler is not None and cuda:
        rec["final_scale"] = float(scaler.get_scale())
    if cuda:
        rec["peak_mem_bytes"] = torch.cuda.max_memory_allocated() - base
        rec["mem_base_bytes"] = base
    return rec


# ---------------------------------------------------------------- driver

def env_record(torch, a):
    """The "env" record: device, driver, CUDA, cuDNN, torch, flags."""
    rec = {"kind": "env", "torch": torch.__version__, "python": platform.python_version(),
           "host": platform.node(), "device_kind": a.device, "dry_run": a.dry_run,
           "cuda": torch.version.cuda, "warmup": a.warmup, "steps": a.steps,
           "batch_modes": a.batch,
           "tf32": set_fp32_flags(torch), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                 time.gmtime())}
    try:
        rec["cudnn"] = torch.backends.cudnn.version()
    except Exception as e:
        rec["cudnn"] = "unknown: %s" % e
    if a.device == "cuda":
        p = torch.cuda.get_device_properties(0)
        rec.update(device=p.name, capability="%d.%d" % (p.major, p.minor),
                   sms=p.multi_processor_count, memory_bytes=p.total_memory)
        try:
            r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                                "--format=csv,noheader"], capture_output=True, text=True,
                               timeout=30)
            rec["driver"] = r.stdout.strip() or "unknown (nvidia-smi: %s)" % r.stderr.strip()
        except (OSError, subprocess.TimeoutExpired) as e:
            rec["driver"] = "unknown (%s)" % e
    else:
        rec.update(device="cpu: " + (platform.processor() or platform.machine()))
    return rec


def cases(a, variants, batch):
    """The cases of these variants for one batch mode, variant by variant
    (the graph captures, the likeliest to upset the CUDA context, after
    every eager case)."""
    return [(m, v, p, batch) for v in variants for m in a.models for p in a.precisions]


def run_cases(torch, a, todo, out, deadline):
    """Run the (model, variant, precision) cases in order, one record each."""
    inits = {}
    for name, variant, precision, bmode in todo:
        base = {"kind": "case", "model": name, "variant": variant, "precision": precision,
                "batch": bmode,
                "shape": dict(zip(("in", "hidden", "depth", "out", "batch"),
                                  shape_of(name, a.dry_run)))}
        if time.time() > deadline:
            emit(out, dict(base, status="not-run", reason="the time budget is spent"))
            continue
        t0 = time.perf_counter()
        try:
            if name not in inits:
                inits[name] = initial_state(torch, name, shape_of(name, a.dry_run), a)
            rec = dict(base, **run_case(torch, a, name, variant, precision, bmode,
                                        inits[name]))
        except Unavailable as e:
            rec = dict(base, status="unavailable", reason=str(e))
        except Exception as e:  # recorded, the other cases go on
            msg = " ".join(str(e).split())
            rec = dict(base, status="error", reason="%s: %s" % (
                type(e).__name__, msg if len(msg) < 600 else msg[:300] + " ... " + msg[-300:]))
        rec["case_s"] = time.perf_counter() - t0
        rec["note"] = "; ".join(rec.get("note") or [])
        emit(out, rec)
        print("case %s %s %s %s: %s, %s (%.1f s)" % (
            name, variant, precision, bmode, rec["status"], "%.1f us/step" % rec["us_per_step"]
            if "us_per_step" in rec else rec.get("reason", ""), rec["case_s"]), flush=True)
        gc.collect()


def compile_child(a, out, deadline, batch):
    """The compile cases of one batch mode in a child process (own process
    group), killed at --compile-cap-s or the budget; cases it did not
    record are recorded here as unavailable."""
    todo = cases(a, ["compile"], batch)
    cap = max(0.0, min(a.compile_cap_s, deadline - time.time()))
    cmd = [sys.executable, os.path.abspath(__file__), "--child-compile", "--out-dir", a.out_dir,
           "--device", a.device, "--models", ",".join(a.models), "--precisions",
           ",".join(a.precisions), "--warmup", str(a.warmup), "--steps", str(a.steps),
           "--seed", str(a.seed), "--budget-s", str(int(cap) + 1), "--batch", batch,
           "--ring", str(a.ring)]
    cmd += (["--dry-run"] if a.dry_run else []) + (["--init-dir", a.init_dir] if a.init_dir
                                                   else [])
    why = None
    if cap < 5:
        why = "the time budget is spent"
    else:
        p = subprocess.Popen(cmd, start_new_session=True)

        def on_term(signum, _frame):  # gpu-check's timeout: the child goes too
            os.killpg(p.pid, signal.SIGKILL)
            sys.exit(128 + signum)
        signal.signal(signal.SIGTERM, on_term)
        try:
            rc = p.wait(timeout=cap)
            if rc != 0:
                why = "the compile child exited %d" % rc
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            why = "compile cap of %.0f s reached (--compile-cap-s)" % cap
    seen = {(r["model"], r["precision"]) for r in read_jsonl(out)
            if r.get("kind") == "case" and r["variant"] == "compile" and
            r.get("batch") == batch}
    for name, variant, precision, _ in todo:
        if (name, precision) not in seen:
            emit(out, {"kind": "case", "model": name, "variant": variant,
                       "precision": precision, "batch": batch, "status": "unavailable",
                       "reason": why or "no record from the compile child"})


def read_jsonl(path):
    recs = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    recs.append(json.loads(line))
                except ValueError:
                    recs.append({"kind": "broken", "line": line[:200]})
    return recs


def fmt(v, spec, none="-"):
    return none if v is None else format(v, spec)


def render(recs):
    """The readable table of a run's records."""
    lines = []
    env = next((r for r in recs if r.get("kind") == "env"), None)
    if env:
        lines.append("# torch %s, CUDA %s, cuDNN %s, device %s (cc %s), driver %s; %s" % (
            env.get("torch"), env.get("cuda"), env.get("cudnn"), env.get("device"),
            env.get("capability", "-"), env.get("driver", "-"),
            "DRY RUN (tiny shapes, not a measurement)" if env.get("dry_run") else
            "warm-up %s + %s timed steps" % (env.get("warmup"), env.get("steps"))))
        lines.append("# TF32 state: %s" % json.dumps(env.get("tf32")))
    lines.append("%-8s %-8s %-5s %-8s %-11s %10s %10s %12s %9s %7s %14s %9s  %s" % (
        "model", "variant", "prec", "batch", "status", "us/step", "us min", "samples/s", "peak MiB",
        "syncs", "loss@N", "vs eager", "optimizer / reason"))
    order = {k: i for i, k in enumerate(list(MODELS) + list(VARIANTS) + list(PRECISIONS) +
                                        list(BATCH_MODES))}
    rows = sorted((r for r in recs if r.get("kind") == "case"),
                  key=lambda r: (order.get(r["model"], 99), order.get(r.get("batch"), 99),
                                 order.get(r["variant"], 99), order.get(r["precision"], 99)))
    good = [r for r in rows if r.get("status") in ("ok", "dry")]
    eager = {(r["model"], r["precision"], r.get("batch")): r["loss"] for r in good
             if r["variant"] == "eager"}
    for r in rows:
        ok = r.get("status") in ("ok", "dry")
        ref = eager.get((r["model"], r["precision"], r.get("batch"))) if ok else None
        dev = None if not ref else r["loss"] / ref - 1  # the same weights, batch and steps
        peak = r.get("peak_mem_bytes")
        tail = (r.get("optimizer") or "") + (" + " + r["scaler"] if r.get("scaler") else "")
        if r.get("compile_s") is not None:
            tail += ", compile %.1f s" % r["compile_s"]
        if r.get("note"):
            tail += " [%s]" % r["note"]
        lines.append("%-8s %-8s %-5s %-8s %-11s %10s %10s %12s %9s %7s %14s %9s  %s" % (
            r["model"], r["variant"], r["precision"], r.get("batch", "-"), r.get("status"),
            fmt(r.get("us_per_step"), ".1f"), fmt(r.get("us_min"), ".1f"),
            fmt(r.get("samples_per_s"), ".0f"),
            fmt(None if peak is None else peak / 2**20, ".1f"),
            fmt(r.get("syncs_per_step"), ".1f"),
            fmt(r.get("loss"), ".6g") + ("@%d" % r["loss_step"] if ok else ""),
            fmt(dev, "+.1e"), tail if ok else r.get("reason", "")))
    lines.append("# vs eager: loss@N / the eager variant's loss@N - 1 (same weights, batch "
                 "ring and step count: FP32 variants should agree to about 1e-5); batch: h2d "
                 "copies each step's batch from pinned host memory inside the timed step "
                 "(as mixprec's step), resident keeps the ring on the device")
    for m in MODELS:
        for prec in PRECISIONS:
            for bmode in BATCH_MODES:
                cand = [r for r in good if r["model"] == m and r["precision"] == prec and
                        r.get("batch") == bmode]
                if cand:
                    best = min(cand, key=lambda r: r["us_per_step"])
                    lines.append("# fastest %s %s batch %s: %s, %.1f us/step, %.0f samples/s" % (
                        m, prec, bmode, best["variant"], best["us_per_step"],
                        best["samples_per_s"]))
    return "\n".join(lines) + "\n"


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out-dir")
    p.add_argument("--table", help="print the table of an earlier run's JSON lines file")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--dry-run", action="store_true", help="tiny shapes, a few steps")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--precisions", default=",".join(PRECISIONS))
    p.add_argument("--warmup", type=int, default=None, help="default 20 (dry run 5)")
    p.add_argument("--steps", type=int, default=None, help="default 100 (dry run 3)")
    p.add_argument("--budget-s", type=float, default=170.0)
    p.add_argument("--compile-cap-s", type=float, default=80.0)
    p.add_argument("--init-dir")
    p.add_argument("--save-init", action="store_true")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--ring", type=int, default=8,
                   help="batches in the ring when no init file gives it (default 8)")
    p.add_argument("--batch", default="h2d,resident",
                   help="batch modes, in run order: h2d (copied from pinned host memory in "
                        "each step, as mixprec's), resident (on the device)")
    p.add_argument("--loss-trace", action="store_true",
                   help="record every step's loss in the case record (losses)")
    p.add_argument("--child-compile", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.table:
        return a
    if not a.out_dir:
        p.error("--out-dir DIR is needed (or --table FILE.jsonl)")
    for key, accepted in (("models", MODELS), ("variants", VARIANTS),
                          ("precisions", PRECISIONS), ("batch", BATCH_MODES)):
        vals = [v for v in getattr(a, key).split(",") if v]
        bad = [v for v in vals if v not in accepted]
        if bad or not vals:
            p.error("--%s %s: accepted: a comma list of %s" % (key, getattr(a, key),
                                                              ", ".join(accepted)))
        setattr(a, key, vals)
    a.warmup = a.warmup if a.warmup is not None else 5 if a.dry_run else 20
    a.steps = a.steps if a.steps is not None else 3 if a.dry_run else 100
    if a.warmup < GRAPH_SIDE_WARMUP + 2:
        p.error("--warmup %d: accepted: at least %d (the graph's side-stream warm-up + 2)"
                % (a.warmup, GRAPH_SIDE_WARMUP + 2))
    if a.steps < 1 or a.budget_s <= 0 or a.compile_cap_s < 0:
        p.error("--steps must be >= 1, --budget-s > 0, --compile-cap-s >= 0")
    if not 1 <= a.ring <= 1024:
        p.error("--ring %d: accepted: 1..1024" % a.ring)
    if a.save_init and not a.init_dir:
        p.error("--save-init needs --init-dir DIR")
    return a


def main(argv=None):
    a = parse(sys.argv[1:] if argv is None else argv)
    if a.table:
        sys.stdout.write(render(read_jsonl(a.table)))
        return 0
    start = time.time()
    deadline = start + a.budget_s
    os.makedirs(a.out_dir, exist_ok=True)
    out = os.path.join(a.out_dir, JSONL)
    try:
        import torch
    except ImportError as e:
        print("torch_gpu_step: %s cannot import torch: %s" % (sys.executable, e), file=sys.stderr)
        return 1
    if a.device == "cuda" and not torch.cuda.is_available():
        print("torch_gpu_step: --device cuda, but torch %s sees no CUDA device (torch.version."
              "cuda %s); --device cpu --dry-run runs the CPU paths" % (torch.__version__,
                                                                      torch.version.cuda),
              file=sys.stderr)
        return 1
    fake = os.environ.get("MXP_TORCH_FAKE_COMPILE")
    if fake:  # test hook (tests/test_torch_gpu_step.sh): the compile child's machinery
        def fake_compile(fn):
            if fake == "hang":
                time.sleep(3600)
            return fn
        torch.compile = fake_compile
    if a.child_compile:
        set_fp32_flags(torch)
        for bmode in a.batch:
            run_cases(torch, a, cases(a, ["compile"], bmode), out, deadline)
        return 0
    if os.path.exists(out):
        os.remove(out)
    emit(out, env_record(torch, a))
    for bmode in a.batch:  # in --batch order: the first mode's cases first
        run_cases(torch, a, cases(a, [v for v in a.variants if v != "compile"], bmode), out,
                  deadline)
        if "compile" in a.variants:
            if hasattr(torch, "compile"):
                compile_child(a, out, deadline, bmode)
            else:  # records why not
                run_cases(torch, a, cases(a, ["compile"], bmode), out, deadline)
    recs = read_jsonl(out)
    emit(out, {"kind": "end", "total_s": time.time() - start})
    text = render(recs)
    with open(os.path.join(a.out_dir, TABLE), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    print("# %d cases in %.0f s; %s, %s" % (sum(r.get("kind") == "case" for r in recs),
                                          time.time() - start, out,
                                          os.path.join(a.out_dir, TABLE)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
