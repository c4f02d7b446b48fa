#!/usr/bin/env python3
"""PyTorch CPU baseline for bench_train: the nanochat GPT exactly as
../shared/fixtures/README.md section B defines it (untied head, parameter-free
RMSNorm eps 1e-6, half-split RoPE then QK-norm, ReLU^2 MLP, no biases, logit
soft-cap), trained for a few AdamW steps on the batch bench_train wrote.

Usage: torch_nanochat.py DIR --threads N --steps S --warmup W
DIR holds config.json, model.safetensors (F32), x.npy, y.npy. Prints one JSON
line: tokens_per_second, step_ms (median), first_loss, torch version, threads.
"""
import argparse
import json
import statistics
import struct
import time

import numpy as np
import torch
import torch.nn.functional as F


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", name
        b, end = e["data_offsets"]
        out[name] = torch.from_numpy(
            np.frombuffer(data[base + b:base + end], dtype="<f4").reshape(e["shape"]).copy())
    return out


def rms(x, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rope(x, cos, sin):
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class NanochatGPT(torch.nn.Module):
    def __init__(self, cfg, weights):
        super().__init__()
        self.cfg = cfg
        self.w = torch.nn.ParameterDict(
            {k.replace(".", "__"): torch.nn.Parameter(v) for k, v in weights.items()})
        hd = cfg["n_embd"] // cfg["n_head"]
        inv_freq = 1.0 / (cfg.get("rope_theta", 10000.0) **
                          (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        t = torch.arange(cfg["sequence_len"], dtype=torch.float32)
        freqs = torch.outer(t, inv_freq)
        self.cos, self.sin = freqs.cos(), freqs.sin()

    def p(self, name):
        return self.w[name.replace(".", "__")]

    def forward(self, idx, tgt):
        cfg = self.cfg
        B, T = idx.shape
        C, H = cfg["n_embd"], cfg["n_head"]
        Hkv = cfg.get("n_kv_head", H)
        D = C // H
        eps = cfg.get("norm_eps", 1e-6)
        cap = cfg.get("softcap", 15.0)
        cos, sin = self.cos[:T], self.sin[:T]
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        x = rms(F.embedding(idx, self.p("transformer.wte.weight")), eps)
        for i in range(cfg["n_layer"]):
            pre = f"transformer.h.{i}."
            h = rms(x, eps)
            q = (h @ self.p(pre + "attn.c_q.weight").t()).view(B, T, H, D).transpose(1, 2)
            k = (h @ self.p(pre + "attn.c_k.weight").t()).view(B, T, Hkv, D).transpose(1, 2)
            v = (h @ self.p(pre + "attn.c_v.weight").t()).view(B, T, Hkv, D).transpose(1, 2)
            q, k = rms(rope(q, cos, sin), eps), rms(rope(k, cos, sin), eps)
            if Hkv != H:
                k = k.repeat_interleave(H // Hkv, dim=1)
                v = v.repeat_interleave(H // Hkv, dim=1)
            att = (q @ k.transpose(-2, -1)) * D ** -0.5
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, C)
            x = x + y @ self.p(pre + "attn.c_proj.weight").t()
            m = F.relu(rms(x, eps) @ self.p(pre + "mlp.c_fc.weight").t()).square()
            x = x + m @ self.p(pre + "mlp.c_proj.weight").t()
        logits = rms(x, eps) @ self.p("lm_head.weight").t()
        if cap > 0:
            logits = cap * torch.tanh(logits / cap)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    with open(f"{a.dir}/config.json") as f:
        cfg = json.load(f)
    model = NanochatGPT(cfg, load_safetensors(f"{a.dir}/model.safetensors"))
    x = torch.from_numpy(np.load(f"{a.dir}/x.npy").astype(np.int64))
    y = torch.from_numpy(np.load(f"{a.dir}/y.npy").astype(np.int64))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.0)
    times, first_loss = [], None
    for step in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if first_loss is None:
            first_loss = loss.item()
        if step >= a.warmup:
            times.append(dt)
    med = statistics.median(times)
    print(json.dumps({"tokens_per_second": x.numel() / med, "step_ms": med * 1e3,
                      "first_loss": first_loss, "torch": torch.__version__,
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
