#!/usr/bin/env python3
"""llama.cpp side by side with octet_bench_engine, on the same weights.

The bench models are random-weight checkpoints of real shapes that
octet_bench_engine writes (engine/src/random_checkpoint.cpp). This script
writes GGUF copies of exactly those weights through gguf-py from a llama.cpp
source tree (BF16, and Q4_0 of every matrix as `llama-quantize --pure` would
make it), then runs llama.cpp's `llama-bench` and `octet_bench_engine`
alternately, round after round, at the same thread count, and prints the
ratios octet / llama.cpp (median over the rounds) and one JSON document.

  tests/bench/llama_cpp_peer.py --llama-cpp $HOME/src/llama.cpp \\
      --llama-bench $HOME/src/llama.cpp/build-noamx/bin/llama-bench \\
      --octet-bench build/default/tests/bench/octet_bench_engine \\
      [--threads 2] [--rounds 3] [--backend avx512] [--dir /tmp/octet-bench-engine]

Compared (the issue's goals in brackets):
  prefill_bf16   prompt of 512 tokens, BF16 weights                 [>= 1.2]
  decode_bf16    128 tokens, BF16 weights                           [>= 1.0]
  decode_q       octet --quantize nvfp4 on the BF16 checkpoint
                 against llama.cpp's Q4_0 of the same weights        [>= 1.0]

llama.cpp is built outside this repository from its public source tree; on
an AMX machine, build it without AMX (GGML_NATIVE=OFF, GGML_AVX512*=ON,
GGML_AMX_*=OFF) and pass --backend avx512 here so neither side uses AMX. For
a CPU with AVX2 only, build it with GGML_AVX512*=OFF as well (GGML_AVX2,
GGML_FMA, GGML_F16C on) and pass --backend avx2. Each round records the load
average (1 minute) before it starts: the machine may be shared.
Needs numpy (Debian: python3-numpy). Nothing of llama.cpp is committed.
"""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import time


def read_safetensors(path):
    """name -> (dtype, shape, numpy array viewing the file's bytes)."""
    import numpy as np
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = data[b:e]
        dt = info["dtype"]
        if dt == "BF16":
            arr = raw.view(np.uint16).reshape(info["shape"])
        elif dt == "F32":
            arr = raw.view(np.float32).reshape(info["shape"])
        else:
            raise SystemExit(f"{path}: tensor {name} is {dt}; only BF16/F32 checkpoints convert")
        out[name] = (dt, info["shape"], arr)
    return out


def bf16_to_f32(a):
    import numpy as np
    return (a.astype(np.uint32) << 16).view(np.float32)


