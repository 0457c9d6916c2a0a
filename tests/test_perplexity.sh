#!/usr/bin/env bash
# test_perplexity.sh KILN [quick|model]: `kiln perplexity` end to end.
#
# quick (default; the `perplexity` test, also run under ASan/UBSan): usage
# errors (exit 2) and, on a tiny random model made by make_fixture
# ($KILN_MAKE_FIXTURE), the failures that depend on files (exit 1: missing
# text or program, a text shorter than 2 x ctx, --ctx past the context, a
# --kl-base program with another vocabulary: stories260K from ../shared/data
# when present), the output format, a chunk run in several prefill calls
# giving the same figures as one call, and --kl-base of a program against
# itself (KL 0, top-1 agreement 100%).
#
# model (the `perplexity_llama_cpp` test, label slow): SmolLM2-135M-Instruct
# Q4_1 (the GGUF scripts/run.sh caches in ${KILN_CACHE:-~/.cache/kiln}/models),
# compiled with `kiln compile` for the default cpu backend; its perplexity
# on tests/data/ppl/alice_ch1.txt must be within 1% of llama-perplexity's on
# the same GGUF, text and --ctx (tests/data/ppl/ppl_ref.txt, made by
# scripts/make_ppl_ref.sh), with the same number of chunks. Without the GGUF
# the test says "skipped: ..." and passes.
set -u
KILN=$1
MODE=${2:-quick}
HERE=$(cd "$(dirname "$0")" && pwd)
TEXT=$HERE/data/ppl/alice_ch1.txt
REF=$HERE/data/ppl/ppl_ref.txt
CACHE=${KILN_CACHE:-$HOME/.cache/kiln}
SHARED=${KILN_SHARED_DATA:-$HERE/../../shared/data}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
. "$(dirname "$0")/lib.sh"

# within A B REL: |A - B| <= REL x |B| (numbers; false when either is empty).
within() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(d <= r * m) }'; }
# The numbers of "Final estimate: PPL = X +/- Y" in a file: "X Y".
final() { sed -n 's/^Final estimate: PPL = \([0-9.]*\) +\/- \([0-9.]*\)$/\1 \2/p' "$1"; }

[ -f "$TEXT" ] || { bad text_present "$TEXT is missing"; finish; }

