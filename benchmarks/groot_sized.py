"""A GR00T-sized policy for the step-cost benchmarks (bench_scale.py, bench_tiers.py).

The small conv policies of the benchmarks run a step in 3-15 ms on an H100: they measure what the
loader costs a model that barely uses the GPU. GR00T N1.5's step is much longer: a frozen vision-language
backbone (Eagle 2.5: SigLIP-2 at 224x224 and a 1.7B language model) encodes each camera frame, and a
diffusion-transformer action head, trained by flow matching, cross-attends those tokens. This model
keeps that shape at a smaller size, so the step it gives is shorter than GR00T's (a loader's share of
it is an upper bound of the share in GR00T):

- vision: a ViT-L/14 (24 layers, 1024 wide, 16 heads; SigLIP-L's size, ~300M parameters), frozen
  (no gradients, as GR00T N1.5 freezes its VLM), on each camera frame resized to 224x224 (256 patches
  and a class token per frame);
- action head: 8 transformer decoder layers, 1024 wide (~130M parameters, trained), over the state
  token and the noised action chunk's tokens, cross-attending every camera's tokens; the flow-matching
  loss (velocity of a straight path from noise to the action chunk at a random time), masked where
  the chunk runs past the episode's end.

Estimated on an H100 in bf16 (~400 TFLOP/s sustained): 64 samples x 3 cameras ~80 ms a step, 64 x 1
camera ~30 ms. Weights are random: the step's cost, not its learning, is measured.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

IMAGE = 224
PATCH = 14
WIDTH = 1024


class GrootSized(nn.Module):
    def __init__(self, cameras: int, state_dim: int, action_dim: int, chunk: int, vision_layers: int = 24,
                 head_layers: int = 8):
        super().__init__()
        self.cameras, self.chunk, self.action_dim = cameras, chunk, action_dim
        tokens = (IMAGE // PATCH) ** 2 + 1
        self.patch = nn.Conv2d(3, WIDTH, PATCH, stride=PATCH)
        self.cls = nn.Parameter(torch.zeros(1, 1, WIDTH))
        self.pos = nn.Parameter(torch.randn(1, tokens, WIDTH) * 0.02)
        layer = nn.TransformerEncoderLayer(WIDTH, 16, 4 * WIDTH, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.vision = nn.TransformerEncoder(layer, vision_layers, enable_nested_tensor=False)
        for p in (*self.patch.parameters(), self.cls, self.pos, *self.vision.parameters()):
            p.requires_grad_(False)                                   # frozen, as GR00T's VLM
        self.camera = nn.Parameter(torch.randn(cameras, 1, WIDTH) * 0.02)
        self.state = nn.Linear(state_dim, WIDTH)
        self.action = nn.Linear(action_dim, WIDTH)
        self.time = nn.Sequential(nn.Linear(1, WIDTH), nn.SiLU(), nn.Linear(WIDTH, WIDTH))
        self.slots = nn.Parameter(torch.randn(1, 1 + chunk, WIDTH) * 0.02)
        dec = nn.TransformerDecoderLayer(WIDTH, 16, 4 * WIDTH, dropout=0.0, activation="gelu", batch_first=True,
                                         norm_first=True)
        self.head = nn.TransformerDecoder(dec, head_layers)
        self.out = nn.Linear(WIDTH, action_dim)

    @torch.no_grad()
    def encode(self, images: list) -> torch.Tensor:
        """Camera frames ([B, 3, H, W] float each) -> their tokens [B, cameras * 257, WIDTH]."""
        B = images[0].shape[0]
        x = torch.cat([F.interpolate(im, size=(IMAGE, IMAGE), mode="bilinear", antialias=False, align_corners=False)
                       for im in images])                             # [cameras * B, 3, 224, 224]
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        x = self.vision(x)                                            # [cameras * B, 257, WIDTH]
        return x.view(self.cameras, B, -1, WIDTH).permute(1, 0, 2, 3).reshape(B, -1, WIDTH)

    def loss(self, state, images: list, action, pad=None) -> torch.Tensor:
        """Flow-matching loss: state [B, 1, S], images (one [B, 3, H, W] per camera), action [B, chunk, A],
        pad [B, chunk] bool (steps past the episode's end, left out) or None."""
        B = state.shape[0]
        memory = self.encode(images)
        memory = memory + self.camera.repeat_interleave(memory.shape[1] // self.cameras, 0).view(1, -1, WIDTH)
        t = torch.rand(B, 1, 1, device=state.device)
        noise = torch.randn_like(action)
        noised = t * action + (1 - t) * noise
        q = torch.cat([self.state(state[:, :1]), self.action(noised)], 1) + self.slots + self.time(t)
        v = self.out(self.head(q, memory)[:, 1:])                     # predicted velocity
        err = ((v - (action - noise)) ** 2).mean(-1)                  # [B, chunk]
        if pad is not None:
            keep = (~pad).float()
            return (err * keep).sum() / keep.sum().clamp(min=1)
        return err.mean()


def smoke() -> int:
    """CI (--smoke): a one-layer model of this shape, one loss and backward on random inputs on the CPU."""
    torch.manual_seed(0)
    m = GrootSized(2, 8, 7, 16, vision_layers=1, head_layers=1)
    loss = m.loss(torch.randn(2, 1, 8), [torch.rand(2, 3, 96, 128) for _ in range(2)], torch.randn(2, 16, 7),
                  pad=torch.arange(16).expand(2, 16) > 12)
    loss.backward()
    assert torch.isfinite(loss) and m.out.weight.grad is not None and m.patch.weight.grad is None
    print(f"groot_sized smoke: loss {loss.item():.3f}, the action head trained, the vision frozen")
    return 0


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="the GR00T-sized policy of bench_scale.py and bench_tiers.py")
    ap.add_argument("--smoke", action="store_true", help="CI: a one-layer model's loss and backward on the CPU")
    if not ap.parse_args().smoke:
        ap.error("this module is a policy for the benchmarks; --smoke checks it runs")
    raise SystemExit(smoke())
