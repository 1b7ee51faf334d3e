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
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        self.register_buffer("mask", torch.tril(torch.ones(context, context)).bool())

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q = q.view(b, t, h, d // h).transpose(1, 2)
        k = k.view(b, t, h, d // h).transpose(1, 2)
        v = v.view(b, t, h, d // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Parameter(torch.randn(1, CONTEXT, DIM) * 0.02)
        self.blocks = nn.ModuleList([Block(DIM, HEADS, CONTEXT) for _ in range(BLOCKS)])
        self.ln_f = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx):
        x = self.tok(idx) + self.pos[:, : idx.size(1)]
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def gpt():
    torch.manual_seed(0)
    return GPT()
