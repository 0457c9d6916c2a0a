#!/usr/bin/env bash
# test_cli.sh KILN BUILD_DIR: end-to-end tests of the `kiln` command: exit
# codes (0 ok, 1 failure, 2 usage), help texts, compile/info/generate on a
# tiny model made by make_fixture, and the stories260K acceptance when the
# shared data is present.
set -u
KILN=$1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
FIX=${KILN_MAKE_FIXTURE:?make_fixture path}
HERE=$(cd "$(dirname "$0")" && pwd)
SHARED=${KILN_SHARED_DATA:-$HERE/../../shared/data}
. "$(dirname "$0")/lib.sh"


"$FIX" "$WORK" 5 || { echo "make_fixture failed"; exit 1; }
M=$WORK/model.bin T=$WORK/tok.bin P=$WORK/m.kiln

expect version 0 "(program format 7)" -- "$KILN" --version
expect no_args 2 "usage: kiln" -- "$KILN"
expect unknown_command 2 "unknown command 'frobnicate'" -- "$KILN" frobnicate
for c in compile info generate chat; do
  expect "help_$c" 0 "example" -- "$KILN" "$c" --help
done
expect compile_no_output 2 "no output given" -- "$KILN" compile "$M"
expect compile_bad_prefill 2 "--prefill must be an integer" -- "$KILN" compile "$M" -o "$P" --prefill 0
expect compile_unknown_option 2 "unknown option '--frob'" -- "$KILN" compile "$M" -o "$P" --frob
expect compile_missing_input 1 "cannot open '$WORK/nope.bin'" -- "$KILN" compile "$WORK/nope.bin" -o "$P"
expect compile_unknown_backend 1 "unknown backend 'npu'" -- "$KILN" compile "$M" -o "$P" --backend npu
expect compile_ok 0 "wrote" -- "$KILN" compile "$M" --tokenizer "$T" -o "$P" --prefill 8
if ls "$WORK" | grep -q '\.tmp\.'; then bad no_temp_files_left "$(ls "$WORK")"; else ok no_temp_files_left; fi
# An output that is the same file as an input (or as another output) is a
# usage error before any work, links followed; /dev/null may take several.
expect same_file_input 2 "-o '$M' is the same file as INPUT '$M'" -- "$KILN" compile "$M" -o "$M"
ln -s "$P" "$WORK/link.kiln"
expect same_file_link 2 "--trace '$WORK/link.kiln' is the same file as -m '$P'" -- "$KILN" generate -m "$P" -p hi --trace "$WORK/link.kiln"
expect same_file_outputs 2 "--stats-json '$WORK/o.json' is the same file as --trace '$WORK/o.json'" -- "$KILN" generate -m "$P" -p hi --stats-json "$WORK/o.json" --trace "$WORK/o.json"
expect same_file_dev_null 0 "" -- "$KILN" generate -m "$P" -p hi -n 2 --temp 0 --stats-json /dev/null --trace /dev/null
expect flag_takes_no_value 2 "--check takes no value or '=fallback', got '--check=yes'" -- "$KILN" compile "$M" -o "$WORK/y.kiln" --check=yes

expect info_text 0 "method 1: decode" -- "$KILN" info "$P"
expect info_nodes 0 "blk.1.attn_q" -- "$KILN" info "$P"
expect info_verify 0 "all checksums verified" -- "$KILN" info "$P" --verify
if command -v python3 >/dev/null; then
  if "$KILN" info "$P" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
names = [m["name"] for m in d["methods"]]
assert names == ["prefill", "decode"], names
pre = d["methods"][0]
assert [i["name"] for i in pre["inputs"]] == ["tokens", "pos", "all_logits"]
assert all(n["backend"] == "cpu" and not n["fallback"] for n in pre["nodes"])  # the default backend
assert any(s["name"] == "kv_cache.k.0" for s in d["state"])
'; then ok info_json; else bad info_json; fi
else
  skip=$((skip + 1)); echo "skip info_json (no python3)"
fi

