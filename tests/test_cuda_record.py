"""CI has no GPU, so the `cuda`-marked suite cannot run there; instead the repository carries the record of
its last run (tests/cuda_record.json, written by `tools/gpu_session.sh tests` on a GPU) and this CPU test
fails once the kernels or the C sources differ from the ones that run covered. A change to cuda/ or csrc/
therefore lands only with a new GPU run recorded beside it."""
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "tests" / "cuda_record.json"
HOW = ("run `ROBOCACHE_COMMIT=$(git rev-parse HEAD) bash tools/gpu_session.sh tests` on a GPU machine and "
       "commit its $OUT/cuda_record.json as tests/cuda_record.json")


def _tool():
    spec = importlib.util.spec_from_file_location("cuda_record", ROOT / "tools" / "cuda_record.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _record() -> dict:
    assert RECORD.is_file(), f"no record of a `pytest -m cuda` run: {HOW}"
    return json.loads(RECORD.read_text())


def test_record_covers_these_kernels_and_c_sources():
    rec = _record()
    now = _tool().sources_digest(ROOT)
    assert rec["sources_sha256"] == now, (
        f"cuda/ or csrc/ changed since the last recorded GPU run ({rec['date']}, {rec['gpu']}, commit "
        f"{rec['commit']}): {HOW}")


def test_recorded_run_passed_on_a_gpu():
    rec = _record()
    assert rec["gpu"] != "none", "the record was made without a GPU"
    assert rec["failed"] == 0 and rec["errors"] == 0, f"the recorded GPU run had failures: {rec}"
    # every `cuda` test skipping would also give failed == 0; the suite holds several hundred
    assert rec["passed"] >= 500, f"the recorded run passed only {rec['passed']} tests: {rec}"


def test_digest_sees_a_one_byte_change(tmp_path):
    tool = _tool()
    for top in ("cuda", "csrc"):
        (tmp_path / top).mkdir()
        (tmp_path / top / "k.cu").write_text("x")
    before = tool.sources_digest(tmp_path)
    (tmp_path / "csrc" / "k.cu").write_text("y")
    assert tool.sources_digest(tmp_path) != before
    (tmp_path / "csrc" / "k.cu").write_text("x")
    assert tool.sources_digest(tmp_path) == before
    (tmp_path / "cuda" / "k.cu").rename(tmp_path / "cuda" / "j.cu")     # a rename is a change too
    assert tool.sources_digest(tmp_path) != before


def test_junit_counts_read_pytests_totals(tmp_path):
    xml = tmp_path / "j.xml"
    xml.write_text('<?xml version="1.0"?><testsuites><testsuite name="pytest" errors="1" failures="2" '
                   'skipped="3" tests="10"/></testsuites>')
    assert _tool().junit_counts(xml) == {"passed": 4, "failed": 2, "errors": 1, "skipped": 3}
