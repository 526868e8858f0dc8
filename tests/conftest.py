"""Shared fixtures for the robocache tests.

- `cuda` marker: such tests skip (with the reason) when torch is missing, torch
  sees no GPU, or robocache was built without CUDA. Anything else, a broken
  import included, is left to fail.
- `rng`: a fresh generator per test, seeded from os.urandom. The seed is
  printed with every failure and set ROBOCACHE_TEST_SEED=<seed> to replay it.
- `make_case`: random resample inputs in every form (dense, one row, ragged),
  with a `check` method that runs the whole reference -> robocache comparison.
- `DATA`: the real-data folder ../shared/data next to the repository.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

# decoded-frame cache entries of the test session go to a throwaway folder, not the user's
# ~/.cache/robocache (tests that exercise the cache set their own per test). The folder is removed when the
# session's process exits: a whole suite leaves ~800 MB of entries there, and left behind, run after run, they
# filled the disk CI shares (a CI run then failed with 201 errors). Only the process that made it removes it:
# a forked child that exits normally runs the parent's atexit handlers too.
if "ROBOCACHE_CACHE_DIR" not in os.environ:
    import atexit
    import tempfile
    _session_cache = tempfile.mkdtemp(prefix="robocache-test-cache-")
    os.environ["ROBOCACHE_CACHE_DIR"] = _session_cache
    _session_pid = os.getpid()
    atexit.register(lambda: os.getpid() == _session_pid and shutil.rmtree(_session_cache, ignore_errors=True))

from reference import (FLOAT_DTYPES, SLERP_ATOL, assert_close, assert_equal, bf16_round, dtype_name, is_torch,
                       poisoned, resample_ref, snapshot, to_numpy)

try:
    import torch
except ModuleNotFoundError:
    torch = None


# ----------------------------------------------------------------------------
# marker and skips


#: GCC 12's libasan (CI's sanitizer suite preloads it) has no fork interceptor and no atfork handler
#: (`nm -D libasan.so`: vfork only), so its allocator is not locked around fork(): a decode process forked
#: while another thread of the parent allocates can wait on that lock forever. Seen once in CI's sanitizer
#: suite (test_decode_processes_hold_no_lock_of_the_cache: a forked decode process stalled for 300 s),
#: not seen outside it. Under it, tests stop where they would fork decode processes, skipped.
FORKS_DEADLOCK = "libasan" in os.environ.get("LD_PRELOAD", "")
FORKS_DEADLOCK_WHY = "forks decode processes: under GCC 12's ASan a fork of a threaded process can deadlock"


@pytest.fixture(autouse=True)
def _no_decode_processes_under_asan(monkeypatch):
    if FORKS_DEADLOCK:
        from robocache.frames import ingest
        monkeypatch.setattr(ingest, "decode_processes", lambda *a, **k: pytest.skip(FORKS_DEADLOCK_WHY))


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU, torch with CUDA and a CUDA build of robocache")


def _cuda_skip_reason():
    if torch is None:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    try:
        import robocache
        built_with_cuda = robocache.build_info()["cuda"]
    except Exception:
        # not a reason to skip: let the tests run into the same error and fail
        return None
    if not built_with_cuda:
        return "robocache was built without CUDA (build_info()['cuda'] is False)"
    return None


def pytest_collection_modifyitems(config, items):
    cuda_items = [item for item in items if item.get_closest_marker("cuda")]
    if not cuda_items:
        return
    reason = _cuda_skip_reason()
    if reason:
        for item in cuda_items:
            item.add_marker(pytest.mark.skip(reason=reason))


# ----------------------------------------------------------------------------
# seeds


class SeededRNG(np.random.Generator):
    """np.random.Generator that remembers its seed, for failure messages."""

    def __init__(self, seed: int):
        super().__init__(np.random.PCG64(seed))
        self.seed = seed

    def __repr__(self):
        return f"SeededRNG(seed={self.seed})"


@pytest.fixture
def cache_env(tmp_path, monkeypatch):
    """A cache directory of the test's own and no progress bars (frame ingest tests use it autouse)."""
    d = tmp_path / "rc-cache"
    monkeypatch.setenv("ROBOCACHE_CACHE_DIR", str(d))
    monkeypatch.setenv("ROBOCACHE_NO_PROGRESS", "1")
    return d


def fresh_seed(nbytes: int = 8) -> int:
    """ROBOCACHE_TEST_SEED when it is set (a replay), else a fresh seed from os.urandom: the `rng` fixture's,
    and the module fixtures' that write a random set once for the module."""
    env = os.environ.get("ROBOCACHE_TEST_SEED")
    return int(env) if env else int.from_bytes(os.urandom(nbytes), "little")


