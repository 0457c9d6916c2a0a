#!/usr/bin/env bash
# test_debug.sh KILN [quick|smollm2] [TEST_TENSORS]: `kiln debug` end to end.
#
# quick (default), on a tiny random model made by make_fixture: a program
# compiled for the test backend told to perturb one named node is caught:
# the debugger names that node as the first with its own error (not a later
# one), the first node past the threshold is that node or a later one, and
# the nodes after it carry error in with no own error; the same after state
# was built up (--method decode --position N), also on the Qwen3-VL fixture
# (text rows: its rope positions and visual inputs set by the debugger); a clean cpu-vs-ref run on f32
# weights has no node past a loose threshold; --dump writes a tensor folder
# that the tensor-folder reader reads back (kiln run --inputs reads every
# file a manifest names) and python3's json parses, and --inputs reads it
# back to the same report; --against compiles the checkpoint into an f32
# program and reports the quantization error; every bad argument is a clear
# error with a non-zero exit. With TEST_TENSORS, also a program that is no
# language model (test_tensors --write-program: one method, random inputs).
# smollm2: SmolLM2-135M-Instruct Q4_1 cpu vs ref, prefill and decode after
# history (skipped without the cached GGUF).
set -u
KILN=$1
MODE=${2:-quick}
TT=${3:-}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
CACHE=${KILN_CACHE:-$HOME/.cache/kiln}
. "$(dirname "$0")/lib.sh"

# table_rows FILE: the table's rows without their marks ("id node op ... own_rel").
table_rows() { grep -E '^ *[0-9]+  ' "$1" | sed 's/  <- .*//'; }
# node_id FILE NAME: the id of node NAME in the table.
node_id() { table_rows "$1" | awk -v n="$2" '$2 == n { print $1; exit }'; }
# summary_node FILE WHICH: "ID NAME" from the summary line "WHICH: node ID NAME (...)".
summary_node() { sed -n "s/^$2: node \([0-9]*\) \([^ ]*\) .*/\1 \2/p" "$1"; }

# check_caught NAME PROGRAM NODE [ARGS...]: a program whose node NODE the test
# backend perturbs; the debugger must name NODE as the first own error, put
# the first past the threshold at NODE or later, and see no own error after it.
check_caught() {
  local name=$1 prog=$2 node=$3
  shift 3
  local out=$WORK/$name.txt
  "$KILN" debug -m "$prog" "$@" >"$out" 2>"$WORK/$name.err"
  local rc=$?
  if [ $rc != 0 ]; then bad "${name}_runs" "exit $rc: $(head -3 "$WORK/$name.err")"; return; fi
  ok "${name}_runs"
  local id own first
  id=$(node_id "$out" "$node")
  own=$(summary_node "$out" "first own error")
  first=$(summary_node "$out" "first past threshold")
  if [ -n "$id" ] && [ "$own" = "$id $node" ]; then ok "${name}_own_error_names_$node"
  else bad "${name}_own_error_names_$node" "node $node is $id; summary says '$own': $(grep '^first' "$out")"; fi
  if [ -n "$first" ] && [ -n "$id" ] && [ "${first%% *}" -ge "$id" ]; then ok "${name}_first_past_not_before"
  else bad "${name}_first_past_not_before" "first past threshold: '$first', perturbed node $id"; fi
  # exactly one row marked as the first own error, and it is NODE's
  local marked
  marked=$(grep -c 'first own error$' "$out")
  if [ "$marked" = 1 ] && grep 'first own error$' "$out" | awk -v n="$node" '$2 == n' | grep -q .; then
    ok "${name}_one_mark"
  else bad "${name}_one_mark" "$(grep 'first own error$' "$out")"; fi
  # later nodes: error carried in (cos below 1) but none of their own
  local carried own_after
  carried=$(table_rows "$out" | awk -v id="$id" '$1 > id && $(NF-5) != "1.000000" && $(NF-1) == "1.000000"' | wc -l)
  own_after=$(table_rows "$out" | awk -v id="$id" '$1 > id && $(NF-1) != "1.000000" && $(NF-1) != "n/a"' | wc -l)
  if [ "$carried" -gt 0 ] && [ "$own_after" = 0 ]; then ok "${name}_carried_not_own"
  else bad "${name}_carried_not_own" "$carried rows carry error with no own error, $own_after rows after the node have an own error"; fi
  if grep -q "^verdict: node $id $node (.*) computes wrongly on its own" "$out"; then ok "${name}_verdict"
  else bad "${name}_verdict" "$(grep '^verdict' "$out")"; fi
}

# ---- smollm2 --------------------------------------------------------------------------

