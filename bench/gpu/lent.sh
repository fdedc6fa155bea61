#!/usr/bin/env bash
# Where a GPU machine is lent (the workplace's device tool): every check that needs CUDA, as one short
# script whose parts each have their own time limit, so one that hangs or fails leaves the rest.
#
#   bash bench/gpu/lent.sh [part ...]      parts: tests kernels parallel sweep calibrate plan (default: all)
#
# About 8 minutes in all on one H200; `tests calibrate plan` about 6.
#
# The lent machine's image has PyTorch with CUDA but not every package the project needs; those travel
# as wheels in .whl/ (ignored by git; see bench/gpu/README.md for the download line) and are unpacked
# into /tmp/site. The project itself runs from the checkout (PYTHONPATH), so no install is needed.
# Everything written goes under $OUT (the tool's return folder), one log per part.
set -u
OUT=${OUT:-/tmp/llmbench-gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH="/tmp/site:$PWD"
fi
llmbench() { python3 -c 'import sys; from llmbench.cli import app; sys.argv[0] = "llmbench"; app()' "$@"; }
llmdiag() { python3 -c 'import sys; from llmbench.diag_cli import app; sys.argv[0] = "llmdiag"; app()' "$@"; }
export -f llmbench llmdiag

# part NAME LIMIT_S COMMAND...: run it under its limit, its output in $OUT/NAME.log, one status line.
part() {
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    timeout "$limit" bash -c "$*" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "== $name: rc $rc in $((SECONDS - t0)) s (limit $limit)"
    tail -n 6 "$OUT/$name.log"
}

wanted() { [ $# -eq 0 ] || [[ " $PARTS " == *" $1 "* ]]; }
PARTS="${*:-tests kernels parallel sweep calibrate plan}"

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())'

if wanted tests; then
    part tests 150 python3 -m pytest -q -rs -m gpu -p no:cacheprovider tests/refengine/kernels/test_kernels_gpu.py \
        tests/refengine/quant/test_w8a8.py tests/probes/test_gpu_probe.py tests/refengine/distributed/test_gpu_nccl.py \
        tests/analyzers/plan/test_calibrate.py
fi
if wanted kernels; then
    part kernels 90 python3 bench/gpu/kernels.py --quick --json "$OUT/kernels.json"
fi
if wanted parallel; then
    part parallel 90 python3 bench/gpu/parallel.py --quick --json "$OUT/parallel.json"
fi
if wanted sweep; then
    # The README's main job on the GPU: the embedded engine picks CUDA (device auto) and its dtype there.
    part sweep 150 "llmbench sweep --concurrency 1,8,32 --duration 5 --out /tmp/gpu-sweep \
        && tar -C /tmp -czf $OUT/sweep_run.tgz gpu-sweep"
fi
if wanted calibrate; then
    # The measured GPU profile (fitted to a short sweep of the bundled server, --serve), for `plan` below.
    part calibrate 180 "llmdiag calibrate --device cuda --serve --name h200-measured --out $OUT/h200_measured.json"
fi
if wanted plan; then
    # bench/plan_accuracy.py on the GPU with that profile: one GPU, so TP1 only; runs kept and returned
    # (the tar is a part of its own, so that runs kept before a timeout still come back).
    part plan 300 "python3 bench/plan_accuracy.py --profile $OUT/h200_measured.json --models tiny,random \
        --concurrency 1,4,16 --input-lens 128,512 --duration 5 --keep-runs /tmp/pa-gpu \
        --out $OUT/plan_accuracy_gpu.json"
    part plan_runs 60 "tar -C /tmp -czf $OUT/plan_runs_gpu.tgz pa-gpu"
fi