def write_gguf(gguf, model_dir, out_path, qtype):
    """The checkpoint in model_dir (Qwen3 / Llama shapes) as GGUF: matrices in
    qtype (BF16 or Q4_0, token_embd included, as --pure), norms F32."""
    import numpy as np
    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    files = sorted(x for x in os.listdir(model_dir) if x.endswith(".safetensors"))
    tensors = {}
    for x in files:
        tensors.update(read_safetensors(os.path.join(model_dir, x)))
    mt = c["model_type"]
    arch = {"qwen3": "qwen3", "llama": "llama"}.get(mt)
    if arch is None:
        raise SystemExit(f"{model_dir}: model_type {mt} is not converted by this script")
    H, L = c["hidden_size"], c["num_hidden_layers"]
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim") or H // nh
    V = c["vocab_size"]
    w = gguf.GGUFWriter(out_path, arch)
    w.add_name(os.path.basename(model_dir))
    w.add_context_length(c.get("max_position_embeddings", 4096))
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_freq_base(float(c.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(c.get("rms_norm_eps", 1e-6)))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16 if qtype == "BF16"
                    else gguf.LlamaFileType.MOSTLY_Q4_0)
    # A placeholder SentencePiece vocabulary of V tokens (llama-bench feeds
    # random ids; the weights are random too): control tokens, the 256 byte
    # tokens SPM needs, then plain pieces.
    toks, scores, types = ["<unk>", "<s>", "</s>"], [0.0] * 3, [2, 3, 3]
    toks += [f"<0x{b:02X}>" for b in range(256)]
    scores += [0.0] * 256
    types += [6] * 256
    toks += [f"t{i}" for i in range(len(toks), V)]
    scores += [-float(i) for i in range(len(scores), V)]
    types += [1] * (V - len(types))
    w.add_tokenizer_model("llama")
    w.add_token_list(toks[:V])
    w.add_token_scores(scores[:V])
    w.add_token_types(types[:V])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)

    def matrix(name, arr):
        x = bf16_to_f32(arr) if arr.dtype == np.uint16 else np.asarray(arr, dtype=np.float32)
        if qtype == "BF16" and arr.dtype == np.uint16:  # the exact stored bits
            w.add_tensor(name, np.ascontiguousarray(arr), raw_dtype=gguf.GGMLQuantizationType.BF16)
        elif qtype == "BF16":
            data = gguf.quants.quantize(x, gguf.GGMLQuantizationType.BF16)
            w.add_tensor(name, data, raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            data = gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q4_0)
            w.add_tensor(name, data, raw_dtype=gguf.GGMLQuantizationType.Q4_0)

    def vector(name, arr):
        x = bf16_to_f32(arr) if arr.dtype == np.uint16 else np.asarray(arr, dtype=np.float32)
        w.add_tensor(name, np.ascontiguousarray(x, dtype=np.float32))

    def get(name):
        if name not in tensors:
            raise SystemExit(f"{model_dir}: tensor {name} is missing")
        return tensors[name][2]

    matrix("token_embd.weight", get("model.embed_tokens.weight"))
    for i in range(L):
        p = f"model.layers.{i}."
        b = f"blk.{i}."
        vector(b + "attn_norm.weight", get(p + "input_layernorm.weight"))
        matrix(b + "attn_q.weight", get(p + "self_attn.q_proj.weight"))
        matrix(b + "attn_k.weight", get(p + "self_attn.k_proj.weight"))
        matrix(b + "attn_v.weight", get(p + "self_attn.v_proj.weight"))
        matrix(b + "attn_output.weight", get(p + "self_attn.o_proj.weight"))
        if arch == "qwen3":
            vector(b + "attn_q_norm.weight", get(p + "self_attn.q_norm.weight"))
            vector(b + "attn_k_norm.weight", get(p + "self_attn.k_norm.weight"))
        vector(b + "ffn_norm.weight", get(p + "post_attention_layernorm.weight"))
        matrix(b + "ffn_gate.weight", get(p + "mlp.gate_proj.weight"))
        matrix(b + "ffn_up.weight", get(p + "mlp.up_proj.weight"))
        matrix(b + "ffn_down.weight", get(p + "mlp.down_proj.weight"))
    vector("output_norm.weight", get("model.norm.weight"))
    if not c.get("tie_word_embeddings", False):
        matrix("output.weight", get("lm_head.weight"))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def run_llama(bench, gguf_path, threads, n_prompt, n_gen, timeout):
    out = subprocess.run([bench, "-m", gguf_path, "-t", str(threads), "-p", str(n_prompt),
                          "-n", str(n_gen), "-r", "1", "-o", "json"],
                         capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise SystemExit(f"llama-bench failed ({out.returncode}):\n{out.stderr[-3000:]}")
    rows = json.loads(out.stdout)
    res = {}
    for r in rows:
        if r["n_prompt"] > 0 and r["n_gen"] == 0:
            res["prefill_tps"] = r["avg_ts"]
        elif r["n_gen"] > 0 and r["n_prompt"] == 0:
            res["decode_tps"] = r["avg_ts"]
    return res


def run_octet(bench, model, threads, backend, quantize, bench_dir, n_prompt, n_gen, timeout):
    out = subprocess.run([bench, "--threads", str(threads), "--dir", bench_dir, "--models", model,
                          "--prompt", str(n_prompt), "--decode", str(n_gen), "--concurrency", "1",
                          "--backend", backend, "--quantize", quantize, "--stream-mib", "64"],
                         capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise SystemExit(f"octet_bench_engine failed ({out.returncode}):\n{out.stderr[-3000:]}")
    m = json.loads(out.stdout)["models"][0]
    return {"prefill_tps": m["prefill_tps"], "decode_tps": m["decode_tps"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp source tree (its gguf-py)")
    ap.add_argument("--llama-bench", required=True, help="a built llama-bench")
    ap.add_argument("--octet-bench", required=True, help="octet_bench_engine")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backend", default="auto", help="octet kernel backend (avx512: no AMX)")
    ap.add_argument("--dir", default="/tmp/octet-bench-engine", help="octet_bench_engine --dir")
    ap.add_argument("--gguf-dir", default="/tmp/octet-bench-gguf")
    ap.add_argument("--model", default="qwen3-0.6b-bf16")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per program run")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(a.llama_cpp, "gguf-py"))
    try:
        import gguf  # noqa: E402
    except ImportError as e:
        raise SystemExit(f"cannot import gguf-py from {a.llama_cpp}/gguf-py ({e}); numpy installed?")

    model_dir = os.path.join(a.dir, a.model)
    if not os.path.exists(os.path.join(model_dir, "config.json")):
        print(f"writing {model_dir} (octet_bench_engine) ...", file=sys.stderr)
        run_octet(a.octet_bench, a.model, a.threads, a.backend, "off", a.dir, 16, 1, a.timeout)
    os.makedirs(a.gguf_dir, exist_ok=True)
    ggufs = {}
    for q in ("BF16", "Q4_0"):
        path = os.path.join(a.gguf_dir, f"{a.model}-{q}.gguf")
        stamp = os.path.getmtime(os.path.join(model_dir, "config.json"))
        if not os.path.exists(path) or os.path.getmtime(path) < stamp:
            print(f"writing {path} ...", file=sys.stderr)
            t = time.time()
            write_gguf(gguf, model_dir, path + ".tmp", q)
            os.replace(path + ".tmp", path)
            print(f"  {time.time() - t:.0f} s", file=sys.stderr)
        ggufs[q] = path

    rounds = []
    for r in range(a.rounds):
        one = {"load_average": os.getloadavg()[0]}
        print(f"round {r + 1}/{a.rounds} (load average {one['load_average']:.1f})",
              file=sys.stderr)
        one["llama_bf16"] = run_llama(a.llama_bench, ggufs["BF16"], a.threads, a.prompt, a.decode,
                                      a.timeout)
        one["octet_bf16"] = run_octet(a.octet_bench, a.model, a.threads, a.backend, "off", a.dir,
                                      a.prompt, a.decode, a.timeout)
        one["llama_q4_0"] = run_llama(a.llama_bench, ggufs["Q4_0"], a.threads, a.prompt, a.decode,
                                      a.timeout)
        one["octet_nvfp4"] = run_octet(a.octet_bench, a.model, a.threads, a.backend, "nvfp4",
                                       a.dir, a.prompt, a.decode, a.timeout)
        one["ratios"] = {
            "prefill_bf16": one["octet_bf16"]["prefill_tps"] / one["llama_bf16"]["prefill_tps"],
            "decode_bf16": one["octet_bf16"]["decode_tps"] / one["llama_bf16"]["decode_tps"],
            "prefill_q": one["octet_nvfp4"]["prefill_tps"] / one["llama_q4_0"]["prefill_tps"],
            "decode_q": one["octet_nvfp4"]["decode_tps"] / one["llama_q4_0"]["decode_tps"],
        }
        print("  " + "  ".join(f"{k} {v:.2f}x" for k, v in one["ratios"].items()), file=sys.stderr)
        print("  tok/s octet / llama.cpp: " + "  ".join(
            f"{o}/{l} {p} {one[o][p]:.1f}/{one[l][p]:.1f}"
            for o, l in (("octet_bf16", "llama_bf16"), ("octet_nvfp4", "llama_q4_0"))
            for p in ("prefill_tps", "decode_tps")), file=sys.stderr)
        rounds.append(one)
    goals = {"prefill_bf16": 1.2, "decode_bf16": 1.0, "decode_q": 1.0}
    median = {k: statistics.median(x["ratios"][k] for x in rounds) for k in rounds[0]["ratios"]}
    print(f"\noctet / llama.cpp, {a.model}, {a.threads} threads, median of {a.rounds} rounds "
          f"(backend {a.backend}):", file=sys.stderr)
    for k, v in median.items():
        g = goals.get(k)
        print(f"  {k:14s} {v:6.2f}x" + (f"   goal >= {g}: {'met' if v >= g else 'NOT met'}"
                                          if g else ""), file=sys.stderr)
    print(json.dumps({"model": a.model, "threads": a.threads, "backend": a.backend,
                      "prompt": a.prompt, "decode": a.decode, "rounds": rounds,
                      "median_ratios": median, "goals": goals}, indent=1))


if __name__ == "__main__":
    main()
