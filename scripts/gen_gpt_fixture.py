#!/usr/bin/python3
"""scripts/gen_gpt_fixture.py: the PyTorch reference dump for tests/test_gpt_parity.c.

Builds, in float32, the GPT that mxp_model_spec_gpt(V=11, context=8, embd=16,
n_heads=4, n_layer=1, max_seqs=3) describes -- token + position embedding, ONE
pre-LN transformer block (causal multi-head self-attention and a GELU MLP, as
GPT-2 / nanoGPT), a final LayerNorm and an lm_head tied to the token
embedding -- runs one forward/backward on a fixed batch (loss, logits, the
gradient of every parameter), then 5 full-batch AdamW steps (no clipping),
and writes everything to tests/data/gpt_block.bin.

Weights are random (seeded) with non-trivial LayerNorm affines and biases,
and the attention weights are scaled up so the softmax is far from uniform.
Parameter order is mixprec's slab order (layers.0.wte, layers.0.wpe, the 12
block tensors in GPT-2 order, layers.2.weight/bias = ln_f); linear weights
are [out, in] as nn.Linear.

Binary format (little-endian):
    u32 magic 0x5450474D ("MGPT"), u32 version 1
    i32 V, T, C, H, L, Bs, n_steps
    u32 P                      parameter count
    f32 params[P]              initial weights, slab order
    i32 ids[Bs*T], i32 targets[Bs*T]
    f32 logits[Bs*T*V]
    f64 loss0
    f32 grads[P]
    f64 losses[n_steps]        loss before each AdamW update
    f32 params_after[P]        after the n_steps updates
    f32 lr, beta1, beta2, eps, weight_decay

Run with Debian's interpreter (torch 1.13): /usr/bin/python3 scripts/gen_gpt_fixture.py [out]
It also prints how far float32 is from float64 for the same computation, so
the test's tolerances can stay well above it.
"""

import math
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

V, T, C, H, L, BS = 11, 8, 16, 4, 1, 3
N_STEPS = 5
LR, BETA1, BETA2, EPS, WD = 1e-3, 0.9, 0.999, 1e-8, 0.01
LN_EPS = 1e-5


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=LN_EPS)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=LN_EPS)
        self.c_fc = nn.Linear(C, 4 * C)
        self.m_proj = nn.Linear(4 * C, C)

    def attn(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(b, t, H, c // H).transpose(1, 2)
        k = k.view(b, t, H, c // H).transpose(1, 2)
        v = v.view(b, t, H, c // H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.m_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.blocks = nn.ModuleList([Block() for _ in range(L)])
        self.ln_f = nn.LayerNorm(C, eps=LN_EPS)

    def forward(self, idx, targets):
        b, t = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(t))[None]
        for blk in self.blocks:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied lm_head, no bias
        loss = F.cross_entropy(logits.view(-1, V), targets.view(-1))
        return logits, loss

    def slab(self):
        """Parameters in mixprec's slab order."""
        ps = [self.wte.weight, self.wpe.weight]
        for blk in self.blocks:
            ps += [blk.ln_1.weight, blk.ln_1.bias, blk.c_attn.weight, blk.c_attn.bias,
                   blk.c_proj.weight, blk.c_proj.bias, blk.ln_2.weight, blk.ln_2.bias,
                   blk.c_fc.weight, blk.c_fc.bias, blk.m_proj.weight, blk.m_proj.bias]
        ps += [self.ln_f.weight, self.ln_f.bias]
        return ps


def build(dtype):
    torch.manual_seed(1234)
    m = GPT()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0.0, 0.3)
        for blk in m.blocks:
            for ln in (blk.ln_1, blk.ln_2):
                ln.weight.add_(1.0)
            blk.c_attn.weight.mul_(2.0)
        m.ln_f.weight.add_(1.0)
    return m.to(dtype)


def flat(ts):
    return torch.cat([t.reshape(-1) for t in ts])


def run(dtype, idx, tgt):
    m = build(dtype)
    p0 = flat([p.detach().clone() for p in m.slab()])
    logits, loss = m(idx, tgt)
    loss.backward()
    grads = flat([p.grad for p in m.slab()])
    opt = torch.optim.AdamW(m.parameters(), lr=LR, betas=(BETA1, BETA2), eps=EPS,
                            weight_decay=WD)
    m.zero_grad()
    losses = []
    for _ in range(N_STEPS):
        opt.zero_grad()
        _, l = m(idx, tgt)
        losses.append(l.item())
        l.backward()
        opt.step()
    p1 = flat([p.detach().clone() for p in m.slab()])
    return p0, logits.detach().reshape(-1), loss.item(), grads, losses, p1


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "data", "gpt_block.bin")
    g = torch.Generator().manual_seed(7)
    idx = torch.randint(0, V, (BS, T), generator=g)
    tgt = torch.randint(0, V, (BS, T), generator=g)
    r32 = run(torch.float32, idx, tgt)
    r64 = run(torch.float64, idx, tgt)
    print("float32 vs float64: loss %.3e, max |dgrad| %.3e (max |grad| %.3e), "
          "max |dlogit| %.3e, step losses %.3e, params after %.3e" % (
              abs(r32[2] - r64[2]), (r32[3].double() - r64[3]).abs().max().item(),
              r64[3].abs().max().item(), (r32[1].double() - r64[1]).abs().max().item(),
              max(abs(a - b) for a, b in zip(r32[4], r64[4])),
              (r32[5].double() - r64[5]).abs().max().item()))
    p0, logits, loss0, grads, losses, p1 = r32
    with open(out, "wb") as f:
        f.write(struct.pack("<II", 0x5450474D, 1))
        f.write(struct.pack("<7i", V, T, C, H, L, BS, N_STEPS))
        f.write(struct.pack("<I", p0.numel()))
        f.write(p0.numpy().astype("<f4").tobytes())
        f.write(idx.reshape(-1).numpy().astype("<i4").tobytes())
        f.write(tgt.reshape(-1).numpy().astype("<i4").tobytes())
        f.write(logits.numpy().astype("<f4").tobytes())
        f.write(struct.pack("<d", loss0))
        f.write(grads.numpy().astype("<f4").tobytes())
        f.write(struct.pack("<%dd" % N_STEPS, *losses))
        f.write(p1.numpy().astype("<f4").tobytes())
        f.write(struct.pack("<5f", LR, BETA1, BETA2, EPS, WD))
    print("wrote %s: %d params, loss %.6f" % (out, p0.numel(), loss0))


if __name__ == "__main__":
    main()
