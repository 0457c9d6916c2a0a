#!/usr/bin/env bash
# test_calibrate.sh KILN: `kiln compile --calibrate / --calibrate-tokens` end
# to end, on a tiny random model made by make_fixture. The built-in text and
# a user's file each store calibration.* metadata (kiln info shows it) with
# one [lo, hi] per value name and per attention's scores, and the log says
# how the run went; the ranges hold what the graph implies (an attention's
# output lies within its V's range, its scores within |q| |k| hd / div);
# the program is the same one otherwise (greedy tokens unchanged), also with
# a delegate whose partitions have no blob yet when calibration runs; an
# empty, whitespace-only, too short or missing text, and a count past the
# context, fail naming the file and the rule, leaving no file; a count
# under 8 is a usage error; without the flags nothing is calibrated.
set -u
KILN=$1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
. "$(dirname "$0")/lib.sh"

FIX=${KILN_MAKE_FIXTURE:?make_fixture path}
"$FIX" "$WORK" 5 >/dev/null || { echo "make_fixture failed"; exit 1; }
M=$WORK/model.bin T=$WORK/tok.bin
# a context of 64, prefill calls of at most 8 tokens
compile() { "$KILN" compile "$M" --tokenizer "$T" --prefill 8 --max-seq 64 "$@"; }
no_temp() { ! ls "$WORK" | grep -q '\.tmp\.'; }
# meta FILE KEY: the value `kiln info` prints for metadata KEY
meta() { "$KILN" info "$1" | awk -v k="$2" '$1 == k && $2 == "=" { sub(/^[^=]*= /, ""); print; exit }'; }
greedy() { "$KILN" generate -m "$1" -p "Once upon a time" -n 12 --temp 0 2>/dev/null; }

# ---- the built-in text -------------------------------------------------------------------

P=$WORK/builtin.kiln
out=$(compile -o "$P" --calibrate-tokens 32 2>&1)
rc=$?
line=$(grep '^kiln compile: calibrate: 32 tokens ' <<<"$out")
if [ $rc = 0 ] &&
   grep -Eq "^kiln compile: calibrate: 32 tokens of 'built-in' on ref \(28 prefill in 4 calls, 4 decode\), [1-9][0-9]* ranges, [0-9]+\.[0-9] s$" <<<"$line"; then
  ok builtin_log_line
else bad builtin_log_line "exit $rc: $(head -3 <<<"$out")"; fi
if grep -q '^kiln compile: calibrate: attention scores from -\?[0-9.e+-]* to -\?[0-9.e+-]*$' <<<"$out" &&
   grep -q '^kiln compile: calibrate: by op: .*matmul \[' <<<"$out" &&
   [ "$(grep -c '^kiln compile: calibrate: widest #' <<<"$out")" = 5 ] &&
   [ "$(grep -c '^kiln compile: calibrate:' <<<"$out")" -le 10 ]; then
  ok builtin_log_summary
else bad builtin_log_summary "$(grep calibrate: <<<"$out")"; fi
if [ "$(meta "$P" calibration.tokens)" = 32 ] && [ "$(meta "$P" calibration.text)" = built-in ] &&
   meta "$P" calibration.names | grep -q '"blk.0.attn_q"' && no_temp; then
  ok builtin_info_shows_it
else bad builtin_info_shows_it "$("$KILN" info "$P" | grep calibration)"; fi

# The ranges, read back whole (kiln info --json): one pair per name, lo <= hi,
# the count the log gave; scores of both attentions, lo < hi; an attention's
# output (convex combinations of V's f16 rows) inside its V's range; its
# scores inside +-max|q| max|k| hd / sqrt(hd) (the fixture's divisor).
n_log=$(sed -n 's/.*), \([0-9]*\) ranges.*/\1/p' <<<"$line")
if "$KILN" info "$P" --json | python3 -c '
import json, math, sys
m = json.load(sys.stdin)["metadata"]
names, r = m["calibration.names"], m["calibration.ranges"]
assert len(r) == 2 * len(names) == 2 * int(sys.argv[1]), (len(names), len(r), sys.argv[1])
assert len(set(names)) == len(names), "a name twice"
rng = {n: (r[2 * i], r[2 * i + 1]) for i, n in enumerate(names)}
assert all(lo <= hi and math.isfinite(lo) and math.isfinite(hi) for lo, hi in rng.values())
hd = m["llm.head_dim"]
for l in range(m["llm.block_count"]):
    lo, hi = rng["scores:blk.%d.attn" % l]
    assert lo < hi, ("scores", l, lo, hi)
    q, k = (max(abs(x) for x in rng["blk.%d.rope_%s" % (l, w)]) for w in "qk")
    bound = q * k * hd / math.sqrt(hd) * 1.01 + 1e-3
    assert -bound <= lo and hi <= bound, ("scores bound", l, lo, hi, bound)
    (alo, ahi), (vlo, vhi) = rng["blk.%d.attn" % l], rng["blk.%d.attn_v" % l]
    tol = 2e-3 * max(abs(vlo), abs(vhi))
    assert vlo - tol <= alo and ahi <= vhi + tol, ("attention outside V", l, alo, ahi, vlo, vhi)
