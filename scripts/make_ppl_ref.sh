#!/usr/bin/env bash
# scripts/make_ppl_ref.sh - records llama.cpp's perplexity of
# SmolLM2-135M-Instruct Q4_1 on tests/data/ppl/alice_ch1.txt into
# tests/data/ppl/ppl_ref.txt, the reference of the `perplexity_llama_cpp`
# test (tests/test_perplexity.sh model), which needs no llama.cpp.
#
# For each context size it runs llama.cpp's own tool on the same GGUF and
# text:
#   llama-perplexity -m MODEL -f TEXT -c CTX -b CTX -t THREADS
# (-b CTX: one chunk per batch, as Kiln runs them) and keeps the chunk count,
# the running values, and "Final estimate: PPL = X +/- Y". The file records
# the command, the llama.cpp commit, the date and the sha256 of the model and
# of the text (the test refuses a reference made from other files).
#
# llama.cpp is built by scripts/llama_cpp.sh (into $KILN_CACHE/llama.cpp);
# the model is the one scripts/run.sh fetches into $KILN_CACHE/models.
#
# Environment: KILN_CACHE (default ~/.cache/kiln), THREADS (default nproc),
# CTXS (default "128 512"), TEXT (default the file above), OUT (default the
# reference file above).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
CACHE=${KILN_CACHE:-$HOME/.cache/kiln}
MODEL=$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf
TEXT=${TEXT:-$ROOT/tests/data/ppl/alice_ch1.txt}
OUT=${OUT:-$ROOT/tests/data/ppl/ppl_ref.txt}
CTXS=${CTXS:-128 512}
THREADS=${THREADS:-$(nproc 2>/dev/null || echo 2)}

[ -f "$MODEL" ] || { echo "make_ppl_ref: $MODEL is missing: run scripts/run.sh once (it fetches it)" >&2; exit 1; }
[ -f "$TEXT" ] || { echo "make_ppl_ref: $TEXT is missing" >&2; exit 1; }
BIN_DIR=$(bash "$HERE/llama_cpp.sh" --print-bin-dir)
PPL=$BIN_DIR/llama-perplexity
[ -x "$PPL" ] || { echo "make_ppl_ref: $PPL was not built" >&2; exit 1; }
COMMIT=$(cat "$CACHE/llama.cpp/COMMIT" 2>/dev/null || echo unknown)

sha() { sha256sum "$1" | cut -d' ' -f1; }
rel() { case $1 in "$ROOT"/*) echo "${1#"$ROOT"/}" ;; *) basename "$1" ;; esac; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
{
  echo "# llama.cpp's perplexity of $(basename "$MODEL") on $(rel "$TEXT"), made by scripts/make_ppl_ref.sh"
  echo "# date $(date -u +%Y-%m-%d)"
  echo "# llama.cpp commit $COMMIT"
  echo "# model $(basename "$MODEL") sha256 $(sha "$MODEL")"
  echo "# text $(rel "$TEXT") sha256 $(sha "$TEXT")"
  echo "# command: llama-perplexity -m $(basename "$MODEL") -f $(rel "$TEXT") -c CTX -b CTX -t $THREADS"
  echo "# lines: ctx CTX chunks N ppl PPL se STANDARD_ERROR, then that run's running values"
} >"$work/ref.txt"
for ctx in $CTXS; do
  echo "[make_ppl_ref] ctx $ctx" >&2
  "$PPL" -m "$MODEL" -f "$TEXT" -c "$ctx" -b "$ctx" -t "$THREADS" >"$work/$ctx.log" 2>&1 ||
    { tail -5 "$work/$ctx.log" >&2; exit 1; }
  chunks=$(sed -n 's/.*calculating perplexity over \([0-9]*\) chunks.*/\1/p' "$work/$ctx.log")
  final=$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\) +\/- \([0-9.]*\).*/\1 \2/p' "$work/$ctx.log")
  values=$(grep -o '^\[1\].*' "$work/$ctx.log" | head -1)
  [ -n "$chunks" ] && [ -n "$final" ] || { echo "make_ppl_ref: no result in the log of ctx $ctx:" >&2; tail -5 "$work/$ctx.log" >&2; exit 1; }
  set -- $final
  echo "ctx $ctx chunks $chunks ppl $1 se $2" >>"$work/ref.txt"
  echo "# $values" >>"$work/ref.txt"
done
mkdir -p "$(dirname "$OUT")"
mv "$work/ref.txt" "$OUT"
cat "$OUT"
