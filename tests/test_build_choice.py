"""What a source build chooses and says: setup.py's choice between a CPU-only build and the CUDA
kernels (from a fake environment and fake GPU probes), the nvcc object cache's key and folder, and
`python -m robocache info` telling "compiled in" from "usable here" (from fake build facts).
setup.py is run with setuptools.setup replaced, so nothing is built; the stand-in nvcc only
touches its output."""

import os
import re
import runpy
from pathlib import Path

import pytest

import robocache
import robocache.__main__ as cli

ROOT = Path(__file__).resolve().parents[1]
TOOLKIT = "nvcc 13.0.88 (/usr/local/cuda-13.0)"


@pytest.fixture
def setup_py(monkeypatch):
    setuptools = pytest.importorskip("setuptools")
    monkeypatch.setattr(setuptools, "setup", lambda **kw: None)
    return runpy.run_path(str(ROOT / "setup.py"), run_name="setup_under_test")


def no_probe():
    raise AssertionError("a probe was asked, but the answer did not depend on it")


def toolkit():
    return TOOLKIT


def no_toolkit():
    return ""


# --------------------------------------------------------------------------------------------
# CPU-only or CUDA


def test_no_gpu_and_no_request_builds_cpu_only(setup_py):
    asked = []
    choice = setup_py["choose_build"]({}, toolkit, lambda: asked.append(1) or "")
    assert asked == [1]
    assert (choice.cuda, choice.reason) == (False, "no-gpu")
    assert TOOLKIT in choice.why and "no NVIDIA GPU is visible" in choice.why


def test_a_visible_gpu_builds_the_kernels(setup_py):
    seen = "the NVIDIA driver lists 2 GPUs (/proc/driver/nvidia/gpus)"
    choice = setup_py["choose_build"]({}, toolkit, lambda: seen)
    assert (choice.cuda, choice.reason, choice.why) == (True, "", seen)


@pytest.mark.parametrize("var, value", [("ROBOCACHE_CUDA", "1"), ("ROBOCACHE_CUDA_HOME", "/opt/cuda-12.4"),
                                        ("ROBOCACHE_CUDA_ARCHS", "90")])
def test_an_explicit_request_builds_the_kernels_without_a_gpu(setup_py, var, value):
    choice = setup_py["choose_build"]({var: value}, toolkit, no_probe)
    assert (choice.cuda, choice.reason) == (True, "")
    assert f"{var}={value}" in choice.why


def test_zero_wins_over_every_request(setup_py):
    env = {"ROBOCACHE_CUDA": "0", "ROBOCACHE_CUDA_HOME": "/opt/cuda", "ROBOCACHE_CUDA_ARCHS": "90"}
    choice = setup_py["choose_build"](env, no_probe, no_probe)  # and no nvcc is run: a broken one is no error
    assert (choice.cuda, choice.reason) == (False, "disabled")


def test_no_toolkit_builds_cpu_only_without_probing(setup_py):
    choice = setup_py["choose_build"]({"CUDA_HOME": "/somewhere"}, no_toolkit, no_probe)
    assert (choice.cuda, choice.reason) == (False, "no-toolkit")


def test_blank_values_are_no_request(setup_py):
    env = {"ROBOCACHE_CUDA": " ", "ROBOCACHE_CUDA_HOME": "", "ROBOCACHE_CUDA_ARCHS": "  "}
    assert setup_py["choose_build"](env, toolkit, lambda: "").reason == "no-gpu"


def test_a_request_without_a_toolkit_is_an_error(setup_py):
    with pytest.raises(RuntimeError, match=r"ROBOCACHE_CUDA_ARCHS=90 asks for the CUDA kernels, but no CUDA "
                                           r"toolkit was found .*ROBOCACHE_CUDA=0 builds without them"):
        setup_py["choose_build"]({"ROBOCACHE_CUDA_ARCHS": "90"}, no_toolkit, no_probe)
    with pytest.raises(RuntimeError, match=r"ROBOCACHE_CUDA_HOME=/opt/none has no bin/nvcc"):
        setup_py["choose_build"]({"ROBOCACHE_CUDA_HOME": "/opt/none"}, no_toolkit, no_probe)


