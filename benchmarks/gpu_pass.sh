#!/usr/bin/env bash
# The GPU checks of one device lease, most valuable first, each under its own limit so that one
# overrunning loses only itself; every file lands in the folder given (default reports/data):
#   1. deviceless vs real compile of ResNet-50's step (with what the real compile's autotuner
#      chose), and `fit --target`'s batch run for real (benchmarks/device_check.py;
#      FIT_* below is what `xla-cost fit` answered without the GPU:
#      reports/data/fit_gpt2-small_h200_2026-11-26.json),
#   2. a kernel's and a step's cost apart from any work (benchmarks/dispatch_costs.py),
#   3. matrix products by shape (benchmarks/gemm_shapes.py; GEMM_S=0 skips them),
#   4. the zoo's timing with the current harness (benchmarks/time_zoo.py, the models in TIMING_MODELS).
# Run from the repository root on the GPU machine:  bash benchmarks/gpu_pass.sh OUT
set -u
out=${1:-reports/data}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation --no-index . >"$out/install.log" 2>&1 \
  || { echo "gpu_pass: install failed (see $out/install.log)"; exit 2; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
cd /tmp  # the installed package, not the checkout, is imported
repo=$OLDPWD
timeout "${CHECK_S:-170}" python3 "$repo/benchmarks/device_check.py" --fit-model "${FIT_MODEL:-gpt2-small}" \
  --fit-batch "${FIT_BATCH:-130}" --fit-dtype "${FIT_DTYPE:-bfloat16}" --fit-optimizer "${FIT_OPTIMIZER:-adam}" \
  --out "$out" 2>"$out/device_check.log" || { echo "gpu_pass: device_check ended with $?"; tail -c 2000 "$out/device_check.log"; }
grep -h "hlo_rematerialization\|device_check: " "$out/device_check.log" >"$out/device_check_remat.log"  # the compiler's own account
rm -f "$out/device_check.log"  # megabytes of autotuning chatter; the rematerialization lines are kept
timeout "${DISPATCH_S:-60}" python3 "$repo/benchmarks/dispatch_costs.py" --out "$out" || echo "gpu_pass: dispatch_costs ended with $?"
if [ "${GEMM_S:-80}" != 0 ]; then
  timeout "${GEMM_S:-80}" python3 "$repo/benchmarks/gemm_shapes.py" --out "$out" || echo "gpu_pass: gemm_shapes ended with $?"
fi
only=()
for m in ${TIMING_MODELS:-gpt2-small resnet50 bert-base}; do only+=(--only "$m"); done
timeout "${TIMING_S:-200}" python3 "$repo/benchmarks/time_zoo.py" "${only[@]}" ${TIMING_ARGS:---batch 8 --batch 32 --batch 256 --optimizer adam} \
  --output "$out/timing.csv" || echo "gpu_pass: time_zoo ended with $?"
ls -la "$out"
