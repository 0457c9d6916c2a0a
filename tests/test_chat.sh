#!/usr/bin/env bash
# test_chat.sh KILN: the chat formats against the checkpoints' own Jinja
# templates rendered by Python's jinja2 the way transformers does
# (trim_blocks, lstrip_blocks, raise_exception, strftime_now), byte for
# byte, through `kiln chat --render-only`; then `kiln chat` and
# `kiln generate --chat` on SmolLM2 when its GGUF is in the cache.
set -u
KILN=$1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
HERE=$(cd "$(dirname "$0")" && pwd)
SHARED=${KILN_SHARED_DATA:-$HERE/../../shared/data}
GGUF=${KILN_SMOLLM2_GGUF:-$HOME/.cache/kiln/models/SmolLM2-135M-Instruct.Q4_1.gguf}
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

# render_ref TEMPLATE_FILE CONV_FILE THINK(0/1/-) BOS: what jinja2 renders.
render_ref() {
  python3 - "$@" <<'PY'
import json, sys
from datetime import datetime
import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
tmpl, conv, think, bos = sys.argv[1:5]
def raise_exception(m): raise jinja2.exceptions.TemplateError(m)
def strftime_now(f): return datetime(2024, 7, 26).strftime(f)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now
kw = dict(messages=json.load(open(conv)), add_generation_prompt=True, bos_token=bos, eos_token="")
if think != "-": kw["enable_thinking"] = think == "1"
sys.stdout.write(env.from_string(open(tmpl).read()).render(**kw))
PY
}

# check FAMILY TEMPLATE_FILE BOS
check() {
  local fam=$1 t=$2 bos=$3
  for name in "${!CONV[@]}"; do
    printf '%s' "${CONV[$name]}" >"$WORK/$name.json"
    for think in - 0 1; do
      [ "$fam" != qwen3 ] && [ "$think" != - ] && continue
      local flag=
      [ "$think" = 0 ] && flag=--no-think
      [ "$think" = 1 ] && flag=--think
      render_ref "$t" "$WORK/$name.json" "$think" "$bos" >"$WORK/want" || { bad "render_${fam}_${name}_$think" "jinja2 failed"; continue; }
      # By name and by detecting the template file.
      for sel in "$fam" "$t"; do
        if ! "$KILN" chat --render-only --chat-template "$sel" --messages "$WORK/$name.json" $flag >"$WORK/got" 2>"$WORK/err"; then
          bad "render_${fam}_${name}_$think" "$(cat "$WORK/err")"
        elif cmp -s "$WORK/want" "$WORK/got"; then
          ok "render_${fam}_${name}_${think}_$( [ "$sel" = "$fam" ] && echo name || echo file)"
        else
          bad "render_${fam}_${name}_$think" "$(diff <(od -c "$WORK/want") <(od -c "$WORK/got") | head -8)"
        fi
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

# Unknown templates are a clear error naming what was found.
printf '%s' '{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}' >"$WORK/mistral.jinja"
printf '[]' >"$WORK/empty.json"
out=$("$KILN" chat --render-only --chat-template "$WORK/mistral.jinja" --messages "$WORK/empty.json" 2>&1)
if [ $? = 1 ] && grep -q "not recognised (no ChatML markers" <<<"$out"; then ok unknown_template; else bad unknown_template "$out"; fi
out=$("$KILN" chat --render-only --chat-template nope --messages "$WORK/empty.json" 2>&1)
if [ $? = 1 ] && grep -q "neither chatml" <<<"$out"; then ok unknown_template_name; else bad unknown_template_name "$out"; fi

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
finish
