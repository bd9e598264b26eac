#!/usr/bin/env bash
# A short check on a GPU node (needs only torch, pyarrow and nvidia-ml-py there):
#   bash pipelines/validation/gpu_node_check.sh GPU OUTDIR
# 1. the node's hardware inventory, with the host speed `maya predict` scales host gaps by
#    (copy it to <warehouse>/hardware/gpu=GPU/ on the machine that predicts);
# 2. real step times of two training programs, to set beside `maya predict --gpu GPU` of the same
#    commands: GPT-2 small (bf16 autocast, batch 8 x 1024) and a Megatron-style GPT (fp16 model,
#    fp32 main weights, checkpointing, micro-batch 1: a host-heavy step).
set -euo pipefail
GPU=${1:?GPU key, e.g. h200}
OUT=${2:?output folder}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv | tee "$OUT/nvidia_smi.csv" || true
WH=$(mktemp -d)
python -m pipelines.runners.hardware --gpu "$GPU" --run-id "node-check-$(date +%Y%m%d%H%M%S)" --root "$WH" > /dev/null
cp "$WH"/hardware/gpu="$GPU"/*.json "$OUT/inventory_$GPU.json"
python -c "import json,sys; print('host_speed', json.load(open(sys.argv[1]))['cpu']['host_speed'])" "$OUT/inventory_$GPU.json"
python examples/gpt_single.py --model gpt2-small --batch-size 8 --steps 12 2>&1 | tee "$OUT/gpt2_small_b8_$GPU.log"
(cd examples/validation && python megatron_gpt.py --layers 12 --hidden 2048 --heads 16 --seq 1024 --vocab 50257 \
    --pad-vocab-to 128 --micro-batch 1 --global-batch 4 --dtype fp16 --half-params --attention eager --checkpoint \
    --steps 10) 2>&1 | tee "$OUT/megatron_h2048_L12_mb1_gb4_$GPU.log"
