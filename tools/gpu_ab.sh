#!/usr/bin/env bash
# An A/B of the DataLoader's time per batch between this tree and an older one, on a lent GPU:
#
#   bash tools/gpu_ab.sh OLD.tgz [ROUNDS]     # OLD.tgz: `git archive <commit> | gzip` of the older tree
#
# Builds the old tree in /tmp/ab-old (this one in place, as gpu_setup.sh does), then runs tools/ab_loader.py
# against each tree in turn, ROUNDS times (default 3), alternating so drift hits both alike. One JSON line
# per tier and run in $OUT/ab.jsonl; the summary (median per tier and tree) at the end. AB_TIERS="compressed
# lossless" measures only those.
set -uo pipefail
cd "$(dirname "$0")/.."
old_tgz=${1:?usage: tools/gpu_ab.sh OLD.tgz [ROUNDS]}
rounds=${2:-3}
out=${OUT:-/tmp/robocache-gpu}
mkdir -p "$out" /tmp/ab-old
[ -f /tmp/ab-old/setup.py ] || tar xzf "$old_tgz" -C /tmp/ab-old
if ! ls robocache/_C*.so >/dev/null 2>&1; then
    ROBOCACHE_CUDA_ARCHS=${ROBOCACHE_CUDA_ARCHS:-90} python3 setup.py build_ext --inplace >"$out/build-new.log" 2>&1 \
        || { tail -30 "$out/build-new.log"; exit 1; }
fi
ls /tmp/ab-old/robocache/_C*.so >/dev/null 2>&1 || (cd /tmp/ab-old && ROBOCACHE_CUDA_ARCHS=${ROBOCACHE_CUDA_ARCHS:-90} python3 setup.py build_ext --inplace \
    >"$out/build-old.log" 2>&1) || { tail -30 "$out/build-old.log"; exit 1; }
for r in $(seq "$rounds"); do
    for t in old new; do
        where=$([ "$t" = old ] && echo /tmp/ab-old || pwd)
        # the carried wheels (PyAV for the coded tiers) where gpu_setup.sh / gpu_session.sh put them
        PYTHONPATH="$where:/tmp/site" python3 tools/ab_loader.py --label "$t" ${AB_TIERS:+--tiers $AB_TIERS} \
            2>>"$out/ab.err" | tee -a "$out/ab.jsonl"
    done
done
python3 - "$out/ab.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for tier in dict.fromkeys(r["tier"] for r in rows):
    m = {t: statistics.median(r["ms_per_batch"] for r in rows if r["tier"] == tier and r["label"] == t)
         for t in ("old", "new")}
    print(f"{tier:>10}: old {m['old']:.3f} ms/batch, new {m['new']:.3f} ms/batch ({(m['new'] / m['old'] - 1) * 100:+.1f}%)")
PY
