#!/usr/bin/env bash
# test_check.sh KILN: `kiln compile --check` end to end, on a tiny random model
# made by make_fixture. A program compiled for the test backend told to
# perturb one node fails the check naming that node's partition and the node,
# and writes nothing; with --check=fallback only the failing node moves, to
# the next backend in the list or to ref (said, marked by `kiln info`, the
# rest of its partition stays) and the program runs, giving ref's tokens;
# --check-threshold moves the bar; a clean cpu compile passes with one line
# per partition and a speed ratio; a delegate's nodes (testd) run alone and
# are judged the same way, what leaves its partitions shown beside: a clean
# one passes, a perturbed one fails naming the node, and with
# --check=fallback that node moves to cpu, the kv_stores of one attention
# together; bad --check values and thresholds are usage errors.
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

# ---- --check=fallback: the failing node moves to ref ----------------------------------

out=$(compile -o "$P" --backend "test:perturb=blk.1.attn_q" --check=fallback 2>&1)
rc=$?
moved=$(grep -c '^kiln compile: check: moved ' <<<"$out")
if [ $rc = 0 ] && [ "$moved" = 2 ] &&
   grep -q '^kiln compile: check: moved prefill node [0-9]* blk.1.attn_q from test to ref: own cosine 0\.[0-9]*$' <<<"$out" &&
   grep -q '^kiln compile: check: moved decode node [0-9]* blk.1.attn_q from test to ref: own cosine' <<<"$out" &&
   grep -q 'FAILED, its failing nodes moved$' <<<"$out" &&
   grep -q '^kiln compile: check: 6 partitions after the move, prepared again in [0-9.]* s' <<<"$out" &&
   [ -f "$P" ] && no_temp; then
  ok fallback_moves_the_node
else bad fallback_moves_the_node "exit $rc: $(grep -E 'moved|error|after the move' <<<"$out" | head -3)"; fi
for m in prefill decode; do
  r1=$(info_row "$P" $m blk.1.attn_q) r2=$(info_row "$P" $m blk.1.attn_k)
  if [ "$r1" = "ref yes" ] && [ "$r2" = "test no" ]; then ok "fallback_info_${m}"
  else bad "fallback_info_${m}" "blk.1.attn_q '$r1', blk.1.attn_k '$r2'"; fi
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
if [ $rc = 0 ] && [ "$moved" = 2 ] && grep -q '^kiln compile: check: moved prefill node [0-9]* blk.0.ffn_up from test to ref' <<<"$out" &&
   grep -q ' ref, not checked ' <<<"$out"; then
  ok fallback_one_partition
else bad fallback_one_partition "exit $rc, $moved moved: $(grep -E 'moved|error' <<<"$out" | head -3)"; fi
r1=$(info_row "$P2" decode blk.0.ffn_up) r2=$(info_row "$P2" decode blk.1.attn_q)
r3=$(info_row "$P2" decode blk.0.ffn_gate)
if [ "$r1" = "ref yes" ] && [ "$r2" = "test no" ] && [ "$r3" = "test no" ]; then ok fallback_rest_stays
else bad fallback_rest_stays "blk.0.ffn_up: '$r1', blk.1.attn_q: '$r2', blk.0.ffn_gate: '$r3'"; fi
expect fallback_one_generates 0 "" -- "$KILN" generate -m "$P2" --prompt-ids "1 5" -n 4 --temp 0 --no-stats

# ---- a delegate: its nodes alone, and what leaves its partitions -----------------------

out=$(compile -o "$WORK/d.kiln" --backend testd:refuse=swiglu,cpu --check 2>&1)
rc=$?
n=$(grep -cE '^kiln compile: check: (prefill|decode) #[0-9]+ testd, nodes [0-9.]+ \([0-9]+\): worst [^ ]+ cos 1\.0+ rel [-+0-9.e]+; what leaves it \(error carried in included\): worst [^ ]+ cos 1\.0+ rel [-+0-9.e]+; testd [0-9.]+ ms, ref [0-9.]+ ms, speed x[0-9.]+: ok \(passes at cos >= 0\.99\)$' <<<"$out")
if [ $rc = 0 ] && [ "$n" -ge 4 ] && ! grep -q FAILED <<<"$out"; then ok "delegate_checked ($n partitions)"
else bad delegate_checked "exit $rc, $n lines: $(grep -E 'check:|error' <<<"$out" | head -3)"; fi
out=$(compile -o "$WORK/dp.kiln" --backend testd:perturb=blk.0.attn_norm,cpu --check 2>&1)
rc=$?
if [ $rc = 1 ] && grep -q "error: check: method 'prefill' partition #0 (testd, nodes 0..36): node 'blk.0.attn_norm' has cosine 0\.[0-9]* against ref, below 0.99" <<<"$out" &&
   [ ! -e "$WORK/dp.kiln" ]; then ok delegate_perturbed_fails
else bad delegate_perturbed_fails "exit $rc: $(tail -2 <<<"$out")"; fi
out=$(compile -o "$WORK/dp.kiln" --backend testd:perturb=blk.0.attn_norm,cpu --check=fallback 2>&1)
rc=$?
r1=$(info_row "$WORK/dp.kiln" decode blk.0.attn_norm) r2=$(info_row "$WORK/dp.kiln" decode blk.0.attn_q)
if [ $rc = 0 ] && grep -q '^kiln compile: check: moved decode node 1 blk.0.attn_norm from testd to cpu: own cosine' <<<"$out" &&
   grep -q '^kiln compile: testd: 4 partitions in one blob' <<<"$out" && [ "$r1" = "cpu no" ] && [ "$r2" = "testd no" ]; then
  ok delegate_fallback_moves_the_node
else bad delegate_fallback_moves_the_node "exit $rc, blk.0.attn_norm '$r1', blk.0.attn_q '$r2': $(grep -E 'moved|error' <<<"$out" | head -2)"; fi
a=$(gen "$WORK/dp.kiln") b=$(gen "$R")
if [ -n "$a" ] && [ "$a" = "$b" ]; then ok delegate_fallback_runs_as_ref; else bad delegate_fallback_runs_as_ref "'$a' vs ref '$b'"; fi
# a kv_store moves with the other one its attention reads (f32 cache: testd perturbs f32 only)
out=$(compile -o "$WORK/dk.kiln" --kv-type f32 --backend testd:perturb=blk.1.kv_store_k,cpu --check=fallback 2>&1)
rc=$?
r1=$(info_row "$WORK/dk.kiln" prefill blk.1.kv_store_v) r2=$(info_row "$WORK/dk.kiln" prefill blk.1.attn)
if [ $rc = 0 ] && grep -q '^kiln compile: check: moved prefill node [0-9]* blk.1.kv_store_k from testd to cpu: own cosine' <<<"$out" &&
   grep -q '^kiln compile: check: moved prefill node [0-9]* blk.1.kv_store_v from testd to cpu (with the other kv_store of its attention)$' <<<"$out" &&
   [ "$r1" = "cpu no" ] && [ "$r2" = "testd no" ]; then
  ok delegate_fallback_kv_pair
else bad delegate_fallback_kv_pair "exit $rc, kv_store_v '$r1', attn '$r2': $(grep -E 'moved|error' <<<"$out" | head -3)"; fi
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
