#!/usr/bin/env bash
# The one-call GPU check (issue 9), for a machine with an NVIDIA GPU, a CUDA toolkit and a
# PyTorch wheel, but no network and no apt. From the repository root:
#   bench/gpu/prepare-carry.sh     # here, on the CPU machine (shards, headers, GoogleTest)
#   bench/gpu/check.sh             # there; carry bench/gpu/.carry along
# Builds nightshift-trainer against the wheel's LibTorch, runs the trainer's tests, then
# the GPU benchmarks (fp32 / bf16 / fp16, activation checkpointing, dynamic batching,
# Nightshift vs plain PyTorch eager on the same model), then a pretrained-model job (a small
# BERT folder, fp32 and bf16) and a LoRA run of an 8B-shaped Llama (bench/gpu/lora_8b.py),
# and prints the tables.
# Without a GPU it says so and only checks that it is ready (a dry run). Under 8 minutes.
set -uo pipefail
cd "$(dirname "$0")/../.."
CARRY=bench/gpu/.carry
OUT_DIR=${OUT:-/tmp/nightshift-gpu-check}
mkdir -p "$OUT_DIR"
PY=${PYTHON:-python3}
step() { echo; echo "== $* ($(date +%T))"; }

missing=0
for f in "$CARRY/spam-512/meta.json" "$CARRY/include/nlohmann/json.hpp" "$CARRY/include/gloo/config.h" \
         "$CARRY/googletest/CMakeLists.txt"; do
  [ -e "$f" ] || { echo "gpu-check: missing $f: run bench/gpu/prepare-carry.sh on the CPU machine"; missing=1; }
done
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1 ||
   ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  echo "gpu-check: no GPU on this machine (nvidia-smi or torch.cuda unavailable): dry run only."
  echo "gpu-check: carried inputs: $([ $missing = 0 ] && echo present || echo MISSING)"
  echo "gpu-check: would build with: cmake -DNIGHTSHIFT_TRAINER_ONLY=ON -DCMAKE_PREFIX_PATH=<torch.utils.cmake_prefix_path>"
  bash -n "$0" && echo "gpu-check: script syntax OK"
  exit 0
fi
[ $missing = 0 ] || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT_DIR/gpu.txt"

step "build nightshift-trainer against the wheel's LibTorch"
TORCH_PREFIX=$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DNIGHTSHIFT_TRAINER_ONLY=ON \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DNIGHTSHIFT_PYTHON="$(command -v "$PY")" \
  -DNIGHTSHIFT_NLOHMANN_INCLUDE="$PWD/$CARRY/include" -DNIGHTSHIFT_GLOO_INCLUDE="$PWD/$CARRY/include" \
  -DNIGHTSHIFT_GTEST_SOURCE="$PWD/$CARRY/googletest" -DTORCH_CUDA_ARCH_LIST=9.0 \
  >"$OUT_DIR/cmake.log" 2>&1 || { tail -30 "$OUT_DIR/cmake.log"; exit 1; }
grep -E "nightshift-trainer:|Torch" "$OUT_DIR/cmake.log" | head -5
timeout 300 ninja -C build-gpu -j "$(nproc)" >"$OUT_DIR/build.log" 2>&1 || { tail -40 "$OUT_DIR/build.log"; exit 1; }
readelf -d build-gpu/bin/nightshift-trainer | grep NEEDED | tee "$OUT_DIR/needed.txt"

step "trainer tests (CUDA where a test can use it)"
timeout 150 ctest --test-dir build-gpu -L trainer -j 8 --timeout 120 2>&1 | tail -15 | tee "$OUT_DIR/ctest.txt"

step "benchmarks"
timeout 240 "$PY" bench/trainer_bench.py --build build-gpu --work "$OUT_DIR/work" --only gpu --steps 30 \
  --data-512 "$PWD/$CARRY/spam-512" --python "$PY" 2>&1 | tee "$OUT_DIR/bench.txt"

step "a pretrained-model job (model.pretrained: the carried small BERT folder), fp32 and bf16"
if [ -f "$CARRY/bert-256/meta.json" ]; then
  timeout 180 "$PY" - "$PWD/$CARRY" build-gpu <<'PRETRAINED' 2>&1 | tee "$OUT_DIR/pretrained.txt"
import json, os, sys, tempfile
sys.path.insert(0, "bench")
from trainer_bench import run_trainer
carry, build = sys.argv[1], sys.argv[2]
data = os.path.join(carry, "bert-256")
meta = json.load(open(os.path.join(data, "meta.json")))
with tempfile.TemporaryDirectory() as tmp:
    for precision in ("fp32", "bf16"):
        r = run_trainer(build, data, meta, tmp, "pretrained-" + precision, max_len=256, batch_size=32,
                        max_steps=60, precision=precision, lr=5e-5, warmup=10, skip_steps=10, threads=8,
                        model={"pretrained": os.path.join(carry, "hf", "bert"), "max_len": 256})
        print(json.dumps(r))
PRETRAINED
else
  echo "gpu-check: no $CARRY/bert-256 (an older carry): pretrained-model job skipped"
fi

step "LoRA on an 8B-shaped Llama (random bf16 weights): peak GPU memory, against torchtune's 16.2 GiB"
if [ -f "$CARRY/spam-lm-512/meta.json" ]; then
  # 16 GB of weights go to /tmp, not under $OUT (lora_8b.py deletes them).
  timeout 420 "$PY" bench/gpu/lora_8b.py --carry "$PWD/$CARRY" --build build-gpu --shape 8b 2>&1 | tail -5 |
    tee "$OUT_DIR/lora8b.txt"
else
  echo "gpu-check: no $CARRY/spam-lm-512 (an older carry): LoRA 8B run skipped"
fi
echo
echo "gpu-check: done; logs in $OUT_DIR"
