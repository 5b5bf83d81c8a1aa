#!/usr/bin/env bash
# tests/fuzz/make_corpus.sh MIXPREC_BINARY: regenerate the seed corpus of
# the checkpoint fuzzer in tests/fuzz/corpus: real checkpoints of the tiny
# model fuzz_ckpt.c loads into (pure bf16 and fp32, so loads convert), an
# fp8 export, hand-made hostile files, and checkpoints of a regressor and a
# world model trained on user data (needs /usr/bin/python3 with NumPy).
set -euo pipefail
bin=$(realpath "$1")
cd "$(dirname "$0")"
out=$PWD/corpus
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rm -f "$out"/*
mkdir -p "$out"
tiny="data.trajectories=4 data.episode_length=20 model.hidden=4 model.depth=1 training.epochs=1 training.batch_size=8 checkpoint.every_steps=0"
for p in bf16 fp32 mixed_fp16 fp8; do
  "$bin" train --quiet $tiny training.precision=$p output.dir="$tmp/$p" >/dev/null 2>&1
  cp "$tmp/$p"/checkpoints/ckpt-*.safetensors "$out/ckpt_$p.safetensors"
done
"$bin" ckpt export "$out/ckpt_fp32.safetensors" --dtype f8_e4m3 -o "$out/export_e4m3.safetensors" >/dev/null
"$bin" ckpt export "$out/ckpt_fp32.safetensors" --dtype f8_e5m2 -o "$out/export_e5m2.safetensors" >/dev/null
hdr() { # hdr NAME JSON [DATA_BYTES]: a file whose header length matches JSON
  local n=${#2}
  { printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $((n & 255)) $((n >> 8 & 255)) $((n >> 16 & 255)) $((n >> 24 & 255)))\\x00\\x00\\x00\\x00"
    printf '%s' "$2"; head -c "${3:-16}" /dev/zero; } >"$out/$1"
}
hdr plain.safetensors '{"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}'
hdr overlap.safetensors '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F16","shape":[4],"data_offsets":[4,12]}}'
hdr dtypes.safetensors '{"__metadata__":{"k":"v"},"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"F8_E5M2","shape":[4],"data_offsets":[4,8]},"c":{"dtype":"F8_E4M3","shape":[],"data_offsets":[8,9]},"d":{"dtype":"F16","shape":[0],"data_offsets":[9,9]}}' 9
hdr nested.safetensors '{"a":[[[[[[[[[[[[1]]]]]]]]]]]]}'
hdr overflow.safetensors '{"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,16]}}'
head -c 200 "$out/ckpt_bf16.safetensors" >"$out/truncated.safetensors"
printf '\xff\xff\xff\xff\xff\xff\xff\x7f{}' >"$out/huge_header_len.safetensors"
# checkpoints of runs on user data (workload_meta: widths, statistics), for
# the predictor's reading of them (mxp_predictor_file_spec)
/usr/bin/python3 -c "
import numpy as np; r = np.random.default_rng(0); x = r.normal(size=(32, 3)).astype('f4')
np.savez('$tmp/reg.npz', x=x, y=np.tanh(x[:, :2]))
np.savez('$tmp/wm.npz', obs=r.normal(size=(4, 6, 2)).astype('f4'),
         actions=r.normal(size=(4, 5, 1)).astype('f4'), rewards=r.normal(size=(4, 5)).astype('f4'))"
small="model.hidden=4 model.depth=1 training.epochs=1 training.batch_size=8 checkpoint.every_steps=0"
"$bin" train --quiet data.path="$tmp/reg.npz" model.workload=regressor $small output.dir="$tmp/ureg" >/dev/null 2>&1
"$bin" train --quiet data.path="$tmp/wm.npz" $small output.dir="$tmp/uwm" >/dev/null 2>&1
cp "$tmp"/ureg/checkpoints/ckpt-*.safetensors "$out/ckpt_user_regressor.safetensors"
cp "$tmp"/uwm/checkpoints/ckpt-*.safetensors "$out/ckpt_user_world_model.safetensors"
ls -l "$out"