if [ "$MODE" = smollm2 ]; then
  GGUF=$(smollm2_gguf)
  if [ -z "$GGUF" ]; then
    skipped smollm2 "no SmolLM2-135M-Instruct.Q4_1.gguf under $CACHE: run 'bash scripts/run.sh' once"
    finish
  fi
  S=$WORK/smol.kiln
  expect smollm2_compile 0 "wrote" -- "$KILN" compile "$GGUF" -o "$S" --max-seq 256
  # Q4_1 on cpu rounds activations to 8 bits: a few per mille from ref, and no
  # node wrong on its own at 0.99
  for call in "prefill" "decode --position 40"; do
    n=${call%% *}
    # shellcheck disable=SC2086
    "$KILN" debug -m "$S" -p "The capital of France is" --method $call --threshold 0.99 -t 2 >"$WORK/s_$n.txt" 2>&1
    rc=$?
    rows=$(table_rows "$WORK/s_$n.txt" | wc -l)
    if [ $rc = 0 ] && [ "$rows" = 513 ] && grep -q '^first own error: none' "$WORK/s_$n.txt"; then
      ok "smollm2_$n"
    else
      bad "smollm2_$n" "exit $rc, $rows rows: $(grep -E '^(first|verdict)|error' "$WORK/s_$n.txt" | head -4)"
    fi
    grep -E '^(first|verdict)' "$WORK/s_$n.txt"
  done
  finish
fi

# ---- quick: the fixture -----------------------------------------------------------------

FIX=${KILN_MAKE_FIXTURE:?make_fixture path}
"$FIX" "$WORK" 5 >/dev/null || { echo "make_fixture failed"; exit 1; }
M=$WORK/model.bin T=$WORK/tok.bin
C=$WORK/cpu.kiln P1=$WORK/p1.kiln P2=$WORK/p2.kiln
# a context of 64, prefill calls of at most 8 tokens; f32 weights
compile() { "$KILN" compile "$M" --tokenizer "$T" --prefill 8 --max-seq 64 "$@" >/dev/null 2>&1 || { echo "compile $* failed"; exit 1; }; }
compile -o "$C"
compile -o "$P1" --backend "test:perturb=blk.1.attn_q"
# a later node, with some ops refused by test (they fall back to ref)
compile -o "$P2" --backend "test:refuse=rope+swiglu:perturb=blk.0.ffn_up"

expect help 0 "example" -- "$KILN" debug --help
expect listed 0 "debug " -- "$KILN" --help

# the perturbed node is caught: prefill, decode after a history, a prompt
check_caught prefill "$P1" blk.1.attn_q
check_caught decode_history "$P1" blk.1.attn_q --method decode --position 20
check_caught prompt "$P1" blk.1.attn_q -p "hello world" --position 3 --tokens 5
check_caught other_node "$P2" blk.0.ffn_up --method decode --position 9
# a vision-language program (Qwen3-VL, M-RoPE and DeepStack inputs): text rows
# after history; prefill with the DeepStack add of layer 0 perturbed
VL=$WORK/vl.kiln
"$KILN" compile "$(dirname "$0")/data/hf/qwen3vl_tiny_f32" -o "$VL" --prefill 16 --max-seq 64 \
  --backend "test:perturb=blk.0.deepstack" >/dev/null 2>&1 || { echo "compile of the VL fixture failed"; exit 1; }
check_caught vl_prefill "$VL" blk.0.deepstack --position 4 --tokens 6
# decode has no DeepStack input (it is text): its rope positions, at row 9
"$KILN" compile "$(dirname "$0")/data/hf/qwen3vl_tiny_f32" -o "$VL" --prefill 16 --max-seq 64 \
  --backend "test:perturb=blk.1.attn_q" >/dev/null 2>&1 || { echo "compile of the VL fixture failed"; exit 1; }
check_caught vl_decode "$VL" blk.1.attn_q --method decode --position 9
if grep -q 'ref\*' "$WORK/other_node.txt" && grep -q '^\* ref standing in' "$WORK/other_node.txt"; then
  ok fallback_marked
else bad fallback_marked "$(grep rope "$WORK/other_node.txt" | head -2)"; fi
expect history_header 0 "1 token at position 20; history: 20 tokens (0 the prompt's, 20 random)" -- \
  "$KILN" debug -m "$P1" --method decode --position 20
# the last position of the context
expect decode_last_position 0 "first own error: node" -- "$KILN" debug -m "$P1" --method decode --position 63
# every node on ref: the perturbation is the test backend's, so it is gone
expect backend_ref 0 "first own error: none" -- "$KILN" debug -m "$P1" --backend ref

