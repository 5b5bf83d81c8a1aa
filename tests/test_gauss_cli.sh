#!/usr/bin/env bash
# tests/test_gauss_cli.sh: a world model with model.head=gaussian through the
# CLI, on a flat replay buffer (obs, actions, rewards, next_obs, timeouts)
# of a damped spring with KNOWN process noise (velocity std 0.05, reward std
# 0.1, position exact), written by /usr/bin/python3 numpy.
# usage: test_gauss_cli.sh MIXPREC_BINARY SOURCE_DIR
#  - train (fp32) reports val_loss (the Gaussian NLL) and val_mse; eval
#    --json gives the same numbers and head "gaussian"; the text eval shows
#    the nll/mse columns;
#  - predict returns next_obs_var and reward_var in the data's units: the
#    noise variances (0.0025 and 0.01) within a factor 1.6 (oracle: the
#    simulator's noise), the position's far below;
#  - ckpt export --torch carries max_logvar/min_logvar and head=gaussian,
#    and the module of docs/world_models.md reproduces predict to 1e-5
#    relative (tests/gauss_cases.py; skipped without torch);
#  - 1 epoch + --resume to 2 gives the losses of 2 epochs bit for bit (the
#    bounds and their optimizer state are checkpointed), and a mixed_fp16
#    run (loss scaler on) trains to a finite NLL and MSE;
#  - model.ensemble=3: train/eval agree, predict gives the ensemble mean,
#    aleatoric and epistemic variances (aleatoric = the noise; epistemic
#    positive and below it inside the data; var = their sum), the PyTorch
#    Ensemble of docs/world_models.md on the export reproduces all of them
#    to 1e-5, and resume is bit-exact.
# Exit 77 without numpy.
set -u
src=$(realpath "$2")
. "$(dirname "$0")/cli_lib.sh" "$1"
spring_buffer 29 120 0.05 0.1 200 || { echo "SKIP: /usr/bin/python3 numpy could not write the data"; exit 77; }

common=(data.path=buffer.npz model.head=gaussian "model.layers=[linear:64, gelu, linear:64, gelu, linear]"
        training.batch_size=64 training.lr=3e-3 training.lr_schedule=constant)
"$bin" train "${common[@]}" training.epochs=6 output.dir=runs/g --json --quiet \
  >train.json 2>train.err || fail "train: $(cat train.err)"
"$bin" eval runs/g --json >eval.json 2>eval.err || fail "eval: $(cat eval.err)"
/usr/bin/python3 - train.json eval.json <<'EOF' || fail "train/eval numbers: $(cat train.json eval.json)"
import json, sys
t = json.load(open(sys.argv[1]))
e = json.load(open(sys.argv[2]))
assert e["head"] == "gaussian" and e["workload"] == "world_model", e
assert abs(e["loss"] - t["val_loss"]) <= 1e-6 * abs(t["val_loss"]), (e["loss"], t["val_loss"])
assert abs(e["mse"] - t["val_mse"]) <= 1e-6 * t["val_mse"], (e["mse"], t["val_mse"])
assert e["loss"] == e["fp32_loss"] and e["mse"] == e["fp32_mse"], e   # an fp32 run
# standardised targets: MSE well under 1 (predict-the-mean); the NLL below the
# NLL of unit variance (mean(1 + log 1) = 1) as it learns small variances
assert 0 < e["mse"] < 0.5 and e["loss"] < 0.5, e
EOF
"$bin" eval runs/g >eval.txt 2>&1 || fail "eval text: $(cat eval.txt)"
grep -q "nll" eval.txt && grep -q "mse" eval.txt || fail "eval text lacks nll/mse: $(cat eval.txt)"

"$bin" predict runs/g --input query.npz --output pred.safetensors 2>pred.err ||
  fail "predict: $(cat pred.err)"
/usr/bin/python3 - pred.safetensors <<'EOF' || fail "predicted variances are not the noise's"
import json, struct, sys
import numpy as np
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n]); h.pop("__metadata__", None)
a = {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
                      np.float32).reshape(v["shape"]) for k, v in h.items()}
assert set(a) == {"next_obs", "reward", "next_obs_var", "reward_var"}, set(a)
assert a["next_obs_var"].shape == (200, 2) and a["reward_var"].shape == (200,)
vv, rv, pv = np.median(a["next_obs_var"][:, 1]), np.median(a["reward_var"]), np.median(a["next_obs_var"][:, 0])
print(f"median predicted variance: velocity {vv:.5f} (true 0.0025), reward {rv:.5f} (true 0.01), position {pv:.2e} (true 0)")
assert 0.0025 / 1.6 < vv < 0.0025 * 1.6, vv
assert 0.01 / 1.6 < rv < 0.01 * 1.6, rv
assert pv < 0.0025 / 4, pv
EOF

"$bin" ckpt export runs/g --torch -o export.safetensors 2>exp.err || fail "export: $(cat exp.err)"
/usr/bin/python3 "$src/tests/gauss_cases.py" export export.safetensors query.npz pred.safetensors
rc=$?
[ $rc -eq 0 ] || [ $rc -eq 77 ] || fail "predict differs from the PyTorch GaussianMLP on the export"

