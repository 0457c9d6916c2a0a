#!/usr/bin/env python3
"""make_random_gguf.py: GGUF files for logits comparisons (scripts/compare_logits.sh).

  make_random_gguf.py random MODEL OUT.gguf [--seed S]
      Random weights in the real shapes of MODEL (qwen3-0.6b or llama-3.2-1b),
      2D weights F16, norms and rope factors F32, with a small generated
      byte-level BPE vocabulary (tokenizer.ggml.model gpt2, pre default) of the
      model's vocabulary size, so llama.cpp loads the file. Quantized copies
      come from llama-quantize (compare_logits.sh does that).
  make_random_gguf.py dequant IN.gguf OUT.gguf
      Every tensor of IN dequantized to F32, metadata copied: the same weights
      without llama.cpp's activation quantization in its matmuls.

The files are large (up to 2.5 GB): they belong in the cache, never in the
repository. Needs `pip install gguf numpy`.
"""
import argparse
import math
import sys

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("make_random_gguf.py: needs the gguf package (pip install gguf numpy)")

# Config values from the models' Hugging Face config.json files.
MODELS = {
    # Qwen/Qwen3-0.6B: head_dim 128 != hidden/heads (64), q/k RMS norm per head,
    # tied embeddings, NEOX-style rope.
    "qwen3-0.6b": dict(
        arch="qwen3", n_embd=1024, n_layer=28, n_head=16, n_head_kv=8, head_dim=128, n_ff=3072,
        n_vocab=151936, rope_theta=1000000.0, norm_eps=1e-6, n_ctx=40960, tied=True, qk_norm=True,
        bos=None, eos=151645, add_bos=False,
    ),
    # meta-llama/Llama-3.2-1B: tied embeddings, rope_scaling rope_type llama3
    # (factor 32, low_freq_factor 1, high_freq_factor 4, original context 8192),
    # stored as the rope_freqs.weight tensor like llama.cpp's converter does.
    "llama-3.2-1b": dict(
        arch="llama", n_embd=2048, n_layer=16, n_head=32, n_head_kv=8, head_dim=64, n_ff=8192,
        n_vocab=128256, rope_theta=500000.0, norm_eps=1e-5, n_ctx=131072, tied=True, qk_norm=False,
        bos=128000, eos=128001, add_bos=True,
        llama3_scaling=dict(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0, original_ctx=8192),
    ),
}


