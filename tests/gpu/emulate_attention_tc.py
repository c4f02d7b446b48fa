#!/usr/bin/env python3
# The tensor-core prefill attention kernel (kernels/cuda/src/attention_tc.cu)
# emulated on the CPU, written line by line after the kernel where it indexes:
# its shared-memory arrays, the WMMA loads (row- or column-major with their
# leading dimension), mma and stores, the split of each query row and
# probability into two halves, the power-of-two row scaling and the online
# softmax; each case against float64 attention. It checks the kernel's
# arithmetic and indexing as transcribed, on a machine without a GPU: keep it
# in step with the kernel. Needs NumPy; about a second.
#
#   python3 tests/gpu/emulate_attention_tc.py
import sys

import numpy as np
kRows, kKeys, kFrag = 16, 64, 16
f16, f32 = np.float16, np.float32

def load(arr, off, ldm, major):  # a 16x16 tile as WMMA reads it
    t = np.empty((16, 16), arr.dtype)
    for i in range(16):
        for j in range(16):
            t[i, j] = arr[off + i * ldm + j] if major == "row" else arr[off + j * ldm + i]
    return t

def store(arr, off, ldm, tile):
    for i in range(16):
        arr[off + i * ldm: off + i * ldm + 16] = tile[i]

def mma(acc, a, b):
    return (acc.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)).astype(f32)

def add_split_product(acc, a_hi, a_lo, lda, b, b_off, b_step, ldb, b_major, steps):  # AddSplitProduct
    for kk in range(steps):
        fb = load(b, b_off + kk * b_step, ldb, b_major)
        acc = mma(acc, load(a_hi, kk * kFrag, lda, "row"), fb)
        acc = mma(acc, load(a_lo, kk * kFrag, lda, "row"), fb)
    return acc