if [ "$MODE" = quick ]; then
  P="$KILN perplexity"
  expect help 0 "kl-base" -- $P --help
  expect no_model 2 "no model given (-m FILE)" -- $P -f "$TEXT"
  expect no_text 2 "no text given (-f FILE)" -- $P -m x.kiln
  expect ctx_odd 2 "--ctx must be an even number of tokens >= 16, got '127'" -- $P -m x.kiln -f "$TEXT" --ctx 127
  expect ctx_small 2 "--ctx must be an even number of tokens >= 16, got '8'" -- $P -m x.kiln -f "$TEXT" --ctx 8
  expect ctx_text 2 "--ctx must be an even number of tokens >= 16, got '12x'" -- $P -m x.kiln -f "$TEXT" --ctx 12x
  expect ctx_value 2 "--ctx needs a value" -- $P -m x.kiln -f "$TEXT" --ctx
  expect limit_zero 2 "--limit must be a number of chunks >= 1, got '0'" -- $P -m x.kiln -f "$TEXT" --limit 0
  expect limit_text 2 "--limit must be a number of chunks >= 1, got 'all'" -- $P -m x.kiln -f "$TEXT" --limit all
  expect threads_bad 2 "-t must be a thread count" -- $P -m x.kiln -f "$TEXT" -t many
  expect unknown_arg 2 "unknown argument '--temp'" -- $P -m x.kiln -f "$TEXT" --temp 0
  expect text_missing 1 "cannot read '$WORK/nope.txt'" -- $P -m x.kiln -f "$WORK/nope.txt"

  FIX=${KILN_MAKE_FIXTURE:-}
  if [ -z "$FIX" ] || ! "$FIX" "$WORK" 5 >/dev/null; then
    skipped "fixture tests (no make_fixture: set KILN_MAKE_FIXTURE)"
    finish
  fi
  # A tiny llama2.c model (context 64, vocabulary 300, BOS added): prefill
  # of 8 tokens (a chunk of 32 runs in 4 calls) and of 32 (one call).
  for pre in 8 32; do
    "$KILN" compile "$WORK/model.bin" --tokenizer "$WORK/tok.bin" -o "$WORK/m$pre.kiln" --prefill $pre >/dev/null 2>&1 ||
      { bad "compile_fixture_$pre"; finish; }
  done
  M=$WORK/m8.kiln
  head -c 2500 "$TEXT" >"$WORK/text.txt"
  printf 'Too short.' >"$WORK/short.txt"
  expect model_missing 1 "nope.kiln" -- $P -m "$WORK/nope.kiln" -f "$WORK/text.txt"
  expect kl_base_missing 1 "nope.kiln" -- $P -m "$M" -f "$WORK/text.txt" --kl-base "$WORK/nope.kiln"
  expect ctx_past_context 1 "--ctx 128 is more than the context of '$M' (64 tokens)" -- $P -m "$M" -f "$WORK/text.txt" --ctx 128
  expect text_short 1 "tokens; --ctx 16 needs at least 32 (2 x ctx)" -- $P -m "$M" -f "$WORK/short.txt" --ctx 16
  expect text_empty 1 "tokenizes to 1 token; --ctx 16 needs at least 32" -- $P -m "$M" -f /dev/null --ctx 16

  # A run: running values [1]..[N], then the estimate; the chunk plan on stderr.
  $P -m "$M" -f "$WORK/text.txt" --ctx 32 -t 1 >"$WORK/a.out" 2>"$WORK/a.err"
  rc=$?
  n=$(grep -o '\[[0-9]*\]' "$WORK/a.out" | wc -l)
  want=$(sed -n 's/.*: \([0-9]*\) tokens (BOS added); \([0-9]*\) chunks of 32 tokens.*/\2/p' "$WORK/a.err")
  if [ "$rc" = 0 ] && [ -n "$want" ] && [ "$n" = "$want" ] && grep -q '^\[1\][0-9.]*,\[2\][0-9.]*,' "$WORK/a.out" &&
    [ -n "$(final "$WORK/a.out")" ] && grep -qF "with its first token replaced by BOS" "$WORK/a.err" &&
    grep -qF "each chunk in 4 prefill calls of at most 8 tokens; scoring positions 16..30 (15 tokens a chunk" "$WORK/a.err"; then
    ok "run_format ($want chunks, PPL $(final "$WORK/a.out"))"
  else
    bad run_format "exit $rc, $n values for '$want' chunks: $(head -c 300 "$WORK/a.out") $(cat "$WORK/a.err")"
  fi
  # Several prefill calls per chunk (the KV cache continues) = one call.
  $P -m "$WORK/m32.kiln" -f "$WORK/text.txt" --ctx 32 -t 1 >"$WORK/b.out" 2>"$WORK/b.err"
  if grep -qF "each chunk in 1 prefill call of at most 32 tokens" "$WORK/b.err" && [ -n "$(final "$WORK/a.out")" ] &&
    within "$(final "$WORK/a.out" | cut -d' ' -f1)" "$(final "$WORK/b.out" | cut -d' ' -f1)" 1e-4; then
    ok "prefill_split (4 calls: $(final "$WORK/a.out"), 1 call: $(final "$WORK/b.out"))"
  else
    bad prefill_split "4 calls: $(final "$WORK/a.out"), 1 call: $(final "$WORK/b.out"): $(cat "$WORK/b.err")"
  fi
  # --limit, and --kl-base against the same model (prefill sizes 8 and 32):
  # KL 0, same top p 100%, and the model's own perplexity.
  $P -m "$M" -f "$WORK/text.txt" --ctx 32 --limit 2 --kl-base "$WORK/m32.kiln" >"$WORK/k.out" 2>"$WORK/k.err"
  rc=$?
  if [ "$rc" = 0 ] && grep -q '^Mean    KLD:   0.000000 ±   0.000000$' "$WORK/k.out" &&
    grep -q '^Same top p: 100.000 ± 0.000 %$' "$WORK/k.out" && grep -q '^   2 ' "$WORK/k.out" &&
    ! grep -q '^   3 ' "$WORK/k.out" && grep -qF "2 chunks of 32 tokens (--limit)" "$WORK/k.err"; then
    ok "kl_self ($(grep '^Mean    KLD' "$WORK/k.out"))"
  else
    bad kl_self "exit $rc: $(cat "$WORK/k.out" "$WORK/k.err" | head -30)"
  fi
  # Another vocabulary: stories260K (512 tokens) against the fixture (300).
  S=$SHARED/models/stories260K
  if [ -f "$S/stories260K.bin" ] && [ -f "$S/tok512.bin" ]; then
    if "$KILN" compile "$S/stories260K.bin" --tokenizer "$S/tok512.bin" -o "$WORK/s.kiln" --max-seq 64 >/dev/null 2>&1; then
      expect kl_vocab_mismatch 1 "--kl-base: '$WORK/s.kiln' has a vocabulary of 512 tokens (512 logits), '$M' of 300 tokens (300 logits); both programs must use the same tokenizer" -- \
        $P -m "$M" -f "$WORK/text.txt" --ctx 16 --kl-base "$WORK/s.kiln"
    else
      bad compile_stories260K
    fi
  else
    skipped "kl_vocab_mismatch (no $S)"
  fi
  finish
