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