def kernel(W, q, q_row_stride, k, v, ps, hs, positions, n_tokens, n_keys, n_heads, group, d, scale, out, out_row_stride):
    groups = (n_tokens + W * kRows - 1) // (W * kRows)
    for bx in range(groups):
        for head in range(n_heads):
            kv_head = head // group
            warps = []
            block_last = -1
            for warp in range(W):
                first_row = (bx * W + warp) * kRows
                q_hi = np.zeros(kRows * d, f16); q_lo = np.zeros(kRows * d, f16)
                o = np.zeros(kRows * d, f32)
                pos, unscale = [0] * kRows, [0.0] * kRows
                warp_last = -1
                for r in range(kRows):
                    t = first_row + r
                    p = positions[t] if t < n_tokens else -1
                    valid = t < n_tokens and 0 <= p < n_keys
                    pos[r] = p if valid else -1
                    warp_last = max(warp_last, pos[r])
                    base = t * q_row_stride + head * d
                    big = f32(0)
                    if valid:
                        big = max(abs(f32(q[base + c]) * f32(scale)) for c in range(d))
                    e = max(int(np.frexp(big)[1]) - 1, -110) if big > 0 else 0  # ilogbf
                    factor = f32(2.0 ** (12 - e)); unscale[r] = f32(2.0 ** (e - 12))
                    for c in range(d):
                        x = f32(f32(q[base + c]) * f32(scale)) * factor if valid else f32(0)
                        hi = f16(x); q_hi[r * d + c] = hi; q_lo[r * d + c] = f16(f32(x) - f32(hi))
                block_last = max(block_last, warp_last)
                warps.append(dict(first_row=first_row, q_hi=q_hi, q_lo=q_lo, o=o, pos=pos, unscale=unscale,
                                  warp_last=warp_last, m=[-np.inf] * kRows, l=[f32(0)] * kRows))
            last = block_last
            for j0 in range(0, last + 1, kKeys):
                k_tile = np.zeros(kKeys * d, f16); v_tile = np.zeros(kKeys * d, f16)
                for i in range(kKeys * d):
                    j, c = j0 + i // d, i % d
                    at = kv_head * hs + j * ps + c
                    if j <= last:
                        k_tile[i] = k[at]; v_tile[i] = v[at]
                for w in warps:
                    if not (j0 <= w["warp_last"]): continue
                    s = np.zeros(kRows * kKeys, f32)
                    for n in range(kKeys // kFrag):
                        acc = np.zeros((16, 16), f32)
                        acc = add_split_product(acc, w["q_hi"], w["q_lo"], d, k_tile, n * kFrag * d, kFrag, d, "col", d // kFrag)
                        store(s, n * kFrag, kKeys, acc)
                    p_hi = np.zeros(kRows * kKeys, f16); p_lo = np.zeros(kRows * kKeys, f16)
                    o = w["o"]
                    for r in range(kRows):
                        pr = w["pos"][r]
                        if pr < j0: continue
                        us = w["unscale"][r]
                        vals = [f32(s[r * kKeys + c] * us) for c in range(kKeys) if j0 + c <= pr]
                        tile_max = max(vals)
                        m_new = max(w["m"][r], tile_max)
                        alpha = f32(np.exp(f32(w["m"][r] - m_new)))
                        total = f32(0)
                        for c in range(kKeys):
                            p = f32(np.exp(f32(s[r * kKeys + c] * us) - f32(m_new))) if j0 + c <= pr else f32(0)
                            total += p
                            hi = f16(p); p_hi[r * kKeys + c] = hi; p_lo[r * kKeys + c] = f16(p - f32(hi))
                        w["l"][r] = f32(w["l"][r] * alpha + total); w["m"][r] = m_new
                        o[r * d:(r + 1) * d] *= alpha
                    for n in range(d // kFrag):
                        acc = load(o, n * kFrag, d, "row")
                        acc = add_split_product(acc, p_hi, p_lo, kKeys, v_tile, n * kFrag, kFrag * d, d, "row", kKeys // kFrag)
                        store(o, n * kFrag, d, acc)
            for w in warps:
                for r in range(kRows):
                    t = w["first_row"] + r
                    if t >= n_tokens: continue
                    inv = 1.0 / w["l"][r] if w["pos"][r] >= 0 else np.nan
                    out[t * out_row_stride + head * d: t * out_row_stride + head * d + d] = w["o"][r * d:(r + 1) * d] * f32(inv)

def reference(q, q_row_stride, k, v, ps, hs, positions, n_tokens, n_heads, group, d, scale):
    res = np.zeros((n_tokens, n_heads, d))
    for t in range(n_tokens):
        for h in range(n_heads):
            kvh = h // group; p = positions[t]
            qq = q[t * q_row_stride + h * d: t * q_row_stride + h * d + d].astype(np.float64)
            K = np.array([k[kvh * hs + j * ps: kvh * hs + j * ps + d] for j in range(p + 1)], np.float64)
            V = np.array([v[kvh * hs + j * ps: kvh * hs + j * ps + d] for j in range(p + 1)], np.float64)
            sc = K @ qq * scale; sc -= sc.max(); w = np.exp(sc); w /= w.sum()
            res[t, h] = w @ V
    return res

rng = np.random.default_rng(1)
failed = False
for (heads, kv, d, layout, n, start) in [(4, 2, 64, 0, 70, 0), (6, 1, 80, 2, 33, 0), (4, 1, 128, 2, 40, 90), (8, 4, 96, 1, 20, 16)]:
    W = 4 if d <= 64 else 2
    cap = start + n + 3
    q_row_stride = heads * d + 8; out_row_stride = heads * d + 3
    q = rng.uniform(-1, 1, n * q_row_stride).astype(f32)
    k = rng.uniform(-1, 1, cap * kv * d).astype(f16); v = rng.uniform(-1, 1, cap * kv * d).astype(f16)
    ps = d if layout == 0 else kv * d; hs = cap * d if layout == 0 else d   # layout 2 packed = 1's strides
    positions = [start + t for t in range(n)]
    out = np.zeros(n * out_row_stride, f32)
    kernel(W, q, q_row_stride, k, v, ps, hs, positions, n, start + n, heads, heads // kv, d, 1 / np.sqrt(d), out, out_row_stride)
    want = reference(q, q_row_stride, k, v, ps, hs, positions, n, heads, heads // kv, d, 1 / np.sqrt(d))
    got = np.array([out[t * out_row_stride: t * out_row_stride + heads * d] for t in range(n)]).reshape(n, heads, d)
    err, tol = np.abs(got - want).max(), 3e-5 * np.abs(v.astype(f32)).max()
    print(f"heads {heads}/{kv} d {d} layout {layout} {n}@{start}: max |err| {err:.2e} (test_cuda_backend's tolerance {tol:.1e})")
    failed |= not err <= tol
sys.exit(1 if failed else 0)
