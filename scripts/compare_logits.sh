#!/usr/bin/env bash
# scripts/compare_logits.sh - Kiln's logits beside llama.cpp's on the same
# GGUF files and token ids: max relative error per position,
# max|kiln - llama.cpp| / max|llama.cpp|, target <= 1e-2.
#
# Usage
#   scripts/compare_logits.sh [FILE.gguf ...]
# Without files: random-weight GGUFs in the real shapes of Qwen3-0.6B and
# Llama-3.2-1B (scripts/make_random_gguf.py, F16, then Q8_0, Q4_0 and Q4_K
# made from the F16 file by `llama-quantize --pure`), and SmolLM2-135M-Instruct
# Q4_1 when it is in the cache (scripts/make_llama_refs.sh fetches it). All of
# them live in $KILN_CACHE/models/compare/, never in the repository.
#
# For each file: llama.cpp (scripts/llama_ref.sh --dump) runs POSITIONS prompt
# tokens in one batch, then STEPS greedy decode steps; Kiln (a Release build of
# `kiln` and tests/dump_logits) runs the same tokens: prefill with all_logits,
# then decode. With DEQUANT=1 (the default) llama.cpp also runs the same
# weights dequantized to F32 (make_random_gguf.py dequant), which separates
# llama.cpp's rounding of activations in quantized/F16 matmuls from errors
# in Kiln.
#
# Environment: KILN_CACHE (~/.cache/kiln), POSITIONS (8), STEPS (4),
# THREADS (nproc), DEQUANT (1), BUILD (build-compare, under the repo),
# TARGET (1e-2; only reported against, exit 1 when exceeded).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
CACHE=${KILN_CACHE:-$HOME/.cache/kiln}
DIR=$CACHE/models/compare
POSITIONS=${POSITIONS:-8}
STEPS=${STEPS:-4}
THREADS=${THREADS:-$(nproc 2>/dev/null || echo 2)}
DEQUANT=${DEQUANT:-1}
BUILD=${BUILD:-$ROOT/build-compare}
TARGET=${TARGET:-1e-2}
log() { echo "[compare_logits] $*" >&2; }

python3 -c 'import gguf, numpy' 2>/dev/null || { log "needs: pip install gguf numpy"; exit 1; }
BIN_DIR=$(bash "$HERE/llama_cpp.sh" --print-bin-dir)
bash "$HERE/llama_ref.sh" --build-only >/dev/null
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" --target kiln dump_logits -j "$THREADS" >/dev/null
KILN=$BUILD/kiln
DUMP=$BUILD/tests/dump_logits
mkdir -p "$DIR"

files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  for m in qwen3-0.6b llama-3.2-1b; do
    f16=$DIR/random-$m.f16.gguf
    if [ ! -f "$f16" ]; then
      log "making $f16"
      python3 "$HERE/make_random_gguf.py" random "$m" "$f16.tmp.$$"
      mv "$f16.tmp.$$" "$f16"
    fi
    files+=("$f16")
    for q in q8_0 q4_0 q4_k; do
      out=$DIR/random-$m.$q.gguf
      if [ ! -f "$out" ]; then
        log "quantizing $out (llama-quantize --pure ${q^^})"
        "$BIN_DIR/llama-quantize" --pure "$f16" "$out.tmp.$$" "${q^^}" "$THREADS" >"$DIR/quantize.log" 2>&1 ||
          { tail -5 "$DIR/quantize.log" >&2; exit 1; }
        mv "$out.tmp.$$" "$out"
      fi
      files+=("$out")
    done
  done
  smol=$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf
  if [ -f "$smol" ]; then files+=("$smol"); else log "no $smol (run scripts/make_llama_refs.sh); left out"; fi
fi