# --quant: converts matmul/embedding weights; a row that is not whole blocks
# is an error naming the tensor, or kept with --quant-fallback.
expect compile_quant_bad 2 "--quant must be keep" -- "$KILN" compile "$M" -o "$WORK/q.kiln" --quant q5_0
expect compile_quant_rows 1 "tensor 'blk.0.ffn_down.weight' [32, 48]: rows of 48 are not whole q4_0 blocks of 32" -- "$KILN" compile "$M" -o "$WORK/q.kiln" --quant q4_0
expect compile_quant_fallback 0 "converted 13 weight tensors" -- "$KILN" compile "$M" --tokenizer "$T" -o "$WORK/q.kiln" --quant q4_0 --quant-fallback
# q4_0 weights that run on cpu are packed (q4_0x8) unless --no-pack; the
# embedding (rows not a multiple of 8) stays q4_0.
expect info_quant_packed 0 "q4_0x8    12 tensors" -- "$KILN" info "$WORK/q.kiln"
expect info_quant_unpacked_rest 0 "q4_0      1 tensors" -- "$KILN" info "$WORK/q.kiln"
expect compile_no_pack 0 "converted 13 weight tensors" -- "$KILN" compile "$M" --tokenizer "$T" -o "$WORK/q.kiln" --quant q4_0 --quant-fallback --no-pack
expect info_quant_dtypes 0 "q4_0     13 tensors" -- "$KILN" info "$WORK/q.kiln"

# The test backend told to refuse ops: those nodes run on ref, marked fallback.
expect compile_test_backend 0 "wrote" -- "$KILN" compile "$M" --tokenizer "$T" -o "$WORK/fb.kiln" --backend "test:refuse=rms_norm+swiglu"
expect info_fallback_count 0 "nodes (37, 7 fallback)" -- "$KILN" info "$WORK/fb.kiln"
if command -v python3 >/dev/null && "$KILN" info "$WORK/fb.kiln" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
for m in d["methods"]:
    for n in m["nodes"]:
        refused = n["op"] in ("rms_norm", "swiglu")
        assert n["fallback"] == refused and n["backend"] == ("ref" if refused else "test"), n
'; then ok info_fallback_json; else bad info_fallback_json; fi
expect compile_refuse_unknown_op 1 "refuse names unknown op 'conv'" -- "$KILN" compile "$M" -o "$WORK/x.kiln" --backend "test:refuse=conv"

# Delegates, with testd (a delegate for tests: no per-node exec; its
# partitions run whole from a blob stored in the program, with ref's kernels).
D=$WORK/d.kiln
expect testd_compile 0 "testd: 2 partitions in one blob" -- "$KILN" compile "$M" --tokenizer "$T" -o "$D" --backend testd
expect testd_info_blob 0 "blob 0: backend testd" -- "$KILN" info "$D"
expect testd_info_graph 0 "prefill.p0" -- "$KILN" info "$D"
expect testd_mixed 0 "testd: 6 partitions" -- "$KILN" compile "$M" --tokenizer "$T" -o "$WORK/d2.kiln" --backend testd:refuse=swiglu,cpu
"$KILN" compile "$M" --tokenizer "$T" -o "$WORK/r.kiln" --backend ref >/dev/null 2>&1
ids() { "$KILN" generate -m "$1" -p "the" -n 16 --temp 0 --print-ids --no-stats 2>&1; }
if [ "$(ids "$D")" = "$(ids "$WORK/r.kiln")" ] && [ -n "$(ids "$D")" ]; then ok testd_same_ids_as_ref
else bad testd_same_ids_as_ref "testd: $(ids "$D") ref: $(ids "$WORK/r.kiln")"; fi
expect testd_mixed_debug 0 "agrees with the reference at every node it shows" -- "$KILN" debug -m "$WORK/d2.kiln" --reference ref
expect testd_run_100 0 "100 iterations" -- "$KILN" run -m "$D" --iteration 100
# a delegate made every node's backend at open runs each node alone: all observed
out=$("$KILN" debug -m "$WORK/r.kiln" --backend testd 2>&1)
if grep -q "agrees with the reference at every node$" <<<"$out" && ! grep -q "not observed" <<<"$out" &&
   grep -qE '^ +1 +blk.0.attn_norm +rms_norm +testd +testd delegate ' <<<"$out"; then ok testd_at_open
