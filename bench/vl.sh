#!/usr/bin/env bash
# bench/vl.sh: Qwen3-VL-2B-Instruct's shapes on the cpu backend, Kiln and
# llama.cpp side by side in one run.
#
# The weights are random in the released shapes (tests/make_random_vl: the
# folder, bf16, every layer), with the Qwen3 tokenizer from the shared data
# (Qwen3-VL's vocabulary is Qwen3's). Kiln compiles the folder with
# --quant q8_0 and --quant f16; llama.cpp converts the same folder with its
# convert_hf_to_gguf.py (--outtype q8_0 / f16; the vision tower as --mmproj
# at the same type). For each type, alternately:
#   encode   one 448x448 image (784 patches, 196 visual tokens): Kiln's
#            `kiln run --method encode_image` on 784 patches (p50 ms over
#            REPS), llama-mtmd-cli's "mtmd batch encoding done in N ms" (median
#            of REPS runs on a 448x448 picture)
#   ppN tgN  the text model: `kiln bench` and llama-bench (mean ± sd)
# llama.cpp comes from scripts/llama_cpp.sh (with llama-mtmd-cli); the
# conversion needs torch and transformers 4 (a venv at $CVENV, made here
# when missing). Without llama.cpp (NO_LLAMA_CPP=1) Kiln runs alone.
#
# Environment (defaults in brackets):
#   THREADS [2]  REPS [3]  TESTS_P [128]  TEST_N [64]  TYPES [q8_0 f16]
#   KILN_CACHE [~/.cache/kiln]: the folder and files are made once into
#   $KILN_CACHE/models/vl (about 4.3 GB bf16, 2.3 + 4.3 GB per tool)
# Prints a markdown table for bench/RESULTS.md. About 20 minutes on 2 cores
# once the files exist.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
CACHE=${KILN_CACHE:-$HOME/.cache/kiln}
DIR=$CACHE/models/vl
THREADS=${THREADS:-2}
REPS=${REPS:-3}
TESTS_P=${TESTS_P:-128}
TEST_N=${TEST_N:-64}
TYPES=${TYPES:-q8_0 f16}
CVENV=${CVENV:-$CACHE/convert-venv}
TOK=${KILN_SHARED_DATA:-$ROOT/../shared/data}/tokenizers/qwen3
log() { echo "[vl] $*" >&2; }

cmake -S "$ROOT" -B "$ROOT/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$ROOT/build" kiln make_random_vl >/dev/null
KILN=$ROOT/build/kiln
mkdir -p "$DIR"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

HF=$DIR/qwen3vl-2b-random
if [ ! -f "$HF/.done" ]; then
  [ -f "$TOK/tokenizer.json" ] || { log "no Qwen3 tokenizer at $TOK"; exit 1; }
  log "making $HF (make_random_vl, every layer)"
  rm -rf "$HF" && mkdir -p "$HF"
  "$ROOT/build/tests/make_random_vl" "$HF" --seed 1 >/dev/null
  cp "$TOK/tokenizer.json" "$TOK/tokenizer_config.json" "$HF/"
  touch "$HF/.done"
fi

LLAMA=0
if [ -z "${NO_LLAMA_CPP:-}" ]; then
  BIN=$(bash "$ROOT/scripts/llama_cpp.sh" --print-bin-dir)
  LSRC=$(dirname "$(dirname "$BIN")")/src
  CONVERT=$(find "$LSRC" -maxdepth 4 -name convert_hf_to_gguf.py | head -1)
  if [ -x "$BIN/llama-mtmd-cli" ] && [ -n "$CONVERT" ]; then LLAMA=1
  else log "no llama-mtmd-cli or convert_hf_to_gguf.py: Kiln alone"; fi
fi
if [ $LLAMA = 1 ] && ! "$CVENV/bin/python3" -c 'import torch, transformers' 2>/dev/null; then
  log "making $CVENV (torch, transformers 4, for convert_hf_to_gguf.py)"
  python3 -m venv "$CVENV"
  "$CVENV/bin/pip" install -q torch 'transformers<5' numpy sentencepiece protobuf
fi

