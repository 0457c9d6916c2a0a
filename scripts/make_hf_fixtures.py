#!/usr/bin/env python3
"""make_hf_fixtures.py: tiny random Hugging Face checkpoints and their logits,
computed by transformers (not Kiln), for tests/test_hf.c.

Each fixture folder under tests/data/hf/<name>/ holds what save_pretrained
wrote (config.json, safetensors, generation_config.json, sometimes tokenizer
files) plus:
  oracle.json   {"ids": [...], "n_tokens": T, "vocab": V, "logits": "logits.f32"}
  logits.f32    T x V little-endian float32: model(ids).logits[0] in float32

The logits come from reloading the saved folder with from_pretrained(...,
dtype=float32), so f16/bf16 checkpoints are computed in float32 from exactly
the stored values (what Kiln does).

Usage (CPU is enough):
  python3 -m venv /tmp/hfvenv && /tmp/hfvenv/bin/pip install torch transformers safetensors
  /tmp/hfvenv/bin/python scripts/make_hf_fixtures.py tests/data/hf
"""
import json
import os
import shutil
import sys

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

PROMPT = [1, 17, 200, 45, 3, 99, 128, 7, 255, 64, 31, 2, 250, 5]

TOKENIZER_TEXTS = ["Hello world, this is Kiln.", "The lazy dog jumps over the quick brown fox.",
                   "<|im_start|>user\nwhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n4",
                   "caf\u00e9 na\u00efve \U0001F600 \u4f60\u597d", "  Hello  \n\n world  "]

TINY = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=256, max_position_embeddings=256)


def randomize(model, seed):
    """Every parameter random (HF's init leaves norms at 1 and biases at 0,
    which would hide a norm or bias wired wrong)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                v = 1.0 + 0.2 * torch.randn(p.shape, generator=g)
            elif name.endswith(".bias"):
                v = 0.2 * torch.randn(p.shape, generator=g)
            elif "embed_tokens" in name:
                v = 0.5 * torch.randn(p.shape, generator=g)
            else:
                v = 0.08 * torch.randn(p.shape, generator=g)
            p.copy_(v.to(p.dtype))


def write_tokenizer(out):
    """A small byte-level BPE tokenizer (Qwen2's kind) with a chat template,
    trained on a few sentences so its vocabulary fits the tiny model's 256
    ids, and saved the way transformers saves tokenizers (tokenizer.json,
    tokenizer_config.json, and the template where this version puts it)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tk = Tokenizer(models.BPE())
    # Qwen2's own normalizer and pre-tokenizer (as in its tokenizer.json);
    # transformers 5 applies these for model_type qwen2 whatever the file says.
    tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                                   r"|\s*[\r\n]+|\s+(?!\S)|\s+"), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    text = ["Hello world, this is Kiln.", "The quick brown fox jumps over the lazy dog.",
            "user: what is 2 + 2?\nassistant: 4", "caf\u00e9 na\u00efve \U0001F600 \u4f60\u597d"] * 4
    tk.train_from_iterator(text, trainers.BpeTrainer(vocab_size=200, special_tokens=specials, show_progress=False))
    assert tk.get_vocab_size() <= 256
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", bos_token=None,
                                   pad_token="<|endoftext|>")
    fast.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    fast.save_pretrained(out)


def to_v4_config(path):
    """Rewrites a transformers-5 config.json with the transformers-4 keys
    (rope_theta and rope_scaling at the top, torch_dtype): what most
    checkpoints on the Hub carry."""
    with open(path) as f:
        c = json.load(f)
    rp = c.pop("rope_parameters")
    c["rope_theta"] = rp.pop("rope_theta")
    c["rope_scaling"] = rp if rp.get("rope_type", "default") != "default" else None
    if "dtype" in c:
        c["torch_dtype"] = c.pop("dtype")
    with open(path, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)


