# mypy: disable-error-code="import-untyped,import-not-found"
"""LeRobot's own training script run twice, fed by LeRobot's loader and by robocache, and the loss of every
step of both (issue 44: the same losses, on LeRobot 0.4.x and 0.6.x).

    python tools/lerobot_losses.py --out losses.json -- <lerobot-train arguments>
    python tools/lerobot_losses.py --loader robocache -- <lerobot-train arguments>   # one run, JSON to stdout

Each run is a process of its own (``lerobot.scripts.lerobot_train``'s ``main``, or robocache's
``python -m robocache.lerobot.train``), with the script's ``update_policy`` wrapped to record the loss it
computed at each step. Nothing else changes: the sampler, the seed, the policy's randomness are the script's.
``--episode-aware`` gives a policy without ``drop_n_last_frames`` (ACT) LeRobot's ``EpisodeAwareSampler``
anyway (drop 0): LeRobot 0.4 shuffles those with torch's ``RandomSampler``, robocache with its own
permutation, so only then do both runs see the same samples (LeRobot 0.6 uses the sampler for every policy).
Prints the largest |difference| of the two curves and steps/s of each (after the first two steps).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # robocache from this checkout


def record(args) -> dict:
    """One training run in this process: the loss of every step and steps/s."""
    from lerobot.scripts import lerobot_train as script

    if args.episode_aware:
        # the script asks hasattr(policy config, "drop_n_last_frames") (0.4) or getattr(..., 0) (0.6)
        from lerobot.policies.act.configuration_act import ACTConfig
        ACTConfig.drop_n_last_frames = 0
    losses, stamps = [], []
    update = script.update_policy

    def recorded(*a, **k):
        tracker, out = update(*a, **k)
        losses.append(float(tracker.loss.val))
        stamps.append(time.perf_counter())
        return tracker, out

    script.update_policy = recorded
    sys.argv = [sys.argv[0], *args.lerobot]
    if args.loader == "robocache":
        from robocache.lerobot.train import main
        main()
    else:
        script.main()
    timed = len(stamps) - 2
    rate = timed / (stamps[-1] - stamps[1]) if timed > 0 else None
    return {"loss": losses, "steps_per_s": rate}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--loader", choices=["robocache", "lerobot", "both"], default="both")
    p.add_argument("--episode-aware", action="store_true",
                   help="LeRobot's EpisodeAwareSampler for ACT too (LeRobot 0.4: the same samples on both sides)")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("lerobot", nargs=argparse.REMAINDER, help="-- then lerobot-train's arguments")
    args = p.parse_args()
    if args.lerobot[:1] == ["--"]:
        args.lerobot = args.lerobot[1:]
    if args.loader != "both":
        print("LOSSES " + json.dumps(record(args)), flush=True)
        return 0
    from importlib.metadata import version

    report = {"lerobot": version("lerobot"), "arguments": args.lerobot, "episode_aware": args.episode_aware}
    for loader in ("lerobot", "robocache"):
        cmd = [sys.executable, __file__, "--loader", loader, *(["--episode-aware"] * args.episode_aware), "--",
               *args.lerobot]
        r = subprocess.run(cmd, capture_output=True, text=True)
        lines = [x for x in r.stdout.splitlines() if x.startswith("LOSSES ")]
        if r.returncode or not lines:
            sys.stderr.write(r.stdout[-3000:] + r.stderr[-3000:])
            return 1
        report[f"{loader}_fed"] = json.loads(lines[-1][len("LOSSES "):])
    a, b = report["lerobot_fed"]["loss"], report["robocache_fed"]["loss"]
    if len(a) != len(b):
        raise SystemExit(f"{len(a)} steps fed by LeRobot, {len(b)} by robocache")
    report["max_abs_loss_difference"] = max(abs(x - y) for x, y in zip(a, b))
    print(f"LeRobot {report['lerobot']}: {len(a)} steps, max |loss difference| "
          f"{report['max_abs_loss_difference']:.3g}; steps/s LeRobot-fed {report['lerobot_fed']['steps_per_s']:.2f}, "
          f"robocache-fed {report['robocache_fed']['steps_per_s']:.2f}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
