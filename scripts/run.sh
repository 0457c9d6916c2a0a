#!/usr/bin/env bash
# run.sh: Kiln's main job, start to finish: build kiln (if needed), get the
# default model, compile it once into $KILN_CACHE (default ~/.cache/kiln),
# and generate text from a default prompt.
#
# The default model, for now, is stories260K (a real, tiny llama2.c model)
# when this checkout has ../shared/data beside it or KILN_MODEL/KILN_TOKENIZER
# name one. Otherwise it makes a tiny model with random weights itself, so the
# whole flow still runs (its text is gibberish). SmolLM2-135M becomes the
# default once GGUF import and byte-level BPE land.
#
#   PROMPT="Once upon a time" N=128 bash scripts/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=${KILN_CACHE:-$HOME/.cache/kiln}
PROMPT=${PROMPT:-Once upon a time}
N=${N:-128}
mkdir -p "$CACHE"

if ! command -v cmake >/dev/null || ! command -v cc >/dev/null; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake gcc make
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc 2>/dev/null || echo 2)" --target kiln make_fixture >/dev/null
KILN=$ROOT/build/kiln

STORIES=$ROOT/../shared/data/models/stories260K
if [ -n "${KILN_MODEL:-}" ]; then
  MODEL=$KILN_MODEL; TOK=${KILN_TOKENIZER:?set KILN_TOKENIZER with KILN_MODEL}; NAME=$(basename "$MODEL" .bin)
elif [ -f "$STORIES/stories260K.bin" ]; then
  MODEL=$STORIES/stories260K.bin; TOK=$STORIES/tok512.bin; NAME=stories260K
else
  echo "kiln run.sh: no real model found; making a tiny random one (its text is gibberish)" >&2
  "$ROOT/build/tests/make_fixture" "$CACHE"
  MODEL=$CACHE/model.bin; TOK=$CACHE/tok.bin; NAME=random-tiny
fi

PROG=$CACHE/$NAME.kiln
# Compile once; again when the program was written by another format version
# (or is damaged), which `kiln info` reports as an error.
if [ ! -f "$PROG" ] || ! "$KILN" info "$PROG" >/dev/null 2>&1; then
  "$KILN" compile "$MODEL" --tokenizer "$TOK" -o "$PROG"
fi
exec "$KILN" generate -m "$PROG" -p "$PROMPT" -n "$N" --temp 0