def make(root, name, config, dtype, seed, shard=None, v4=False, tokenizer=False, gen_eos=None):
    out = os.path.join(root, name)
    shutil.rmtree(out, ignore_errors=True)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    randomize(model, seed)
    model = model.to(dtype)
    kw = {"safe_serialization": True}
    if shard:
        kw["max_shard_size"] = shard
    model.save_pretrained(out, **kw)
    if v4:
        to_v4_config(os.path.join(out, "config.json"))
    if gen_eos is not None:
        p = os.path.join(out, "generation_config.json")
        with open(p) as f:
            gc = json.load(f)
        gc["eos_token_id"] = gen_eos
        with open(p, "w") as f:
            json.dump(gc, f, indent=2, sort_keys=True)
    if tokenizer:
        write_tokenizer(out)

    # The oracle: the saved folder, reloaded, computed in float32.
    ref = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager")
    ref.eval()
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        logits = ref(ids).logits[0].float().numpy()
        # A fresh float32 model holding the same (rounded) weights agrees, so
        # the reload read what was meant. (Not model.float(): .to(bfloat16)
        # also rounds the rotary inv_freq buffer.)
        mem = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="eager")
        mem.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
        same = mem.eval()(ids).logits[0].float().numpy()
    err = np.abs(logits - same).max() / np.abs(same).max()
    assert err < 1e-5, (name, err)
    assert logits.shape == (len(PROMPT), config.vocab_size)
    logits.astype("<f4").tofile(os.path.join(out, "logits.f32"))
    oracle = {"ids": PROMPT, "n_tokens": len(PROMPT), "vocab": config.vocab_size,
              "logits": "logits.f32", "dtype": str(dtype).replace("torch.", "")}
    if tokenizer:  # encode(text, add_special_tokens=False) of a few texts
        from transformers import AutoTokenizer
        from tokenizers import Tokenizer
        tok = AutoTokenizer.from_pretrained(out)
        plain = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
        oracle["tokenizer"] = [{"text": t, "ids": tok.encode(t, add_special_tokens=False)} for t in TOKENIZER_TEXTS]
        for case in oracle["tokenizer"]:  # the file alone says the same as transformers
            assert plain.encode(case["text"], add_special_tokens=False).ids == case["ids"], case
    with open(os.path.join(out, "oracle.json"), "w") as f:
        json.dump(oracle, f, indent=1, ensure_ascii=False)
    size = sum(os.path.getsize(os.path.join(out, x)) for x in os.listdir(out))
    print(f"{name}: {sorted(os.listdir(out))}, {size} bytes, max |logit| {np.abs(logits).max():.3f}")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "tests/data/hf"
    os.makedirs(root, exist_ok=True)
    make(root, "llama_f32", LlamaConfig(**TINY, rms_norm_eps=1e-5, tie_word_embeddings=False), torch.float32, 1)
    make(root, "llama3_rope_bf16",
         LlamaConfig(**TINY, rms_norm_eps=1e-5, rope_theta=10000.0,
                     rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
         torch.bfloat16, 2, v4=True)
    make(root, "llama_tied_f16", LlamaConfig(**TINY, rms_norm_eps=1e-6, tie_word_embeddings=True), torch.float16, 3)
    make(root, "qwen2_bf16",
         Qwen2Config(**TINY, rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False,
                     eos_token_id=2),
         torch.bfloat16, 4, tokenizer=True, gen_eos=[2, 1])
    try:
        from transformers import Qwen3Config
    except ImportError:
        print("this transformers has no Qwen3: qwen3 fixture skipped")
        return
    make(root, "qwen3_f32_sharded",
         Qwen3Config(**dict(TINY, head_dim=24), rms_norm_eps=1e-6, rope_theta=1000000.0,
                     tie_word_embeddings=False, attention_bias=False),
         torch.float32, 5, shard="100KB")
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, numpy {np.__version__}")


if __name__ == "__main__":
    main()
