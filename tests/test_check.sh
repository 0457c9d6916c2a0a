#!/usr/bin/env bash
# test_check.sh KILN: `kiln compile --check` end to end, on a tiny random model
# made by make_fixture. A program compiled for the test backend told to
# perturb one node fails the check naming that node's partition and the node,
# and writes nothing; with --check=fallback the failing partition moves to
# ref (said, marked fallback by `kiln info`, the rest stays on its backend)
# and the program runs, giving ref's tokens; --check-threshold moves the bar;
# a clean cpu compile passes with one line per partition and a speed ratio;
# a delegate's partitions (testd) are checked by what leaves them: a clean
# one passes, a perturbed one fails naming the output that left it and moves
# whole to ref with --check=fallback; bad --check values and thresholds are
# usage errors.
set -u
KILN=$1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
. "$(dirname "$0")/lib.sh"

FIX=${KILN_MAKE_FIXTURE:?make_fixture path}
"$FIX" "$WORK" 5 >/dev/null || { echo "make_fixture failed"; exit 1; }
M=$WORK/model.bin T=$WORK/tok.bin
# a context of 64, prefill calls of at most 8 tokens; f32 weights
compile() { "$KILN" compile "$M" --tokenizer "$T" --prefill 8 --max-seq 64 "$@"; }
# info_row FILE METHOD NODE: "backend fallback" of NODE in METHOD's table of `kiln info`
info_row() {
  "$KILN" info "$1" | awk -v m="$2" -v n="$3" '
    /^method / { cur = $0 }
    $2 == n && index(cur, m) { print $4, $5; exit }'
}
no_temp() { ! ls "$WORK" | grep -q '\.tmp\.'; }

expect help 0 "--check=fallback" -- "$KILN" compile --help

# ---- a perturbed node fails the check --------------------------------------------------

P=$WORK/p1.kiln
out=$(compile -o "$P" --backend "test:perturb=blk.1.attn_q" --check 2>&1)
rc=$?
if [ $rc = 1 ] && grep -q "error: check: method 'prefill' partition #0 (test, nodes 0..36): node 'blk.1.attn_q' has cosine 0\.[0-9]* against ref, below 0.99" <<<"$out"; then
  ok perturbed_fails_naming_node
else bad perturbed_fails_naming_node "exit $rc: $(tail -2 <<<"$out")"; fi
if grep -q '^kiln compile: check: prefill #0 test, nodes 0..36 (37): worst blk.1.attn_q cos .*speed x[0-9.]*: FAILED$' <<<"$out"; then
  ok perturbed_partition_line
else bad perturbed_partition_line "$(grep 'check:' <<<"$out" | head -3)"; fi
if [ ! -e "$P" ] && no_temp; then ok perturbed_writes_nothing; else bad perturbed_writes_nothing "$(ls "$WORK")"; fi

# a lower threshold lets it through
out=$(compile -o "$WORK/low.kiln" --backend "test:perturb=blk.1.attn_q" --check --check-threshold 0.5 2>&1)
if [ $? = 0 ] && ! grep -q FAILED <<<"$out" && grep -q 'cosine >= 0.5 ' <<<"$out" && [ -f "$WORK/low.kiln" ]; then
  ok threshold_lowered_passes
else bad threshold_lowered_passes "$(tail -2 <<<"$out")"; fi

# ---- --check=fallback: the partition moves to ref --------------------------------------

out=$(compile -o "$P" --backend "test:perturb=blk.1.attn_q" --check=fallback 2>&1)
rc=$?
if [ $rc = 0 ] && grep -q '^kiln compile: check: moved prefill #0 (test, nodes 0..36) to ref: node blk.1.attn_q' <<<"$out" &&
   grep -q '^kiln compile: check: moved decode #0 (test, nodes 0..36) to ref' <<<"$out" &&
   grep -q 'FAILED, moved to ref$' <<<"$out" && [ -f "$P" ] && no_temp; then
  ok fallback_moves
else bad fallback_moves "exit $rc: $(grep -E 'moved|error' <<<"$out" | head -3)"; fi
for m in prefill decode; do
  row=$(info_row "$P" $m blk.1.attn_q)
  if [ "$row" = "ref yes" ]; then ok "fallback_info_${m}"; else bad "fallback_info_${m}" "'$row'"; fi
done
# it runs, and every node on ref gives ref's tokens
R=$WORK/ref.kiln
compile -o "$R" --backend ref >/dev/null 2>&1 || bad ref_compile
gen() { "$KILN" generate -m "$1" --prompt-ids "1 5 7" -n 6 --temp 0 --print-ids --no-stats 2>&1; }
a=$(gen "$P") b=$(gen "$R")
if [ -n "$a" ] && [ "$a" = "$b" ]; then ok fallback_runs_as_ref; else bad fallback_runs_as_ref "'$a' vs ref '$b'"; fi

# only the failing partition moves: ops refused by test split the methods
P2=$WORK/p2.kiln
out=$(compile -o "$P2" --backend "test:refuse=rope+swiglu:perturb=blk.0.ffn_up" --check=fallback 2>&1)
rc=$?
moved=$(grep -c '^kiln compile: check: moved ' <<<"$out")
if [ $rc = 0 ] && [ "$moved" = 2 ] && grep -q '^kiln compile: check: moved prefill #[0-9]* (test, nodes [0-9.]*) to ref: node blk.0.ffn_up' <<<"$out" &&
   grep -q ' ref, not checked ' <<<"$out"; then
  ok fallback_one_partition
