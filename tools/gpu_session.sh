#!/usr/bin/env bash
# What a session on a lent GPU machine runs, in parts that each fit one 10-minute command:
#
#   bash tools/gpu_session.sh tests     # build, then the `cuda`-marked suite (~5 min on an H100) and its
#                                       # dated record $OUT/cuda_record.json (ROBOCACHE_COMMIT names the commit)
#   bash tools/gpu_session.sh scale     # build, then benchmarks/bench_scale.py       (~8 min)
#   bash tools/gpu_session.sh v30       # build, then the LeRobot v3.0 tests (CPU and cuda) and
#                                       # bench_lerobot_v30.py (v2.1 against v3.0, tiers host/disk/device)
#   bash tools/gpu_session.sh tiers     # build, then bench_tiers.py + bench_ingest.py on the real AV1 set
#                                       # (SKIP_INGEST=1: bench_tiers only, when both do not fit 10 minutes)
#   bash tools/gpu_session.sh multi     # on a 4-GPU kind: the NUMA/PCIe layout, the multi-GPU tests (NCCL
#                                       # elastic resume 2->3, 3->1; 2 nodes x 2 GPUs), the shard build of a
#                                       # 9 GB frame set at 2 and 4 concurrent ranks (host and device tiers)
#   bash tools/gpu_session.sh multibench  # on a 4-GPU kind: bench_multi_gpu.py at 1, 2, 4 ranks, every set and
#                                       # the pinned-copy floor ($MULTI_TIERS), pinned frames on the GPU's node
#                                       # (and, on a host of several NUMA nodes, without)
#   bash tools/gpu_session.sh atlas     # one H100: the atlas tests (cuda), bench_scale.py --tiers compressed in
#                                       # both JPEG layouts (atlas, per camera) against the torch DataLoader
#   bash tools/gpu_session.sh lossless  # one H100: bench_scale.py --tiers lossless (the DROID-shaped set,
#                                       # ~4 min), nvCOMP against the tier's decoder (needs nvcomp wheels in
#                                       # $WHEELS), the JPEG decode layouts (per camera, one call, atlas)
#
# Logs and JSON go to $OUT (the device tool's folder that comes back; default /tmp/robocache-gpu).
# Wheels the machine lacks (PyAV, nvidia-ml-py) are installed from $WHEELS (a carried folder of
# them), and the real data is read from $ROBOCACHE_DATA (a carried copy of ../shared/data's sets the
# parts use). The extension is built here with this machine's python and kept between parts of one
# warm machine; ROBOCACHE_REBUILD=1 forces a clean build (an in-place build of a stale tree once ran
# an old .cu: setup.py's depends now list cuda/*.cu, this is the belt to those braces).
set -uo pipefail
cd "$(dirname "$0")/.."
part=${1:?usage: tools/gpu_session.sh tests|scale|tiers|v30|multi|multibench|atlas|lossless}
out=${OUT:-/tmp/robocache-gpu}
mkdir -p "$out"
export PYTHONUNBUFFERED=1

if [ -n "${WHEELS:-}" ] && [ -d "$WHEELS" ] && [ ! -d /tmp/site/av ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$WHEELS"/*.whl || exit 1
fi
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"

if [ "${ROBOCACHE_REBUILD:-0}" = 1 ]; then rm -rf build robocache/_C*.so; fi
if ! ls robocache/_C*.so >/dev/null 2>&1; then
    t=$SECONDS
    ROBOCACHE_CUDA_ARCHS=${ROBOCACHE_CUDA_ARCHS:-90} python3 setup.py build_ext --inplace >"$out/build.log" 2>&1 \
        || { tail -40 "$out/build.log"; exit 1; }
    echo "== built in $((SECONDS - t)) s"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
python3 -m robocache info 2>&1 | tee "$out/info.txt"

case "$part" in
tests)
    # the dated record tests/test_cuda_record.py holds cuda/ and csrc/ to (commit it as tests/cuda_record.json)
    python3 -m pytest -m cuda -q -p no:cacheprovider -rs --junitxml="$out/cuda-junit.xml" 2>&1 | tee "$out/cuda-tests.txt"
    python3 tools/cuda_record.py write "$out/cuda-junit.xml" "$out/cuda_record.json"
    ;;
