"""The models and jobs the GPU suite profiles: built here, no downloads.

Everything takes a ``device`` so the same code runs (slowly, without
kernels) on a CPU while it is being written; the suite itself only runs
where CUDA is.  Shapes are multiples of 8 so bf16 GEMMs can take the
Tensor Cores, and small enough that a step takes milliseconds and a
recorded trace stays a few hundred KB gzipped.

The loss is computed inside the model: its kernels then belong to a module
like every other forward kernel, and only the optimizer's run outside all
modules (which is what an optimizer is).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class Config:
    vocab: int = 512
    dim: int = 256
    heads: int = 4
    layers: int = 2
    seq: int = 128
    batch: int = 8


SMALL = Config()
#: Per-kernel CUPTI counters replay every kernel several times: keep it tiny.
TINY = Config(vocab=256, dim=128, heads=2, layers=1, seq=64, batch=4)


class Attention(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        # Not causal: kinetolens counts a causal attention's FLOPs as half,
        # FlopCounterMode ignores the mask; the comparison wants one convention.
        y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.dim)
        self.attn = Attention(cfg)
        self.norm2 = nn.LayerNorm(cfg.dim)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim), nn.GELU(), nn.Linear(4 * cfg.dim, cfg.dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    """Token + position embedding (an fp32 elementwise add under autocast),
    pre-norm transformer blocks, a head and the loss."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos = nn.Parameter(torch.randn(cfg.seq, cfg.dim) * 0.02)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab)

    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        logits = self.logits(tokens)
        if targets is None:
            return logits
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def batch(cfg: Config, device: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq), generator=g)
    targets = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq), generator=g)
    return tokens.to(device), targets.to(device)


def device_type(device: str) -> str:
    return torch.device(device).type


class Trainer:
    """One bf16-autocast training step of a :class:`TinyLM` with AdamW."""

    def __init__(self, cfg: Config = SMALL, device: str = "cuda", *, compiled: bool = False) -> None:
        torch.manual_seed(0)
        self.cfg = cfg
        self.device = device
        self.model: Any = TinyLM(cfg).to(device)
        if compiled:
            self.model = torch.compile(self.model)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.tokens, self.targets = batch(cfg, device)

    def step(self) -> None:
        with torch.autocast(device_type(self.device), dtype=torch.bfloat16):
            loss = self.model(self.tokens, self.targets)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()

    def sync(self) -> None:
        if device_type(self.device) == "cuda":
            torch.cuda.synchronize()


def flop_counts(trainer: Trainer) -> dict[str, float]:
    """torch.utils.flop_counter.FlopCounterMode's FLOPs per op of one step of
    ``trainer`` (``aten::mm`` spelled as the trace spells it)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        trainer.step()
    trainer.sync()
    counts = counter.get_flop_counts().get("Global", {})
    return {str(op).replace("aten.", "aten::"): float(v) for op, v in counts.items()}


#: The job ``kinetolens run`` profiles (argv: repo root, steps).
RUN_SCRIPT = """
import sys
sys.path.insert(0, sys.argv[1])
from tests.gpu.models import SMALL, Trainer

trainer = Trainer(SMALL, "cuda")
for _ in range(int(sys.argv[2])):
    trainer.step()
trainer.sync()
print("trained")
"""

#: The job Nsight Systems profiles, marked with ``kinetolens.nvtx()``.
NVTX_SCRIPT = """
import sys
sys.path.insert(0, sys.argv[1])
import kinetolens
from tests.gpu.models import TINY, Trainer

trainer = Trainer(TINY, "cuda")
with kinetolens.nvtx():  # every step marked: each kernel has its op's range
    for _ in range(3):
        trainer.step()
    trainer.sync()
print("trained")
"""


class GraphedForward:
    """A bf16 :class:`TinyLM` forward captured into one CUDA graph
    (``torch.cuda.graph``) and replayed: the inference engines' pattern."""

    def __init__(self, cfg: Config = SMALL) -> None:
        torch.manual_seed(0)
        self.model = TinyLM(cfg).to("cuda", torch.bfloat16).eval()
        self.static_in, _ = batch(cfg, "cuda")
        self.graph = torch.cuda.CUDAGraph()
        self.static_out: torch.Tensor | None = None
        # Warm up on a side stream, as torch.cuda.graph's documentation asks.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(3):
                self.model(self.static_in)
        torch.cuda.current_stream().wait_stream(side)

    def capture(self) -> None:
        with torch.no_grad(), torch.cuda.graph(self.graph):
            self.static_out = self.model(self.static_in)

    def replay(self, tokens: torch.Tensor) -> None:
        self.static_in.copy_(tokens)
        self.graph.replay()


def profile_two_steps(trainer: Trainer, logdir: Path, run: str, **options: Any) -> tuple[Path, int]:
    """One unrecorded and two recorded steps of ``trainer`` under ``kinetolens.profile``
    (``options`` added), the peak memory statistics reset just before: the
    trace, and ``torch.cuda.max_memory_allocated()`` over that window."""
    import kinetolens

    trainer.sync()
    torch.cuda.reset_peak_memory_stats()
    with kinetolens.profile(logdir=logdir, run=run, steps=2, warmup=1, **options) as prof:
        for _ in range(3):
            trainer.step()
            prof.step()
    trainer.sync()
    (path,) = prof.trace_files
    return path, torch.cuda.max_memory_allocated()