else bad testd_at_open "$(tail -3 <<<"$out")"; fi
if command -v python3 >/dev/null; then
  "$KILN" generate -m "$WORK/d2.kiln" -p "the" -n 4 --temp 0 --no-stats --trace "$WORK/d2.jsonl" >/dev/null 2>&1
  "$KILN" info "$WORK/d2.kiln" --json >"$WORK/d2.json"
  if python3 - "$WORK/d2.jsonl" "$WORK/d2.json" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])][1:]
info = json.load(open(sys.argv[2]))
parts = info["methods"][0]["partitions"]
assert [p["backend"] for p in parts] == ["testd", "cpu", "testd", "cpu", "testd"], parts
assert parts[1]["inputs"] == ["blk.0.ffn_gate", "blk.0.ffn_up"], parts[1]
assert parts[1]["outputs"] == ["blk.0.ffn_swiglu"], parts[1]
assert parts[0]["blob"] == 0 and parts[0]["graph"] == "prefill.p0" and parts[1]["blob"] == -1
assert info["blobs"][0]["backend"] == "testd", info["blobs"]
# a delegate's partition is one call; its node events are what it profiled
# (estimated, each over its ops), the per-node backends' are measured
nodes = [e for e in ev if e["ev"] == "node"]
ops = [e for e in ev if e["ev"] == "op"]
ps = [e for e in ev if e["ev"] == "partition" and e["call"] == 0]
assert [p["backend"] for p in ps] == ["testd", "cpu", "testd", "cpu", "testd"], ps
assert all(p["delegate_ns"] > 0 for p in ps if p["backend"] == "testd"), ps
cpu = [e for e in nodes if e["backend"] == "cpu"]
assert cpu and all(e["name"].endswith("ffn_swiglu") and not e.get("estimated") for e in cpu)
est = [e for e in nodes if e["backend"] == "testd"]
assert est and all(e["estimated"] for e in est), est[:2]
assert len(ops) == len(est) and all(o["estimated"] for o in ops)
for o in ops:  # each op inside its node's event
    n = [e for e in est if e["call"] == o["call"] and e["node_id"] == o["node_id"]]
    assert len(n) == 1 and n[0]["start_ns"] <= o["start_ns"] <= o["end_ns"] <= n[0]["end_ns"], o
PY
  then ok testd_partitions_in_info_and_trace; else bad testd_partitions_in_info_and_trace; fi
  expect testd_inspect 0 "testd" -- "$KILN" inspect "$WORK/d2.jsonl" --by backend
else
  skipped testd_partitions_in_info_and_trace "no python3"
fi
# A damaged blob and a blob from another program: clear errors naming the
# method, the partition and the backend.
read -r boff bsize < <("$KILN" info "$D" | awk '$1 == "blobs" && $2 == "offset" { print $3, $4 }')
cp "$D" "$WORK/dbad.kiln"
printf '\x07' | dd of="$WORK/dbad.kiln" bs=1 seek=$((boff + bsize - 2)) conv=notrunc status=none
expect testd_damaged_blob 1 "method 'prefill' partition 0 (backend testd): blob 0 is damaged" -- "$KILN" generate -m "$WORK/dbad.kiln" -p the -n 2
"$KILN" compile "$M" --tokenizer "$T" -o "$WORK/d48.kiln" --backend testd --max-seq 48 >/dev/null 2>&1
read -r boff2 bsize2 < <("$KILN" info "$WORK/d48.kiln" | awk '$1 == "blobs" && $2 == "offset" { print $3, $4 }')
if [ "$boff2" = "$boff" ] && [ "$bsize2" = "$bsize" ]; then
  dd if="$D" of="$WORK/d48.kiln" bs=1 skip="$boff" seek="$boff" count="$bsize" conv=notrunc status=none
  expect testd_blob_of_another_program 1 "blob 0 was prepared for another program" -- "$KILN" generate -m "$WORK/d48.kiln" -p the -n 2