# bit-exact resume: 1 epoch + resume to 2 == 2 epochs (the bounds and their
# optimizer state travel in the checkpoint); a constant learning rate, as
# the cosine schedule is planned over the training.epochs of each call
"$bin" train "${common[@]}" training.epochs=2 output.dir=runs/a --json --quiet >a.json 2>a.err ||
  fail "train 2 epochs: $(cat a.err)"
"$bin" train "${common[@]}" training.epochs=1 output.dir=runs/b --quiet >/dev/null 2>b.err ||
  fail "train 1 epoch: $(cat b.err)"
"$bin" train --resume runs/b data.path=buffer.npz training.epochs=2 --json --quiet >b.json \
  2>b.err || fail "resume to 2 epochs: $(cat b.err)"
/usr/bin/python3 -c "
import json, sys
a, b = json.load(open('a.json')), json.load(open('b.json'))
sys.exit(0 if (a['val_loss'], a['val_mse'], a['final_train_loss']) ==
              (b['val_loss'], b['val_mse'], b['final_train_loss']) else 1)" ||
  fail "resume is not bit-exact: $(cat a.json b.json)"

"$bin" train "${common[@]}" training.epochs=2 training.precision=mixed_fp16 \
  checkpoint.enabled=false --json --quiet >f16.json 2>f16.err || fail "mixed_fp16: $(cat f16.err)"
/usr/bin/python3 -c "
import json, math, sys
t = json.load(open('f16.json'))
sys.exit(0 if t['precision'] == 'mixed_fp16' and math.isfinite(t['val_loss']) and 0 < t['val_mse'] < 0.5 else 1)" ||
  fail "mixed_fp16 run: $(cat f16.json)"

# ---- an ensemble of 3 Gaussian members (model.ensemble=3) ------------------------
"$bin" train "${common[@]}" model.ensemble=3 training.epochs=4 output.dir=runs/e --json --quiet \
  >ens.json 2>ens.err || fail "train ensemble: $(cat ens.err)"
"$bin" eval runs/e --json >ens_eval.json 2>ens_eval.err || fail "eval ensemble: $(cat ens_eval.err)"
/usr/bin/python3 - ens.json ens_eval.json <<'EOF' || fail "ensemble train/eval: $(cat ens.json ens_eval.json)"
import json, sys
t, e = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert t["params"] == 3 * 4812, t["params"]   # 3 members of the model above
assert abs(e["loss"] - t["val_loss"]) <= 1e-6 * abs(t["val_loss"]) and 0 < e["mse"] < 0.5, e
EOF
"$bin" predict runs/e --input query.npz --output ens_pred.safetensors >/dev/null 2>ens_pred.err ||
  fail "predict ensemble: $(cat ens_pred.err)"
"$bin" ckpt export runs/e --torch -o ens_export.safetensors >/dev/null 2>ens_exp.err ||
  fail "export ensemble: $(cat ens_exp.err)"
/usr/bin/python3 "$src/tests/gauss_cases.py" export ens_export.safetensors query.npz ens_pred.safetensors
rc=$?
[ $rc -eq 0 ] || [ $rc -eq 77 ] || fail "ensemble predict differs from the PyTorch Ensemble on the export"
/usr/bin/python3 - ens_pred.safetensors <<'EOF' || fail "ensemble variances"
import json, struct, sys
import numpy as np
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n]); h.pop("__metadata__", None)
a = {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
                      np.float32).reshape(v["shape"]) for k, v in h.items()}
al, ep = np.median(a["next_obs_aleatoric"][:, 1]), np.median(a["next_obs_epistemic"][:, 1])
print(f"ensemble, velocity: median aleatoric {al:.5f} (noise 0.0025), epistemic {ep:.2e}")
assert 0.0025 / 1.6 < al < 0.0025 * 1.6, al
assert 0 < ep < al, ep            # inside the data: members agree better than the noise
np.testing.assert_allclose(a["next_obs_var"], a["next_obs_aleatoric"] + a["next_obs_epistemic"],
                           rtol=1e-6)
EOF
# bit-exact resume of the ensemble (bootstraps re-drawn from the seed, all members' state saved)
"$bin" train "${common[@]}" model.ensemble=3 training.epochs=2 output.dir=runs/ea --json --quiet \
  >ea.json 2>ea.err || fail "ensemble 2 epochs: $(cat ea.err)"
"$bin" train "${common[@]}" model.ensemble=3 training.epochs=1 output.dir=runs/eb --quiet \
  >/dev/null 2>eb.err || fail "ensemble 1 epoch: $(cat eb.err)"
"$bin" train --resume runs/eb data.path=buffer.npz training.epochs=2 --json --quiet >eb.json \
  2>eb.err || fail "ensemble resume: $(cat eb.err)"
/usr/bin/python3 -c "
import json, sys
a, b = json.load(open('ea.json')), json.load(open('eb.json'))
sys.exit(0 if (a['val_loss'], a['val_mse'], a['final_train_loss']) ==
              (b['val_loss'], b['val_mse'], b['final_train_loss']) else 1)" ||
  fail "ensemble resume is not bit-exact: $(cat ea.json eb.json)"

exit $((fails > 0))
