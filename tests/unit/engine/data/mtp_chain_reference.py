#!/usr/bin/env python3
"""Regenerates mtp_chain_references.json (needs numpy). Not run by the tests.

The fixtures' MTP reference (glm4_moe's `mtp` section) covers only the head's
first draft step. This script is an independent float32 NumPy implementation
of the fixtures' glm4_moe recipe (../shared/fixtures/README.md: the main
forward and the MTP layer) that extends it to the chain vLLM runs for drafts
2..k: MTP position p is fed the MTP layer's own output at position p - 1
(before shared_head.norm) and the embedding of the draft that output gave,
at RoPE position p, attending over the head's KV of every earlier position.
Before it writes anything it checks itself against the fixture: its main
logits against logits.npy and its first-step MTP logits against
mtp_logits.npy (the differences are recorded in the output).

test_speculative's mtpChainMatchesTheReference compares the engine's chained
draft logits with the file.

  python3 mtp_chain_reference.py FIXTURES_DIR > mtp_chain_references.json
"""
import hashlib
import json
import re
import struct
import sys

import numpy as np

MODELS = ["glm4-moe-tiny", "glm4-moe-tiny-nvfp4"]
K = 3  # drafts a chain makes: the first step and two chained ones

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)


def e4m3(codes):
    """float8_e4m3fn codes -> float32 (no infinities; 0x7f/0xff are NaN)."""
    c = codes.astype(np.int32)
    sign = np.where(c & 0x80, -1.0, 1.0)
    exp = (c >> 3) & 0xF
    man = c & 0x7
    normal = (1.0 + man / 8.0) * np.exp2(exp - 7.0)
    sub = (man / 8.0) * np.exp2(-6.0)
    v = sign * np.where(exp == 0, sub, normal)
    v = np.where((c & 0x7F) == 0x7F, np.nan, v)
    return v.astype(np.float32)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        b, e = meta["data_offsets"]
        raw = np.frombuffer(data[base + b:base + e], dtype=np.uint8)
        shape = meta["shape"]
        dt = meta["dtype"]
        if dt == "F32":
            arr = raw.view(np.float32).reshape(shape)
        elif dt == "BF16":
            arr = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
        elif dt == "U8":
            arr = raw.reshape(shape)
        elif dt == "F8_E4M3":
            arr = e4m3(raw).reshape(shape)
        else:
            raise ValueError(f"{path}: {name}: dtype {dt}")
        out[name] = arr
    return out


class Weights:
    def __init__(self, tensors):
        self.t = tensors

    def __getitem__(self, name):
        return self.t[name]

    def matrix(self, prefix):
        """`prefix`.weight as float32 [out, in]; NVFP4 dequantized as the README says."""
        w = self.t[prefix + ".weight"]
        if w.dtype == np.float32:
            return w
        codes = np.empty((w.shape[0], w.shape[1] * 2), np.uint8)
        codes[:, 0::2] = w & 0xF  # low nibble = even column
        codes[:, 1::2] = w >> 4
        scale = np.repeat(self.t[prefix + ".weight_scale"], 16, axis=1)
        scale2 = np.float32(self.t[prefix + ".weight_scale_2"].reshape(()))
        return (E2M1[codes] * scale).astype(np.float32) * scale2


def rmsnorm(x, w, eps):
    x = x.astype(np.float32)
    return (w * (x * (1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps))))).astype(np.float32)


def silu(x):
    return (x / (np.float32(1) + np.exp(-x))).astype(np.float32)