else
  bad testd_blob_of_another_program "the two programs' blobs sections differ in place ($boff+$bsize vs $boff2+$bsize2)"
fi

# Damage one weight byte: opening still works, --verify names the section.
cp "$P" "$WORK/bad.kiln"
# the last byte of the weights section, from `kiln info`'s section table
wend=$("$KILN" info "$P" | awk '$1 == "weights" && $2 == "offset" { print $3 + $4 - 1 }')
printf '\x55' | dd of="$WORK/bad.kiln" bs=1 seek="$wend" conv=notrunc status=none
expect info_damaged_weights 1 "section 'weights' checksum mismatch" -- "$KILN" info "$WORK/bad.kiln" --verify
# A program of another format version.
cp "$P" "$WORK/v9.kiln"
printf '\x09' | dd of="$WORK/v9.kiln" bs=1 seek=8 conv=notrunc status=none
expect info_other_version 1 "program format version 9" -- "$KILN" info "$WORK/v9.kiln"
expect info_not_a_program 1 "not a Kiln program" -- "$KILN" info "$M"

expect gen_no_model 2 "no model given" -- "$KILN" generate -p hi
expect gen_both_prompts 2 "exactly one of -p and --prompt-ids" -- "$KILN" generate -m "$P" -p hi --prompt-ids "1 2"
expect gen_bad_temp 2 "--temp must be" -- "$KILN" generate -m "$P" -p hi --temp -1
expect gen_bad_n 2 "-n must be -1" -- "$KILN" generate -m "$P" -p hi -n -5
expect gen_bad_ids 2 "--prompt-ids must be" -- "$KILN" generate -m "$P" --prompt-ids "1 x"
# -n is the most new tokens: past the context, generation goes on to what
# fits (the same ids as asking for exactly that) and stderr says so, exit 0;
# a prompt with no room for a new token is an error (but with -n 0).
out=$("$KILN" generate -m "$P" --prompt-ids "1 2 3" -n 62 --temp 0 --print-ids --ignore-eos 2>"$WORK/ctx.err")
rc=$?
fit=$("$KILN" generate -m "$P" --prompt-ids "1 2 3" -n 61 --temp 0 --print-ids --ignore-eos 2>"$WORK/fit.err")
if [ $rc = 0 ] && [ "$(wc -w <<<"$out")" = 61 ] && [ "$out" = "$fit" ] &&
  grep -qF "stopped at the context limit: prompt 3 + 61 generated tokens fill the context of 64 (-n asked for 62)" "$WORK/ctx.err" &&
  ! grep -q "context limit" "$WORK/fit.err"
then ok gen_past_context_stops_there; else bad gen_past_context_stops_there "rc $rc, $(wc -w <<<"$out") ids: $(cat "$WORK/ctx.err")"; fi
expect gen_fills_context_says_so 0 "stopped at the context limit: prompt 3 + 61 generated tokens fill the context of 64" -- \
  "$KILN" generate -m "$P" --prompt-ids "1 2 3" --temp 0 --ignore-eos --no-stats
ids=$(seq -s ' ' 1 65)
expect gen_prompt_too_long 1 "the prompt has 65 tokens, more than the context of 64" -- "$KILN" generate -m "$P" --prompt-ids "$ids" -n 0
ids=$(seq -s ' ' 1 64)
expect gen_prompt_fills_context 1 "the prompt has 64 tokens, the context holds 64: no room for a new token" -- \
  "$KILN" generate -m "$P" --prompt-ids "$ids"
