#!/usr/bin/env bash
# tests/test_term_cli.sh: the termination head (model.termination) and
# per-target loss weights (model.target_weights) through the CLI, on flat
# replay buffers written by /usr/bin/python3 numpy (.npz) and h5py (HDF5,
# the D4RL layout), of a 2-D state whose episode terminates when |x0| > 1.
# usage: test_term_cli.sh MIXPREC_BINARY SOURCE_DIR
#  - the flag rule: the same transitions given as terminals + timeouts
#    (npz), as dones + timeouts (npz; terminal = done and not timeout) and
#    as D4RL HDF5 (observations, ..., terminals, timeouts) train to the same
#    losses bit for bit;
#  - train reports val_bce (below half the BCE of the best constant, the
#    flag rate's entropy) and val_accuracy (at least the majority rate),
#    eval --json gives the same numbers;
#  - predict writes terminal_prob in [0, 1], whose mean matches the flags'
#    rate on the buffer; mixprec.load_torch on the export reproduces
#    predict (terminal_prob included) to 1e-5 (Gaussian 3-member ensemble);
#  - 1 epoch + --resume to 2 == 2 epochs, bit for bit (history.csv losses
#    and the final checkpoint's tensor bytes), in fp32 and mixed_fp16;
#  - refusals: dones without timeouts, the episode layout, the built-in
#    pendulum, a weight list of the wrong length (named with its columns).
# Exit 77 without numpy.
set -u
src=$(realpath "$2")
. "$(dirname "$0")/cli_lib.sh" "$1"
[ -x /usr/bin/python3 ] || { echo "SKIP: no /usr/bin/python3"; exit 77; }
/usr/bin/python3 - <<'EOF' || { echo "SKIP: numpy could not write the data"; exit 77; }
import numpy as np
rng = np.random.default_rng(7)
obs, act, rew, nxt, term, tmo = [], [], [], [], [], []
for e in range(150):
    s = rng.uniform(-1.0, 1.0, 2)
    for t in range(30):
        a = rng.uniform(-1, 1)
        n = np.array([s[0] + 0.3 * a + 0.1 * s[1], s[1] - 0.1 * s[0]]) + 0.01 * rng.standard_normal(2)
        obs.append(s); act.append([a]); rew.append(-n[0] ** 2); nxt.append(n)
        done = abs(n[0]) > 1.0
        term.append(done); tmo.append(t == 29 and not done)
        s = n
        if done:
            break
f = lambda v, t=np.float32: np.asarray(v, t)
base = dict(obs=f(obs), actions=f(act), rewards=f(rew), next_obs=f(nxt))
np.savez("terms.npz", terminals=f(term, bool), timeouts=f(tmo, bool), **base)
np.savez("dones.npz", dones=f(np.array(term) | np.array(tmo), bool), timeouts=f(tmo, bool), **base)
np.savez("dones_only.npz", dones=f(np.array(term) | np.array(tmo), bool), **base)
print("transitions", len(obs), "terminals", int(np.sum(term)))
EOF
have_h5=0
/usr/bin/python3 - <<'EOF' && have_h5=1
import numpy as np, h5py
d = np.load("terms.npz")
with h5py.File("d4rl.hdf5", "w") as h:
    h["observations"] = d["obs"]; h["actions"] = d["actions"]; h["rewards"] = d["rewards"]
    h["next_observations"] = d["next_obs"]
    h["terminals"] = d["terminals"]; h["timeouts"] = d["timeouts"]
EOF

common=(model.termination=true "model.layers=[linear:64, tanh, linear:64, tanh, linear]"
        training.batch_size=64 training.lr=0.005 training.lr_schedule=constant data.val_fraction=0.2)

# ---- the flag rule: three files, one training --------------------------------------
"$bin" train data.path=terms.npz "${common[@]}" training.epochs=6 output.dir=runs/t --json \
  --quiet >t.json 2>t.err || fail "train on terminals: $(cat t.err)"
"$bin" train data.path=dones.npz "${common[@]}" training.epochs=6 output.dir=runs/d --json \
  --quiet >d.json 2>d.err || fail "train on dones + timeouts: $(cat d.err)"
cmp -s runs/t/history.csv runs/d/history.csv ||
  fail "terminals and dones - timeouts train differently"
if [ $have_h5 = 1 ]; then
  "$bin" train data.path=d4rl.hdf5 "${common[@]}" training.epochs=6 output.dir=runs/h --quiet \
    >/dev/null 2>h.err || fail "train on D4RL HDF5: $(cat h.err)"
  cmp -s runs/t/history.csv runs/h/history.csv || fail "HDF5 and npz train differently"
else
  echo "note: no h5py, HDF5 case skipped"
fi
/usr/bin/python3 - <<'EOF' || fail "train summary: $(cat t.json)"
import json, numpy as np, sys
t = json.load(open("t.json"))
d = np.load("terms.npz")
# the validation split is the last 20% of episodes; the majority rate there
rate = float(np.mean(d["terminals"]))
# the best constant predictor (the flag rate) has BCE = the rate's binary entropy
h = -(rate * np.log(rate) + (1 - rate) * np.log(1 - rate))
ok = t["val_bce"] < 0.5 * h and t["val_accuracy"] >= max(rate, 1 - rate) and "val_mse" in t
print("val_bce %.4f (constant %.4f) val_accuracy %.4f flag rate %.3f" % (t["val_bce"], h, t["val_accuracy"], rate))
sys.exit(0 if ok else 1)
EOF
"$bin" eval runs/t --json >e.json 2>e.err || fail "eval: $(cat e.err)"
/usr/bin/python3 -c "
import json, sys
t, e = json.load(open('t.json')), json.load(open('e.json'))
sys.exit(0 if abs(e['bce'] - t['val_bce']) < 1e-12 and abs(e['accuracy'] - t['val_accuracy']) < 1e-12
         and abs(e['loss'] - t['val_loss']) < 1e-12 else 1)" || fail "eval differs from train: $(cat e.json)"