lo, hi = rng["logits"]
assert lo < hi
' "${n_log:-0}"; then
  ok ranges_are_real
else bad ranges_are_real; fi

# the same program otherwise: greedy tokens as without calibration
compile -o "$WORK/plain.kiln" >"$WORK/plain.log" 2>&1
g0=$(greedy "$WORK/plain.kiln")
if [ -n "$g0" ] && [ "$g0" = "$(greedy "$P")" ] && ! grep -q 'calibrate:' "$WORK/plain.log" &&
   [ -z "$(meta "$WORK/plain.kiln" calibration.tokens)" ]; then
  ok uncalibrated_by_default_and_same_tokens
else bad uncalibrated_by_default_and_same_tokens "'$g0' vs '$(greedy "$P")'"; fi

# ---- a user's text ---------------------------------------------------------------------

TXT=$WORK/notes.txt
cat >"$TXT" <<'EOF'
A kettle takes about three minutes to boil a litre of water on a two kilowatt element. The
same litre on a gas ring takes closer to five, since much of the flame's heat warms the air
around the pan instead of the water inside it. Lids help: covered water boils a minute sooner.
EOF
out=$(compile -o "$WORK/user.kiln" --calibrate "$TXT" --calibrate-tokens 40 2>&1)
if [ $? = 0 ] && grep -Eq "^kiln compile: calibrate: 40 tokens of 'notes.txt' on ref \(35 prefill in 5 calls, 5 decode\), [1-9][0-9]* ranges" <<<"$out" &&
   [ "$(meta "$WORK/user.kiln" calibration.text)" = notes.txt ] &&
   [ "$(meta "$WORK/user.kiln" calibration.tokens)" = 40 ] &&
   [ "$(meta "$WORK/user.kiln" calibration.ranges)" != "$(meta "$P" calibration.ranges)" ]; then
  ok user_file
else bad user_file "$(head -3 <<<"$out")"; fi

# Against an independent reference: with one prefill call of 64, the 32
# tokens run as 28 prefill + 4 decode; `kiln debug` dumps a single prefill of
# the same 32 tokens on ref, from whose q and K (rounded to the f16 cache)
# NumPy computes every causal score q.k / sqrt(hd): the same extremes, and the
# same ranges for the values it dumps (ref's rows do not depend on batching).
PY=python3
if command -v $PY >/dev/null && $PY -c 'import numpy' 2>/dev/null; then
  compile -o "$WORK/p64.kiln" --prefill 64 --calibrate "$TXT" --calibrate-tokens 32 >/dev/null 2>&1 &&
    "$KILN" debug -m "$WORK/p64.kiln" --backend ref --method prefill -p "$(cat "$TXT")" -n 32 \
      --dump "$WORK/dump" >/dev/null 2>&1
  "$KILN" info "$WORK/p64.kiln" --json >"$WORK/p64.json"
  if $PY - "$WORK/p64.json" "$WORK/dump" <<'PY'; then