expect gen_prompt_fills_context_n0 0 "" -- "$KILN" generate -m "$P" --prompt-ids "$ids" -n 0 --no-stats
expect gen_id_outside_vocab 1 "outside the vocabulary" -- "$KILN" generate -m "$P" --prompt-ids "1 300" -n 2 --temp 0
out=$("$KILN" generate -m "$P" --prompt-ids "1 40 50" -n 7 --temp 0 --print-ids 2>/dev/null)
if [ "$(wc -w <<<"$out")" = 7 ]; then ok gen_print_ids_count; else bad gen_print_ids_count "got '$out'"; fi
a=$("$KILN" generate -m "$P" -p "the" -n 10 --temp 0.9 --seed 42 --print-ids 2>/dev/null)
b=$("$KILN" generate -m "$P" -p "the" -n 10 --temp 0.9 --seed 42 --print-ids 2>/dev/null)
if [ -n "$a" ] && [ "$a" = "$b" ]; then ok gen_seed_reproducible; else bad gen_seed_reproducible "'$a' vs '$b'"; fi
expect gen_random_seed_printed 0 "seed " -- "$KILN" generate -m "$P" -p "the" -n 3
# --ignore-eos: the fixture's greedy answer to "1 87" is three 87s, then its
# end token (1) stops it; told to ignore end tokens it runs to -n, the end
# token kept.
out=$("$KILN" generate -m "$P" --prompt-ids "1 87" -n 8 --temp 0 --print-ids 2>/dev/null)
if [ "$out" = "87 87 87" ]; then ok gen_stops_at_end; else bad gen_stops_at_end "got '$out'"; fi
out=$("$KILN" generate -m "$P" --prompt-ids "1 87" -n 8 --temp 0 --print-ids --ignore-eos --stats-json "$WORK/eos.json" 2>/dev/null)
if [ "$(wc -w <<<"$out")" = 8 ] && [[ "$out" == "87 87 87 1 "* ]] && grep -q '"generated_tokens": 8' "$WORK/eos.json"
then ok gen_ignore_eos; else bad gen_ignore_eos "got '$out'"; fi

# Sampler options: llama.cpp's names; bad values are usage errors naming the flag.
expect gen_bad_top_k 2 "--top-k must be" -- "$KILN" generate -m "$P" -p hi --top-k -1
expect gen_bad_top_p_zero 2 "--top-p must be" -- "$KILN" generate -m "$P" -p hi --top-p 0
expect gen_bad_top_p_big 2 "--top-p must be" -- "$KILN" generate -m "$P" -p hi --top-p 1.5
expect gen_bad_min_p 2 "--min-p must be" -- "$KILN" generate -m "$P" -p hi --min-p -0.1
expect gen_bad_repeat_penalty 2 "--repeat-penalty must be" -- "$KILN" generate -m "$P" -p hi --repeat-penalty 0
expect gen_bad_repeat_last_n 2 "--repeat-last-n must be" -- "$KILN" generate -m "$P" -p hi --repeat-last-n -2
expect gen_bad_threads 2 "-t must be a thread count" -- "$KILN" generate -m "$P" -p hi -t 0
expect chat_bad_threads 2 "-t must be a thread count" -- "$KILN" chat -m "$P" --threads x
# The cpu backend's results do not depend on the thread count.
t1=$("$KILN" generate -m "$P" --prompt-ids "1 2 3" -n 12 --temp 0 --print-ids -t 1 2>/dev/null)
t3=$("$KILN" generate -m "$P" --prompt-ids "1 2 3" -n 12 --temp 0 --print-ids --threads 3 2>/dev/null)
if [ -n "$t1" ] && [ "$t1" = "$t3" ]; then ok gen_threads_same_ids; else bad gen_threads_same_ids "'$t1' vs '$t3'"; fi
# --backend ref runs the same program on the reference backend: on the f32
# fixture its greedy ids are cpu's; an unknown backend is a usage error.
tr=$("$KILN" generate -m "$P" --prompt-ids "1 2 3" -n 12 --temp 0 --print-ids --backend ref 2>/dev/null)
if [ -n "$tr" ] && [ "$tr" = "$t1" ]; then ok gen_backend_ref_same_ids; else bad gen_backend_ref_same_ids "'$tr' vs '$t1'"; fi
expect gen_backend_unknown 2 "--backend must be cpu or ref, got 'npu'" -- "$KILN" generate -m "$P" -p hi --backend npu
expect chat_backend_unknown 2 "--backend must be cpu or ref, got 'gpu'" -- "$KILN" chat -m "$P" --backend gpu
out=$(printf 'hi\n' | "$KILN" chat -m "$P" --chat-template chatml -n 6 --temp 0 --backend ref 2>&1)
if [ $? = 0 ] && grep -q "turn 1: prefilled" <<<"$out"; then ok chat_backend_ref; else bad chat_backend_ref "$out"; fi
expect gen_stop_with_ids 2 "--stop works on text" -- "$KILN" generate -m "$P" -p hi --stop x --print-ids
expect gen_all_samplers 0 "" -- "$KILN" generate -m "$P" -p "the" -n 8 --temp 0.7 --seed 3 --top-k 5 --top-p 0.9 --min-p 0.1 --repeat-penalty 1.3 --repeat-last-n -1
# The fixture's greedy text for "the" is "the" then "222222222" (12 tokens).
full=$("$KILN" generate -m "$P" -p "the" -n 12 --temp 0 2>/dev/null)
if [ "$full" = "the222222222" ]; then ok gen_greedy_fixture_text; else bad gen_greedy_fixture_text "got '$full'"; fi
out=$("$KILN" generate -m "$P" -p "the" -n 12 --temp 0 --stop 2222 --stats-json "$WORK/stop.json" 2>/dev/null)
if [ "$out" = "the" ] && ! grep -q '"generated_tokens": 12' "$WORK/stop.json"; then ok gen_stop_early
else bad gen_stop_early "got '$out', $(cat "$WORK/stop.json")"; fi
# A held-back prefix that never completes is printed in the end.
out=$("$KILN" generate -m "$P" -p "the" -n 12 --temp 0 --stop 22x --stop zz 2>/dev/null)
if [ "$out" = "$full" ]; then ok gen_stop_no_match; else bad gen_stop_no_match "got '$out'"; fi
expect gen_stats_stderr 0 "time to first token" -- "$KILN" generate -m "$P" -p "the" -n 4 --temp 0
err=$("$KILN" generate -m "$P" -p "the" -n 4 --temp 0 --no-stats 2>&1 >/dev/null)
if [ -z "$err" ]; then ok gen_no_stats; else bad gen_no_stats "stderr '$err'"; fi
if command -v python3 >/dev/null; then
  if "$KILN" generate -m "$P" -p "the" -n 6 --temp 0 --stats-json "$WORK/stats.json" >/dev/null 2>&1 &&
     python3 - "$WORK/stats.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