def test_an_unknown_mode_is_an_error(setup_py):
    with pytest.raises(RuntimeError, match=r"ROBOCACHE_CUDA='yes': expected 0 \(CPU-only\) or 1"):
        setup_py["choose_build"]({"ROBOCACHE_CUDA": "yes"}, toolkit, no_probe)


def test_the_build_says_how_to_build_the_other_way(setup_py):
    choose, other = setup_py["choose_build"], setup_py["other_way"]
    no_gpu = other(choose({}, toolkit, lambda: ""), "pip install -e .")
    assert "ROBOCACHE_CUDA=1 ROBOCACHE_CUDA_ARCHS=90 pip install -e ." in no_gpu
    assert "ROBOCACHE_CUDA_HOME=" in other(choose({}, no_toolkit, no_probe), "pip install .")
    assert "ROBOCACHE_CUDA=0 pip install ." in other(choose({}, toolkit, lambda: "a GPU"), "pip install .")


def test_cpu_only_reason_is_compiled_in(setup_py, monkeypatch, tmp_path):
    """build_extensions on a machine with a toolkit and no GPU: the reason info reads is the macro
    the C module is compiled with, and the summary says why and the way out."""
    from setuptools import Extension
    from setuptools.command.build_ext import build_ext

    monkeypatch.setattr(build_ext, "build_extensions", lambda self: None)  # the C compile itself
    for var in ("ROBOCACHE_CUDA", "ROBOCACHE_CUDA_HOME", "ROBOCACHE_CUDA_ARCHS", "ROBOCACHE_SANITIZE"):
        monkeypatch.delenv(var, raising=False)
    cmd = setup_py["BuildExt"].__new__(setup_py["BuildExt"])
    cmd.extensions, cmd.inplace, cmd.summary = [Extension("robocache._C", [])], True, []
    setup_globals = cmd.build_extensions.__globals__  # the namespace setup.py's functions run in
    monkeypatch.setitem(setup_globals, "find_toolkit", toolkit)
    monkeypatch.setitem(setup_globals, "visible_gpus", lambda: "")
    cmd.build_extensions()
    assert ("RC_CUDA_MISSING", '"no-gpu"') in cmd.extensions[0].define_macros
    assert "CPU-only build, without the CUDA kernels, because" in cmd.summary[0] and TOOLKIT in cmd.summary[0]
    assert "ROBOCACHE_CUDA=1 ROBOCACHE_CUDA_ARCHS=90 pip install -e ." in cmd.summary[-1]


# --------------------------------------------------------------------------------------------
# the GPU probe: the driver's list, device nodes, nvidia-smi -L


def fake_smi(tmp_path, body: str) -> str:
    smi = tmp_path / "fake-nvidia-smi"
    smi.write_text(f"#!/bin/sh\n{body}\n")
    smi.chmod(0o755)
    return str(smi)


def test_probe_reads_the_drivers_gpu_list(setup_py, tmp_path):
    proc = tmp_path / "gpus"
    for bus in ("0000:17:00.0", "0000:65:00.0"):
        (proc / bus).mkdir(parents=True)
    seen = setup_py["visible_gpus"](str(proc), str(tmp_path / "nodev"), "absent-nvidia-smi")
    assert "lists 2 GPUs" in seen


