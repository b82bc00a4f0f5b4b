#!/usr/bin/env bash
# One prepared GPU check (< 8 min on an H200): kernel tests on CUDA, the sm_90/sm_80 build
# check, kernel benchmarks (JSON into benchmarks/results/), then engine batch-1 decode.
#   bash benchmarks/gpu_check.sh            # PYTHON=... to pick the interpreter
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
OUT="${OUT_DIR:-benchmarks/results}"
mkdir -p "$OUT"
unset TRITON_INTERPRET
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
status=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu_check_nvidia_smi.txt"

echo "== kernel tests on CUDA, CUDA-graph and speculation tests (~1 min)"
timeout 240 "$PY" -m pytest tests/test_kernels_ops.py tests/test_kernels_attention.py tests/test_kernels_engine.py \
    -q -p no:cacheprovider -n 8 --durations=10 2>&1 | tee "$OUT/gpu_check_tests.txt" || status=1

echo "== build check sm_90 / sm_80 (~30 s)"
timeout 120 "$PY" -m kernels.compile_check 2>&1 | tail -3 || status=1

echo "== kernel benchmarks (~2-3 min)"
timeout 240 "$PY" benchmarks/kernels.py --out "$OUT" 2>&1 | tee "$OUT/gpu_check_kernels.log" || status=1

echo "== engine batch-1 decode, random Llama-3-8B and SmolLM2-135M shapes (~2 min)"
if "$PY" -c "import llm_engine" 2>/dev/null; then
    timeout 300 "$PY" benchmarks/kernels.py --engine-only --out "$OUT" 2>&1 | tee "$OUT/gpu_check_engine.log" || status=1
else
    echo "llm_engine not importable (a missing dependency, e.g. gguf?): engine benchmark NOT run"
    status=1
fi
exit $status