WORK=$(mktemp -d "$CACHE/compare-work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
results=()
worst=0
for f in "${files[@]}"; do
  name=$(basename "$f" .gguf)
  t0=$SECONDS
  # Token ids: fixed pseudo-random ids over the whole vocabulary (the random
  # models have a synthetic one), or English text for a real model.
  n_vocab=$(python3 -c 'import sys; from gguf import GGUFReader; r = GGUFReader(sys.argv[1]); print([t for t in r.tensors if t.name == "token_embd.weight"][0].shape[1])' "$f")
  if [[ $name == random-* ]]; then
    ids=$(python3 -c 'import random, sys; r = random.Random(7); print(" ".join(str(r.randrange(int(sys.argv[1]))) for _ in range(int(sys.argv[2]))))' "$n_vocab" "$POSITIONS")
    prompt=(--ids "$ids")
  else
    prompt=(-p "The history of the Roman Empire is long, and it")
  fi
  log "$name: llama.cpp"
  bash "$HERE/llama_ref.sh" -m "$f" "${prompt[@]}" -n "$STEPS" -t "$THREADS" --dump "$WORK/ref.bin" >"$WORK/ref.jsonl"
  n_rows=$(python3 -c 'import struct, sys; print(struct.unpack("<4I", open(sys.argv[1], "rb").read(24)[8:])[2])' "$WORK/ref.bin")
  log "$name: kiln compile + dump ($n_rows positions)"
  "$KILN" compile "$f" -o "$WORK/m.kiln" --max-seq $((n_rows + 16)) --prefill "$n_rows" >/dev/null
  tk=$SECONDS
  "$DUMP" "$WORK/m.kiln" --like "$WORK/ref.bin" -o "$WORK/kiln.bin"
  tk=$((SECONDS - tk))
  rm -f "$WORK/m.kiln"
  extra=()
  if [ "$DEQUANT" = 1 ]; then
    log "$name: llama.cpp on the weights dequantized to F32"
    python3 "$HERE/make_random_gguf.py" dequant "$f" "$WORK/f32.gguf"
    all=$(python3 -c 'import struct, sys; b = open(sys.argv[1], "rb").read(); n = struct.unpack("<I", b[16:20])[0]; print(" ".join(map(str, struct.unpack("<%di" % n, b[24:24 + 4 * n]))))' "$WORK/ref.bin")
    bash "$HERE/llama_ref.sh" -m "$WORK/f32.gguf" --ids "$all" -n 0 -t "$THREADS" --dump "$WORK/f32.bin" >/dev/null
    rm -f "$WORK/f32.gguf"
    extra=("$WORK/f32.bin")
  fi
  line=$(python3 - "$name" "$WORK/kiln.bin" "$WORK/ref.bin" "$TARGET" "$((SECONDS - t0))" "$tk" "${extra[@]}" <<'PY'
import struct, sys
import numpy as np
name, kiln, ref, target, secs, tk = sys.argv[1:7]
f32 = sys.argv[7] if len(sys.argv) > 7 else None

def load(p):
    b = open(p, "rb").read()
    assert b[:8] == b"KLNLOGIT", p
    _, V, n, P = struct.unpack("<4I", b[8:24])
    ids = np.frombuffer(b[24:24 + 4 * n], np.int32)
    return ids, P, np.frombuffer(b[24 + 4 * n:], np.float32).reshape(n, V)

ki, P, k = load(kiln)
ri, _, r = load(ref)
assert (ki == ri).all()
rel = np.abs(k - r).max(1) / np.abs(r).max(1)
worst = int(rel.argmax())
same = int((k.argmax(1) == r.argmax(1)).sum())
s = "%-40s %3d pos (%d prompt + %d decode)  max rel err %.2e at pos %d  per pos: %s  argmax equal %d/%d" % (
    name, len(rel), P, len(rel) - P, rel.max(), worst, " ".join("%.1e" % x for x in rel), same, len(rel))
if f32:
    _, _, d = load(f32)
    rd = np.abs(k - d).max(1) / np.abs(d).max(1)
    rq = np.abs(r - d).max(1) / np.abs(d).max(1)
    s += "\n%-40s kiln vs llama.cpp on F32-dequantized weights: max %.2e; llama.cpp vs its own F32 run: max %.2e" % (
        "", rd.max(), rq.max())
s += "\n%-40s %s (target %s); %s s in all, kiln dump %s s" % ("", "ok" if rel.max() <= float(target) else "EXCEEDS", target, secs, tk)
print(s)
print("WORST %.6e" % rel.max())
PY
)
  echo "$line" | grep -v '^WORST'
  results+=("$(echo "$line" | grep -v '^WORST')")
  w=$(echo "$line" | sed -n 's/^WORST //p')
  worst=$(python3 -c 'import sys; print(max(float(sys.argv[1]), float(sys.argv[2])))' "$worst" "$w")
done

echo
echo "== summary (llama.cpp $(cut -c1-12 "$CACHE/llama.cpp/COMMIT"), $POSITIONS prompt positions + $STEPS decode steps, $THREADS threads)"
printf '%s\n' "${results[@]}"
if python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)' "$worst" "$TARGET"; then
  echo "all files within $TARGET (worst $worst)"
else
  echo "worst max relative error $worst exceeds the target $TARGET"
  exit 1
fi