# a clean run: cpu against ref on f32 weights, no node past a loose threshold
for call in "prefill" "decode --position 30"; do
  # shellcheck disable=SC2086
  out=$("$KILN" debug -m "$C" -p "once upon a time" --method $call --threshold 0.999 2>&1)
  if [ $? = 0 ] && grep -q '^first past threshold: none' <<<"$out" && grep -q '^first own error: none' <<<"$out" &&
     grep -q '^verdict: the backend agrees' <<<"$out"; then ok "clean_${call%% *}"
  else bad "clean_${call%% *}" "$(grep -E '^(first|verdict)|error' <<<"$out" | head -3)"; fi
done

# --dump: a tensor folder with the inputs and both outputs of every node
D=$WORK/dump
"$KILN" debug -m "$P1" --method decode --position 12 --dump "$D" >"$WORK/dump.txt" 2>"$WORK/dump.err"
rc=$?
nodes=$(table_rows "$WORK/dump.txt" | wc -l)
if [ $rc = 0 ] && [ -f "$D/manifest.json" ] && grep -q "wrote $((2 * nodes + 2)) tensors" "$WORK/dump.err"; then
  ok dump_written
else bad dump_written "exit $rc, $nodes nodes: $(cat "$WORK/dump.err")"; fi
if command -v python3 >/dev/null; then
  if python3 - "$D" "$nodes" <<'EOF'; then ok dump_manifest_json; else bad dump_manifest_json; fi
import json, os, sys
d, nodes = sys.argv[1], int(sys.argv[2])
m = json.load(open(os.path.join(d, "manifest.json")))
assert m["format"] == "kiln-tensors" and m["version"] == 1
t = m["tensors"]
roles = [e.get("role") for e in t]
assert roles.count("backend") == nodes and roles.count("reference") == nodes, roles
assert sorted(e["name"] for e in t if e.get("role") == "input") == ["pos", "tokens"]
files = set()
for e in t:
    assert e["method"] == "decode"
    assert os.path.isfile(os.path.join(d, e["file"])), e
    files.add(e["file"])
    if e["role"] != "input":
        assert e["node"] and e["op"] and e["name"] == e["node"], e
q = [e for e in t if e.get("node") == "blk.1.attn_q"]
assert sorted(e["role"] for e in q) == ["backend", "reference"] and all(e["op"] == "matmul" for e in q)
assert all(e["shape"] == [1, 32] and e["dtype"] == "f32" for e in q), q
# the cache as the call's attention reads it: positions 0..12, f16
kv = [e for e in t if e.get("node") == "blk.0.kv_store_k"]
assert all(e["dtype"] == "f16" and e["shape"][0] == 13 for e in kv), kv
assert len(files) == len(t)
EOF
else
  skipped dump_manifest_json "no python3"
fi
# the reader reads every file the manifest names and checks it against it
expect dump_read_by_run 0 "summary: 1 iteration" -- "$KILN" run -m "$P1" --method decode --inputs "$D"
# --inputs: the dumped inputs give the same report
"$KILN" debug -m "$P1" --method decode --inputs "$D" >"$WORK/again.txt" 2>&1
if cmp -s "$WORK/dump.txt" "$WORK/again.txt"; then ok inputs_round_trip
else bad inputs_round_trip "$(diff "$WORK/dump.txt" "$WORK/again.txt" | head -4)"; fi

# --against: the f32 program compiled from the checkpoint; q8_0 weights differ from it
Q=$WORK/q8.kiln
compile -o "$Q" --quant q8_0 --quant-fallback
mkdir -p "$WORK/tmp"
out=$(TMPDIR=$WORK/tmp "$KILN" debug -m "$Q" --against "$M" --against-tokenizer "$T" --method decode --position 5 --threshold 0.99 2>&1)
if [ $? = 0 ] && grep -q '^ *id  node .* quant_cos  quant_rel$' <<<"$out" &&
   grep -q '^quantization (reference vs the f32 program): lowest cos at node' <<<"$out" &&
   grep -q '37 of 37 nodes matched by name' <<<"$out"; then ok against
else bad against "$(grep -E 'error|quant' <<<"$out" | head -3)"; fi
if [ -z "$(ls -A "$WORK/tmp")" ]; then ok against_no_temp_left; else bad against_no_temp_left "$(ls -A "$WORK/tmp")"; fi
# f32 weights against their own checkpoint: no quantization error
out=$("$KILN" debug -m "$C" --against "$M" --against-tokenizer "$T" 2>&1)
if [ $? = 0 ] && grep -q 'quant_cos 1.000000, quant_rel 0$' <<<"$out"; then ok against_f32_exact
else bad against_f32_exact "$(grep -E 'error|quant' <<<"$out" | head -3)"; fi

