#!/usr/bin/env bash
# Reproduces the demo model in this folder: public-domain corpus from Debian
# packages (make-corpus.sh) -> `octet train prepare` (4,096-token BPE, BOS
# before every document and every prompt) -> `octet train` (demo-config.json:
# 4 layers, width 128) -> config.json, model.safetensors, tokenizer.json,
# tokenizer_config.json copied here. Training is deterministic for a given CPU
# instruction set (AVX2 / NEON) and thread count, so the same steps give the
# same weights.
#
# usage: make-demo.sh            env: OCTET=path/to/octet  WORK=/tmp/octet-demo
#                                     STEPS=450  THREADS=2
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
octet=${OCTET:-octet}
work=${WORK:-/tmp/octet-demo}
steps=${STEPS:-450}
threads=${THREADS:-2}

"$here/make-corpus.sh" "$work/corpus"
rm -rf "$work/data" "$work/run"
"$octet" train prepare --out "$work/data" --vocab-size 4096 --val-fraction 0.02 "$work/corpus"
"$octet" train --config "$here/demo-config.json" --data "$work/data" --out "$work/run" \
  --seq-len 128 --batch-size 16 --steps "$steps" --warmup-steps 10 --warmdown-frac 0.3 \
  --eval-every 50 --eval-batches 8 --checkpoint-every 150 --seed 1 --threads "$threads" \
  --log-every 10 --json > "$work/train.json"
cp "$work/run/config.json" "$work/run/model.safetensors" "$work/run/tokenizer.json" \
  "$work/run/tokenizer_config.json" "$here/"
cp "$work/train.json" "$here/train-log.json"
echo "make-demo.sh: model in $here ($(du -sh "$here/model.safetensors" | cut -f1)), log in train-log.json" >&2
