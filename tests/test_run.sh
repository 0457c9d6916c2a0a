#!/usr/bin/env bash
# test_run.sh KILN TEST_TENSORS [quick|smollm2]: `kiln run` end to end.
#
# quick (default): bad arguments (exit 2) and bad inputs (exit 1, the message
# names the input or file and the rule) on a tiny random model made by
# make_fixture; inputs from tensor folders and single .npy files (a one-input
# program from `test_tensors --write-program`); NumPy reading Kiln's files and
# Kiln reading NumPy's (numpy pip-installed when missing, else that part is
# skipped); and the language-model loop: after N iterations of prefill +
# decode in one session (with resets at the context), the outputs of the last
# iteration equal, byte for byte, those of a fresh session that prefills the
# same tokens in one go (`--prompt-len P --gen-len 1`: the tokens are a hash
# of seed and position). On the fixture (cpu and ref) and stories260K when
# ../shared/data is present.
# smollm2: the same replay after 50 iterations of SmolLM2-135M-Instruct Q4_1
# (the GGUF cached by scripts/run.sh; skipped when absent).
set -u
KILN=$1
TT=$2
MODE=${3:-quick}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
HERE=$(cd "$(dirname "$0")" && pwd)
SHARED=${KILN_SHARED_DATA:-$HERE/../../shared/data}
CACHE=${KILN_CACHE:-$HOME/.cache/kiln}
. "$(dirname "$0")/lib.sh"