else bad fallback_one_partition "exit $rc, $moved moved: $(grep -E 'moved|error' <<<"$out" | head -3)"; fi
r1=$(info_row "$P2" decode blk.0.ffn_up) r2=$(info_row "$P2" decode blk.1.attn_q)
if [ "$r1" = "ref yes" ] && [ "$r2" = "test no" ]; then ok fallback_rest_stays
else bad fallback_rest_stays "blk.0.ffn_up: '$r1', blk.1.attn_q: '$r2'"; fi
expect fallback_one_generates 0 "" -- "$KILN" generate -m "$P2" --prompt-ids "1 5" -n 4 --temp 0 --no-stats

# ---- a delegate: what leaves its partitions --------------------------------------------

out=$(compile -o "$WORK/d.kiln" --backend testd:refuse=swiglu,cpu --check 2>&1)
rc=$?
n=$(grep -cE '^kiln compile: check: (prefill|decode) #[0-9]+ testd, nodes [0-9.]+ \([0-9]+\): what leaves it \(error carried in included\): worst [^ ]+ cos 1\.0+ rel [-+0-9.e]+; testd [0-9.]+ ms, ref [0-9.]+ ms, speed x[0-9.]+: ok \(passes at cos >= 0\.99\)$' <<<"$out")
if [ $rc = 0 ] && [ "$n" -ge 4 ] && ! grep -q FAILED <<<"$out"; then ok "delegate_checked ($n partitions)"
else bad delegate_checked "exit $rc, $n lines: $(grep -E 'check:|error' <<<"$out" | head -3)"; fi
out=$(compile -o "$WORK/dp.kiln" --backend testd:perturb=blk.0.attn_norm,cpu --check 2>&1)
rc=$?
if [ $rc = 1 ] && grep -q "error: check: method 'prefill' partition #0 (testd, nodes 0..36): node 'blk.0.kv_store_k', leaving the delegate's partition, has cosine 0\.[0-9]* against ref, below 0.99" <<<"$out" &&
   [ ! -e "$WORK/dp.kiln" ]; then ok delegate_perturbed_fails
else bad delegate_perturbed_fails "exit $rc: $(tail -2 <<<"$out")"; fi
out=$(compile -o "$WORK/dp.kiln" --backend testd:perturb=blk.0.attn_norm,cpu --check=fallback 2>&1)
rc=$?
row=$(info_row "$WORK/dp.kiln" decode blk.0.attn_q)
if [ $rc = 0 ] && grep -q '^kiln compile: check: moved decode #0 (testd, nodes 0..36) to ref' <<<"$out" && [ "$row" = "ref yes" ]; then
  ok delegate_fallback_moves_partition
else bad delegate_fallback_moves_partition "exit $rc, blk.0.attn_q '$row': $(grep -E 'moved|error' <<<"$out" | head -2)"; fi
a=$(gen "$WORK/dp.kiln") b=$(gen "$R")
if [ -n "$a" ] && [ "$a" = "$b" ]; then ok delegate_fallback_runs_as_ref; else bad delegate_fallback_runs_as_ref "'$a' vs ref '$b'"; fi
expect testd_unknown_option 1 "backend 'testd': unknown option 'x=1' (refuse, perturb)" -- \
  compile -o "$WORK/u.kiln" --backend testd:x=1

# ---- a clean cpu compile passes --------------------------------------------------------

C=$WORK/cpu.kiln
out=$(compile -o "$C" --check 2>&1)
rc=$?
lines=$(grep -cE '^kiln compile: check: (prefill|decode) #[0-9]+ cpu, nodes [0-9]+\.\.[0-9]+ \([0-9]+\): worst [^ ]+ cos [0-9.]+ rel [-+0-9.e]+; cpu [0-9.]+ ms, ref [0-9.]+ ms, speed x[0-9.]+: ok$' <<<"$out")
if [ $rc = 0 ] && [ "$lines" -ge 2 ] && ! grep -q FAILED <<<"$out" && [ -f "$C" ]; then ok clean_cpu_passes
else bad clean_cpu_passes "exit $rc, $lines lines: $(grep -E 'check|error' <<<"$out" | head -3)"; fi
# as compiled without --check
compile -o "$WORK/plain.kiln" >/dev/null 2>&1
if cmp -s "$C" "$WORK/plain.kiln"; then ok clean_same_program; else bad clean_same_program; fi

# ---- usage errors ----------------------------------------------------------------------

for args in "--check=yes" "--check=" "--check --check-threshold 0" "--check --check-threshold 1.5" \
            "--check --check-threshold abc" "--check --check-threshold -0.5" "--check-threshold 0.9" \
            "--check --check-threshold"; do
  # shellcheck disable=SC2086
  expect "usage_${args// /_}" 2 "" -- compile -o "$WORK/u.kiln" $args
done
if [ ! -e "$WORK/u.kiln" ]; then ok usage_writes_nothing; else bad usage_writes_nothing; fi

finish
