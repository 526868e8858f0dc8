# Sourced by the tools/gpu_*.sh scripts (from the repository root): what every GPU run does first.
# Installs the wheels carried in `.whl/` (ignored by git) into /tmp/site and puts them on PYTHONPATH, builds
# robocache in place for ROBOCACHE_CUDA_ARCHS (default 90: the lent H200) with its log in $out/build.log,
# and prints the GPU. Sets `out` ($OUT, else /tmp/robocache-gpu).
export PYTHONUNBUFFERED=1 ROBOCACHE_CUDA_ARCHS=${ROBOCACHE_CUDA_ARCHS:-90}
out=${OUT:-/tmp/robocache-gpu}
mkdir -p "$out"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
t=$SECONDS
python3 setup.py build_ext --inplace >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
echo "== built in $((SECONDS - t)) s"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
