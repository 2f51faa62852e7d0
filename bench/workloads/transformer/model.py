"""The decoder-only language model and its synthetic token stream (torch only, no
process group), so that determinism can be tested without launching ranks."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bench.workloads.transformer import TransformerParams

SEED_FACTOR = 1_000_003
"""As the ddp workload: batch ``b`` of seed ``s`` comes from generator ``s x F + b``
(validate keeps that below 2**63)."""


class Block(nn.Module):
    """Pre-norm causal self-attention and a 4x MLP: the unit FSDP2 shards one by one."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, w = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(w, dim=-1)
        q, k, v = (z.view(b, t, self.heads, w // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, w))
        out: torch.Tensor = x + self.down(F.gelu(self.up(self.ln2(x))))
        return out


class DecoderLM(nn.Module):
    def __init__(self, p: TransformerParams) -> None:
        super().__init__()
        self.embed = nn.Embedding(p.vocab, p.width)
        self.pos = nn.Parameter(torch.zeros(p.seq_len, p.width))
        self.blocks = nn.ModuleList(Block(p.width, p.heads) for _ in range(p.layers))
        self.ln = nn.LayerNorm(p.width)
        self.head = nn.Linear(p.width, p.vocab, bias=False)
        if p.tied:
            self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return torch.as_tensor(self.head(self.ln(x)))


def build(p: TransformerParams, seed: int) -> DecoderLM:
    """The same initial weights in every rank and every world size, from ``seed`` alone
    (drawn on the CPU in parameter order, before any wrapping or sharding)."""
    model = DecoderLM(p)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("ln1.weight", "ln2.weight", "ln.weight")):
                param.fill_(1.0)
            elif param.dim() == 1:
                param.zero_()
            else:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.02)
    return model


def tokens(p: TransformerParams, seed: int, batch: int, global_batch: int) -> torch.Tensor:
    """Global batch ``batch`` (0-based) of the token stream: ``global_batch`` sequences of
    ``seq_len + 1`` tokens (inputs and the next-token targets).

    The stream has structure to learn (each sequence repeats a short random motif with
    noise), so the loss falls and a wrong restore shows in ``loss_delta``.
    """
    gen = torch.Generator().manual_seed(seed * SEED_FACTOR + batch)
    n = p.seq_len + 1
    period = torch.randint(2, 9, (global_batch, 1), generator=gen)
    motif = torch.randint(0, p.vocab, (global_batch, 8), generator=gen)
    idx = torch.arange(n).unsqueeze(0) % period
    seq = motif.gather(1, idx)
    noise = torch.rand(global_batch, n, generator=gen) < 0.1
    return torch.where(noise, torch.randint(0, p.vocab, (global_batch, n), generator=gen), seq)
