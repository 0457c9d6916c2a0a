#!/usr/bin/env bash
# test_chat.sh KILN: the chat formats against the checkpoints' own Jinja
# templates rendered by Python's jinja2 the way transformers does
# (trim_blocks, lstrip_blocks, raise_exception, strftime_now, tojson as
# json.dumps), byte for byte, through `kiln chat --render-only`; then
# `kiln chat` and `kiln generate --chat` on SmolLM2 when its GGUF is in the
# cache. The Llama-3.1/3.2/3.3 templates are llama.cpp's copies
# (models/templates/) from the llama-cpp-python 0.3.36 sdist: unpacked by
# scripts/llama_cpp.sh under ${KILN_CACHE:-~/.cache/kiln}/llama.cpp, or
# fetched with pip into a temporary folder.
set -u
KILN=$1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
HERE=$(cd "$(dirname "$0")" && pwd)
SHARED=${KILN_SHARED_DATA:-$HERE/../../shared/data}
CACHE=${KILN_CACHE:-$HOME/.cache/kiln}
GGUF=${KILN_SMOLLM2_GGUF:-$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf}
unset KILN_CHAT_DATE
pass=0 fail=0 skip=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && echo "  $2"; }
skipped() { skip=$((skip + 1)); echo "skip $1: $2"; }
finish() { echo "$pass passed, $fail failed, $skip skipped"; [ "$fail" = 0 ]; exit $?; }

HAVE_JINJA=0
if command -v python3 >/dev/null; then
  python3 -c 'import jinja2' 2>/dev/null || python3 -m pip install -q jinja2 >/dev/null 2>&1
  python3 -c 'import jinja2' 2>/dev/null && HAVE_JINJA=1
fi

# Conversations: NAME -> JSON.
declare -A CONV
CONV[system_user]='[{"role":"system","content":"You are terse."},{"role":"user","content":"Hello there!"}]'
CONV[no_system]='[{"role":"user","content":"  What is 2+2?\n"}]'
CONV[multi_turn]='[{"role":"system","content":"Be kind."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello! How can I help?"},{"role":"user","content":"Tell me a joke."}]'
CONV[multi_no_system]='[{"role":"user","content":"One"},{"role":"assistant","content":"Two"},{"role":"user","content":"Three\u00e9 \u4f60\u597d"}]'
CONV[think_history]='[{"role":"user","content":"Q1"},{"role":"assistant","content":"<think>\nreasoning here\n</think>\n\nA1"},{"role":"user","content":"Q2"}]'
CONV[ends_assistant]='[{"role":"user","content":"Q1"},{"role":"assistant","content":"<think>\nr\n</think>\n\nA1"}]'
CONV[late_system]='[{"role":"user","content":"a"},{"role":"system","content":" late system "},{"role":"user","content":"b"}]'
# Jinja's trim is Python's str.strip(): Unicode whitespace goes too.
CONV[unicode_space]='[{"role":"system","content":"\u00a0\u3000 sys\u2003\u000b"},{"role":"user","content":"\u0085\u001chi\u202f\u205f\u2028"}]'
# Tool results (Llama-3.1+ only): rendered under an ipython header through tojson.
declare -A TOOL_CONV
TOOL_CONV[tool_result]='[{"role":"system","content":"  Use tools.  "},{"role":"user","content":"Weather in Paris?"},{"role":"assistant","content":"Let me check."},{"role":"tool","content":"{\"temp_c\": 18, \"sky\": \"cloudy <b>\"}\n\tback\\\\slash \u00e9 \u0001\u001f\u007f"},{"role":"ipython","content":"  raw  "},{"role":"user","content":"Thanks"}]'

