"""A small GPT written in PyTorch for the bridge's tests: token and learned
positional embeddings (the positions a parameter of the root module, not of
any child), pre-LN blocks of causal self-attention and an MLP held in an
nn.ModuleList, a final LayerNorm and a head whose weight is tied to the token
embedding (a parameter two layers read)."""

import math

import torch
from torch import nn

VOCAB, DIM, HEADS, BLOCKS, CONTEXT = 64, 32, 4, 6, 16


class Block(nn.Module):
    def __init__(self, dim, heads, context):
        super().__init__()
        self.heads = heads
        self.dim = dim
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.size(0), x.size(1), self.dim  # torch.fx traces through (--layers)
        h = self.heads
        qkv = self.qkv(self.ln1(x))
        q, k, v = qkv[..., :d], qkv[..., d:2 * d], qkv[..., 2 * d:]
        q = q.view(b, t, h, d // h).transpose(1, 2)
        k = k.view(b, t, h, d // h).transpose(1, 2)
        v = v.view(b, t, h, d // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)
        mask = torch.ones_like(att[0, 0], dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab=VOCAB, dim=DIM, heads=HEADS, blocks=BLOCKS, context=CONTEXT):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(1, context, dim) * 0.02)
        self.blocks = nn.ModuleList([Block(dim, heads, context) for _ in range(blocks)])
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx):
        x = self.tok(idx) + self.pos[:, : idx.size(1)]
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def gpt():
    torch.manual_seed(0)
    return GPT()


def gpt_wide():
    """The same architecture wide enough that its time is arithmetic, not
    Python's per-op cost (tests/bridge/profile_torch_test.sh times it):
    vocabulary 512, width 128, 4 blocks, context 64."""
    torch.manual_seed(0)
    return GPT(vocab=512, dim=128, heads=4, blocks=4, context=64)