class Glm4Moe:
    def __init__(self, folder):
        self.cfg = json.load(open(folder + "/config.json"))
        self.w = Weights(read_safetensors(folder + "/model.safetensors"))
        c = self.cfg
        self.H = c["hidden_size"]
        self.heads = c["num_attention_heads"]
        self.kv = c["num_key_value_heads"]
        self.hd = c.get("head_dim", self.H // self.heads)
        self.rot = int(self.hd * c["partial_rotary_factor"])
        self.eps = c["rms_norm_eps"]
        i = np.arange(self.rot // 2, dtype=np.float32)
        self.inv_freq = (np.float32(1.0) / np.float32(c["rope_theta"]) ** (np.float32(2) * i / np.float32(self.rot))).astype(np.float32)

    def rope(self, x, positions):
        # x [T, heads, hd]; half-split rotation of the first `rot` features.
        ang = positions.astype(np.float32)[:, None] * self.inv_freq[None, :]
        cos = np.cos(ang)[:, None, :]
        sin = np.sin(ang)[:, None, :]
        h = self.rot // 2
        a = x[..., :h].copy()
        b = x[..., h:self.rot].copy()
        out = x.copy()
        out[..., :h] = a * cos - b * sin
        out[..., h:self.rot] = b * cos + a * sin
        return out

    def mlp(self, p, n):
        gate = n @ self.w.matrix(p + ".gate_proj").T
        up = n @ self.w.matrix(p + ".up_proj").T
        return (silu(gate) * up) @ self.w.matrix(p + ".down_proj").T

    def moe(self, p, n):
        c = self.cfg
        E = c["n_routed_experts"]
        s = (1.0 / (1.0 + np.exp(-(n @ self.w[p + ".gate.weight"].T)))).astype(np.float32)
        b = s + self.w[p + ".gate.e_score_correction_bias"]
        G = c["n_group"]
        per = E // G
        out = np.zeros_like(n)
        for t in range(n.shape[0]):
            groups = b[t].reshape(G, per)
            gscore = np.sort(groups, axis=1)[:, -2:].sum(axis=1)
            kept = np.argsort(-gscore, kind="stable")[:c["topk_group"]]
            masked = np.full(E, -np.inf, np.float32)
            for g in kept:
                masked[g * per:(g + 1) * per] = b[t, g * per:(g + 1) * per]
            chosen = np.argsort(-masked, kind="stable")[:c["num_experts_per_tok"]]
            wsum = s[t, chosen].sum()
            for e in chosen:
                we = s[t, e] / (wsum + np.float32(1e-20)) if c["norm_topk_prob"] else s[t, e]
                we = np.float32(we * np.float32(c["routed_scaling_factor"]))
                out[t] += we * self.mlp(f"{p}.experts.{e}", n[t:t + 1])[0]
        return out + self.mlp(p + ".shared_experts", n)

    def layer(self, i, x, positions, cache):
        """One decoder layer over rows `x` at `positions`; `cache` (k, v lists)
        holds the earlier positions and is extended. Causal by position."""
        p = f"model.layers.{i}"
        w = self.w
        T = x.shape[0]
        n = rmsnorm(x, w[p + ".input_layernorm.weight"], self.eps)
        q = (n @ w.matrix(p + ".self_attn.q_proj").T + w[p + ".self_attn.q_proj.bias"]).reshape(T, self.heads, self.hd)
        k = (n @ w.matrix(p + ".self_attn.k_proj").T + w[p + ".self_attn.k_proj.bias"]).reshape(T, self.kv, self.hd)
        v = (n @ w.matrix(p + ".self_attn.v_proj").T + w[p + ".self_attn.v_proj.bias"]).reshape(T, self.kv, self.hd)
        if self.cfg["use_qk_norm"]:
            q = rmsnorm(q, w[p + ".self_attn.q_norm.weight"], self.eps)
            k = rmsnorm(k, w[p + ".self_attn.k_norm.weight"], self.eps)
        q, k = self.rope(q, positions), self.rope(k, positions)
        cache[0].extend(zip(positions.tolist(), k))
        cache[1].extend(zip(positions.tolist(), v))
        kpos = np.array([pp for pp, _ in cache[0]])
        K_ = np.stack([kk for _, kk in cache[0]])
        V_ = np.stack([vv for _, vv in cache[1]])
        o = np.zeros((T, self.heads, self.hd), np.float32)
        group = self.heads // self.kv
        for t in range(T):
            visible = kpos <= positions[t]
            for h in range(self.heads):
                j = h // group
                sc = (K_[visible, j] @ q[t, h]) * np.float32(self.hd ** -0.5)
                sc = np.exp(sc - sc.max())
                o[t, h] = (sc / sc.sum()) @ V_[visible, j]
        x = x + o.reshape(T, -1) @ w.matrix(p + ".self_attn.o_proj").T
        n = rmsnorm(x, w[p + ".post_attention_layernorm.weight"], self.eps)
        if i < self.cfg["first_k_dense_replace"]:
            return x + self.mlp(p + ".mlp", n)
        return x + self.moe(p + ".mlp", n)

    def main(self, ids):
        w = self.w
        x = w["model.embed_tokens.weight"][ids]
        pos = np.arange(len(ids))
        for i in range(self.cfg["num_hidden_layers"]):
            x = self.layer(i, x, pos, ([], []))
        h = rmsnorm(x, w["model.norm.weight"], self.eps)
        return h, h @ w["lm_head.weight"].T

    def mtp_step(self, h, next_ids, positions, cache):
        """The MTP layer over rows: h (the main model's hidden after model.norm,
        or the layer's own earlier output), the token that followed each."""
        L = self.cfg["num_hidden_layers"]
        p = f"model.layers.{L}"
        w = self.w
        e = w[p + ".embed_tokens.weight"][next_ids].copy()
        e[positions == 0] = 0  # vLLM zeroes the embedding at position 0
        u = np.concatenate([rmsnorm(e, w[p + ".enorm.weight"], self.eps),
                            rmsnorm(h, w[p + ".hnorm.weight"], self.eps)], axis=1) @ w[p + ".eh_proj.weight"].T
        y = self.layer(L, u.astype(np.float32), positions, cache)
        logits = rmsnorm(y, w[p + ".shared_head.norm.weight"], self.eps) @ w[p + ".shared_head.head.weight"].T
        return y, logits


def top2_gap(row):
    s = np.sort(row)
    return float(s[-1] - s[-2])


def main():
    fixtures = sys.argv[1] if len(sys.argv) > 1 else "../../../../../shared/fixtures"
    doc = {
        "note": "Chained MTP draft logits (drafts 2..k) for the glm4_moe fixtures, from "
                "tests/unit/engine/data/mtp_chain_reference.py (float32 NumPy, the fixture README's "
                "recipe extended as vLLM chains one MTP layer); checked against the fixture's logits "
                "and first-step MTP logits before writing (max_abs_err_*).",
        "k": K,
        "models": [],
    }
    for name in MODELS:
        folder = f"{fixtures}/{name}"
        ref = json.load(open(folder + "/reference.json"))
        m = Glm4Moe(folder)
        seq = np.array(ref["prompt_ids"] + ref["generated_ids"])
        T = len(seq) - 1
        h, logits = m.main(seq[:T])
        main_err = float(np.abs(logits - np.load(folder + "/logits.npy")).max())
        cache = ([], [])
        y, mtp_logits = m.mtp_step(h, seq[1:T + 1], np.arange(T), cache)
        mtp_err = float(np.abs(mtp_logits - np.load(folder + "/" + ref["mtp"]["logits_file"])).max())
        if main_err > 2e-4 or mtp_err > 2e-4:
            sys.exit(f"{name}: this implementation disagrees with the fixture "
                     f"(main {main_err:.3g}, mtp {mtp_err:.3g}); nothing written")
        assert [int(np.argmax(r)) for r in mtp_logits] == ref["mtp"]["draft_ids"]
        cases = []
        for fed in range(1, T + 1):
            # Every prefix: the head fed positions 0..fed-1 (main hidden j,
            # token S[j+1]), then chained: position fed-1+s from its own
            # output and draft s.
            cache = ([], [])
            yy, ll = m.mtp_step(h[:fed], seq[1:fed + 1], np.arange(fed), cache)
            drafts = [int(np.argmax(ll[-1]))]
            prev = yy[-1:]
            chain, gaps = [], [top2_gap(ll[-1])]
            for s in range(1, K):
                prev, cl = m.mtp_step(prev, np.array([drafts[-1]]), np.array([fed - 1 + s]), cache)
                chain.append([float(f"{v:.7g}") for v in cl[0]])
                gaps.append(top2_gap(cl[0]))
                drafts.append(int(np.argmax(cl[0])))
            cases.append({"fed": fed, "drafts": drafts, "top2_gaps": [round(g, 6) for g in gaps],
                          "chain_logits": chain})
        doc["models"].append({
            "model": name,
            "safetensors_sha256": hashlib.sha256(open(folder + "/model.safetensors", "rb").read()).hexdigest(),
            "max_abs_err_main_logits": main_err,
            "max_abs_err_mtp_logits": mtp_err,
            "cases": cases,
        })
    # One line per logits row, so that a regenerated file diffs by row.
    text = json.dumps(doc, indent=1)
    text = re.sub(r"\[\s+(-?[0-9][^\[\]]*?)\s+\]", lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]", text)
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