# Image parts (Qwen3-VL only): a part list in any role, OpenAI's image_url
# form, two images in one message, images in a thinking history.
declare -A VL_CONV
VL_CONV[image_parts]='[{"role":"system","content":[{"type":"text","text":"Look."}]},{"role":"user","content":[{"type":"image","image":"a.png"},{"type":"text","text":"What?"},{"type":"image_url","image_url":{"url":"file:///x/b.png"}}]},{"role":"assistant","content":[{"type":"text","text":"A cat."}]},{"role":"user","content":"And now?"}]'
VL_CONV[image_only]='[{"role":"user","content":[{"type":"image","path":"c.jpg"}]}]'
VL_CONV[image_think]='[{"role":"user","content":[{"type":"text","text":"Q1 "},{"type":"image","image":"a.png"}]},{"role":"assistant","content":"<think>\nseen\n</think>\n\nA1"},{"role":"user","content":[{"type":"image","image":"b.png"},{"type":"text","text":"Q2"}]}]'

# render_ref TEMPLATE_FILE CONV_FILE THINK(0/1/-) BOS [DATE_STRING]: what
# jinja2 renders; DATE_STRING is passed as the template's date_string, as
# apply_chat_template(..., date_string=D) does. strftime_now formats
# $REF_TODAY (YYYY-MM-DD; "now": the clock; default 2024-07-26).
render_ref() {
  python3 - "$@" <<'PY'
import json, os, sys
from datetime import datetime
import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
tmpl, conv, think, bos = sys.argv[1:5]
def raise_exception(m): raise jinja2.exceptions.TemplateError(m)
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
today = os.environ.get("REF_TODAY", "2024-07-26")
def strftime_now(f):
    return (datetime.now() if today == "now" else datetime.strptime(today, "%Y-%m-%d")).strftime(f)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now
kw = dict(messages=json.load(open(conv)), add_generation_prompt=True, bos_token=bos, eos_token="")
if think != "-": kw["enable_thinking"] = think == "1"
if len(sys.argv) > 5: kw["date_string"] = sys.argv[5]
sys.stdout.write(env.from_string(open(tmpl).read()).render(**kw))
PY
}

# compare TEST_NAME CONV_JSON REF_ARGS... -- KILN_ARGS...: renders a
# conversation both ways and compares them byte for byte.
compare() {
  local name=$1 conv=$2
  shift 2
  local ref=()
  while [ "$1" != -- ]; do ref+=("$1"); shift; done
  shift
  printf '%s' "$conv" >"$WORK/conv.json"
  if ! render_ref "${ref[0]}" "$WORK/conv.json" "${ref[@]:1}" >"$WORK/want" 2>"$WORK/err"; then
    bad "$name" "jinja2 failed: $(tail -1 "$WORK/err")"
  elif ! "$KILN" chat --render-only --messages "$WORK/conv.json" "$@" >"$WORK/got" 2>"$WORK/err"; then
    bad "$name" "$(cat "$WORK/err")"
  elif cmp -s "$WORK/want" "$WORK/got"; then
    ok "$name"
  else
    bad "$name" "$(diff <(od -c "$WORK/want") <(od -c "$WORK/got") | head -8)"
  fi
}

# check FAMILY TEMPLATE_FILE BOS [DATE]: every conversation (and the tool
# ones for Llama-3.1+), by name and by detecting the template file; DATE
# goes to jinja2 as date_string and to Kiln as --chat-date.
check() {
  local fam=$1 t=$2 bos=$3 date=${4:-}
  local names=("${!CONV[@]}")
  case $fam in llama3.*) names+=("${!TOOL_CONV[@]}") ;; qwen3vl*) names+=("${!VL_CONV[@]}") ;; esac
  for name in "${names[@]}"; do
    local conv=${CONV[$name]:-${TOOL_CONV[$name]:-${VL_CONV[$name]:-}}}
    for think in - 0 1; do
      [ "$fam" != qwen3 ] && [ "$think" != - ] && continue
      local flag=() ref=("$t" "$think" "$bos")
      [ "$think" = 0 ] && flag=(--no-think)
      [ "$think" = 1 ] && flag=(--think)
      [ -n "$date" ] && { flag+=(--chat-date "$date"); ref+=("$date"); }
      for sel in "$fam" "$t"; do
        compare "render_${fam}_${name}_${think}_$( [ "$sel" = "$fam" ] && echo name || echo file)" "$conv" \
          "${ref[@]}" -- --chat-template "$sel" "${flag[@]}"
      done
    done
  done
}