import json, sys
import numpy as np
m = json.load(open(sys.argv[1]))["metadata"]
d = sys.argv[2] + "/prefill."
names, r = m["calibration.names"], m["calibration.ranges"]
rng = {n: (r[2 * i], r[2 * i + 1]) for i, n in enumerate(names)}
H, KV, hd = m["llm.head_count"], m["llm.head_count_kv"], m["llm.head_dim"]
assert np.load(d + "tokens.npy").shape == (32,)
close = lambda a, b: abs(a - b) <= 1e-5 * max(1.0, abs(b))
for l in range(m["llm.block_count"]):
    q = np.load(d + "blk.%d.rope_q.reference.npy" % l).astype(np.float64)
    k = np.load(d + "blk.%d.rope_k.reference.npy" % l).astype(np.float16).astype(np.float64)
    causal = np.tril(np.ones((32, 32), bool))
    s = [(q[:, h * hd:(h + 1) * hd] @ k[:, (h // (H // KV)) * hd:][:, :hd].T / np.sqrt(hd))[causal]
         for h in range(H)]
    lo, hi = min(x.min() for x in s), max(x.max() for x in s)
    clo, chi = rng["scores:blk.%d.attn" % l]
    assert close(clo, lo) and close(chi, hi), ("scores", l, (clo, chi), (lo, hi))
    for v in ("attn_norm", "attn_q", "rope_k", "attn", "ffn_swiglu", "ffn_residual"):
        a = np.load(d + "blk.%d.%s.reference.npy" % (l, v))
        got = rng["blk.%d.%s" % (l, v)]
        assert close(got[0], float(a.min())) and close(got[1], float(a.max())), (v, l, got)
PY
    ok scores_match_numpy
  else bad scores_match_numpy; fi
else skipped scores_match_numpy "no python3 with numpy"; fi

# --calibrate alone: the default count, capped by the context (64 here)
out=$(compile -o "$WORK/cap.kiln" --calibrate "$TXT" 2>&1)
if [ $? = 0 ] && grep -q "^kiln compile: calibrate: 64 tokens of 'notes.txt' on ref (56 prefill in 7 calls, 8 decode)" <<<"$out"; then
  ok default_count_capped_by_context
else bad default_count_capped_by_context "$(head -3 <<<"$out")"; fi

# a delegate (testd) before it has its blob: the program written for the run
# has partitions with none, opened on ref; then it prepares as usual
out=$(compile -o "$WORK/testd.kiln" --backend testd,cpu --calibrate-tokens 16 2>&1)
if [ $? = 0 ] && grep -q "^kiln compile: calibrate: 16 tokens of 'built-in'" <<<"$out" &&
   grep -q '^kiln compile: testd: ' <<<"$out" && [ "$(greedy "$WORK/testd.kiln")" = "$g0" ]; then
  ok delegate_without_blob_yet
else bad delegate_without_blob_yet "$(head -3 <<<"$out")"; fi

# ---- errors ------------------------------------------------------------------------------

# fails NAME MESSAGE ARGS...: exit 1 naming MESSAGE, no output, no temporary
fails() {
  local name=$1 msg=$2 out rc
  shift 2
  rm -f "$WORK/bad.kiln"
  out=$(compile -o "$WORK/bad.kiln" "$@" 2>&1)
  rc=$?
  if [ $rc = 1 ] && grep -qF -- "$msg" <<<"$out" && [ ! -e "$WORK/bad.kiln" ] && no_temp; then
    ok "$name"
  else bad "$name" "exit $rc: $(tail -2 <<<"$out")"; fi
}
: >"$WORK/empty.txt"
printf ' \n\t\n\n' >"$WORK/blank.txt"
printf 'Too short.\n' >"$WORK/short.txt"
fails empty_text "error: calibration text '$WORK/empty.txt' is empty" --calibrate "$WORK/empty.txt"
fails blank_text "error: calibration text '$WORK/blank.txt' is empty" --calibrate "$WORK/blank.txt"
fails short_text "error: calibration text '$WORK/short.txt' has " --calibrate "$WORK/short.txt" --calibrate-tokens 32
out=$(compile -o "$WORK/bad.kiln" --calibrate "$WORK/short.txt" --calibrate-tokens 32 2>&1)
if grep -Eq "has [0-9]+ tokens, fewer than the 32 --calibrate-tokens asks for$" <<<"$out"; then
  ok short_text_says_counts
else bad short_text_says_counts "$out"; fi
fails missing_text "'$WORK/nope.txt'" --calibrate "$WORK/nope.txt"
fails past_context "error: --calibrate-tokens 65 is more than the context holds (64 positions" --calibrate-tokens 65
expect tokens_under_8 2 "--calibrate-tokens must be an integer in 8..1048576" -- compile -o "$WORK/bad.kiln" --calibrate-tokens 7
expect help_lists_flags 0 "--calibrate-tokens N" -- "$KILN" compile --help

finish