@pytest.fixture
def rng(request):
    seed = fresh_seed()
    request.node._robocache_seed = seed
    return SeededRNG(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    seed = getattr(item, "_robocache_seed", None)
    if report.failed and seed is not None:
        report.sections.append(("random seed", f"replay with ROBOCACHE_TEST_SEED={seed}"))


# ----------------------------------------------------------------------------
# real data


@pytest.fixture(scope="session")
def DATA():
    # ROBOCACHE_DATA points elsewhere (a GPU machine gets a copy carried with the tree)
    path = Path(os.environ.get("ROBOCACHE_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
    if not path.is_dir():
        pytest.skip(f"real-data folder {path} is not present")
    return path


def same_batches(a: list, b: list, *, strides: bool = False) -> None:
    """Two lists of batches (dicts of tensors) equal bit for bit: as many (at least one), the same keys,
    dtypes, shapes (and memory strides, with ``strides``) and values."""
    assert len(a) == len(b) and len(a) > 0
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            assert x[k].dtype == y[k].dtype and x[k].shape == y[k].shape, k
            if strides:
                assert x[k].stride() == y[k].stride(), k
            assert x[k].equal(y[k]), k


def mapped_file(address: int) -> str | None:
    """The file behind the mapping that holds ``address`` in this process (/proc/self/maps), or None."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= address < hi:
                return parts[5].strip() if len(parts) == 6 else None
    return None


def sha256_tree(root) -> dict:
    """{relative path: sha256} of every file under root (or of root itself, a file)."""
    root = Path(root)
    if root.is_file():
        return {root.name: hashlib.sha256(root.read_bytes()).hexdigest()}
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def unchanged(DATA, name: str, what: str):
    """Body of a fixture: yields DATA / name (skips when it is absent) and fails the module if
    anything changed a byte of it (readers open sources read-only)."""
    path = DATA / name
    if not path.exists():
        pytest.skip(f"{path} is not present")
    before = sha256_tree(path)
    yield path
    assert sha256_tree(path) == before, f"a reader modified the {what} fixture"


# the real folders the reader tests open, hashed before and after each module (a module may
# define its own `groot`, e.g. a loaded Dataset)
@pytest.fixture(scope="module")
def groot(DATA):
    yield from unchanged(DATA, "groot_picknplace", "GR00T")


@pytest.fixture(scope="module")
def cr5_v21(DATA):
    yield from unchanged(DATA, "cr5_flashdrive_av1", "CR5 (LeRobot v2.1)")


@pytest.fixture(scope="module")
def cr5_v30(DATA):
    yield from unchanged(DATA, "cr5_v30", "CR5 (LeRobot v3.0)")


@pytest.fixture(scope="module")
def pusht(DATA):
    yield from unchanged(DATA, "pusht_cchi_v7_replay.zarr", "PushT")


@pytest.fixture
def pusht_copy(pusht, tmp_path):
    """A copy of the PushT zarr store without its 30 MB image array, for tests that damage files."""
    pytest.importorskip("zarr")
    dst = tmp_path / "pusht.zarr"
    shutil.copytree(pusht, dst, ignore=lambda d, names: ["img"] if d.endswith("data") else [])
    return dst


@pytest.fixture(scope="module")
def px4_dir(DATA):
    yield from unchanged(DATA, "rosbags/px4_flight_2025-12-03", "PX4 flight")


@pytest.fixture(scope="module")
def sim_dir(DATA):
    yield from unchanged(DATA, "rosbags/sim_abitobot_arm", "simulated arm")


def run_in_threads(work, args, timeout: float = 600):
    """work(*a) on one thread per a in args, all started before any is joined; fails when a
    thread is still running after `timeout` seconds."""
    threads = [threading.Thread(target=work, args=a) for a in args]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=timeout)
    assert not any(th.is_alive() for th in threads), "a thread hung"


def read_euroc_imu(path):
    """'#timestamp [ns],w_x,...,a_z' CSV with CRLF lines -> (t int64 ns, values [N, 6] float64).
    The timestamps are parsed as Python ints, never through float: epoch ns exceed 2**53."""
    t, v = [], []
    for line in path.read_bytes().splitlines():
        line = line.strip()
        if not line or line.startswith(b"#"):
            continue
        cols = line.split(b",")
        assert len(cols) == 7, f"{path}: unexpected line {line[:80]!r}"
        t.append(int(cols[0]))
        v.append([float(c) for c in cols[1:]])
    return np.array(t, np.int64), np.array(v, np.float64)


@pytest.fixture(scope="session")
def euroc(DATA):
    """The real EuRoC V1_01 recording: IMU times (int64 ns), IMU values [29120, 6], camera times."""
    root = DATA / "multirate" / "euroc_v1_01_easy"
    imu_t, imu_v = read_euroc_imu(root / "EuRoC_IMU" / "V101.txt")
    cam_t = np.array([int(s) for s in (root / "EuRoC_TimeStamps" / "V101.txt").read_bytes().split()], np.int64)
    # what the tests rely on, checked rather than assumed
    assert imu_v.shape == (29120, 6) and cam_t.shape == (2912,)
    assert (np.diff(imu_t) > 0).all() and (np.diff(cam_t) > 0).all()
    assert imu_t[0] > 2**53, "epoch nanoseconds: beyond float64's exact integers"
    assert np.isin(cam_t, imu_t).all(), "every camera time is an IMU time"
    return imu_t, imu_v, cam_t


# ----------------------------------------------------------------------------
# random inputs

EPOCH_NS = 1_700_000_000_000_000_000  # int64 times sit at epoch scale, beyond 2**53


def make_times(rng, n, tdtype, dup=0.1):
    """n non-decreasing times; about `dup` of them repeat the previous one."""
    if tdtype == "float64":
        gaps = rng.uniform(0.002, 0.05, n)
        start = rng.uniform(-2.0, 2.0)
    elif tdtype == "float32":
        # multiples of 2**-10 with |t| < 2**6: every difference between times
        # and targets (a 2**-11 grid) is exact in float32, so no result depends
        # on whether an implementation subtracts in float32 or float64.
        gaps = rng.integers(1, 40, n).astype(np.float64) / 1024
        start = rng.integers(-2048, 2048) / 1024
    elif tdtype == "int64":
        gaps = rng.integers(1_000_000, 20_000_000, n)
        start = EPOCH_NS + int(rng.integers(0, 10**12))
    else:
        raise ValueError(tdtype)
    gaps[rng.random(n) < dup] = 0
    if n:
        gaps[0] = 0
    return (start + np.cumsum(gaps)).astype(tdtype)


def make_targets(rng, t, T, tdtype):
    """T unsorted targets for a row with times t: random points in and around
    the span, exact sample times, midpoints (ties for nearest) and far outside."""
    if tdtype == "int64":
        lo, hi = (int(t[0]), int(t[-1])) if len(t) else (EPOCH_NS, EPOCH_NS + 10**8)
        margin = (hi - lo) // 10 + 5_000_000
        x = rng.integers(lo - margin, hi + margin, T, endpoint=True)
        far = np.array([lo - 10 * margin, hi + 10 * margin])
    else:
        lo, hi = (float(t[0]), float(t[-1])) if len(t) else (0.0, 1.0)
        margin = (hi - lo) / 10 + 0.01
        if tdtype == "float32":  # stay on the 2**-11 grid (see make_times)
            x = rng.integers(int((lo - margin) * 2048), int((hi + margin) * 2048), T, endpoint=True) / 2048
        else:
            x = rng.uniform(lo - margin, hi + margin, T)
        far = np.array([lo - 10 * margin, hi + 10 * margin])
        if tdtype == "float32":
            far = np.round(far * 2048) / 2048
    return place_targets(rng, x.astype(tdtype), t, far, tdtype, p=[0.45, 0.2, 0.25, 0.1])


def place_targets(rng, x, t, far, tdtype, p):
    """Moves some of the targets x (in place; returned) onto the row's edge cases: with
    probabilities p = (stay, exactly on a sample, midway between two samples, far outside at one
    of the two `far` points)."""
    kind = rng.choice(4, len(x), p=p)
    if len(t):
        on = kind == 1
        x[on] = t[rng.integers(0, len(t), on.sum())]
    if len(t) > 1:
        mid = kind == 2
        j = rng.integers(0, len(t) - 1, mid.sum())
        if tdtype == "int64":
            x[mid] = t[j] + (t[j + 1] - t[j]) // 2
        else:
            x[mid] = ((t[j].astype(np.float64) + t[j + 1]) / 2).astype(tdtype)
    out = kind == 3
    x[out] = far.astype(tdtype)[rng.integers(0, 2, out.sum())]
    return x


def make_values(rng, shape, vdtype, mode):
    """Random values of `shape` (samples first). Integers never take the
    all-ones bit pattern, the poison written into outputs before a call."""
    if mode == "slerp":
        return make_quats(rng, shape, vdtype)
    if vdtype in FLOAT_DTYPES:
        x = rng.standard_normal(shape) * 4
        return bf16_round(x) if vdtype == "bfloat16" else x.astype(vdtype)
    if vdtype == "bool":
        return rng.random(shape) < 0.5
    info = np.iinfo(vdtype)
    x = rng.integers(info.min, info.max, shape, dtype=vdtype, endpoint=True)
    x[x == np.array(-1).astype(vdtype)] = 0
    return x


def make_quats(rng, shape, vdtype):
    """Unit quaternions [N, ..., 4]: independent ones (the acos branch), small
    steps from the previous sample (the nlerp branch), exact repeats, and
    random sign flips (shortest arc)."""
    assert shape[-1] == 4
    q = rng.standard_normal(shape)
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    n = shape[0]
    for i in range(1, n):
        r = rng.random()
        if r < 0.3:
            step = q[i - 1] + rng.uniform(0.0, 0.03) * rng.standard_normal(shape[1:])
            q[i] = step / np.linalg.norm(step, axis=-1, keepdims=True)
        elif r < 0.35:
            q[i] = q[i - 1]
    flip = rng.random(shape[:-1]) < 0.3
    q[flip] = -q[flip]
    return bf16_round(q) if vdtype == "bfloat16" else q.astype(vdtype)


@dataclass
class Case:
    """One random resample call, held as numpy arrays until asked for a framework.

    bfloat16 values are held as float32 with bfloat16-exact contents."""

    values: np.ndarray
    times: np.ndarray
    new_times: np.ndarray
    vdtype: str
    mode: str
    seed: int
    lengths: np.ndarray | None = None
    offsets: np.ndarray | None = None
    index: np.ndarray | None = None
    tolerance: float = 1e-4
    extra: dict = field(default_factory=dict)

    def inputs(self, fw="numpy", device="cpu"):
        """Arguments as numpy arrays or torch tensors on `device` (fresh copies)."""
        names = ("values", "times", "new_times", "lengths", "offsets", "index")
        arrays = {k: getattr(self, k) for k in names}
        if fw == "numpy":
            assert device == "cpu" and self.vdtype != "bfloat16"
            return {k: (None if a is None else a.copy()) for k, a in arrays.items()}
        assert fw == "torch"
        if torch is None:
            pytest.skip("torch is not installed")
        res = {k: (None if a is None else torch.from_numpy(a.copy()).to(device)) for k, a in arrays.items()}
        if self.vdtype == "bfloat16":
            res["values"] = res["values"].to(torch.bfloat16)
        return res

    def kwargs(self, args):
        kw = {"mode": self.mode}
        for k in ("lengths", "offsets", "index"):
            if args[k] is not None:
                kw[k] = args[k]
        if self.tolerance != 1e-4:
            kw["tolerance"] = self.tolerance
        return kw

    def reference(self):
        args = self.inputs("torch" if self.vdtype == "bfloat16" else "numpy")
        return resample_ref(args["values"], args["times"], args["new_times"], self.mode, lengths=args["lengths"],
                            offsets=args["offsets"], index=args["index"], tolerance=self.tolerance)

    @property
    def msg(self):
        return f"(mode={self.mode}, values {self.vdtype}, times {self.times.dtype}, seed={self.seed})"

    def assert_matches(self, out, ref, like):
        """out is in the framework/device of `like`, has the values' dtype, and
        equals the reference: bit for bit, or for slerp within SLERP_ATOL."""
        assert type(out) is type(like), f"output is {type(out).__name__}, values were {type(like).__name__}"
        if is_torch(like):
            assert out.device == like.device, f"output on {out.device}, values on {like.device}"
        assert dtype_name(out) == self.vdtype, f"output dtype {dtype_name(out)} {self.msg}"
        if self.mode == "slerp":
            got = to_numpy(out).astype(np.float64)
            assert_close(got, ref, atol=SLERP_ATOL[self.vdtype], msg=self.msg)
            rows = got.reshape(-1, 4)
            norm = np.linalg.norm(rows, axis=-1)
            empty = np.all(ref.reshape(-1, 4) == 0, axis=-1)  # empty rows give zeros
            assert_close(norm[~empty], np.ones((~empty).sum()), atol=4 * SLERP_ATOL[self.vdtype],
                         msg="quaternions not unit length " + self.msg)
        else:
            assert_equal(out, ref, msg=self.msg)

    def check(self, fw="numpy", device="cpu"):
        """Run robocache on fresh inputs (once allocating, once into a poisoned
        out= with the mask) and compare both with the reference. Returns the
        allocated output."""
        import robocache

        args = self.inputs(fw, device)
        before = snapshot(args)
        ref, ref_pad = self.reference()
        kw = self.kwargs(args)
        v, t, x = args["values"], args["times"], args["new_times"]

        out = robocache.resample(v, t, x, **kw)
        assert tuple(out.shape) == ref.shape, f"shape {tuple(out.shape)} != {ref.shape} {self.msg}"
        self.assert_matches(out, ref, v)

        buf = poisoned(ref.shape, self.vdtype, v)
        res = robocache.resample(v, t, x, out=buf, return_mask=True, **kw)
        assert isinstance(res, tuple) and len(res) == 2, "return_mask=True must return (out, is_pad)"
        assert res[0] is buf, "out= must be written in place and returned"
        self.assert_matches(buf, ref, v)
        pad = res[1]
        assert type(pad) is type(v) and dtype_name(pad) == "bool", f"is_pad is {type(pad)} {dtype_name(pad)}"
        if is_torch(v):
            assert pad.device == v.device
        assert_equal(pad, ref_pad, msg="is_pad " + self.msg)

        assert snapshot(args) == before, "resample modified its inputs " + self.msg
        return out


@pytest.fixture
def make_case(rng):
    """make_case(form="dense"|"row"|"ragged", vdtype, tdtype, mode, ...) -> Case"""

    def make(form="dense", vdtype="float32", tdtype="float64", mode="linear", *, B=4, S=24, T=16, feat=None,
             lengths=False, dup=0.1, episodes=40, max_len=60, tolerance=1e-4):
        if feat is None:
            feat = (4,) if mode == "slerp" else (3,)
        feat = tuple(feat)
        kw = {}
        if form == "row":
            t = make_times(rng, S, tdtype, dup)
            v = make_values(rng, (S,) + feat, vdtype, mode)
            x = make_targets(rng, t, T, tdtype)
        elif form == "dense":
            n = np.full(B, S)
            if lengths:
                n = rng.integers(0, S + 1, B)
                n[: min(B, 3)] = [0, 1, S][: min(B, 3)]  # always an empty, a one-sample and a full row
                rng.shuffle(n)
                kw["lengths"] = n.astype(np.int64)
            # padding as users write it: times zero (not sorted!), values
            # garbage, so reading past lengths[b] shows
            t = np.zeros((B, S), tdtype)
            v = make_values(rng, (B * S,) + feat, vdtype, mode).reshape((B, S) + feat)
            if lengths and vdtype in FLOAT_DTYPES:
                v = v.copy()
            x = np.zeros((B, T), tdtype)
            for b in range(B):
                row = make_times(rng, n[b], tdtype, dup)
                t[b, : n[b]] = row
                if lengths and vdtype in FLOAT_DTYPES:
                    v[b, n[b]:] = np.nan
                x[b] = make_targets(rng, row, T, tdtype)
        elif form == "ragged":
            E = episodes
            n = rng.integers(0, max_len + 1, E)
            n[: min(E, 2)] = [0, min(1, max_len)][: min(E, 2)]  # an empty and a one-sample episode at least
            rng.shuffle(n)
            offsets = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
            t = np.concatenate([make_times(rng, k, tdtype, dup) for k in n]).astype(tdtype)
            v = make_values(rng, (int(offsets[-1]),) + feat, vdtype, mode)
            index = rng.integers(0, E, B)
            special = np.flatnonzero(n <= 1)[: B // 2]  # make sure rows read them
            index[: len(special)] = special
            rng.shuffle(index)
            x = np.stack([make_targets(rng, t[offsets[e]:offsets[e + 1]], T, tdtype) for e in index]) \
                if B else np.zeros((0, T), tdtype)
            kw.update(offsets=offsets, index=index.astype(np.int64))
        else:
            raise ValueError(form)
        return Case(values=v, times=t, new_times=x, vdtype=vdtype, mode=mode, seed=rng.seed,
                    tolerance=tolerance, **kw)

    return make


# ----------------------------------------------------------------------------
# GPU fixtures shared by the *_cuda.py files (they only run where the `cuda`
# marker did not skip them, so torch with a GPU is there)


@pytest.fixture
def two_gpus():
    """Skips the test (use with @pytest.mark.usefixtures) unless torch sees 2 GPUs."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")


@pytest.fixture(scope="module")
def sleep_cycles():
    """torch.cuda._sleep cycles for about 200 ms on this GPU."""
    torch.cuda._sleep(1000)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(20_000_000)
    end.record()
    end.synchronize()
    ms = max(start.elapsed_time(end), 1e-3)
    return int(min(20_000_000 * 200 / ms, 2**40))
