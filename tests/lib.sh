# lib.sh: what the shell tests share (sourced, not run). Counts results in
# pass / fail / skip and prints one line per check.
pass=0 fail=0 skip=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && echo "  $2"; }
# skipped NAME [WHY]
skipped() { skip=$((skip + 1)); echo "skip $1${2:+ ($2)}"; }
# finish: the summary line; exits 0 when nothing failed.
finish() { echo "$pass passed, $fail failed, $skip skipped"; [ "$fail" = 0 ]; exit $?; }
# expect NAME RC GREP -- CMD...: runs CMD, checks its exit code and that
# stdout+stderr contain GREP (empty: no check).
expect() {
  local name=$1 want=$2 pat=$3
  shift 4
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" != "$want" ]; then bad "$name" "exit $rc, expected $want: $(echo "$out" | head -3)"; return; fi
  if [ -n "$pat" ] && ! grep -qF -- "$pat" <<<"$out"; then bad "$name" "output lacks '$pat': $(echo "$out" | head -3)"; return; fi
  ok "$name"
}
# smollm2_gguf: the path of the SmolLM2-135M-Instruct Q4_1 GGUF the main job
# caches ($KILN_SMOLLM2_GGUF, else under $KILN_CACHE or ~/.cache/kiln), or
# nothing when there is none.
smollm2_gguf() {
  local cache=${KILN_CACHE:-$HOME/.cache/kiln} g=${KILN_SMOLLM2_GGUF:-}
  [ -n "$g" ] || g=$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
  [ -f "$g" ] || g=$(find "$cache" -name 'SmolLM2-135M-Instruct.Q4_1.gguf' 2>/dev/null | head -1)
  if [ -n "$g" ] && [ -f "$g" ]; then echo "$g"; fi
}
