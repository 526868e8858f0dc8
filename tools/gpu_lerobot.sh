#!/usr/bin/env bash
# Issue 44's GPU run (one lent H200 per command; logs under $OUT): LeRobot's current code on the GPU
# machine, which has Python 3.12 but no LeRobot. Carry `.whl/` (ignored by git) holding a wheel of
# LeRobot built from its repository (pip wheel --no-deps) and the wheels it needs that the machine
# lacks (av 15, datasets, draccus, gymnasium, diffusers, ...: pip download --no-deps --python-version 3.12
# --only-binary=:all:), and `.benchframes/` (real frames as .jpg, e.g. of the CR5 AV1 fixtures):
#   run(command="bash tools/gpu_lerobot.sh", carry=[".whl", ".benchframes"])
# It builds robocache (sm_90), makes the ALOHA-shaped set with LeRobot's recording API
# (tools/make_aloha_set.py) and runs benchmarks/bench_lerobot_databound.py (ACT and Diffusion, LeRobot's
# loader against robocache's, batch 64).
set -uo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
source tools/gpu_setup.sh
python3 -c "import lerobot, av, importlib.metadata as m; print('lerobot', m.version('lerobot'), 'av', av.__version__)" || exit 1
t=$SECONDS
python3 tools/make_aloha_set.py /tmp/aloha --episodes "${EPISODES:-10}" --seconds "${SECONDS_PER_EPISODE:-8}" \
    --frames .benchframes 2>&1 | grep -v "moov atom" | tail -3
echo "== set made in $((SECONDS - t)) s"
timeout "${BENCH_TIMEOUT:-420}" python3 benchmarks/bench_lerobot_databound.py --set /tmp/aloha --steps "${STEPS:-30}" \
    --json "$out/databound.json" --logs "$out/logs" 2>&1 | tail -12
cp /tmp/aloha/meta/info.json "$out/aloha_info.json" 2>/dev/null || true
