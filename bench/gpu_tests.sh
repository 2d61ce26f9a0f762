#!/usr/bin/env bash
# The GPU test run (issue 5): the CUDA kernel tests, the Cuda backend tests, the conformance
# suite on every registered CUDA stack and the training examples on `--device cuda`, on a
# machine with an NVIDIA GPU and CuPy installed.
#
#   bench/gpu_tests.sh [LOG_DIR]        (default: bench/results)
#
# Writes LOG_DIR/gpu-tests.log: a header (GPU, driver, Python/CuPy versions, date, commit), the
# pytest output, and a last line with the pass/fail counts. ember need not be installed: the
# repository root goes on PYTHONPATH. EMBER_COMMIT overrides the commit (a copy of the tree
# without .git, as on a lent machine, cannot read it). Extra arguments for pytest go in
# EMBER_PYTEST_ARGS (e.g. "-x" or "-n 8" where pytest-xdist is installed).
set -u -o pipefail
cd "$(dirname "$0")/.."
log_dir=${1:-bench/results}
mkdir -p "$log_dir"
log="$log_dir/gpu-tests.log"
py=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export EMBER_CACHE_DIR=${EMBER_CACHE_DIR:-/tmp/ember-gpu-cache}
commit=${EMBER_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}

{
    echo "# ember GPU test run"
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "commit: $commit"
    echo "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader 2>&1 | head -1)"
    "$py" - <<'EOF'
import platform
print("python:", platform.python_version())
for name in ("numpy", "cupy", "ml_dtypes", "pytest", "hypothesis"):
    try:
        mod = __import__(name)
        print(f"{name}:", mod.__version__)
    except Exception as e:  # noqa: BLE001
        print(f"{name}: absent ({e})")
EOF
    echo
} >"$log"

run() {
    echo "## pytest $*" | tee -a "$log"
    "$py" -m pytest -q -p no:cacheprovider -rs ${EMBER_PYTEST_ARGS:-} "$@" 2>&1 | tee -a "$log"
    local s=${PIPESTATUS[0]}
    echo "exit status: $s" | tee -a "$log"
    return "$s"
}
status=0
run tests/kernel_cuda tests/backend_cuda || status=1
run tests/conformance -k "cuda" || status=1
run tests/fusion -k "cuda" || status=1
run tests/test_examples.py -k "cuda" || status=1
echo "overall: $([ $status = 0 ] && echo pass || echo FAIL)" | tee -a "$log"
exit "$status"