if [ "$HAVE_JINJA" = 0 ]; then
  skipped render_vs_jinja2 "python3 with jinja2 unavailable (pip install failed)"
else
  for fam in qwen3 llama3; do
    cfg=$SHARED/tokenizers/$fam/tokenizer_config.json
    if [ -f "$cfg" ]; then
      python3 -c 'import json,sys; sys.stdout.write(json.load(open(sys.argv[1]))["chat_template"])' "$cfg" >"$WORK/$fam.jinja"
      bos=; [ "$fam" = llama3 ] && bos='<|begin_of_text|>'
      check "$fam" "$WORK/$fam.jinja" "$bos"
    else
      skipped "render_$fam" "$cfg absent (../shared)"
    fi
  done
fi

# Qwen3-VL: third-party copies of its templates (tests/data/chat/README.md);
# the Instruct one is the copy whose hash was published.
VLT=$HERE/data/chat
if [ "$(sha256sum "$VLT/qwen3vl-instruct.jinja" | cut -d' ' -f1)" = \
  3636d0f0bd6bef02654cdffdc447b79cb2cef8ab02cc75267345946291a489e4 ]; then ok qwen3vl_template_is_the_published_one
else bad qwen3vl_template_is_the_published_one "tests/data/chat/qwen3vl-instruct.jinja changed"; fi
if [ "$HAVE_JINJA" = 1 ]; then
  check qwen3vl "$VLT/qwen3vl-instruct.jinja" ""
  check qwen3vl-thinking "$VLT/qwen3vl-thinking.jinja" ""
fi
# Instruct renders the images of user messages only: one elsewhere is an
# error, not an image dropped; without a program, render-only still places
# the format's own placeholder.
printf '%s' '[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"image","image":"a.png"}]}]' >"$WORK/vl_asst.json"
out=$("$KILN" chat --render-only --chat-template qwen3vl --messages "$WORK/vl_asst.json" 2>&1)
if [ $? = 1 ] && grep -q "message 1 part 0: an image in a 'assistant' message; the qwen3vl template renders images in user messages only" <<<"$out"; then
  ok qwen3vl_refuses_assistant_image
else bad qwen3vl_refuses_assistant_image "$out"; fi
out=$("$KILN" chat --render-only --chat-template chatml --messages "$WORK/vl_asst.json" 2>&1)
if [ $? = 1 ] && grep -q "an image, and the program has no vision encoder" <<<"$out"; then ok chatml_without_program_has_no_images
else bad chatml_without_program_has_no_images "$out"; fi

# Llama-3.1/3.2/3.3: llama.cpp's copies of Meta's templates, from the
# llama-cpp-python sdist (unpacked, or the tarball, in the cache; else
# fetched with pip). Sets TDIR.
SDIST=llama_cpp_python-0.3.36
LLAMA_TEMPLATES=(meta-llama-Llama-3.1-8B-Instruct meta-llama-Llama-3.2-3B-Instruct meta-llama-Llama-3.3-70B-Instruct)
# Near relatives of the formats Kiln renders, which render differently: they
# must be refused, not rendered as their relative.
NEAR_TEMPLATES=(meetkai-functionary-medium-v3.1 meetkai-functionary-medium-v3.2 fireworks-ai-llama-3-firefunction-v2
  HuggingFaceTB-SmolLM3-3B Qwen3.5-4B Qwen-QwQ-32B NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 Bielik-11B-v3.0-Instruct
  MiMo-VL)