keys = ["prompt_tokens", "generated_tokens", "load_ms", "ttft_ms", "prefill_tps", "decode_tps",
        "sampling_ms", "peak_rss_bytes"]
assert all(k in d for k in keys), d
assert d["prompt_tokens"] == 2 and d["generated_tokens"] == 6, d
assert d["peak_rss_bytes"] > 0 and d["ttft_ms"] >= 0, d
PY
  then ok gen_stats_json; else bad gen_stats_json; fi
else
  skip=$((skip + 1)); echo "skip gen_stats_json (no python3)"
fi

# Ctrl-C stops a long generation cleanly: the fixture's greedy text never
# ends and a 30000-token context makes the run take seconds, so the signal
# always lands mid-run. The handler reports how far it got; a process killed
# outright would not.
expect compile_long_context 0 "wrote" -- "$KILN" compile "$M" --tokenizer "$T" -o "$WORK/long.kiln" --max-seq 30000
"$KILN" generate -m "$WORK/long.kiln" -p "the" -n -1 --temp 0 >/dev/null 2>"$WORK/int.err" &
pid=$!
sleep 0.5
kill -INT $pid 2>/dev/null
wait $pid
rc=$?
if [ "$rc" = 130 ] && grep -q "interrupted after" "$WORK/int.err"; then ok gen_ctrl_c
else bad gen_ctrl_c "exit $rc: $(cat "$WORK/int.err")"; fi