def llama3_rope_factors(head_dim, theta, factor, low_freq_factor, high_freq_factor, original_ctx):
    """Divisors of each rope frequency under Llama 3's rope scaling (Meta's formula)."""
    low_wavelen = original_ctx / low_freq_factor
    high_wavelen = original_ctx / high_freq_factor
    out = []
    for i in range(0, head_dim, 2):
        freq = 1.0 / theta ** (i / head_dim)
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (original_ctx / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def byte_level_alphabet():
    """GPT-2's byte -> printable character map: 256 distinct one-character tokens."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def make_vocab(n_vocab, bos, eos):
    """A small valid byte-level BPE vocabulary of exactly n_vocab tokens: the 256
    byte tokens, a few merges and their results, fillers, and the special tokens."""
    tokens = byte_level_alphabet()
    merges = ["Ġ t", "t h", "Ġ a", "i n", "e r", "Ġt h", "o n", "r e"]
    for m in merges:
        tokens.append(m.replace(" ", ""))
    specials = {}
    if bos is not None:
        specials[bos] = "<|begin_of_text|>"
    specials[eos] = "<|end_of_text|>"
    types = [1] * len(tokens)  # NORMAL
    i = 0
    while len(tokens) < n_vocab:
        tid = len(tokens)
        if tid in specials:
            tokens.append(specials[tid])
            types.append(3)  # CONTROL
        else:
            tokens.append("Ġw%d" % i)
            types.append(1)
            i += 1
    assert len(set(tokens)) == n_vocab
    return tokens, types, merges


def add_tokenizer(w, c):
    tokens, types, merges = make_vocab(c["n_vocab"], c["bos"], c["eos"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    if c["bos"] is not None:
        w.add_bos_token_id(c["bos"])
    w.add_eos_token_id(c["eos"])
    w.add_add_bos_token(c["add_bos"])


def random_model(name, out, seed):
    c = MODELS[name]
    rng = np.random.default_rng(seed)
    arch, D, F, hd = c["arch"], c["n_embd"], c["n_ff"], c["head_dim"]
    qd, kvd = c["n_head"] * hd, c["n_head_kv"] * hd
    w = gguf.GGUFWriter(out, arch)
    w.add_name("random %s (seed %d)" % (name, seed))
    w.add_context_length(c["n_ctx"])
    w.add_embedding_length(D)
    w.add_block_count(c["n_layer"])
    w.add_feed_forward_length(F)
    w.add_head_count(c["n_head"])
    w.add_head_count_kv(c["n_head_kv"])
    w.add_rope_freq_base(c["rope_theta"])
    w.add_layer_norm_rms_eps(c["norm_eps"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_vocab_size(c["n_vocab"])
    if arch == "llama":  # llama.cpp's converter writes it for llama; qwen3 files leave it out
        w.add_rope_dimension_count(hd)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    add_tokenizer(w, c)

    def mat(rows, cols):
        # ~N(0, 1/cols): every projection keeps its input's scale.
        return (rng.standard_normal((rows, cols), dtype=np.float32) / math.sqrt(cols)).astype(np.float16)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n, dtype=np.float32)).astype(np.float32)

    # (vocab, dim): with tied output, logits = emb . h with |h| ~ sqrt(dim): logits ~ N(0, 1).
    w.add_tensor("token_embd.weight", mat(c["n_vocab"], D))
    w.add_tensor("output_norm.weight", norm(D))
    if not c["tied"]:
        w.add_tensor("output.weight", mat(c["n_vocab"], D))
    if "llama3_scaling" in c:
        s = c["llama3_scaling"]
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(hd, c["rope_theta"], s["factor"], s["low_freq_factor"],
                                                              s["high_freq_factor"], s["original_ctx"]))
    for l in range(c["n_layer"]):
        p = "blk.%d." % l
        w.add_tensor(p + "attn_norm.weight", norm(D))
        w.add_tensor(p + "attn_q.weight", mat(qd, D))  # (n_head*hd, dim)
        w.add_tensor(p + "attn_k.weight", mat(kvd, D))  # (n_head_kv*hd, dim)
        w.add_tensor(p + "attn_v.weight", mat(kvd, D))
        if c["qk_norm"]:
            w.add_tensor(p + "attn_q_norm.weight", norm(hd))
            w.add_tensor(p + "attn_k_norm.weight", norm(hd))
        w.add_tensor(p + "attn_output.weight", mat(D, qd))  # (dim, n_head*hd)
        w.add_tensor(p + "ffn_norm.weight", norm(D))
        w.add_tensor(p + "ffn_gate.weight", mat(F, D))  # (ff, dim)
        w.add_tensor(p + "ffn_up.weight", mat(F, D))
        w.add_tensor(p + "ffn_down.weight", mat(D, F))  # (dim, ff)
    write(w)


def write(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def dequant(src, out):
    from gguf.quants import dequantize

    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(out, arch)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.alignment"):
            continue
        if key == "general.file_type":
            w.add_file_type(gguf.LlamaFileType.ALL_F32)
            continue
        vtype = f.types[0]
        sub = f.types[1] if vtype == gguf.GGUFValueType.ARRAY and len(f.types) > 1 else None
        w.add_key_value(key, f.contents(), vtype, sub)
    for t in r.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float32)
        w.add_tensor(t.name, a.reshape([int(x) for x in reversed(t.shape)]))
    write(w)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("random")
    a.add_argument("model", choices=sorted(MODELS))
    a.add_argument("out")
    a.add_argument("--seed", type=int, default=1)
    d = sub.add_parser("dequant")
    d.add_argument("src")
    d.add_argument("out")
    args = ap.parse_args()
    if args.cmd == "random":
        random_model(args.model, args.out, args.seed)
    else:
        dequant(args.src, args.out)


if __name__ == "__main__":
    main()
