"""``python -m robocache.lerobot.train`` under accelerate, two processes on the CPU (gloo), the LeRobot way:
every process trains on its own share of LeRobot's sampler, as accelerate deals torch's loader's batches out.
Runs only where LeRobot (0.4.x or 0.6.x) and accelerate are installed (optional dependencies, not in the test
extra); the data is written here (robocache.demo.write_lerobot), so it needs nothing else.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("lerobot")
pytest.importorskip("accelerate")
pytest.importorskip("pyarrow")
pytest.importorskip("av")

ROOT = Path(__file__).resolve().parents[1]

#: each rank's batches, recorded where the training script takes them from robocache's loader
RECORDER = """
import json, os, sys
from robocache import lerobot_train

iterate = lerobot_train.TrainLoader.__iter__
seen = []

def recording(self):
    for batch in iterate(self):
        seen.append(batch["index"].tolist())
        yield batch

lerobot_train.TrainLoader.__iter__ = recording
lerobot_train.main()
with open(os.path.join(sys.argv[0] + ".out", os.environ["RANK"] + ".json"), "w") as f:
    json.dump(seen, f)
"""


def test_two_processes_train_on_disjoint_shares(tmp_path):
    from robocache.demo import write_lerobot

    data = write_lerobot(tmp_path / "demo", num_episodes=2)
    script = tmp_path / "recorder.py"
    script.write_text(RECORDER)
    (tmp_path / "recorder.py.out").mkdir()
    steps, batch = 3, 4
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1", "ROBOCACHE_NO_PROGRESS": "1",
           "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    # --multi_gpu starts the processes with torchrun; ACCELERATE_USE_CPU makes them a gloo group on the CPU
    # (accelerate's --cpu alone starts one process)
    r = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", str(script),
                        "--dataset.repo_id=local/demo", f"--dataset.root={data}", "--policy.type=act",
                        "--policy.device=cpu", "--policy.push_to_hub=false",
                        "--policy.pretrained_backbone_weights=null", "--policy.dim_model=32",
                        "--policy.dim_feedforward=64", "--policy.n_heads=2", "--policy.chunk_size=5",
                        "--policy.n_action_steps=5", "--policy.latent_dim=8", f"--steps={steps}",
                        f"--batch_size={batch}", "--num_workers=0", "--log_freq=1", "--save_checkpoint=false",
                        "--wandb.enable=false", f"--output_dir={tmp_path / 'out'}"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=240)
    log = r.stdout + r.stderr
    assert r.returncode == 0, log[-3000:]
    assert f"step:{steps} smpl:{steps * batch * 2}" in log and "End of training" in log     # 2 processes
    shares = [json.loads((tmp_path / "recorder.py.out" / f"{rank}.json").read_text()) for rank in (0, 1)]
    for share in shares:
        assert len(share) == steps and all(len(b) == batch for b in share)
    first = [i for b in shares[0] for i in b]
    second = [i for b in shares[1] for i in b]
    assert len(set(first)) == len(first) and len(set(second)) == len(second)   # one epoch: no sample twice
    assert not set(first) & set(second)
