"""tests/readme_tour.py (run by test_readme_tour.sh): every command of
README.md's "CLI tour" runs as written, in order, in one fresh directory.

usage: python3 readme_tour.py <mixprec binary> <source dir>

The commands are read from README.md itself (the ```sh block under "## CLI
tour"), so the test follows the README. The directory gets build/mixprec (a
link to the binary under test), so `build/mixprec ...` lines run verbatim
through bash, and the user's files that the tour names are made first:
run.yaml, replay.npz (a replay buffer), states.npz (inputs for predict) and
xy.safetensors (a classifier's x/y). Every command must exit 0; the run
directory rule is checked on the way: each default `train` gets a directory
of its own and runs/latest names the newest.

Skipped, each with its reason printed: the `kill -USR1 <pid>` line (a
placeholder for a running job's pid; test_run_cli.sh sends the signal);
lines needing what this machine lacks (Fashion-MNIST or Jargon File data,
MuJoCo in the build, mpirun, a free port 8080 for --serve); and, unless
MIXPREC_TOUR_FULL=1, the lines that take minutes (GPT training and the
sample of its model, `bench train`, `bench kernels`). Under
MIXPREC_TEST_QUICK=1 (the suite on reference kernels and under sanitizers,
many times slower) the lines that train a built-in workload at full size,
and those reading their runs/latest, are
skipped too. The plain suite runs the rest in about 3.5 minutes on the
2-core development machine. Exit 0 pass, 1 fail, 77 skipped (no NumPy).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
except ImportError:
    print("numpy is not importable: skipping the README tour")
    sys.exit(77)

BIN, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
FULL = os.environ.get("MIXPREC_TOUR_FULL") == "1"
QUICK = os.environ.get("MIXPREC_TEST_QUICK") == "1" and not FULL
FMNIST = "/usr/share/datasets/fashion-mnist"
JARGON = "/usr/share/doc/jargon-text/jargon.txt.gz"
PER_COMMAND_S = 1200


def tour_commands():
    text = open(os.path.join(SRC, "README.md"), encoding="utf-8").read()
    m = re.search(r"^## CLI tour\n+```sh\n(.*?)^```", text, re.S | re.M)
    if not m:
        sys.exit("FAIL: README.md has no ```sh block under '## CLI tour'")
    cmds = []
    for line in m.group(1).splitlines():
        code = line.split("  #", 1)[0].strip()  # a trailing comment follows two spaces
        if code and not code.startswith("#"):
            cmds.append(code)
    return cmds


def write_safetensors(path, tensors):
    import json
    import struct
    dt = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64"}
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        raw = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": dt[a.dtype], "shape": list(a.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def make_user_files(d):
    r = np.random.default_rng(1)
    with open(os.path.join(d, "run.yaml"), "w") as f:
        f.write("training:\n  precision: mixed_bf16\n  epochs: 2\n")
    # a replay buffer: 64 episodes of 20 steps, state 3, action 1
    obs = r.normal(size=(64, 21, 3)).astype(np.float32)
    act = r.normal(size=(64, 20, 1)).astype(np.float32)
    obs[:, 1:] = 0.9 * obs[:, :-1] + 0.1 * act
    rew = -np.square(obs[:, 1:]).sum(-1).astype(np.float32)
    np.savez(os.path.join(d, "replay.npz"), obs=obs, actions=act, rewards=rew)
    np.savez(os.path.join(d, "states.npz"), obs=obs[:5, 0], actions=act[:5, 0])
    x = r.normal(size=(600, 10)).astype(np.float32)
    write_safetensors(os.path.join(d, "xy.safetensors"),
                      {"x": x, "y": (x[:, 0] > 0).astype(np.int64) + 2 * (x[:, 1] > 0)})


def mujoco_in_build():
    r = subprocess.run([BIN, "doctor"], capture_output=True, text=True)
    return re.search(r"^mujoco\s+\d[\w.]* compiled in", r.stdout, re.M) is not None


def skip_reason(cmd, state):
    if cmd.startswith("kill "):
        return "a placeholder pid of a running job (test_run_cli.sh sends SIGUSR1)"
    if QUICK and (("mixprec train" in cmd and "data.path=" not in cmd) or
                  cmd.startswith("mpirun ") or "runs/latest" in cmd):
        return ("MIXPREC_TEST_QUICK=1 (reference kernels, sanitizers): the full-size "
                "training lines, and those reading their runs/latest, run in the plain suite")
    if "model.workload=classifier" in cmd and "data.path" not in cmd and \
            not os.path.isdir(FMNIST):
        return "no Fashion-MNIST in %s (Debian dataset-fashion-mnist)" % FMNIST
    if "model.workload=gpt" in cmd or cmd.startswith("build/mixprec sample"):
        if not os.path.isfile(JARGON):
            return "no %s (Debian jargon-text)" % JARGON
        if not FULL:
            return "takes minutes (GPT training ~2-7 min here); MIXPREC_TOUR_FULL=1 runs it"
    if cmd.startswith("build/mixprec bench ") and not FULL:
        return "takes minutes; MIXPREC_TOUR_FULL=1 runs it"
    if "data.env=ant" in cmd and not state.setdefault("mujoco", mujoco_in_build()):
        return "this build has no MuJoCo (libmujoco-dev)"
    if cmd.startswith("mpirun ") and not shutil.which("mpirun"):
        return "no mpirun (Debian openmpi-bin)"
    return None


def default_dirs(d):
    runs = os.path.join(d, "runs")
    return sorted(n for n in os.listdir(runs) if n.startswith("version_")) \
        if os.path.isdir(runs) else []


def main():
    d = tempfile.mkdtemp(prefix="mixprec_tour_")
    ok = False
    try:
        os.makedirs(os.path.join(d, "build"))
        os.symlink(BIN, os.path.join(d, "build", "mixprec"))
        make_user_files(d)
        env = dict(os.environ)
        # the test machine runs as root: Open MPI's opt-in for that (a user's
        # mpirun needs neither)
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_rmaps_base_oversubscribe="1")
        for k in ("ENABLE_FP16_TRAINING", "MIXPREC_FORCE_FP32", "FP16_LOSS_SCALE"):
            env.pop(k, None)
        state, ran, skipped = {}, 0, 0
        for i, cmd in enumerate(tour_commands(), 1):
            why = skip_reason(cmd, state)
            if why:
                print("SKIP %2d %s\n        %s" % (i, cmd, why), flush=True)
                skipped += 1
                continue
            before = default_dirs(d)
            t0 = time.time()
            try:
                r = subprocess.run(["bash", "-c", cmd], cwd=d, env=env, capture_output=True,
                                   text=True, errors="replace", timeout=PER_COMMAND_S)
            except subprocess.TimeoutExpired:
                print("FAIL: line %d did not end within %d s: %s" % (i, PER_COMMAND_S, cmd))
                return 1
            if r.returncode != 0 and "--serve" in cmd and "(in use" in r.stderr:
                # another program on this machine holds port 8080: the line is
                # right, the machine is busy
                print("SKIP %2d %s\n        port 8080 is in use here: %s" %
                      (i, cmd, r.stderr.strip().splitlines()[-1][:200]), flush=True)
                skipped += 1
                continue
            print("ok   %2d %s (%.1f s)" % (i, cmd, time.time() - t0), flush=True)
            if r.returncode != 0:
                print("FAIL: line %d exited %d: %s\n--- stderr ---\n%s" %
                      (i, r.returncode, cmd, r.stderr[-4000:]))
                return 1
            if "\ufffd" in r.stdout + r.stderr:  # a log or report line is not text
                print("FAIL: line %d wrote bytes that are not UTF-8: %s" % (i, cmd))
                return 1
            ran += 1
            new = sorted(set(default_dirs(d)) - set(before))
            trains_new = re.search(r"\bmixprec train\b", cmd) and "output.dir=" not in cmd \
                and "--resume" not in cmd and " bench " not in cmd
            if trains_new:  # one new directory per rank-0 run, and latest names it
                if len(new) != 1:
                    print("FAIL: line %d made run directories %s; expected exactly one" %
                          (i, new))
                    return 1
                link = os.readlink(os.path.join(d, "runs", "latest"))
                if link != new[0]:
                    print("FAIL: line %d: runs/latest -> %s, expected %s" % (i, link, new[0]))
                    return 1
            elif new:
                print("FAIL: line %d made run directories %s but starts no new default run"
                      % (i, new))
                return 1
        print("README tour: %d commands ran, %d skipped" % (ran, skipped))
        ok = ran > 0
        return 0 if ok else 1
    finally:
        if ok or os.environ.get("MIXPREC_KEEP_TOUR") != "1":
            shutil.rmtree(d, ignore_errors=True)
        else:
            print("kept", d)


if __name__ == "__main__":
    sys.exit(main())