# a program that is no language model: random inputs, or a folder's
if [ -n "$TT" ] && "$TT" --write-program "$WORK/scale.kiln" >/dev/null 2>&1; then
  expect plain_program 0 "verdict: the backend agrees with the reference at every node" -- \
    "$KILN" debug -m "$WORK/scale.kiln" --dump "$WORK/scale"
  expect plain_inputs 0 "method 'scale' on given inputs" -- "$KILN" debug -m "$WORK/scale.kiln" --inputs "$WORK/scale"
  expect plain_no_prompt 2 "--prompt applies to a language model's prefill or decode; method 'scale' is not one" -- \
    "$KILN" debug -m "$WORK/scale.kiln" -p hi
  expect plain_no_position 2 "--position applies to a language model" -- "$KILN" debug -m "$WORK/scale.kiln" --position 1
else
  skipped plain_program "no test_tensors given"
fi

# bad arguments: usage errors exit 2, failures 1; each names the rule
expect no_model 2 "no program given" -- "$KILN" debug
expect missing_model 1 "cannot open '$WORK/nope.kiln'" -- "$KILN" debug -m "$WORK/nope.kiln"
expect unknown_option 2 "unknown option '--frob'" -- "$KILN" debug -m "$P1" --frob
expect stray_argument 2 "unexpected argument 'x'" -- "$KILN" debug -m "$P1" x
expect unknown_method 2 "--method 'generate' is no method of the program (it has 0: prefill, 1: decode)" -- \
  "$KILN" debug -m "$P1" --method generate
expect method_index 0 "method 'decode'" -- "$KILN" debug -m "$P1" --method 1
expect threshold_high 2 "--threshold is a cosine similarity in 0..1, got '1.5'" -- "$KILN" debug -m "$P1" --threshold 1.5
expect threshold_negative 2 "got '-0.1'" -- "$KILN" debug -m "$P1" --threshold -0.1
expect threshold_text 2 "got 'high'" -- "$KILN" debug -m "$P1" --threshold high
expect threshold_nan 2 "got 'nan'" -- "$KILN" debug -m "$P1" --threshold nan
expect threshold_missing 2 "--threshold needs a value" -- "$KILN" debug -m "$P1" --threshold
expect position_past_context 2 "--position 64 is past the context: the program holds 64 positions (0..63)" -- \
  "$KILN" debug -m "$P1" --method decode --position 64
expect position_huge 2 "--position 99999999999999 is past the context" -- \
  "$KILN" debug -m "$P1" --method decode --position 99999999999999
expect position_negative 2 "--position must be an integer" -- "$KILN" debug -m "$P1" --position -1
expect tokens_past_context 2 "--tokens 8: a prefill call at position 60 takes 1..4" -- \
  "$KILN" debug -m "$P1" --position 60 --tokens 8
expect tokens_past_prefill 2 "takes 1..8 (prefill size 8" -- "$KILN" debug -m "$P1" --tokens 9
expect tokens_decode 2 "--tokens applies to prefill" -- "$KILN" debug -m "$P1" --method decode --tokens 2
expect unknown_backend 2 "--backend 'npu': this build has no such backend" -- "$KILN" debug -m "$P1" --backend npu
expect unknown_reference 2 "--reference 'gpu': this build has no such backend" -- "$KILN" debug -m "$P1" --reference gpu
expect against_tokenizer_alone 2 "--against-tokenizer goes with --against" -- "$KILN" debug -m "$P1" --against-tokenizer "$T"
expect against_missing 1 "cannot open '$WORK/nope.bin'" -- "$KILN" debug -m "$P1" --against "$WORK/nope.bin"
expect dump_unwritable 1 "cannot" -- "$KILN" debug -m "$P1" --dump /proc/kiln-debug-dump
# --inputs that do not fit
expect inputs_missing_dir 1 "cannot open '$WORK/none' (--inputs)" -- "$KILN" debug -m "$P1" --inputs "$WORK/none"
expect inputs_file 1 "is not a folder" -- "$KILN" debug -m "$P1" --inputs "$D/manifest.json"
expect inputs_other_method 1 "lacks input 'tokens', 'pos', 'all_logits' of method 'prefill'" -- \
  "$KILN" debug -m "$P1" --method prefill --inputs "$D"
expect inputs_position_differs 2 "--position 3, but the input 'pos' of '$D' says 12" -- \
  "$KILN" debug -m "$P1" --method decode --inputs "$D" --position 3
expect inputs_and_tokens 2 "--tokens and --inputs" -- "$KILN" debug -m "$P1" --inputs "$D" --tokens 2
# a prefill dump's inputs relabelled as decode's: 5 tokens where decode takes 1
"$KILN" debug -m "$P1" --tokens 5 --dump "$WORK/pre" >/dev/null 2>&1
sed -i 's/"method": "prefill", "role": "input"/"method": "decode", "role": "input"/' "$WORK/pre/manifest.json"
expect inputs_shape 1 "method 'decode' input 'tokens': expected i32 [1], given i32 [5]" -- \
  "$KILN" debug -m "$P1" --method decode --inputs "$WORK/pre"
finish