"$bin" eval runs/t 2>/dev/null | grep -q "termination bce" || fail "text eval lacks the termination line"

# ---- predict and the PyTorch module ------------------------------------------------
"$bin" train data.path=terms.npz "${common[@]}" model.head=gaussian model.ensemble=3 \
  "model.target_weights=[1, 1, 0.5, 4]" training.epochs=3 output.dir=runs/g --quiet \
  >/dev/null 2>g.err || fail "train gaussian ensemble: $(cat g.err)"
for r in t g; do
  "$bin" predict runs/$r --input terms.npz --output p$r.safetensors >/dev/null 2>p.err ||
    fail "predict $r: $(cat p.err)"
  "$bin" ckpt export runs/$r --torch -o x$r.safetensors >/dev/null 2>x.err ||
    fail "export $r: $(cat x.err)"
done
PYTHONPATH="$src/python" MIXPREC_LIB="$(dirname "$bin")/libmixprec.so" /usr/bin/python3 - "$src" <<'EOF'
import sys
import numpy as np
sys.path.insert(0, sys.argv[1] + "/tests")
from gauss_cases import st_read
d = np.load("terms.npz")
bad = 0
p, _ = st_read("pt.safetensors")
tp = p["terminal_prob"]
if tp.shape != (len(d["obs"]),) or not (0 <= tp.min() and tp.max() <= 1) or \
        abs(tp.mean() - d["terminals"].mean()) > 0.05:
    print("terminal_prob", tp.shape, tp.min(), tp.max(), tp.mean(), d["terminals"].mean()); bad = 1
_, meta = st_read("xt.safetensors")
if meta.get("termination") != "true":
    print("export metadata", meta); bad = 1
try:
    import torch, mixprec
except ImportError:
    sys.exit(bad)
for r in ("t", "g"):
    want, _ = st_read("p%s.safetensors" % r)
    m = mixprec.load_torch("x%s.safetensors" % r)
    with torch.no_grad():
        got = m(d["obs"], d["actions"])
    if set(got) != set(want):
        print(r, sorted(got), sorted(want)); bad = 1; continue
    for k, v in want.items():
        g = got[k].numpy()
        if (np.abs(g - v) > 1e-6 + 1e-5 * np.abs(v)).any():
            print(r, k, "max diff", np.abs(g - v).max()); bad = 1
sys.exit(bad)
EOF
[ $? -eq 0 ] || fail "predict / export / load_torch"

# ---- bit-exact resume ----------------------------------------------------------------
for mode in fp32 mixed_fp16; do
  "$bin" train data.path=terms.npz "${common[@]}" training.precision=$mode training.epochs=2 \
    output.dir=runs/a$mode --quiet >/dev/null 2>a.err || fail "train 2 epochs $mode: $(cat a.err)"
  "$bin" train data.path=terms.npz "${common[@]}" training.precision=$mode training.epochs=1 \
    output.dir=runs/b$mode --quiet >/dev/null 2>b.err || fail "train 1 epoch $mode: $(cat b.err)"
  "$bin" train --resume runs/b$mode data.path=terms.npz training.epochs=2 --quiet >/dev/null \
    2>b.err || fail "resume $mode: $(cat b.err)"
  /usr/bin/python3 - runs/a$mode runs/b$mode <<'EOF' || fail "resume is not bit-exact ($mode)"
import csv, glob, json, struct, sys
def rows(d):
    with open(d + "/history.csv") as f:
        return [(r["step"], r["loss"], r["grad_norm"]) for r in csv.DictReader(f)]
def data(d):
    p = sorted(glob.glob(d + "/checkpoints/*.safetensors"))[-1]
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__")
    return p.rsplit("/", 1)[1], h, b[8 + n:]
a, b = sys.argv[1], sys.argv[2]
sys.exit(0 if rows(a) == rows(b) and data(a) == data(b) else 1)
EOF
done

# ---- refusals ------------------------------------------------------------------------
"$bin" train data.path=dones_only.npz "${common[@]}" training.epochs=1 output.dir=runs/x \
  >/dev/null 2>x.err && fail "dones without timeouts accepted"
grep -q "dones without timeouts" x.err && grep -q "terminals" x.err ||
  fail "dones-only message: $(cat x.err)"
/usr/bin/python3 -c "
import numpy as np
np.savez('episodes.npz', obs=np.zeros((3, 5, 2), np.float32), actions=np.zeros((3, 4, 1), np.float32),
         rewards=np.zeros((3, 4), np.float32))"
"$bin" train data.path=episodes.npz "${common[@]}" training.epochs=1 output.dir=runs/x \
  >/dev/null 2>x.err && fail "episode layout accepted"
grep -q "episode layout" x.err || fail "episode-layout message: $(cat x.err)"
"$bin" train model.termination=true training.epochs=1 output.dir=runs/x >/dev/null 2>x.err &&
  fail "the pendulum with termination accepted"
grep -q "pendulum records no terminations" x.err || fail "pendulum message: $(cat x.err)"
"$bin" train data.path=terms.npz "${common[@]}" "model.target_weights=[1, 1]" training.epochs=1 \
  output.dir=runs/x >/dev/null 2>x.err && fail "a short weight list accepted"
grep -q "exactly 4, one per target column (2 state deltas, the reward, the termination flag)" x.err ||
  fail "weight-length message: $(cat x.err)"
[ ! -e runs/x/checkpoints ] || [ -z "$(ls runs/x/checkpoints)" ] || fail "a refused run wrote checkpoints"
exit $((fails > 0))