scale)
    python3 benchmarks/bench_scale.py --json "$out/bench_scale.json" 2>&1 | tee "$out/bench_scale.txt"
    ;;
v30)
    python3 -m pytest -q -p no:cacheprovider -rs tests/test_lerobot_v30.py tests/test_lerobot_v30_cuda.py 2>&1 \
        | tee "$out/v30-tests.txt"
    python3 benchmarks/bench_lerobot_v30.py --episodes "${V30_EPISODES:-14}" --tiers host,disk,device --recorded --json "$out/bench_v30.json" 2>&1 \
        | tee "$out/bench_v30.txt"
    ;;
tiers)
    data=${ROBOCACHE_DATA:?set ROBOCACHE_DATA to the carried data folder}/cr5_flashdrive_av1
    python3 benchmarks/bench_tiers.py --data "$data" --json "$out/bench_tiers.json" 2>&1 | tee "$out/bench_tiers.txt"
    python3 benchmarks/bench_ingest.py --data "$data/videos/chunk-000/observation.images.top" --json "$out/bench_ingest.json" 2>&1 | tee "$out/bench_ingest.txt"
    ;;
multi)
    { nvidia-smi topo -m; for n in /sys/devices/system/node/node*; do echo "$n: cpus $(cat "$n/cpulist")"; done; } \
        2>&1 | tee "$out/topology.txt"
    python3 -m pytest -m cuda -q -p no:cacheprovider -rs tests/test_distributed.py tests/test_frames_tiers.py 2>&1 \
        | tee "$out/multi-tests.txt"
    # a 9 GB set (64 episodes x 300 frames of 480x640 I420) sharded over 2 and over 4 ranks building at once
    for w in 2 4; do
        python3 benchmarks/bench_multi_gpu.py --ranks $w --tiers host,device --episodes-per-rank $((64 / w)) \
            --batches 5 --warm 1 --json "$out/shard_build_$w.json" 2>&1 | tee "$out/shard_build_$w.txt"
    done
    ;;
multibench)
    nodes=$(ls -d /sys/devices/system/node/node* | wc -l)
    for numa in 1 $([ "$nodes" -gt 1 ] && echo 0); do
        ROBOCACHE_PIN_NUMA=$numa python3 benchmarks/bench_multi_gpu.py \
            --tiers "${MULTI_TIERS:-copy,host,device,compressed,lossless}" --batches 60 --episodes-per-rank 4 \
            --json "$out/bench_multi_gpu_numa$numa.json" 2>&1 | tee "$out/bench_multi_gpu_numa$numa.txt"
    done
    ;;
atlas)
    python3 -m pytest -m cuda -q -p no:cacheprovider -rs tests/test_frames_atlas.py tests/test_frames_compressed.py \
        2>&1 | tee "$out/atlas-tests.txt"
    python3 benchmarks/bench_scale.py --tiers compressed --jpeg-layout atlas per_camera --backends hardware \
        --policies groot --skip decode host --mp4-episodes 16 --json "$out/bench_scale_atlas.json" 2>&1 \
        | tail -30 | tee "$out/bench_scale_atlas.txt"
    ;;
lossless)
    python3 benchmarks/bench_scale.py --tiers lossless --skip decode host --policies groot small --mp4-episodes 16 \
        --json "$out/bench_scale_lossless.json" 2>&1 | tail -20 | tee "$out/bench_scale_lossless.txt"
    python3 benchmarks/bench_lossless.py --gpu --nvcomp --json "$out/nvcomp.json" 2>&1 | tee "$out/nvcomp.txt"
    for b in hardware gpu_hybrid; do
        ROBOCACHE_NVJPEG_BACKEND=$b python3 -c "import sys, json, torch; sys.path.insert(0, 'benchmarks'); \
import bench_scale as s; print(json.dumps(s.layout_bench(torch.device('cuda', 0), 2, 64)))" 2>&1 | tee -a "$out/layouts.txt"
    done
    ;;
*)
    echo "unknown part $part (tests, scale, tiers, v30, multi, multibench, atlas, lossless)"
    exit 2
    ;;
esac