# The stories260K acceptance: exactly what llama2.c's run.c prints.
S=$SHARED/models/stories260K
if [ -f "$S/stories260K.bin" ] && command -v python3 >/dev/null; then
  # run.c's exact text is ref's promise; the cpu backend is checked against
  # ref at a tolerance (test_cpu_backend, test_generate).
  expect stories_compile 0 "wrote" -- "$KILN" compile "$S/stories260K.bin" --tokenizer "$S/tok512.bin" -o "$WORK/s.kiln" --backend ref
  # run.c's text holds generated_tokens + 1 sampled tokens (its loop samples
  # steps - prompt_tokens + 1), so -n is that count.
  if python3 - "$KILN" "$WORK/s.kiln" "$S/expected.json" <<'PY'
import json, subprocess, sys
kiln, prog, exp = sys.argv[1:]
bad = 0
for e in json.load(open(exp)):
    n = e["generated_tokens"] + (0 if e["stopped_at_bos"] else 1)
    out = subprocess.run([kiln, "generate", "-m", prog, "-p", e["prompt"], "-n", str(n), "--temp", "0"],
                         capture_output=True, text=True)
    if out.returncode != 0 or out.stdout != e["text"] + "\n":
        bad += 1
        print("  mismatch for prompt %r: rc %d" % (e["prompt"], out.returncode))
sys.exit(1 if bad else 0)
PY
  then ok stories_exact_text; else bad stories_exact_text; fi
else
  skip=$((skip + 1)); echo "skip stories_exact_text (no shared data at $S or no python3)"
fi

# kiln compile --kv-type: f16 by default, f32 on request, shown by info.
expect kv_type_default 0 "kv_cache.k.0     f16" -- "$KILN" info "$P"
expect kv_type_f32 0 "wrote" -- "$KILN" compile "$M" -o "$WORK/kv32.kiln" --prefill 8 --kv-type f32
expect kv_type_f32_info 0 "kv_cache.v.1     f32" -- "$KILN" info "$WORK/kv32.kiln"
expect kv_type_bad 2 "--kv-type must be f16 or f32, got 'q8_0'" -- "$KILN" compile "$M" -o "$WORK/kvx.kiln" --kv-type q8_0

# kiln bench: the table, CSV and JSON shapes on the fixture program (tiny
# runs), the chunked prompt note, --machine's JSON file, and bad arguments.
expect help_bench 0 "example" -- "$KILN" bench --help
BA=(-m "$P" -p 8,12 -n 4 -r 2 -t 1)
if command -v python3 >/dev/null; then
  if "$KILN" bench "${BA[@]}" >"$WORK/b.txt" 2>&1 && python3 - "$WORK/b.txt" <<'PY'
import sys
lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
rows = [l for l in lines if l.startswith("|")]
assert len(rows) == 5, rows
head = [c.strip() for c in rows[0].strip("|").split("|")]
assert head == ["model", "size", "params", "backend", "threads", "test", "t/s"], head
tests = []
for r in rows[2:]:
    c = [x.strip() for x in r.strip("|").split("|")]
    assert len(c) == 7 and c[0] == "m.kiln" and c[4] == "1", c
    mean, sd = c[6].split(" ± ")
    assert float(mean) > 0 and float(sd) >= 0, c
    tests.append(c[5])
assert tests == ["pp8", "pp12", "tg4"], tests
assert "pp8: one prefill call of 8 tokens" in lines, lines
assert any(l.startswith("pp12: 2 prefill calls of up to 8 tokens") for l in lines), lines
assert lines[-1].startswith("peak RSS: "), lines[-1]
PY
  then ok bench_table; else bad bench_table "$(head -12 "$WORK/b.txt")"; fi
  if "$KILN" bench "${BA[@]}" -o csv >"$WORK/b.csv" 2>&1 && python3 - "$WORK/b.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [(r["n_prompt"], r["n_gen"], r["n_batch"]) for r in rows] == [("8", "0", "8"), ("12", "0", "8"), ("0", "4", "1")], rows
for r in rows:
    assert float(r["avg_ts"]) > 0 and len(r["samples_ts"].split()) == 2 and int(r["peak_rss_bytes"]) > 0, r
    assert r["type_k"] == "f16" and r["n_threads"] == "1" and int(r["model_n_params"]) > 0, r