# a 448x448 picture for llama-mtmd-cli (binary PPM, which its loader reads)
python3 - "$WORK/img.ppm" <<'PY'
import sys
w = h = 448
px = bytes((x * 7 + y * 3 + c * 50) % 256 for y in range(h) for x in range(w) for c in range(3))
open(sys.argv[1], 'wb').write(b'P6\n%d %d\n255\n' % (w, h) + px)
PY

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
rows=()
for ty in $TYPES; do
  P=$DIR/qwen3vl-2b.$ty.kiln
  if [ ! -f "$P" ]; then
    log "compiling $P (--quant $ty)"
    "$KILN" compile "$HF" --quant "$ty" --prefill "$TESTS_P" --max-seq 1024 -o "$P.tmp" >/dev/null
    mv "$P.tmp" "$P"
  fi
  if [ $LLAMA = 1 ]; then
    G=$DIR/qwen3vl-2b.$ty.gguf M=$DIR/qwen3vl-2b.mmproj.$ty.gguf
    for what in text mmproj; do
      f=$G extra=()
      [ $what = mmproj ] && f=$M extra=(--mmproj)
      if [ ! -f "$f" ]; then
        log "converting $f (convert_hf_to_gguf.py --outtype $ty ${extra[*]})"
        "$CVENV/bin/python3" "$CONVERT" "$HF" --outtype "$ty" "${extra[@]}" --outfile "$f.tmp" \
          >"$WORK/conv.log" 2>&1 || { tail -5 "$WORK/conv.log" >&2; exit 1; }
        mv "$f.tmp" "$f"
      fi
    done
  fi
  # encode: Kiln, then llama.cpp
  log "$ty: encode_image, 784 patches"
  k_enc=$("$KILN" run -m "$P" --method encode_image --prompt-len 784 --warm-up 1 \
    --iteration "$REPS" -t "$THREADS" 2>/dev/null | sed -n 's/.* p50 \([0-9.]*\) ms.*/\1/p')
  l_enc=—
  if [ $LLAMA = 1 ]; then
    for r in $(seq 0 "$REPS"); do
      "$BIN/llama-mtmd-cli" -m "$G" --mmproj "$M" --image "$WORK/img.ppm" -p "Describe." \
        -n 1 -t "$THREADS" --temp 0 2>&1 |
        sed -n -e 's/.*mtmd batch encoding done in \([0-9]*\) ms.*/\1/p' \
          -e 's/.*image slice encoded in \([0-9]*\) ms.*/\1/p' |
        { [ "$r" = 0 ] && cat >/dev/null || cat; } # the first run warms up
    done >"$WORK/enc"
    [ -s "$WORK/enc" ] && l_enc=$(median <"$WORK/enc")
  fi
  ratio=—
  [ "$l_enc" != — ] && [ -n "$k_enc" ] && ratio=$(awk -v k="$k_enc" -v l="$l_enc" 'BEGIN {printf "%.2f", l / k}')
  rows+=("| $ty | encode 448x448 (ms, lower is better) | $l_enc | $k_enc | $ratio |")
  # text: llama-bench, then kiln bench
  if [ $LLAMA = 1 ]; then
    "$BIN/llama-bench" -m "$G" -p "$TESTS_P" -n "$TEST_N" -t "$THREADS" -r "$REPS" -o csv \
      2>/dev/null >"$WORK/lb.csv"
  fi
  "$KILN" bench -m "$P" -p "$TESTS_P" -n "$TEST_N" -t "$THREADS" -r "$REPS" -o csv \
    2>/dev/null >"$WORK/kb.csv"
  while read -r row; do rows+=("$row"); done < <(python3 - "$ty" "$WORK/kb.csv" "$WORK/lb.csv" <<'PY'
import csv, os, sys
ty, kb, lb = sys.argv[1:]
def read(p):
    out = {}
    if not os.path.exists(p) or not os.path.getsize(p):
        return out
    for r in csv.DictReader(open(p)):
        np, ng = int(r['n_prompt']), int(r['n_gen'])
        out['pp%d' % np if np else 'tg%d' % ng] = (float(r['avg_ts']), float(r['stddev_ts']))
    return out
k, l = read(kb), read(lb)
for t in k:
    f = lambda x: '%.1f ± %.1f' % x if x else '—'
    r = '%.2f' % (k[t][0] / l[t][0]) if t in l and l[t][0] else '—'
    print('| %s | %s (t/s) | %s | %s | %s |' % (ty, t, f(l.get(t)), f(k[t]), r))
PY
  )
done

echo "date: $(date -u +%Y-%m-%d), machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $THREADS threads"
echo "kiln $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
[ $LLAMA = 1 ] && echo "llama.cpp $(cat "$(dirname "$(dirname "$BIN")")/COMMIT" 2>/dev/null || echo unknown)"
echo
echo "| weights | test | llama.cpp | kiln | ratio (speed, kiln / llama.cpp) |"
echo "|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
