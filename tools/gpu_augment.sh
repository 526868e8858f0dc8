#!/usr/bin/env bash
# What issue 42's GPU runs were (one lent H200 per command; logs under $OUT):
#   bash tools/gpu_augment.sh          build (sm_90), the augmentation tests, benchmarks/bench_augment.py
#   bash tools/gpu_augment.sh tiers    build, the augmentation tests with PyAV from a carried .whl/ (the JPEG
#                                      tier's encoder), and the cuda suites of the frame gather and the loader
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/gpu_setup.sh
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_augment_cuda.py tests/test_augment.py \
    tests/test_reference_augment.py 2>&1 | tail -25 | tee "$out/tests.log"
if [ "${1:-}" = tiers ]; then
    timeout 300 python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_frames_cuda.py tests/test_loader_cuda.py \
        tests/test_frames_compressed.py 2>&1 | tail -15 | tee "$out/cuda_suites.log"
else
    timeout 280 python3 benchmarks/bench_augment.py --json "$out/bench.json" 2>&1 | tail -30 | tee "$out/bench.log"
fi