PY
  then ok bench_csv; else bad bench_csv "$(head -5 "$WORK/b.csv")"; fi
  # cpu_kernels: the table that ran ($KILN_CPU's, here)
  if KILN_CPU=scalar "$KILN" bench "${BA[@]}" -o json >"$WORK/b.json" 2>&1 && python3 - "$WORK/b.json" "$P" <<'PY'
import json, os, sys
d = json.load(open(sys.argv[1]))
assert isinstance(d, list) and len(d) == 3, d
keys = {"model_filename", "model_size", "model_n_params", "n_prompt", "n_gen", "n_threads", "avg_ts",
        "stddev_ts", "samples_ts", "backend", "cpu_kernels", "peak_rss_bytes"}
for o in d:
    assert keys <= set(o), set(o) ^ keys
    assert o["model_filename"] == sys.argv[2] and 0 < o["model_size"] < os.path.getsize(sys.argv[2]), o
    assert len(o["samples_ts"]) == 2 and all(x > 0 for x in o["samples_ts"]), o
    assert abs(o["avg_ts"] - sum(o["samples_ts"]) / 2) <= 1e-3 * o["avg_ts"], o
    assert o["backend"] and o["peak_rss_bytes"] > 0 and o["cpu_kernels"] == "scalar", o
assert [(o["n_prompt"], o["n_gen"]) for o in d] == [(8, 0), (12, 0), (0, 4)], d
PY
  then ok bench_json; else bad bench_json "$(head -5 "$WORK/b.json")"; fi
  if KILN_CACHE="$WORK/cache" "$KILN" bench --machine -t 1 --mem-mib 16 >"$WORK/m.txt" 2>&1 &&
     grep -q "memory read GB/s" "$WORK/m.txt" && python3 - "$WORK/cache/machine.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("cpu_model", "date", "n_threads", "f32_kernel", "i8_kernel", "single_thread", "all_threads"):
    assert k in d, k
for k in ("mem_read_gbps", "f32_gflops", "i8_gops"):
    assert d["single_thread"][k] > 0, d
PY
  then ok bench_machine; else bad bench_machine "$(head -8 "$WORK/m.txt")"; fi
else
  skip=$((skip + 4)); echo "skip bench_table, bench_csv, bench_json, bench_machine (no python3)"
fi
expect bench_no_model 2 "no model given" -- "$KILN" bench -p 8
expect bench_bad_reps 2 "-r must be an integer in 1..1000, got '0'" -- "$KILN" bench -m "$P" -r 0
expect bench_bad_format 2 "-o must be table, csv or json, got 'xml'" -- "$KILN" bench -m "$P" -o xml
expect bench_bad_list 2 "-p needs a comma-separated list" -- "$KILN" bench -m "$P" -p 8,,4
expect bench_bad_number 2 "-n takes integers in 0..1048576, got 'x'" -- "$KILN" bench -m "$P" -n x
expect bench_bad_threads 2 "-t takes integers in 1..256, got '0'" -- "$KILN" bench -m "$P" -t 0
expect bench_nothing 2 "nothing to measure" -- "$KILN" bench -m "$P" -p 0 -n 0
expect bench_unknown_option 2 "unknown option '--frob'" -- "$KILN" bench -m "$P" --frob
expect bench_machine_and_model 2 "drop -m" -- "$KILN" bench --machine -m "$P"
expect bench_machine_and_backend 2 "--backend applies to a model's runs" -- "$KILN" bench --machine --backend ref
expect bench_backend_unknown 2 "--backend must be cpu or ref, got 'npu'" -- "$KILN" bench -m "$P" --backend npu
expect bench_backend_ref 0 "| ref        |       1 |           pp8 |" -- "$KILN" bench -m "$P" -p 8 -n 0 -r 1 -t 1 --backend ref
expect bench_too_long 1 "does not fit the program's context" -- "$KILN" bench -m "$P" -p 100000 -r 1
expect bench_missing_file 1 "nope.kiln" -- "$KILN" bench -m "$WORK/nope.kiln"

echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" = 0 ]
