"""Pinned host memory placed on the NUMA node of the GPU that reads it (issue 31 item 4,
robocache/frames/numa.py): the GPU's node from sysfs, the policy set before any page exists."""

from __future__ import annotations

import mmap
from types import SimpleNamespace

import numpy as np
import pytest

from robocache.frames import numa


def _policy_of(address: int) -> str:
    """The memory policy /proc/self/numa_maps shows for the mapping starting at ``address``."""
    for line in open("/proc/self/numa_maps"):
        start, policy = line.split()[:2]
        if int(start, 16) == address:
            return policy
    raise AssertionError(f"no mapping at {address:#x}")


def test_prefer_sets_the_policy_of_untouched_pages():
    try:
        open("/proc/self/numa_maps").close()
    except OSError:
        pytest.skip("no /proc/self/numa_maps (kernel without NUMA)")
    region = mmap.mmap(-1, 1 << 22, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    arr = np.frombuffer(region, np.uint8)
    address = arr.ctypes.data
    assert _policy_of(address) == "default"
    if not numa.prefer(address, arr.nbytes, 0):
        pytest.skip("the kernel refuses mbind here")
    assert _policy_of(address) == "prefer:0"
    arr[:] = 7                                   # pages come (from node 0, the only one here) and hold data
    assert int(arr.sum()) == 7 * arr.nbytes
    assert not numa.prefer(address, arr.nbytes, 64 * 8)   # a node past the mask: refused, not a crash


def test_gpu_node_reads_the_pci_device(tmp_path, monkeypatch):
    props = SimpleNamespace(pci_domain_id=0, pci_bus_id=0x1b, pci_device_id=0)
    fake_torch = SimpleNamespace(cuda=SimpleNamespace(get_device_properties=lambda i: props))
    monkeypatch.setattr(numa, "_torch", lambda: fake_torch)
    monkeypatch.setattr(numa, "PCI", tmp_path)
    assert numa.gpu_node(0) is None                              # no sysfs entry
    (tmp_path / "0000:1b:00.0").mkdir()
    (tmp_path / "0000:1b:00.0" / "numa_node").write_text("1\n")
    assert numa.gpu_node(0) == 1
    (tmp_path / "0000:1b:00.0" / "numa_node").write_text("-1\n")  # firmware that does not say
    assert numa.gpu_node(0) is None


def test_current_gpu_node_only_where_it_matters(tmp_path, monkeypatch):
    fake_torch = SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: True, current_device=lambda: 0))
    monkeypatch.setattr(numa, "_torch", lambda: fake_torch)
    monkeypatch.setattr(numa, "gpu_node", lambda i: 1)
    monkeypatch.setattr(numa, "NODES", tmp_path)
    (tmp_path / "node0").mkdir()
    (tmp_path / "possible").write_text("0-1")
    assert numa.nodes() == 1 and numa.current_gpu_node() is None     # one node: nothing to place
    (tmp_path / "node1").mkdir()
    assert numa.nodes() == 2 and numa.current_gpu_node() == 1
    monkeypatch.setenv("ROBOCACHE_PIN_NUMA", "0")
    assert numa.current_gpu_node() is None