find_llama_templates() {
  local d tarball=$CACHE/llama.cpp/sdist/$SDIST.tar.gz
  for d in "$CACHE"/llama.cpp/src/*/vendor/llama.cpp/models/templates; do
    [ -f "$d/${LLAMA_TEMPLATES[0]}.jinja" ] && { TDIR=$d; return 0; }
  done
  if [ ! -f "$tarball" ]; then
    mkdir -p "$WORK/sdist"
    python3 -m pip download -q --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$WORK/sdist" \
      >"$WORK/pip.log" 2>&1 || return 1
    tarball=$WORK/sdist/$SDIST.tar.gz
  fi
  TDIR=$WORK/templates
  mkdir -p "$TDIR"
  for d in "${LLAMA_TEMPLATES[@]}" "${NEAR_TEMPLATES[@]}"; do
    tar -xzf "$tarball" -O "$SDIST/vendor/llama.cpp/models/templates/$d.jinja" >"$TDIR/$d.jinja" 2>/dev/null ||
      rm -f "$TDIR/$d.jinja"
  done
  [ -f "$TDIR/${LLAMA_TEMPLATES[0]}.jinja" ]
}

if [ "$HAVE_JINJA" = 0 ]; then
  :
elif ! find_llama_templates; then
  skipped render_llama3.x "no llama.cpp templates in $CACHE/llama.cpp and pip download failed: $(tail -1 "$WORK/pip.log" 2>/dev/null)"
else
  BOS='<|begin_of_text|>'
  for v in 1 2 3; do
    t=$TDIR/meta-llama-Llama-3.$v-$( [ $v = 1 ] && echo 8B || { [ $v = 2 ] && echo 3B || echo 70B; } )-Instruct.jinja
    if [ -f "$t" ]; then
      # A fixed date on both sides (date_string / --chat-date).
      check "llama3.$v" "$t" "$BOS" "05 Mar 2025"
    else
      skipped "render_llama3.$v" "$(basename "$t") not in the sdist"
    fi
  done
  t31=$TDIR/${LLAMA_TEMPLATES[0]}.jinja t32=$TDIR/${LLAMA_TEMPLATES[1]}.jinja
  # The templates' own dates: 3.1's fixed one; 3.2's today (strftime_now),
  # or KILN_CHAT_DATE's.
  compare llama3.1_default_date "${CONV[multi_turn]}" "$t31" - "$BOS" -- --chat-template "$t31"
  [ -f "$t32" ] && REF_TODAY=now compare llama3.2_today "${CONV[multi_turn]}" "$t32" - "$BOS" -- --chat-template "$t32"
  [ -f "$t32" ] && REF_TODAY=2031-01-09 KILN_CHAT_DATE="09 Jan 2031" \
    compare llama3.2_env_date "${CONV[no_system]}" "$t32" - "$BOS" -- --chat-template "$t32"
  KILN_CHAT_DATE="09 Jan 2031" compare llama3.1_env_date "${CONV[no_system]}" "$t31" - "$BOS" "09 Jan 2031" -- \
    --chat-template llama3.1
  # Without a generation prompt (3.1+ honour add_generation_prompt).
  printf '%s' "${CONV[system_user]}" >"$WORK/c.json"
  "$KILN" chat --render-only --chat-template llama3.1 --messages "$WORK/c.json" --no-generation-prompt >"$WORK/got" 2>&1
  if [ "$(tail -c 22 "$WORK/got")" = "Hello there!<|eot_id|>" ]; then ok llama3.1_no_generation_prompt
  else bad llama3.1_no_generation_prompt "$(cat "$WORK/got")"; fi
  for n in "${NEAR_TEMPLATES[@]}"; do
    [ -f "$TDIR/$n.jinja" ] || { skipped "refuse_$n" "not in the sdist"; continue; }
    out=$("$KILN" chat --render-only --chat-template "$TDIR/$n.jinja" --messages "$WORK/c.json" 2>&1)
    if [ $? = 1 ] && grep -q "chat template" <<<"$out"; then ok "refuse_$n"; else bad "refuse_$n" "$out"; fi
  done
fi

# What Kiln does not render is a clear error: tool definitions, tool calls,
# tool results outside Llama-3.1+, a bad date.
printf '%s' '{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]}' >"$WORK/tools.json"
out=$("$KILN" chat --render-only --chat-template llama3.2 --messages "$WORK/tools.json" 2>&1)
if [ $? = 1 ] && grep -q '"tools" (tool definitions)' <<<"$out"; then ok refuse_tool_definitions; else bad refuse_tool_definitions "$out"; fi
printf '%s' '[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]}]' >"$WORK/calls.json"
out=$("$KILN" chat --render-only --chat-template llama3.1 --messages "$WORK/calls.json" 2>&1)
if [ $? = 1 ] && grep -q 'message 1 has "tool_calls"' <<<"$out"; then ok refuse_tool_calls; else bad refuse_tool_calls "$out"; fi
printf '%s' "${TOOL_CONV[tool_result]}" >"$WORK/tool.json"
out=$("$KILN" chat --render-only --chat-template qwen3 --messages "$WORK/tool.json" 2>&1)
if [ $? = 1 ] && grep -q "role 'tool'" <<<"$out"; then ok refuse_tool_role_qwen3; else bad refuse_tool_role_qwen3 "$out"; fi
out=$(KILN_CHAT_DATE=$'26\nJul' "$KILN" chat --render-only --chat-template llama3.2 --messages "$WORK/tool.json" 2>&1)
if [ $? = 1 ] && grep -q "KILN_CHAT_DATE" <<<"$out"; then ok refuse_bad_date; else bad refuse_bad_date "$out"; fi

# Unknown templates are a clear error naming what was found.
printf '%s' '{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}' >"$WORK/mistral.jinja"
printf '[]' >"$WORK/empty.json"
out=$("$KILN" chat --render-only --chat-template "$WORK/mistral.jinja" --messages "$WORK/empty.json" 2>&1)
if [ $? = 1 ] && grep -q "not recognised (no ChatML markers" <<<"$out"; then ok unknown_template; else bad unknown_template "$out"; fi
out=$("$KILN" chat --render-only --chat-template nope --messages "$WORK/empty.json" 2>&1)
if [ $? = 1 ] && grep -q "neither chatml" <<<"$out"; then ok unknown_template_name; else bad unknown_template_name "$out"; fi

# --messages is read in both modes: a file that cannot be read, or a NUL
# byte in a message, is an error naming it.
out=$("$KILN" chat --render-only --chat-template chatml --messages /nonexistent 2>&1)
if [ $? = 1 ] && grep -q "cannot read '/nonexistent'" <<<"$out"; then ok render_messages_missing; else bad render_messages_missing "$out"; fi
printf '%s' '[{"role":"user","content":"a"},{"role":"user","content":"b\u0000c"}]' >"$WORK/nul.json"
out=$("$KILN" chat --render-only --chat-template chatml --messages "$WORK/nul.json" 2>&1)
if [ $? = 1 ] && grep -qF 'message 1: its content holds a NUL byte (\u0000) at byte 1' <<<"$out"; then ok render_refuses_nul
else bad render_refuses_nul "$out"; fi

# `kiln chat` at the context's limit, on the committed Qwen2 fixture (tiny,
# random weights: its greedy answers are gibberish, but deterministic) with
# a context of 96 tokens. Each " a" of a line is 2 tokens, a lone line 7 more.
FIXQ=$HERE/data/hf/qwen2_bf16
Q=$WORK/q.kiln
if [ ! -f "$FIXQ/config.json" ]; then
  skipped chat_context "$FIXQ absent"
elif ! command -v python3 >/dev/null; then
  skipped chat_context "python3 unavailable"
elif ! "$KILN" compile "$FIXQ" -o "$Q" --max-seq 96 >"$WORK/err" 2>&1; then
  bad chat_context_compile "$(cat "$WORK/err")"
else
  words() { python3 -c "import sys; print(' '.join([sys.argv[1]] * int(sys.argv[2])))" "$1" "$2"; }
  # A long conversation: the oldest turns go (whole turns; the system
  # message stays), the cache is re-prefilled from where the render
  # changed, every line is answered, and the render always leaves -n (8)
  # tokens for the answer.
  printf 'hi\nthe cat sat on the mat\nabc\nhello world\nmore words here\nok\nthe dog ran\nyes\nno more\nend\n' |
    "$KILN" chat -m "$Q" --system "be kind" --temp 0 -n 8 >"$WORK/out" 2>"$WORK/err"
  rc=$?
  if python3 - "$WORK/err" <<'PY'
import re, sys
err = open(sys.argv[1]).read()
turns = {int(t): (int(n), int(p)) for n, p, t in
         [(m.group(2), m.group(3), m.group(1)) for m in re.finditer(r"turn (\d+): prefilled (\d+) new tokens at position (\d+)", err)]}
assert sorted(turns) == list(range(1, 11)), "answered turns %s" % sorted(turns)
drops = [(int(a), int(b), int(c), int(d)) for a, b, c, d in
         re.findall(r"turn (\d+): context full: dropped the oldest (\d+) turns? \(\d+ messages\), (\d+) tokens freed \(the conversation now takes (\d+) of 96\)", err)]
assert len(drops) >= 2, "expected drops, got %r" % drops
for t, k, freed, now in drops:
    n, pos = turns[t]
    reuse = re.search(r"turn %d: reusing (\d+) of" % t, err)
    assert reuse and int(reuse.group(1)) == pos, "turn %d: prefill at %d, reuse %r" % (t, pos, reuse)
    assert pos + n == now and now + 8 <= 96 and freed > 0 and k >= 1, (t, n, pos, now)
    assert 0 < pos < now, "turn %d: the system message's tokens are kept" % t
PY
  then [ $rc = 0 ] && ok chat_context_drops_oldest_turns || bad chat_context_drops_oldest_turns "rc $rc"
  else bad chat_context_drops_oldest_turns "rc $rc: $(cat "$WORK/err")"; fi

  # Lines that nearly fill the context alone: each drops the turn before,
  # and an answer that reaches the end of the context is cut there and
  # said, exit code 0 (the room is 1 or 3 tokens: greedy answers run past).
  { words a 44; words a 43; words b 44; words c 43; } |
    "$KILN" chat -m "$Q" --temp 0 -n 20 >"$WORK/out" 2>"$WORK/err"
  rc=$?
  if python3 - "$WORK/err" <<'PY'
import re, sys
err = open(sys.argv[1]).read()
cut = re.findall(r"turn (\d+): the answer hit the context limit \(96 tokens\) after (\d+) tokens?: cut there", err)
assert cut, "no answer was cut"
for t, g in cut:
    n, pos, gen = map(int, re.search(r"turn %s: prefilled (\d+) new tokens at position (\d+), generated (\d+)" % t, err).groups())
    assert gen == int(g) and pos + n + gen == 96, (t, n, pos, gen)
assert len(re.findall(r"prefilled", err)) == 4
PY
  then [ $rc = 0 ] && ok chat_answer_cut_at_context || bad chat_answer_cut_at_context "rc $rc"
  else bad chat_answer_cut_at_context "rc $rc: $(cat "$WORK/err")"; fi

  # A line too big even alone is an error for its turn (exit code 1 at the
  # end); the conversation goes on with the next line, without it. So is a
  # line holding a NUL byte.
  { echo hi; words a 60; printf 'x\0y\n'; echo abc; } |
    "$KILN" chat -m "$Q" --temp 0 -n 8 >"$WORK/out" 2>"$WORK/err"
  rc=$?
  if [ $rc = 1 ] && grep -q "turn 2: it takes 127 tokens alone (with the system message and the assistant's prompt), the context holds 96: no room for an answer; turn skipped" "$WORK/err" &&
    grep -q "turn 3: the line holds a NUL byte (byte 1)" "$WORK/err" &&
    grep -q "turn 1: prefilled" "$WORK/err" && grep -q "turn 4: prefilled" "$WORK/err" &&
    ! grep -q "turn [23]: prefilled" "$WORK/err"
  then ok chat_turn_too_big_skipped; else bad chat_turn_too_big_skipped "rc $rc: $(cat "$WORK/err")"; fi

  # --messages without --render-only is the conversation chat goes on from:
  # one that ends with a user message is answered first, as a fresh
  # `kiln generate` answers its render; a missing file or a NUL byte is an
  # error before any turn.
  printf '%s' '[{"role":"system","content":"be kind"},{"role":"user","content":"hello"},{"role":"assistant","content":"hi there"},{"role":"user","content":"bye"}]' >"$WORK/m.json"
  "$KILN" chat -m "$Q" --messages "$WORK/m.json" --temp 0 -n 6 </dev/null >"$WORK/out" 2>"$WORK/err"
  rc=$?
  "$KILN" chat --render-only -m "$Q" --messages "$WORK/m.json" >"$WORK/prompt"
  prompt=$(cat "$WORK/prompt"; printf x)
  "$KILN" generate -m "$Q" -p "${prompt%x}" --temp 0 -n 6 --no-stats >"$WORK/fresh" 2>/dev/null
  if [ $rc = 0 ] && cat "$WORK/prompt" "$WORK/out" | cmp -s - "$WORK/fresh" && grep -q "turn 1: prefilled" "$WORK/err"
  then ok chat_messages_used; else bad chat_messages_used "rc $rc: $(cat "$WORK/err")"; fi
  expect() { # NAME RC GREP -- CMD... (stdin empty)
    local name=$1 want=$2 pat=$3 out rc
    shift 4
    out=$("$@" </dev/null 2>&1)
    rc=$?
    if [ "$rc" = "$want" ] && grep -qF -- "$pat" <<<"$out"; then ok "$name"; else bad "$name" "exit $rc: $out"; fi
  }
  expect chat_messages_missing 1 "kiln chat: error: --messages: cannot read '/nonexistent': No such file or directory" -- \
    "$KILN" chat -m "$Q" --messages /nonexistent
  expect chat_messages_nul 1 "message 1: its content holds a NUL byte" -- "$KILN" chat -m "$Q" --messages "$WORK/nul.json"
  expect chat_messages_and_system 2 "--system and the system message of --messages" -- \
    "$KILN" chat -m "$Q" --messages "$WORK/m.json" --system "x"
  expect chat_no_generation_prompt 2 "--no-generation-prompt needs --render-only" -- "$KILN" chat -m "$Q" --no-generation-prompt
fi

if [ ! -f "$GGUF" ]; then
  skipped smollm2 "$GGUF not in the cache"
  finish
fi
P=$WORK/s.kiln
"$KILN" compile "$GGUF" -o "$P" --max-seq 2048 >/dev/null 2>&1 || { bad smollm2_compile; finish; }
if [ "$HAVE_JINJA" = 1 ]; then
  "$KILN" info "$P" --json | python3 -c 'import json,sys; sys.stdout.write(json.load(sys.stdin)["metadata"]["tokenizer.chat_template"])' >"$WORK/smollm2.jinja"
  check smollm2 "$WORK/smollm2.jinja" "<|im_start|>"
  # The program's own template is detected as smollm2.
  printf '%s' "${CONV[no_system]}" >"$WORK/c.json"
  "$KILN" chat --render-only -m "$P" --messages "$WORK/c.json" >"$WORK/got" 2>&1
  render_ref "$WORK/smollm2.jinja" "$WORK/c.json" - "<|im_start|>" >"$WORK/want"
  if cmp -s "$WORK/want" "$WORK/got"; then ok smollm2_program_template; else bad smollm2_program_template "$(head -3 "$WORK/got")"; fi
fi

out=$("$KILN" generate -m "$P" --chat -p "What is 2+2?" --temp 0 -n 24 --no-stats 2>&1)
if [ $? = 0 ] && grep -q 4 <<<"$out" && ! grep -q "im_start" <<<"$out"; then ok generate_chat; else bad generate_chat "$out"; fi

printf 'What is 2+2?\nAnd times 3?\n' | "$KILN" chat -m "$P" --temp 0 -n 32 >"$WORK/out" 2>"$WORK/err"
rc=$?
n_lines=$(grep -c . "$WORK/out")
t1=$(sed -n 's/.*turn 1: prefilled \([0-9]*\) new tokens at position \([0-9]*\), generated \([0-9]*\).*/\1 \2 \3/p' "$WORK/err")
t2=$(sed -n 's/.*turn 2: prefilled \([0-9]*\) new tokens at position \([0-9]*\).*/\1 \2/p' "$WORK/err")
if [ $rc = 0 ] && [ "$n_lines" -ge 2 ] && [ -n "$t1" ] && [ -n "$t2" ]; then
  read -r p1 s1 g1 <<<"$t1"
  read -r p2 s2 <<<"$t2"
  # Turn 2 starts where turn 1's cache ends (prompt + generated tokens) and
  # prefills only the new ones (<|im_end|>, the user turn, the prompt).
  if [ "$s1" = 0 ] && [ "$s2" = $((p1 + g1)) ] && [ "$p2" -gt 0 ] && [ "$p2" -lt "$p1" ]; then
    ok chat_two_turns_incremental
  else
    bad chat_two_turns_incremental "$(cat "$WORK/err")"
  fi
else
  bad chat_two_turns "rc $rc: $(cat "$WORK/out" "$WORK/err")"
fi

# A render that departs from the cache mid-way: Qwen3's format without
# thinking opens each answer with an empty think block that the next turn's
# render drops from history. The cache is kept up to the change (the
# longest common prefix), the rest prefilled, and the answer is the one a
# fresh session gives for the whole conversation (greedy; the fresh one is
# `kiln generate` on the full render, which prints prompt + answer).
if ! command -v python3 >/dev/null; then
  skipped chat_rewind "python3 unavailable"
  finish
fi
printf 'What is 2+2?\nAnd times 3?\n' |
  "$KILN" chat -m "$P" --chat-template qwen3 --no-think --temp 0 -n 24 >"$WORK/out" 2>"$WORK/err"
rc=$?
reuse=$(sed -n 's/.*turn 2: reusing \([0-9]*\) of \([0-9]*\) cached tokens.*/\1 \2/p' "$WORK/err")
at=$(sed -n 's/.*turn 2: prefilled [0-9]* new tokens at position \([0-9]*\).*/\1/p' "$WORK/err")
read -r kept cached <<<"${reuse:-0 0}"
if [ $rc = 0 ] && [ "$kept" -gt 0 ] && [ "$kept" -lt "$cached" ] && [ "$at" = "$kept" ]; then
  ok chat_rewind_keeps_prefix
else
  bad chat_rewind_keeps_prefix "rc $rc: $(cat "$WORK/err")"
fi
python3 - "$WORK/out" >"$WORK/conv.json" <<'PY'
import json, sys
a = open(sys.argv[1], encoding="utf-8").read().split("\n")
assert len(a) == 3 and a[2] == "", "expected two one-line answers, got %r" % a
json.dump([{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": a[0]},
           {"role": "user", "content": "And times 3?"}], sys.stdout)
PY
if [ $? = 0 ] &&
  "$KILN" chat --render-only --chat-template qwen3 --no-think --messages "$WORK/conv.json" >"$WORK/prompt" &&
  prompt=$(cat "$WORK/prompt"; printf x) &&
  "$KILN" generate -m "$P" -p "${prompt%x}" --temp 0 -n 24 --no-stats >"$WORK/fresh" 2>"$WORK/err" &&
  python3 - "$WORK/prompt" "$WORK/fresh" "$WORK/out" <<'PY'
import sys
prompt, fresh, out = (open(f, encoding="utf-8").read() for f in sys.argv[1:4])
want = prompt + out.split("\n")[1] + "\n"
sys.exit(0 if fresh == want else "fresh session: %r\nkiln chat turn 2: %r" % (fresh[len(prompt):], out))
PY
then
  ok chat_rewind_equals_fresh
else
  bad chat_rewind_equals_fresh "$(cat "$WORK/out" "$WORK/err")"
fi
finish
