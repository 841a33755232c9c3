#!/usr/bin/env bash
# Run HERE (the CPU machine) before bench/gpu/check.sh goes to a GPU machine that has no
# network and no apt: puts into bench/gpu/.carry (git-ignored; name it in the device
# tool's `carry`) what the GPU machine lacks: token shards of SpamAssassin (prepared by
# our own nightshift-prepare), nlohmann-json and gloo headers and the GoogleTest sources.
set -euo pipefail
cd "$(dirname "$0")/../.."
CARRY=bench/gpu/.carry
BUILD=${BUILD_DIR:-build}
mkdir -p "$CARRY/include"
cp -r /usr/include/nlohmann "$CARRY/include/"
# The PyTorch wheel ships no gloo headers (c10d's ProcessGroupGloo.hpp includes them).
rm -rf "$CARRY/include/gloo" && cp -r /usr/include/gloo "$CARRY/include/"
rm -rf "$CARRY/googletest" && cp -r /usr/src/googletest "$CARRY/googletest"
./scripts/fetch-data.sh >/dev/null
for len in 512 2048; do
  out=$CARRY/spam-$len
  [ -f "$out/meta.json" ] || "$BUILD/bin/nightshift-prepare" --path data/spamassassin --vocab-size 8000 \
      --max-len $len --output-dir "$out" --threads 2 2>/dev/null
done
# The LoRA run of an 8B-shaped Llama (lora_8b.py): the corpus as causal-LM rows.
[ -f "$CARRY/spam-lm-512/meta.json" ] || "$BUILD/bin/nightshift-prepare" --path data/spamassassin --vocab-size 8000 \
    --max-len 512 --classifier false --output-dir "$CARRY/spam-lm-512" --threads 2 2>/dev/null
# The pretrained-model job: a small BERT folder (tests/support/hf_folders.py: random weights, a
# WordPiece tokenizer trained on the corpus; 4 layers, 256 wide, about 21 MB) and its shards.
PY=${NIGHTSHIFT_PYTHON:-/opt/nightshift/venv/bin/python}
[ -f "$CARRY/hf/bert/config.json" ] || "$PY" tests/support/hf_folders.py "$CARRY/hf" data/spamassassin --kinds bert \
    --vocab 8000 --hidden 256 --layers 4 --heads 4 --ffn 1024 >/dev/null 2>&1
[ -f "$CARRY/bert-256/meta.json" ] || "$BUILD/bin/nightshift-prepare" --path data/spamassassin --max-len 256 \
    --pretrained "$CARRY/hf/bert" --output-dir "$CARRY/bert-256" --threads 2 2>/dev/null
du -sh "$CARRY"
