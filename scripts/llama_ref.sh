#!/usr/bin/env bash
# scripts/llama_ref.sh - build (when stale) and run scripts/llama_ref.c, a small
# C program against the cached libllama (see scripts/llama_cpp.sh), which
# greedy-decodes with llama.cpp and prints JSON lines, or dumps full logits.
#
# Usage
#   scripts/llama_ref.sh -m MODEL.gguf (-p TEXT | --ids "1 2 3") [-n N] [-t THREADS] [--dump FILE]
#   scripts/llama_ref.sh --build-only      build and print the binary's path
# Every option is passed to llama_ref (see its --help); the llama.cpp commit
# from $KILN_CACHE/llama.cpp/COMMIT is added as --commit.
#
# Environment
#   KILN_CACHE   cache root (default: $HOME/.cache/kiln); the binary is
#                $KILN_CACHE/llama.cpp/llama_ref, outside the repository.
#   CC           C compiler (default: cc).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${KILN_CACHE:-$HOME/.cache/kiln}/llama.cpp

BIN_DIR=$(bash "$HERE/llama_cpp.sh" --print-bin-dir)
SRC=$(ls -d "$CACHE"/src/*/vendor/llama.cpp 2>/dev/null | head -1)
[ -n "$SRC" ] && [ -f "$SRC/include/llama.h" ] || { echo "llama_ref.sh: llama.h not found under $CACHE/src" >&2; exit 1; }
COMMIT=$(cat "$CACHE/COMMIT" 2>/dev/null || echo unknown)
EXE=$CACHE/llama_ref

if [ ! -x "$EXE" ] || [ "$HERE/llama_ref.c" -nt "$EXE" ] || [ "$BIN_DIR/libllama.so" -nt "$EXE" ]; then
  echo "[llama_ref.sh] building $EXE" >&2
  ${CC:-cc} -std=c11 -O2 -Wall -Wextra -o "$EXE.tmp.$$" "$HERE/llama_ref.c" \
    -I"$SRC/include" -I"$SRC/ggml/include" \
    -L"$BIN_DIR" -Wl,-rpath,"$BIN_DIR" -lllama -lggml -lggml-base -lm
  mv "$EXE.tmp.$$" "$EXE"
fi
if [ "${1:-}" = --build-only ]; then
  echo "$EXE"
  exit 0
fi
exec "$EXE" --commit "$COMMIT" "$@"