# npy_data_offset FILE: where an .npy file's data starts (format 1.0).
npy_data_offset() {
  local b8 b9
  read -r b8 b9 < <(od -An -v -t u1 -j 8 -N 2 "$1")
  echo $((10 + b8 + 256 * b9))
}
# npy_i32 FILE: the int32 values of an .npy file, space-separated.
npy_i32() { od -An -v -t d4 -j "$(npy_data_offset "$1")" "$1" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//'; }
# npy_count FILE SIZE: elements of SIZE bytes.
npy_count() { echo $(( ($(wc -c <"$1") - $(npy_data_offset "$1")) / $2 )); }
# mknpy FILE DESCR SHAPE DATA: an .npy file by hand (DATA: printf escapes).
mknpy() {
  local dict="{'descr': '$2', 'fortran_order': False, 'shape': $3, }"
  local pad=$(( (64 - (10 + ${#dict} + 1) % 64) % 64 ))
  local hlen=$(( ${#dict} + pad + 1 ))
  {
    printf '\223NUMPY\001\000'
    printf "\\$(printf %03o $((hlen & 255)))\\$(printf %03o $((hlen >> 8)))"
    printf '%s' "$dict"
    printf "%${pad}s\n" ""
    printf "$4"
  } >"$1"
}

# replay NAME PROGRAM ITER PROMPT GEN SEED [FLAGS...]: runs ITER iterations of
# the language-model loop, then replays the last decode and the last prefill
# in fresh sessions (one prefill of the whole history) and compares the
# logits byte for byte. Sets RUN_OUT to the long run's output.
replay() {
  local name=$1 prog=$2 iter=$3 plen=$4 glen=$5 seed=$6
  shift 6
  local d=$WORK/$name
  rm -rf "$d"
  mkdir -p "$d"
  RUN_OUT=$("$KILN" run -m "$prog" --method all --iteration "$iter" --prompt-len "$plen" --gen-len "$glen" \
    --random-inputs "$seed" --output-dir "$d/A" "$@" 2>&1)
  local rc=$?
  if [ $rc != 0 ]; then bad "${name}_runs" "exit $rc: $(echo "$RUN_OUT" | tail -3)"; return; fi
  local lines
  lines=$(grep -cE '^iteration [0-9]+: [0-9]+\.[0-9]{2} ms$' <<<"$RUN_OUT")
  if [ "$lines" != "$iter" ] || ! grep -q "^iteration $iter: " <<<"$RUN_OUT" ||
     ! grep -qE "^summary: $iter iterations?: min [0-9.]+ ms, p50 [0-9.]+ ms, p90 [0-9.]+ ms, max [0-9.]+ ms, mean [0-9.]+ ms, stddev [0-9.]+ ms$" <<<"$RUN_OUT"; then
    bad "${name}_runs" "expected $iter iteration lines and a summary: $(echo "$RUN_OUT" | tail -3)"
    return
  fi
  ok "${name}_runs"
  # the last decode: at position q after the tokens 0..q-1
  if [ "$glen" -gt 0 ]; then
    local q out
    q=$(npy_i32 "$d/A/decode.pos.npy")
    out=$("$KILN" run -m "$prog" --prompt-len "$q" --gen-len 1 --random-inputs "$seed" --output-dir "$d/B" "$@" 2>&1)
    if [ $? != 0 ] || grep -q reset <<<"$out"; then
      bad "${name}_decode_replay" "$(echo "$out" | tail -2)"
    elif cmp -s "$d/A/decode.logits.npy" "$d/B/decode.logits.npy" && cmp -s "$d/A/decode.tokens.npy" "$d/B/decode.tokens.npy"; then
      ok "${name}_decode_replay (position $q)"
    else
      bad "${name}_decode_replay" "logits at position $q differ from a fresh session's"
    fi
  fi
  # the last prefill: its last row, after the tokens 0..end-1
  if [ "$plen" -gt 0 ]; then
    local p n end
    p=$(npy_i32 "$d/A/prefill.pos.npy")
    n=$(npy_count "$d/A/prefill.tokens.npy" 4)
    end=$((p + n))
    out=$("$KILN" run -m "$prog" --prompt-len "$end" --gen-len 0 --random-inputs "$seed" --output-dir "$d/C" "$@" 2>&1)
    if [ $? != 0 ]; then
      bad "${name}_prefill_replay" "$(echo "$out" | tail -2)"
    elif cmp -s "$d/A/prefill.logits.npy" "$d/C/prefill.logits.npy"; then
      ok "${name}_prefill_replay (positions $p..$((end - 1)))"
    else
      bad "${name}_prefill_replay" "logits of positions $p..$((end - 1)) differ from a fresh session's"
    fi
  fi
}

# ---- smollm2 --------------------------------------------------------------------------

if [ "$MODE" = smollm2 ]; then
  GGUF=$(smollm2_gguf)
  if [ -z "$GGUF" ]; then
    skipped smollm2 "no SmolLM2-135M-Instruct.Q4_1.gguf under $CACHE: run 'bash scripts/run.sh' once"
    finish
  fi
  # A 512-token context: 50 iterations of 32 + 16 tokens reset the session 4 times.
  expect smollm2_compile 0 "wrote" -- "$KILN" compile "$GGUF" -o "$WORK/smol.kiln" --max-seq 512
  replay smollm2 "$WORK/smol.kiln" 50 32 16 11
  if grep -q "session reset before" <<<"$RUN_OUT"; then ok smollm2_resets; else bad smollm2_resets "no reset in 2400 tokens"; fi
  grep '^summary' <<<"$RUN_OUT"
  finish
fi

# ---- quick: the fixture -----------------------------------------------------------------

FIX=${KILN_MAKE_FIXTURE:?make_fixture path}
"$FIX" "$WORK" 5 >/dev/null || { echo "make_fixture failed"; exit 1; }
P=$WORK/m.kiln
# a context of 64, prefill calls of at most 8 tokens
"$KILN" compile "$WORK/model.bin" --tokenizer "$WORK/tok.bin" -o "$P" --prefill 8 --max-seq 64 >/dev/null 2>&1 ||
  { echo "compile failed"; exit 1; }

# bad arguments: exit 2, the message names the flag and the rule
expect help 0 "example" -- "$KILN" run --help
expect listed 0 "run " -- "$KILN" --help
expect no_model 2 "no program given" -- "$KILN" run
expect unknown_option 2 "unknown option '--frob'" -- "$KILN" run -m "$P" --frob
expect stray_argument 2 "unexpected argument 'x'" -- "$KILN" run -m "$P" x
expect no_value 2 "--iteration needs a value" -- "$KILN" run -m "$P" --iteration
expect iteration_zero 2 "--iteration must be an integer in 1..10000000, got '0'" -- "$KILN" run -m "$P" --iteration 0
expect iteration_text 2 "got 'ten'" -- "$KILN" run -m "$P" --iteration ten
expect iteration_huge 2 "got '99999999999'" -- "$KILN" run -m "$P" --iteration 99999999999
expect iteration_trailing 2 "got '5x'" -- "$KILN" run -m "$P" --iteration 5x
expect warm_up_negative 2 "--warm-up must be an integer in 0..10000000, got '-1'" -- "$KILN" run -m "$P" --warm-up -1
expect seed_text 2 "--random-inputs must be an integer" -- "$KILN" run -m "$P" --random-inputs abc
expect threads_zero 2 "-t must be an integer in 1..256, got '0'" -- "$KILN" run -m "$P" -t 0
expect backend_unknown 2 "--backend must be cpu or ref, got 'npu'" -- "$KILN" run -m "$P" --backend npu
expect method_unknown 2 "--method 'frob' is no method of the program (it has 0: prefill, 1: decode; or all)" -- "$KILN" run -m "$P" --method frob
expect method_index_range 2 "--method '2' is no method" -- "$KILN" run -m "$P" --method 2
expect gen_len_single 2 "--gen-len applies to --method all" -- "$KILN" run -m "$P" --method decode --gen-len 4
expect prompt_len_context 2 "--prompt-len 65 is more than the context (64 tokens)" -- "$KILN" run -m "$P" --prompt-len 65
expect nothing_to_run 2 "nothing to run" -- "$KILN" run -m "$P" --prompt-len 0 --gen-len 0
expect prompt_len_method 2 "--prompt-len 9: method 'prefill' input 'tokens' takes 1..8 tokens per call" -- "$KILN" run -m "$P" --method prefill --prompt-len 9
expect prompt_len_decode 2 "--prompt-len applies to" -- "$KILN" run -m "$P" --method decode --prompt-len 4
expect model_missing 1 "cannot open '$WORK/nope.kiln'" -- "$KILN" run -m "$WORK/nope.kiln"
head -c 3000 "$P" >"$WORK/cut.kiln"
expect model_damaged 1 "cut.kiln" -- "$KILN" run -m "$WORK/cut.kiln"
out=$("$KILN" run -m "$P" --output-dir "$P/sub" 2>&1)
if [ $? = 1 ] && grep -qF "cannot create the folder '$P/sub'" <<<"$out" && ! grep -q '^iteration' <<<"$out"; then
  ok output_dir_before_work; else bad output_dir_before_work "$out"; fi

# runs
expect all_three 0 "iteration 3: " -- "$KILN" run -m "$P" --iteration 3
expect all_header 0 "prefill 32 + decode 16 tokens per iteration, one session (context 64)" -- "$KILN" run -m "$P" --prompt-len 32
expect all_resets 0 "iteration 2: the context (64 tokens) is full: session reset before prefill at position 64" -- "$KILN" run -m "$P" --iteration 2 --prompt-len 32 --gen-len 16
expect prompt_chunks 0 "summary: 1 iteration:" -- "$KILN" run -m "$P" --prompt-len 20 --gen-len 0
out=$("$KILN" run -m "$P" --method decode --iteration 2 --warm-up 3 2>/dev/null)
if [ "$(grep -c '^iteration' <<<"$out")" = 2 ] && ! grep -q "warm-up" <<<"$out"; then ok warm_up_untimed; else bad warm_up_untimed "$out"; fi
expect method_index 0 "method 'decode', 1 iteration" -- "$KILN" run -m "$P" --method 1
expect method_prefill 0 "method 'prefill'" -- "$KILN" run -m "$P" --method prefill --prompt-len 5 --iteration 2
expect backend_ref 0 "backend ref" -- "$KILN" run -m "$P" --backend ref --iteration 2
expect backend_cpu 0 "backend cpu" -- "$KILN" run -m "$P" --backend cpu -t 1 --iteration 2
"$KILN" compile "$WORK/model.bin" --tokenizer "$WORK/tok.bin" -o "$WORK/ref.kiln" --prefill 8 --max-seq 64 --backend ref >/dev/null 2>&1
expect backend_ref_to_cpu 0 "backend cpu" -- "$KILN" run -m "$WORK/ref.kiln" --backend cpu --iteration 2

# the language-model loop against fresh sessions: chunked prompts, resets mid-iteration
replay fixture_cpu "$P" 50 8 16 7
replay fixture_chunks "$P" 9 20 5 3
replay fixture_ref "$P" 30 8 16 7 --backend ref
replay fixture_ref_program "$WORK/ref.kiln" 30 8 16 5
replay fixture_decode_only "$P" 70 0 1 2
# the same seed, the same outputs; another seed, others
"$KILN" run -m "$P" --iteration 2 --output-dir "$WORK/s1" >/dev/null 2>&1
"$KILN" run -m "$P" --iteration 2 --output-dir "$WORK/s2" >/dev/null 2>&1
"$KILN" run -m "$P" --iteration 2 --output-dir "$WORK/s3" --random-inputs 1 >/dev/null 2>&1
if cmp -s "$WORK/s1/decode.logits.npy" "$WORK/s2/decode.logits.npy" && ! cmp -s "$WORK/s1/decode.logits.npy" "$WORK/s3/decode.logits.npy"; then
  ok seeds; else bad seeds; fi

# --output-dir then --inputs: a decode from the written folder, in a fresh
# session, gives the same logits
"$KILN" run -m "$P" --method decode --random-inputs 9 --output-dir "$WORK/d1" >/dev/null 2>&1
expect manifest_written 0 '"role": "output", "dtype": "f32", "shape": [1, 300], "file": "decode.logits.npy"' -- cat "$WORK/d1/manifest.json"
expect inputs_folder 0 "iteration 1" -- "$KILN" run -m "$P" --method decode --inputs "$WORK/d1" --output-dir "$WORK/d2"
if cmp -s "$WORK/d1/decode.logits.npy" "$WORK/d2/decode.logits.npy"; then ok inputs_same_outputs; else bad inputs_same_outputs; fi
tok=$(npy_i32 "$WORK/d1/decode.tokens.npy")
pos=$(npy_i32 "$WORK/d1/decode.pos.npy")
if [ "$tok" -ge 0 ] && [ "$tok" -lt 300 ] && [ "$pos" -ge 0 ] && [ "$pos" -lt 64 ]; then ok random_inputs_valid; else bad random_inputs_valid "token $tok, position $pos"; fi
"$KILN" run -m "$P" --method prefill --random-inputs 9 --prompt-len 6 --output-dir "$WORK/p1" >/dev/null 2>&1
n=$(npy_count "$WORK/p1/prefill.tokens.npy" 4)
pos=$(npy_i32 "$WORK/p1/prefill.pos.npy")
if [ "$n" = 6 ] && [ "$pos" -le 58 ] && [ "$(npy_i32 "$WORK/p1/prefill.all_logits.npy")" = 0 ]; then ok random_prefill_valid
else bad random_prefill_valid "$n tokens at $pos"; fi

# hand-made folders: missing inputs, wrong dtype or shape, damaged files, stray tensors
F=$WORK/in
mkdir -p "$F"
manifest() { printf '{"tensors": [%s]}\n' "$1" >"$F/manifest.json"; }
T='{"name": "tokens", "file": "t.npy", "dtype": "%s", "shape": [%s]}'
PS='{"name": "pos", "file": "p.npy", "dtype": "i32", "shape": [1]}'
mknpy "$F/t.npy" '<i4' '(1,)' '\005\000\000\000'
mknpy "$F/p.npy" '<i4' '(1,)' '\003\000\000\000'
manifest "$(printf "$T" i32 1), $PS"
expect folder_ok 0 "iteration 1" -- "$KILN" run -m "$P" --method decode --inputs "$F"
manifest "$(printf "$T" i32 1)"
expect folder_missing 1 "'$F' lacks input 'pos' of method 'decode'" -- "$KILN" run -m "$P" --method decode --inputs "$F"
expect folder_missing_random 0 "iteration 1" -- "$KILN" run -m "$P" --method decode --inputs "$F" --random-inputs 1
mknpy "$F/t.npy" '<i8' '(1,)' '\005\000\000\000\000\000\000\000'
manifest "$(printf "$T" i64 1), $PS"
expect folder_dtype 1 "method 'decode' input 'tokens': expected i32 [1], given i64 [1] (from '$F/t.npy')" -- "$KILN" run -m "$P" --method decode --inputs "$F"
mknpy "$F/t.npy" '<i4' '(2,)' '\005\000\000\000\001\000\000\000'
manifest "$(printf "$T" i32 2), $PS"
expect folder_shape 1 "method 'decode' input 'tokens': expected i32 [1], given i32 [2]" -- "$KILN" run -m "$P" --method decode --inputs "$F"
mknpy "$F/t.npy" '<i4' '(9,)' "$(printf '\\001\\000\\000\\000%.0s' $(seq 9))"
manifest "$(printf "$T" i32 9)"
expect folder_prefill_shape 1 "method 'prefill' input 'tokens': expected i32 [1..8], given i32 [9]" -- "$KILN" run -m "$P" --method prefill --inputs "$F" --random-inputs 1
manifest "$(printf "$T" i32 1), $PS"
mknpy "$F/t.npy" '<i4' '(1,)' '\005\000\000'
expect folder_truncated 1 "t.npy': truncated: the data is 3 bytes, shape [1] of i32 needs 4" -- "$KILN" run -m "$P" --method decode --inputs "$F"
printf 'not an npy file at all' >"$F/t.npy"
expect folder_bad_magic 1 "t.npy': bad magic: not an .npy file" -- "$KILN" run -m "$P" --method decode --inputs "$F"
mknpy "$F/t.npy" '>i4' '(1,)' '\000\000\000\005'
expect folder_big_endian 1 "big-endian" -- "$KILN" run -m "$P" --method decode --inputs "$F"
mknpy "$F/t.npy" '<i4' '(1,)' '\005\000\000\000'
manifest "$(printf "$T" i32 1), $PS, {\"name\": \"tokenz\", \"file\": \"t.npy\", \"dtype\": \"i32\", \"shape\": [1], \"method\": \"decode\"}"
expect folder_stray 1 "tensor 'tokenz' is no input of method 'decode' (its inputs: tokens, pos)" -- "$KILN" run -m "$P" --method decode --inputs "$F"
manifest "$(printf "$T" i32 1), $PS, {\"name\": \"x\", \"file\": \"t.npy\", \"dtype\": \"i32\", \"shape\": [1], \"method\": \"encode\"}"
expect folder_other_method 1 "tensor 'x' is for method 'encode', which the program lacks" -- "$KILN" run -m "$P" --method decode --inputs "$F"
printf '{"tensors": [' >"$F/manifest.json"
expect folder_bad_manifest 1 "manifest.json': byte" -- "$KILN" run -m "$P" --method decode --inputs "$F"
rm "$F/manifest.json"
expect folder_no_manifest 1 "needs a manifest.json" -- "$KILN" run -m "$P" --method decode --inputs "$F"
expect inputs_missing 1 "cannot open '$WORK/none.npy'" -- "$KILN" run -m "$P" --method decode --inputs "$WORK/none.npy" 2>&1
expect inputs_file_many 2 "--inputs FILE is one tensor, but method 'decode' has 2 inputs (tokens, pos)" -- "$KILN" run -m "$P" --method decode --inputs "$F/t.npy"
# failures in the runtime name the iteration, the method and the node
mknpy "$F/t.npy" '<i4' '(1,)' '\377\377\000\000'
manifest "$(printf "$T" i32 1), $PS"
expect token_outside_vocab 1 "iteration 1: method 'decode', node 'token_embd'" -- "$KILN" run -m "$P" --method decode --inputs "$F"
mknpy "$F/t.npy" '<i4' '(1,)' '\005\000\000\000'
mknpy "$F/p.npy" '<i4' '(1,)' '\100\000\000\000'
expect position_outside_context 1 "method 'decode', node 'blk.0.kv_store_k'" -- "$KILN" run -m "$P" --method decode --inputs "$F"

# a one-input program: --inputs FILE
O=$WORK/one.kiln
if "$TT" --write-program "$O" >/dev/null; then
  expect one_random 0 "method 'scale'" -- "$KILN" run -m "$O" --random-inputs 4 --prompt-len 3 --output-dir "$WORK/o1"
  expect one_file 0 "iteration 2" -- "$KILN" run -m "$O" --inputs "$WORK/o1/scale.x.npy" --iteration 2 --output-dir "$WORK/o2"
  if cmp -s "$WORK/o1/scale.y.npy" "$WORK/o2/scale.y.npy" && [ "$(npy_count "$WORK/o1/scale.x.npy" 4)" = 48 ]; then
    ok one_file_same_outputs; else bad one_file_same_outputs; fi
  mknpy "$WORK/x15.npy" '<f4' '(2, 15)' "$(printf '\\000%.0s' $(seq 120))"
  expect one_file_shape 1 "method 'scale' input 'x': expected f32 [1..4, 16], given f32 [2, 15] (from '$WORK/x15.npy')" -- "$KILN" run -m "$O" --inputs "$WORK/x15.npy"
  mknpy "$WORK/x5.npy" '<f4' '(5, 16)' "$(printf '\\000%.0s' $(seq 320))"
  expect one_file_too_many 1 "given f32 [5, 16]" -- "$KILN" run -m "$O" --inputs "$WORK/x5.npy"
  expect one_all 0 "iteration 1" -- "$KILN" run -m "$O" --method all --inputs "$WORK/o1/scale.x.npy"
else
  bad one_input_program "test_tensors --write-program failed"
fi

# NumPy: numpy.load reads Kiln's files; Kiln reads numpy.save's (every dtype),
# writes them again byte for byte, and refuses Fortran order and big-endian.
PY=python3
if command -v $PY >/dev/null && ! $PY -c 'import numpy' 2>/dev/null; then
  $PY -m pip install -q numpy >/dev/null 2>&1 || true
fi
if command -v $PY >/dev/null && $PY -c 'import numpy' 2>/dev/null; then
  if $PY - "$WORK/d1" "$WORK/o1" <<'PY'; then ok numpy_loads_ours; else bad numpy_loads_ours; fi
import json, sys
import numpy as np
names = {"f32": "float32", "f16": "float16", "bf16": "uint16", "f64": "float64", "i32": "int32", "i64": "int64"}
for d in sys.argv[1:]:
    m = json.load(open(d + "/manifest.json"))
    assert m["format"] == "kiln-tensors" and m["version"] == 1
    for t in m["tensors"]:
        a = np.load(d + "/" + t["file"])
        assert str(a.dtype) == names[t["dtype"]] and list(a.shape) == t["shape"], (t, a.dtype, a.shape)
        assert a.flags.c_contiguous and np.isfinite(a).all() if a.dtype.kind == "f" else True
PY
  if $PY - "$WORK/np" <<'PY'
import json, os, sys
import numpy as np
d = sys.argv[1]
os.makedirs(d)
rng = np.random.default_rng(1)
arrays = {
    "a": ("f32", rng.standard_normal((3, 5)).astype(np.float32)),
    "b": ("f16", rng.standard_normal((2, 2, 4)).astype(np.float16)),
    "c": ("bf16", rng.integers(0, 65535, (7,), dtype=np.uint16)),
    "d": ("f64", rng.standard_normal((1, 2, 3, 4))),
    "e": ("i32", rng.integers(-2**31, 2**31 - 1, (4, 1), dtype=np.int32)),
    "f": ("i64", np.array(123456789012345, dtype=np.int64)),
    "g": ("f32", np.zeros((0, 3), np.float32)),
    "h": ("i32", np.arange(100000, dtype=np.int32)),
}
entries = []
for name, (dt, a) in arrays.items():
    np.save(os.path.join(d, name + ".npy"), a)
    entries.append({"name": name, "file": name + ".npy", "dtype": dt, "shape": list(a.shape), "role": "input"})
json.dump({"format": "kiln-tensors", "version": 1, "tensors": entries}, open(os.path.join(d, "manifest.json"), "w"))
PY
  then
    if "$TT" --copy "$WORK/np" "$WORK/np2" && $PY - "$WORK/np" "$WORK/np2" <<'PY'; then ok numpy_round_trip; else bad numpy_round_trip; fi
import json, sys
import numpy as np
src, dst = sys.argv[1:]
m = json.load(open(dst + "/manifest.json"))
assert len(m["tensors"]) == 8
same_bytes = hasattr(np.lib.format, "GROWTH_AXIS_MAX_DIGITS")  # numpy >= 1.24 pads as Kiln does
for t in m["tensors"]:
    a = np.load(src + "/" + t["name"] + ".npy")
    b = np.load(dst + "/" + t["file"])
    assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), t
    if same_bytes:
        assert open(src + "/" + t["name"] + ".npy", "rb").read() == open(dst + "/" + t["file"], "rb").read(), t
PY
  else
    bad numpy_write "python failed"
  fi
  $PY - "$WORK" <<'PY'
import sys
import numpy as np
w = sys.argv[1]
x = np.random.default_rng(2).standard_normal((2, 16)).astype(np.float32)
np.save(w + "/xc.npy", x)
np.save(w + "/xf.npy", np.asfortranarray(x))
np.save(w + "/xb.npy", x.astype(">f4"))
np.save(w + "/x64.npy", x.astype(np.float64))
PY
  if [ -f "$O" ]; then
    expect numpy_input 0 "iteration 1" -- "$KILN" run -m "$O" --inputs "$WORK/xc.npy"
    expect numpy_fortran 1 "xf.npy': 'fortran_order' is True: Kiln reads C order only" -- "$KILN" run -m "$O" --inputs "$WORK/xf.npy"
    expect numpy_big_endian 1 "xb.npy': bad header at byte" -- "$KILN" run -m "$O" --inputs "$WORK/xb.npy"
    expect numpy_f64 1 "expected f32 [1..4, 16], given f64 [2, 16]" -- "$KILN" run -m "$O" --inputs "$WORK/x64.npy"
  fi
else
  skipped numpy "python3 with numpy is not available (pip install numpy failed)"
fi

# stories260K: a real model, the same replay
S=$SHARED/models/stories260K
if [ -f "$S/stories260K.bin" ]; then
  if "$KILN" compile "$S/stories260K.bin" --tokenizer "$S/tok512.bin" -o "$WORK/s.kiln" >/dev/null 2>&1; then
    replay stories "$WORK/s.kiln" 20 32 16 5
    if grep -q "session reset before" <<<"$RUN_OUT"; then ok stories_resets; else bad stories_resets "no reset in 960 tokens"; fi
  else
    bad stories_compile
  fi
else
  skipped stories "no shared data at $S"
fi
# ---- a vision-language program: encode + prefill + decode per iteration ----------------
# A 64x48 image at patch 8, merge 2 is 8 x 6 patches = 12 tokens, so each
# iteration prefills 2 + 12 + 5 = 19 tokens and decodes 3: five iterations
# pass a context of 64 and reset once.
VL=$WORK/vl.kiln
expect vl_compile 0 "wrote" -- "$KILN" compile "$HERE/data/hf/qwen3vl_tiny_f32" -o "$VL" --prefill 8 --max-seq 64
expect vl_all 0 "encode a 8 x 6 patch image (12 tokens), prefill it + 5 tokens, decode 3" -- \
  "$KILN" run -m "$VL" --image-size 64x48 --prompt-len 5 --gen-len 3 --iteration 5 --trace "$WORK/vl.trace"
if "$KILN" run -m "$VL" --image-size 64x48 --prompt-len 5 --gen-len 3 --iteration 5 2>&1 |
  grep -q "the context (64 tokens) is full: session reset before"; then ok vl_reset_at_context
else bad vl_reset_at_context "no reset said after 5 iterations of 22 tokens in a context of 64"; fi
"$KILN" inspect "$WORK/vl.trace" >"$WORK/vl.txt" 2>&1
# methods: calls and tokens (the prefill's in calls of at most 8 tokens)
calls() { awk -v m="$1" '$1 == m && $2 ~ /^[0-9]+$/ { print $2, $4; exit }' "$WORK/vl.txt"; }
if [ "$(calls encode_image)" = "5 240" ] && [ "$(calls prefill)" = "15 95" ] && [ "$(calls decode)" = "15 15" ]; then
  ok vl_trace_methods
else bad vl_trace_methods "encode_image '$(calls encode_image)', prefill '$(calls prefill)', decode '$(calls decode)'"; fi
expect vl_image_size_bad 2 "--image-size 'x48': want WxH in pixels" -- "$KILN" run -m "$VL" --image-size x48
expect vl_image_too_big 2 "--image-size 1000x1000 is 15376 patches; the program's encode_image takes at most 4096" -- \
  "$KILN" run -m "$VL" --image-size 1000x1000
expect vl_image_context 2 "pass the context (64 tokens)" -- "$KILN" run -m "$VL" --image-size 128x128
expect vl_image_size_single 2 "--image-size applies to --method all" -- \
  "$KILN" run -m "$VL" --method prefill --image-size 64x48
expect vl_encode_alone 0 "method 'encode_image'" -- "$KILN" run -m "$VL" --method encode_image --prompt-len 16

finish
