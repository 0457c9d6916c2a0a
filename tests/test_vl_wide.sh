#!/usr/bin/env bash
# test_vl_wide.sh MAKE_RANDOM_VL TEST_VL NAME: Qwen3-VL at Qwen3-VL-2B-
# Instruct's widths against transformers, NAME qwen3vl_2b_wide (two layers
# each side: a 1 GB folder, 2 GB compiled) or qwen3vl_2b_full (every layer:
# 4.3 GB, 8.5 GB). make_random_vl writes the bf16 folder the committed oracle
# (tests/data/hf/NAME, scripts/make_vl_fixtures.py --wide) was computed from;
# test_vl compiles it in f32 and compares encode_image, prefill with one and
# two images (whole and in chunks) and ten decode steps. Both are removed
# afterwards.
set -euo pipefail
GEN=$1 TEST=$2 NAME=$3
ORACLE=$(cd "$(dirname "$0")/data/hf/$NAME" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kiln-vl-wide-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# the arguments the oracle names (oracle.json "model")
ARGS=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["model"].split(" ",2)[2])' \
  "$ORACLE/oracle.json")
# shellcheck disable=SC2086
"$GEN" "$WORK" $ARGS
KILN_VL_WIDE=$WORK KILN_VL_WIDE_ORACLE=$ORACLE TMPDIR=$WORK "$TEST" matches_transformers_at_2b_widths