fi

# ---- model: SmolLM2-135M-Instruct Q4_1 against llama-perplexity ----------------
[ "$MODE" = model ] || { echo "usage: $0 KILN [quick|model]"; exit 2; }
MODEL=$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$MODEL" ]; then
  echo "skipped: $MODEL is absent (scripts/run.sh fetches it)"
  echo "0 passed, 0 failed, 1 skipped"
  exit 0
fi
[ -f "$REF" ] || { bad reference_present "$REF is missing (scripts/make_ppl_ref.sh)"; finish; }
for f in model:"$MODEL" text:"$TEXT"; do
  what=${f%%:*} path=${f#*:}
  want=$(sed -n "s/^# $what .* sha256 \([0-9a-f]*\)$/\1/p" "$REF")
  if ! command -v sha256sum >/dev/null; then
    skipped "${what}_sha256 (no sha256sum)"
  elif [ "$(sha256sum "$path" | cut -d' ' -f1)" = "$want" ]; then
    ok "${what}_sha256"
  else
    bad "${what}_sha256" "$path is not the file $REF was made from ($want)"
  fi
done
sed -n 's/^# \(llama.cpp commit .*\)/reference: \1/p' "$REF"

if ! "$KILN" compile "$MODEL" -o "$WORK/smol.kiln" --max-seq 1024 >"$WORK/compile.log" 2>&1; then
  bad compile "$(tail -3 "$WORK/compile.log")"
  finish
fi
while read -r _ ctx _ chunks _ ppl _ se; do
  t0=$(date +%s)
  "$KILN" perplexity -m "$WORK/smol.kiln" -f "$TEXT" --ctx "$ctx" >"$WORK/p$ctx.out" 2>"$WORK/p$ctx.err"
  rc=$?
  t=$(($(date +%s) - t0))
  got=$(final "$WORK/p$ctx.out")
  n=$(sed -n "s/.* \([0-9]*\) chunks of $ctx tokens.*/\1/p" "$WORK/p$ctx.err")
  if [ "$rc" != 0 ] || [ -z "$got" ]; then
    bad "ctx_$ctx" "exit $rc: $(tail -3 "$WORK/p$ctx.err")"
  elif [ "$n" != "$chunks" ]; then
    bad "ctx_$ctx" "kiln ran $n chunks, llama.cpp $chunks: the tokenizers disagree on the text"
  elif within "${got%% *}" "$ppl" 0.01; then
    ok "ctx_$ctx: kiln PPL = ${got% *} +/- ${got#* }, llama.cpp $ppl +/- $se ($chunks chunks, ${t} s)"
  else
    bad "ctx_$ctx" "kiln PPL = ${got% *} +/- ${got#* }, llama.cpp $ppl +/- $se: more than 1% apart"
  fi
done < <(grep '^ctx ' "$REF")
finish
