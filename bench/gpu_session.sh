#!/usr/bin/env bash
# The GPU checks in one go, for a lent GPU machine with its own PyTorch:
#   bash bench/gpu_session.sh [quick|full]
# Installs carried wheels from .whl/ (when present) into /tmp/site, then runs the
# CUDA tests, bench/gpu_bench.py with each rollout engine, and the trainer and
# reward test packages with the default device (auto -> CUDA). Everything is logged
# under $OUT (or /tmp/gpu-out); a summary table is printed last.
set -u
MODE=${1:-full}
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# bm25s would initialise JAX on the GPU in every test process (trainer/envs/bm25.py)
export JAX_PLATFORMS=${JAX_PLATFORMS:-cpu}
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >"$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
  export PYTHONPATH=/tmp/site:.
else
  export PYTHONPATH=.
fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch, transformers, pydantic; print('torch', torch.__version__, 'transformers', transformers.__version__, 'pydantic', pydantic.__version__, 'cuda', torch.cuda.is_available())"
} 2>&1 | tee "$OUT/env.txt"
summary=()
step() {  # step NAME SECONDS CMD...
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  timeout "$secs" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-28s rc=%-3s %4ss' "$name" "$rc" "$((SECONDS - t0))")")
  [ "$name" = trainer_tests_on_cuda ] || tail -n 25 "$OUT/$name.log"
}
PYT="python3 -m pytest -p no:cacheprovider -p no:django -q -o addopts= --timeout=300"
step gpu_tests ${TESTS_SECS:-240} $PYT -rA tests/trainer/test_gpu.py tests/trainer/test_gpu_path.py
for engine in ${ENGINES:-eager compiled continuous}; do
  secs_var="BENCH_SECS_$engine"
  step "bench_0.5b_$engine" "${!secs_var:-${BENCH_SECS:-240}}" python3 bench/gpu_bench.py --size 0.5b --steps ${STEPS:-5} --engine "$engine" --profile "$OUT/profile_$engine.txt"
done
for engine in ${LEAN_OFF_ENGINES:-}; do  # the same engines without the lean forward
  step "bench_0.5b_${engine}_no_lean" "${BENCH_SECS:-240}" python3 bench/gpu_bench.py --size 0.5b --steps ${STEPS:-5} --engine "$engine" --no-lean
done
if [ "$MODE" = full ]; then
  step trainer_tests_on_cuda ${SUITE_SECS:-300} $PYT -n 12 -vv --continue-on-collection-errors tests/trainer tests/rewards
  grep -E "(FAILED|ERROR) " "$OUT/trainer_tests_on_cuda.log" | sed "s/^\[gw[0-9]*\] //" | sort | uniq | head -80
  grep -cE " PASSED " "$OUT/trainer_tests_on_cuda.log"
fi
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
