"""The dated record of the last `pytest -m cuda` run on a GPU (issue 47): CI has no GPU, so the
repository carries the proof instead. `tests/test_cuda_record.py` (a CPU test) fails once cuda/ or
csrc/ differ from the sources the record was made from, so a kernel change cannot land without a
new GPU run.

    python tools/cuda_record.py write JUNIT_XML OUT_JSON    # on the GPU machine, after pytest --junitxml
    python tools/cuda_record.py digest                      # the digest of this tree's cuda/ and csrc/

`tools/gpu_session.sh tests` does the first; the lead copies $OUT/cuda_record.json to
tests/cuda_record.json and commits it with the change it covers.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WATCHED = ("cuda", "csrc")


def sources_digest(root: Path = ROOT) -> str:
    """sha256 over the relative path and bytes of every file under cuda/ and csrc/, in path order:
    content, not commit, so it holds for a tree the device machine gets without its .git."""
    h = hashlib.sha256()
    for top in WATCHED:
        for p in sorted((root / top).rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                h.update(p.relative_to(root).as_posix().encode() + b"\0")
                h.update(p.read_bytes() + b"\0")
    return h.hexdigest()


def junit_counts(path: Path) -> dict:
    """passed/failed/errors/skipped of a pytest --junitxml report (its testsuite totals)."""
    suites = ET.parse(path).getroot()
    suite = suites if suites.tag == "testsuite" else suites.find("testsuite")
    tests, failed, errors, skipped = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
    return {"passed": tests - failed - errors - skipped, "failed": failed, "errors": errors, "skipped": skipped}


def gpu_name() -> str:
    import torch
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"


def write(junit: str, out: str) -> int:
    import torch
    record = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
              "gpu": gpu_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
              "commit": os.environ.get("ROBOCACHE_COMMIT", "unknown"),
              "command": "python3 -m pytest -m cuda", "sources_sha256": sources_digest(),
              **junit_counts(Path(junit))}
    Path(out).write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["write"] and len(sys.argv) == 4:
        sys.exit(write(sys.argv[2], sys.argv[3]))
    if sys.argv[1:] == ["digest"]:
        print(sources_digest())
        sys.exit(0)
    print(__doc__, file=sys.stderr)
    sys.exit(2)