def test_probe_counts_gpu_device_nodes_only(setup_py, tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-modeset"):  # present with a driver and no GPU
        (dev / name).touch()
    assert setup_py["visible_gpus"](str(tmp_path / "noproc"), str(dev), "absent-nvidia-smi") == ""
    (dev / "nvidia0").touch()
    assert "1 NVIDIA GPU device node" in setup_py["visible_gpus"](str(tmp_path / "noproc"), str(dev),
                                                                  "absent-nvidia-smi")


def test_probe_asks_nvidia_smi_last(setup_py, tmp_path):
    probe = setup_py["visible_gpus"]
    none = str(tmp_path / "none")
    smi = fake_smi(tmp_path, 'echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)"')
    assert probe(none, none, smi) == "nvidia-smi -L lists 1 GPU"
    assert probe(none, none, fake_smi(tmp_path, 'echo "No devices were found"; exit 6')) == ""


def test_probe_gives_up_on_a_hanging_nvidia_smi(setup_py, tmp_path):
    none = str(tmp_path / "none")
    assert setup_py["visible_gpus"](none, none, fake_smi(tmp_path, "exec sleep 60"), timeout=0.5) == ""


# --------------------------------------------------------------------------------------------
# architectures


def test_architectures_from_the_environment_say_so(setup_py):
    archs, why = setup_py["cuda_archs"]({"ROBOCACHE_CUDA_ARCHS": "80, 90a"}, set())
    assert archs == ["80", "90a"] and why == "ROBOCACHE_CUDA_ARCHS=80, 90a"
    with pytest.raises(RuntimeError, match="ROBOCACHE_CUDA_ARCHS: expected compute capabilities"):
        setup_py["cuda_archs"]({"ROBOCACHE_CUDA_ARCHS": "sm_90"}, set())


def test_default_architectures_say_why_and_how_to_build_fewer(setup_py):
    old, why = setup_py["cuda_archs"]({}, {"80", "86", "89", "90"})
    new, _ = setup_py["cuda_archs"]({}, {"80", "86", "89", "90", "100", "120"})
    assert old == setup_py["BASE_ARCHS"] and new == setup_py["BASE_ARCHS"] + setup_py["BLACKWELL_ARCHS"]
    assert "the default" in why and "ROBOCACHE_CUDA_ARCHS=90" in why


# --------------------------------------------------------------------------------------------
# the nvcc object cache


def test_cache_folder_defaults_to_the_per_user_cache(setup_py, tmp_path):
    folder = setup_py["cuda_cache_dir"]
    assert folder({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "robocache" / "cuda-objects"
    assert folder({"ROBOCACHE_CACHE_DIR": str(tmp_path / "rc"), "XDG_CACHE_HOME": "/x"}) == \
        tmp_path / "rc" / "cuda-objects"
    assert folder({}) == Path.home() / ".cache" / "robocache" / "cuda-objects"
    assert folder({"ROBOCACHE_CUDA_CACHE": str(tmp_path / "objs")}) == tmp_path / "objs"
    assert folder({"ROBOCACHE_CUDA_CACHE": "0"}) is None and folder({"ROBOCACHE_CUDA_CACHE": ""}) is None


def test_cache_key_changes_with_everything_that_goes_into_an_object(setup_py):
    key = setup_py["object_key"]
    base = dict(source=b"__global__ void k() {}", header_files={"csrc/robocache.h": b"#define A 1"},
                toolchain=["nvcc V13.0.88", "/usr/local/cuda-13.0", "gcc 12.2"],
                flags=["-O3", "-gencode", "arch=compute_90,code=sm_90"])
    variants = [dict(source=b"__global__ void k() { }"),
                dict(header_files={"csrc/robocache.h": b"#define A 2"}),
                dict(header_files={"csrc/robocache.h": b"#define A 1", "cuda/new.cuh": b""}),
                dict(toolchain=["nvcc V12.4.131", "/usr/local/cuda-13.0", "gcc 12.2"]),
                dict(toolchain=["nvcc V13.0.88", "/usr/local/cuda-13.0", "gcc 13.1"]),
                dict(flags=["-O3", "-gencode", "arch=compute_80,code=sm_80"]),
                dict(flags=["-O2", "-gencode", "arch=compute_90,code=sm_90"])]
    keys = [key(**base)] + [key(**{**base, **v}) for v in variants]
    assert len(set(keys)) == len(keys), keys
    assert key(**base) == key(**base)


def test_cache_key_covers_every_header_a_kernel_includes(setup_py):
    """Each #include "..." of cuda/*.cu, followed through the headers it reaches, is in the key."""
    hashed = set(setup_py["headers"](ROOT))
    todo, seen = list((ROOT / "cuda").glob("*.cu")), set()
    assert todo
    while todo:
        f = todo.pop()
        for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', f.read_text(), re.MULTILINE):
            # nvcc looks beside the including file, then in -I csrc
            found = next((p.resolve() for p in (f.parent / name, ROOT / "csrc" / name) if p.exists()), None)
            assert found is not None, f"{f.name} includes {name}, which is not in the tree"
            rel = str(found.relative_to(ROOT))
            assert rel in hashed, f"{f.name} includes {rel}, which the cache key leaves out"
            if rel not in seen:
                seen.add(rel)
                todo.append(found)


class FakeToolkit:
    def __init__(self, tmp_path, version="fake nvcc 1"):
        self.nvcc = tmp_path / "nvcc"
        self.nvcc.write_text("#!/bin/sh\nwhile [ $# -gt 1 ]; do shift; done; touch \"$1\"\n")  # touches -o
        self.nvcc.chmod(0o755)
        self.home, self.version_text = tmp_path, version


def compile_cuda(setup_py, tmp_path, cache, fake):
    cmd = setup_py["BuildExt"].__new__(setup_py["BuildExt"])
    cmd.build_temp = str(tmp_path / "build")
    return cmd.compile_cuda(fake, ["90"], cache)


def test_a_reinstall_reuses_unchanged_objects(setup_py, tmp_path, capsys):
    cache = tmp_path / "objects"
    n = len(list((ROOT / "cuda").glob("*.cu")))
    first = compile_cuda(setup_py, tmp_path, cache, FakeToolkit(tmp_path))
    assert f"{n} compiled, 0 reused from {cache}" in capsys.readouterr().out
    assert len(first) == n and len(list(cache.glob("*.o"))) == n
    again = compile_cuda(setup_py, tmp_path, cache, FakeToolkit(tmp_path))
    out = capsys.readouterr().out
    assert again == first and f"0 compiled, {n} reused from {cache}" in out and "[1/" not in out
    compile_cuda(setup_py, tmp_path, cache, FakeToolkit(tmp_path, version="fake nvcc 2"))
    assert f"{n} compiled, 0 reused" in capsys.readouterr().out, "another nvcc: every object again"


def test_prune_keeps_the_most_recently_used_objects(setup_py, tmp_path):
    keep = setup_py["CACHE_KEEP"]
    for i in range(keep + 3):
        p = tmp_path / f"resample-{i:024x}.o"
        p.touch()
        os.utime(p, (1000 + i, 1000 + i))
    others = [tmp_path / f"resample_device-{0:024x}.o", tmp_path / "resample-notakey.o"]
    for p in others:
        p.touch()
    setup_py["prune"](tmp_path, "resample")
    left = sorted(p.name for p in tmp_path.glob("resample-*.o") if p not in others)
    assert left == [f"resample-{i:024x}.o" for i in range(3, keep + 3)]
    assert all(p.exists() for p in others), "only this kernel's cached objects are pruned"


# --------------------------------------------------------------------------------------------
# python -m robocache info: compiled in, and usable here


def test_which_gpus_run_which_code():
    runs = cli.runs_on
    assert runs(["90"], (9, 0)) == "the sm_90 cubins"
    assert runs(["80", "86"], (8, 9)) == "the sm_86 cubins"      # same generation, higher minor
    assert runs(["80", "86", "89", "90"], (8, 6)) == "the sm_86 cubins"
    assert runs(["86"], (8, 0)) == ""                            # a cubin never runs on an older minor
    assert runs(["80", "90"], (7, 5)) == ""
    assert runs(["80", "90"], (12, 0)).startswith("the compute_90 PTX")
    assert runs(["90a"], (9, 0)) == "the sm_90a cubins"
    assert runs(["90a"], (10, 0)) == ""                          # arch-specific code is for sm_90 alone


def cuda_build(**facts):
    b = {"version": robocache.__version__, "cuda": True, "cpu_only_reason": "", "archs": "80;86;89;90",
         "cuda_toolkit": "12.4.131", "cuda_runtime": 12040, "cuda_driver": 13000, "nvidia_driver": "580.95.05",
         "devices": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "capability": (9, 0)}], "device_error": ""}
    b.update(facts)
    return b


def test_usable_says_why_not():
    assert cli.cuda_usable(cuda_build()) == "yes"
    assert cli.cuda_usable(cuda_build(cuda_driver=0)).startswith("no: no NVIDIA driver")
    old = cli.cuda_usable(cuda_build(cuda_driver=11080))
    assert old.startswith("no: the driver supports CUDA 11.8, too old") and "CUDA 12.0 or newer" in old
    none = cli.cuda_usable(cuda_build(devices=[], device_error="no CUDA-capable device is detected"))
    assert none.startswith("no: no GPU visible (no CUDA-capable device is detected)")
    t4 = {"index": 1, "name": "Tesla T4", "capability": (7, 5)}
    assert cli.cuda_usable(cuda_build(devices=[t4])) == (
        "no: device 1 (Tesla T4) is sm_75, which the kernels compiled in do not run on: rebuild with "
        "ROBOCACHE_CUDA_ARCHS=75 (docs/install.md)")
    mixed = cli.cuda_usable(cuda_build(devices=cuda_build()["devices"] + [t4]))
    assert mixed.startswith("yes, on 1 of 2 devices; device 1 (Tesla T4) is sm_75")


def run_info(monkeypatch, capsys, facts, gpus=0) -> list:
    monkeypatch.setattr(robocache, "build_info", lambda: facts)
    monkeypatch.setattr(robocache.machine.driver, "nvidia_gpus", lambda: gpus)
    monkeypatch.setattr(cli, "_nvjpeg", lambda: "stand-in")
    assert cli.info() == 0
    return capsys.readouterr().out.splitlines()


def test_info_cuda_build_on_a_gpu_it_cannot_run_on(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("ROBOCACHE_CACHE_DIR", str(tmp_path))
    lines = run_info(monkeypatch, capsys, cuda_build(archs="90", devices=[
        {"index": 0, "name": "NVIDIA A100-SXM4-80GB", "capability": (8, 0)}]))
    assert lines[0].startswith(f"robocache {robocache.__version__}: CUDA kernels compiled in")
    assert "cubins sm_90 + PTX compute_90" in lines[0]
    assert lines[1] == "driver: NVIDIA 580.95.05, supports CUDA 13.0"
    assert "device 0: NVIDIA A100-SXM4-80GB (sm_80): cannot run these kernels" in lines
    assert "CUDA kernels usable here: no: device 0 (NVIDIA A100-SXM4-80GB) is sm_80, which the kernels " \
           "compiled in do not run on: rebuild with ROBOCACHE_CUDA_ARCHS=80 (docs/install.md)" in lines
    assert not any(line.startswith("build report") for line in lines)


def test_info_cuda_build_that_runs(monkeypatch, capsys):
    lines = run_info(monkeypatch, capsys, cuda_build())
    assert "device 0: NVIDIA H100 80GB HBM3 (sm_90): runs the sm_90 cubins" in lines
    assert "CUDA kernels usable here: yes" in lines


@pytest.mark.parametrize("reason, why, todo", [
    ("no-gpu", "no NVIDIA GPU visible at build time, and the kernels were not asked for",
     "rebuild with ROBOCACHE_CUDA=1"),
    ("disabled", "built with ROBOCACHE_CUDA=0", "rebuild with ROBOCACHE_CUDA=1"),
    ("no-toolkit", "no CUDA toolkit at build time", "install a CUDA wheel or rebuild with a toolkit")])
def test_info_cpu_only_build_says_why_and_what_to_do(monkeypatch, capsys, reason, why, todo):
    facts = cuda_build(cuda=False, cpu_only_reason=reason, archs="", cuda_toolkit="", cuda_runtime=0, devices=[])
    lines = run_info(monkeypatch, capsys, facts, gpus=2)
    assert lines[0] == (f"robocache {robocache.__version__}: CPU-only build, no CUDA kernels compiled in ({why}); "
                        f"for the GPU kernels {todo}: docs/install.md")
    assert lines[1].endswith("-- unused by this CPU-only build")
    assert lines[2] == f"CUDA kernels usable here: no, none compiled in, though the driver lists 2 NVIDIA GPUs: {todo}"


def test_info_names_this_modules_build_report(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("ROBOCACHE_CACHE_DIR", str(tmp_path))
    report = tmp_path / "build.log"
    here = Path(robocache._C.__file__).resolve()
    report.write_text(f"robocache {robocache.__version__} build of {here}, 2026-01-01 00:00:00\n")
    assert f"build report (what was built, why, how to build otherwise): {report}" in \
        run_info(monkeypatch, capsys, cuda_build())
    report.write_text(f"robocache {robocache.__version__} build of /elsewhere/_C.so, 2026-01-01 00:00:00\n")
    assert not any(line.startswith("build report") for line in run_info(monkeypatch, capsys, cuda_build()))


def test_info_on_this_build_says_whether_its_kernels_are_usable(capsys):
    assert cli.info() == 0
    lines = capsys.readouterr().out.splitlines()
    usable = [line for line in lines if line.startswith("CUDA kernels usable here: ")]
    assert len(usable) == 1
    if not robocache.build_info()["cuda"]:
        assert usable[0].startswith("CUDA kernels usable here: no, none compiled in")
