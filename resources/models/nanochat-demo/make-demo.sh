#!/usr/bin/env bash
# Reproduces the demo model in this folder: public-domain corpus from Debian
# packages (make-corpus.sh) -> `octet train prepare` (4,096-token BPE) ->
# `octet train` (the "tiny" nanochat preset) -> config.json, model.safetensors,
# tokenizer.json copied here. Training is deterministic for a given CPU
# instruction set (AVX2 / NEON), so the same steps give the same weights.
#
# usage: make-demo.sh            env: OCTET=path/to/octet  WORK=/tmp/octet-demo
#                                     STEPS=60  THREADS=0 (all cores)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
octet=${OCTET:-octet}
work=${WORK:-/tmp/octet-demo}
steps=${STEPS:-60}
threads=${THREADS:-0}

"$here/make-corpus.sh" "$work/corpus"
rm -rf "$work/data" "$work/run"
"$octet" train prepare --out "$work/data" --vocab-size 4096 --val-fraction 0.02 "$work/corpus"
"$octet" train --config tiny --data "$work/data" --out "$work/run" --seq-len 256 --batch-size 8 \
  --steps "$steps" --warmup-steps 10 --warmdown-frac 0.2 --eval-every 40 --eval-batches 4 \
  --checkpoint-every 40 --seed 1 --threads "$threads" --json > "$work/train.json"
cp "$work/run/config.json" "$work/run/model.safetensors" "$work/run/tokenizer.json" "$here/"
cp "$work/train.json" "$here/train-log.json"
echo "make-demo.sh: model in $here ($(du -sh "$here/model.safetensors" | cut -f1)), log in train-log.json" >&2
