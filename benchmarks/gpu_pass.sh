#!/usr/bin/env bash
# The GPU checks of one device lease, most valuable first, each under its own limit so that one
# overrunning loses only itself; every file lands in the folder given (default reports/data):
#   0. each kernel of a few train steps timed by the profiler (benchmarks/kernel_profile.py),
#   1. deviceless vs real compile of ResNet-50's step (with what the real compile's autotuner
#      chose), and `fit --target`'s batch run for real (benchmarks/device_check.py;
#      FIT_* below is what `xla-cost fit` answered without the GPU:
#      reports/data/fit_<model>_<device>_<date>.json; FIT_PROBE, batches to compile there after it),
#   1b. the cuDNN convolutions' text at each pass in both compiles (benchmarks/autotune_keys.py):
#      why the deviceless compile does not find the real one's convolution autotuning results,
#   2. a kernel's and a step's cost apart from any work (benchmarks/dispatch_costs.py),
#   3. matrix products by shape (benchmarks/gemm_shapes.py; GEMM_S=0 skips them),
#   4. the zoo's timing with the current harness (benchmarks/time_zoo.py, the models in TIMING_MODELS).
# A limit of 0 (CHECK_S, KEYS_S, DISPATCH_S, GEMM_S, TIMING_S, KERNELS_S) skips its check.
# A convolutional network's fit check autotunes every convolution at a large batch: ResNet-50's
# step at 2,193 (bfloat16) took about 5 minutes to compile and run on an H100 (2026-11-26), and
# 1.25x of it longer, so CHECK_S needs 600 or more there (one run of this script per check).
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
# run LIMIT NAME COMMAND...: the command under its limit; a limit of 0 skips it, a failure loses only itself
run() {
  local limit=$1 name=$2; shift 2
  [ "$limit" = 0 ] && return 0
  timeout "$limit" "$@" || echo "gpu_pass: $name ended with $?"
}
# shellcheck disable=SC2086  # KERNELS_ARGS and TIMING_ARGS are word lists
run "${KERNELS_S:-150}" kernel_profile python3 "$repo/benchmarks/kernel_profile.py" --out "$out" ${KERNELS_ARGS:-}
# FIT_MEM_FRACTION: the allocator's share for the fit check alone (XLA_PYTHON_CLIENT_MEM_FRACTION),
# as `xla-cost fit --memory-fraction` was given it: a smaller batch, autotuned in far less time
run "${CHECK_S:-170}" device_check env ${FIT_MEM_FRACTION:+XLA_PYTHON_CLIENT_MEM_FRACTION=$FIT_MEM_FRACTION} python3 "$repo/benchmarks/device_check.py" --fit-model "${FIT_MODEL:-gpt2-small}" \
  --fit-batch "${FIT_BATCH:-130}" --fit-dtype "${FIT_DTYPE:-bfloat16}" --fit-optimizer "${FIT_OPTIMIZER:-adam}" \
  ${FIT_PROBE:+--probe "$FIT_PROBE"} --out "$out" 2>"$out/device_check.log"
if [ -s "$out/device_check.log" ]; then
  tail -c 1500 "$out/device_check.log" | grep -v "autotun" | tail -5
  grep -h "hlo_rematerialization\|device_check: " "$out/device_check.log" >"$out/device_check_remat.log"  # the compiler's own account
fi
rm -f "$out/device_check.log"  # megabytes of autotuning chatter; the rematerialization lines are kept
run "${KEYS_S:-90}" autotune_keys python3 "$repo/benchmarks/autotune_keys.py" --out "$out"
run "${DISPATCH_S:-60}" dispatch_costs python3 "$repo/benchmarks/dispatch_costs.py" --out "$out"
run "${GEMM_S:-80}" gemm_shapes python3 "$repo/benchmarks/gemm_shapes.py" --out "$out"
only=()
for m in ${TIMING_MODELS:-gpt2-small resnet50 bert-base}; do only+=(--only "$m"); done
# shellcheck disable=SC2086
run "${TIMING_S:-200}" time_zoo python3 "$repo/benchmarks/time_zoo.py" "${only[@]}" \
  ${TIMING_ARGS:---batch 8 --batch 32 --batch 256 --optimizer adam} --output "$out/timing.csv"
ls -la "$out"
