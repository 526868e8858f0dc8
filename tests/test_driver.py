"""robocache.machine.driver: what the NVIDIA driver says without starting CUDA, read from a fake
/proc/driver/nvidia and a library that is not there (the machine's own driver, when it has one,
is covered by test_install's build_info checks)."""
import robocache
from robocache.machine import driver


def test_nvidia_release_reads_the_kernel_modules_version_line(tmp_path):
    (tmp_path / "version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 09:00:00 UTC 2025\n"
        "GCC version:  gcc version 12.3.0\n")
    assert driver.nvidia_release(str(tmp_path)) == "580.95.05"


def test_nvidia_release_without_a_driver_is_empty(tmp_path):
    assert driver.nvidia_release(str(tmp_path / "absent")) == ""
    (tmp_path / "version").write_text("NVRM version: no release here\n")
    assert driver.nvidia_release(str(tmp_path)) == ""


def test_nvidia_gpus_counts_the_drivers_list(tmp_path):
    assert driver.nvidia_gpus(str(tmp_path)) == 0  # no gpus/ folder: no driver loaded
    for bus in ("0000:17:00.0", "0000:65:00.0"):
        (tmp_path / "gpus" / bus).mkdir(parents=True)
    assert driver.nvidia_gpus(str(tmp_path)) == 2


def test_cuda_version_without_libcuda_is_zero():
    assert driver.cuda_version("libcuda-not-installed.so.1") == 0


def test_build_info_asks_the_driver_module(monkeypatch):
    monkeypatch.setattr(driver, "nvidia_release", lambda: "999.1.2")
    monkeypatch.setattr(driver, "cuda_version", lambda: 13020)
    info = robocache.build_info()
    assert info["nvidia_driver"] == "999.1.2"
    if not info["cuda"]:  # a CUDA build has the runtime's own answer
        assert info["cuda_driver"] == 13020
