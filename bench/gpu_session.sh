#!/usr/bin/env bash
# The GPU checks in one go, for a lent GPU machine with its own PyTorch:
#   bash bench/gpu_session.sh [quick|full|ab]
# Installs carried wheels from .whl/ (when present) into /tmp/site, then runs the
# CUDA tests, bench/gpu_bench.py with each rollout engine, and (full) the trainer
# and reward test packages with the default device (auto -> CUDA); ab: the A/B
# benches docs/gpu.md asks for instead. Everything is logged under $OUT (or
# /tmp/gpu-out); each bench's medians and a summary table are printed last.
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
bench() {  # bench NAME SECONDS ARGS...: one bench/gpu_bench.py run, its medians kept
  local name=$1 secs=$2; shift 2
  step "bench_$name" "$secs" python3 bench/gpu_bench.py --size 0.5b --steps ${STEPS:-5} "$@"
  medians+=("$(printf '%-34s %s' "$name" "$(grep -E 'median rollout|update MFU' "$OUT/bench_$name.log" | tr '\n' ' ')")")
}
medians=()
if [ "$MODE" = ab ]; then
  # One A/B per question left by the last GPU session (docs/gpu.md), unprofiled:
  # the eager engine with and without the lean forward and the reserved cache, the
  # update with and without the fused head, the update compiled or not, a bigger
  # batch in micro-batches, and shared prompts against copied ones.
  step gpu_tests ${TESTS_SECS:-120} $PYT -rA tests/trainer/test_gpu.py -k "optim_compile or micro_batches or prompt_once or fused_head or master_weights"
  S=${BENCH_SECS:-70}
  bench eager "$S" --engine eager
  bench eager_no_lean "$S" --engine eager --no-lean
  bench eager_no_reserve "$S" --engine eager --no-reserve
  # The update with the head's log-probs from the whole logits (before
  # optim.fused_head), against "eager" above: its tokens/s, MFU and peak memory.
  bench eager_no_fused_head "$S" --engine eager --no-fused-head
  # The head alone at Qwen2.5-0.5B's 24 layers: memory and time, both ways.
  step head_bench "${HEAD_SECS:-90}" python3 bench/head_bench.py --device cuda \
    --dtype bfloat16 --layers 24 --batch 16x512 --repeats 1
  medians+=("$(printf '%-34s %s' head "$(tail -n 1 "$OUT/head_bench.log" | cut -c1-400)")")
  bench compiled_compile_update "${BENCH_SECS_compiled:-170}" --engine compiled --compile-update
  # A batch one forward could not hold (32 x 8 peaked at 60 GiB whole), in
  # micro-batches of 32 rollouts: the update's MFU at a realistic batch.
  bench compiled_64x8_micro32 "${BENCH_SECS_micro:-120}" --engine compiled --compile-update --batch 64x8 --micro 32
  # The continuous engine's shared prompts (on by default on CUDA) against copies:
  # 4 prompts of ~256 tokens x 8 completions, tokens/s and key/value buffers.
  step rollout_shared_prompts "${ROLLOUT_SECS:-100}" python3 bench/rollout_bench.py --shape single \
    --size 0.5b --device cuda --dtype bfloat16 --repeats 3 --engines continuous:copied,continuous:shared
  medians+=("$(printf '%-34s %s' shared_prompts "$(tail -n 1 "$OUT/rollout_shared_prompts.log" | cut -c1-400)")")
  # Last (the first thing a short call loses): the update without the float32
  # master copies (optim.master_weights off), against "eager": what they cost.
  bench eager_no_master "$S" --engine eager --no-master-weights
else
  step gpu_tests ${TESTS_SECS:-240} $PYT -rA tests/trainer/test_gpu.py tests/trainer/test_gpu_path.py
  for engine in ${ENGINES:-eager compiled continuous}; do
    secs_var="BENCH_SECS_$engine"
    prof=()  # a whole eager step is ~100k profiler events: slow to write
    [[ " ${PROFILE_ENGINES-compiled} " == *" $engine "* ]] && prof=(--profile "$OUT/profile_$engine.txt")
    bench "0.5b_$engine" "${!secs_var:-${BENCH_SECS:-240}}" --engine "$engine" "${prof[@]}"
  done
  for engine in ${LEAN_OFF_ENGINES:-}; do  # the same engines without the lean forward
    bench "0.5b_${engine}_no_lean" "${BENCH_SECS:-240}" --engine "$engine" --no-lean
  done
fi
if [ "$MODE" = full ]; then
  step trainer_tests_on_cuda ${SUITE_SECS:-300} $PYT -n 12 -vv --continue-on-collection-errors tests/trainer tests/rewards
  grep -E "(FAILED|ERROR) " "$OUT/trainer_tests_on_cuda.log" | sed "s/^\[gw[0-9]*\] //" | sort | uniq | head -80
  grep -cE " PASSED " "$OUT/trainer_tests_on_cuda.log"
fi
printf '%s\n' "${medians[@]}" | tee "$OUT/medians.txt"
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
