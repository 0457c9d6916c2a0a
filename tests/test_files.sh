#!/usr/bin/env bash
# test_files.sh KILN: nothing lost. Outputs never land on inputs; every file
# kiln writes is whole or not there (a full disk, a file size limit, a
# signal); SIGINT, SIGTERM and SIGHUP exit 128 + the signal with nothing
# half-written left; a closed pipe exits 141 quietly; a stdout that cannot
# be written is an error. The full disk is a small tmpfs where the test runs
# as root, and RLIMIT_FSIZE (SIGXFSZ ignored) everywhere.
set -u
KILN=$1
WORK=$(mktemp -d)
FULL=""
cleanup() {
  [ -n "$FULL" ] && umount "$FULL" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
FIX=${KILN_MAKE_FIXTURE:?make_fixture path}
. "$(dirname "$0")/lib.sh"

"$FIX" "$WORK" 5 >/dev/null || { echo "make_fixture failed"; exit 1; }
M=$WORK/model.bin T=$WORK/tok.bin P=$WORK/m.kiln
"$KILN" compile "$M" --tokenizer "$T" -o "$P" >/dev/null 2>&1 || { echo "compile failed"; exit 1; }
"$KILN" generate -m "$P" -p hi -n 4 --temp 0 --no-stats --trace "$WORK/t.jsonl" >/dev/null 2>&1 ||
  { echo "generate --trace failed"; exit 1; }
no_temps() { # NAME DIR: no "*.tmp.<pid>" left in DIR
  if ls -a "$2" | grep -q '\.tmp\.'; then bad "$1" "left: $(ls -a "$2" | grep '\.tmp\.')"; else ok "$1"; fi
}
same_bytes() { # NAME FILE COPY: FILE unchanged
  if cmp -s "$2" "$3"; then ok "$1"; else bad "$1" "'$2' changed"; fi
}

# ---- 1. outputs that are inputs ---------------------------------------------------
cp "$P" "$WORK/keep.kiln"
ln "$P" "$WORK/hard.kiln"
expect id_run_trace 2 "--trace '$P' is the same file as -m '$P'" -- "$KILN" run -m "$P" --trace "$P"
expect id_bench_trace 2 "--trace '$WORK/hard.kiln' is the same file as -m '$P'" -- "$KILN" bench -m "$P" -p 4 -n 2 -r 1 --trace "$WORK/hard.kiln"
expect id_stats_json 2 "--stats-json '$P' is the same file as -m '$P'" -- "$KILN" generate -m "$P" -p hi --stats-json "$P"
expect id_compile_tokenizer 2 "is the same file as --tokenizer '$T'" -- "$KILN" compile "$M" --tokenizer "$T" -o "$T"
expect id_inspect_chrome 2 "--chrome '$WORK/t.jsonl' is the same file as TRACE '$WORK/t.jsonl'" -- "$KILN" inspect "$WORK/t.jsonl" --chrome "$WORK/t.jsonl"
same_bytes id_program_kept "$P" "$WORK/keep.kiln"
mkdir -p "$WORK/io/sub"
"$KILN" run -m "$P" --output-dir "$WORK/io/in" >/dev/null 2>&1
expect id_run_dirs 2 "--output-dir '$WORK/io/in' is the same folder as --inputs '$WORK/io/in'" -- "$KILN" run -m "$P" --inputs "$WORK/io/in" --output-dir "$WORK/io/in"
cp "$P" "$WORK/io/p.kiln"
expect id_run_dir_holds 2 "--output-dir '$WORK/io' is a folder that holds -m '$WORK/io/p.kiln'" -- "$KILN" run -m "$WORK/io/p.kiln" --output-dir "$WORK/io"
expect id_debug_dump_holds 2 "--dump '$WORK/io' is a folder that holds -m '$WORK/io/p.kiln'" -- "$KILN" debug -m "$WORK/io/p.kiln" --reference ref --dump "$WORK/io"
expect id_deeper_is_fine 0 "wrote" -- "$KILN" run -m "$WORK/io/p.kiln" --output-dir "$WORK/io/sub"

# ---- 2. signals -------------------------------------------------------------------
# A generation that never ends (greedy, -n -1, a long context): the signal
# lands mid-run; the command says so and exits 128 + the signal.
"$KILN" compile "$M" --tokenizer "$T" -o "$WORK/long.kiln" --max-seq 30000 >/dev/null 2>&1
for sig in INT TERM HUP; do
  want=$((128 + $(kill -l "$sig")))
  "$KILN" generate -m "$WORK/long.kiln" -p the -n -1 --temp 0 --trace "$WORK/sig.jsonl" >/dev/null 2>"$WORK/sig.err" &
  pid=$!
  sleep 0.5
  kill -"$sig" $pid
  wait $pid
  rc=$?
  if [ "$rc" = "$want" ] && grep -q "interrupted after" "$WORK/sig.err"; then ok "sig_generate_$sig"
  else bad "sig_generate_$sig" "exit $rc (want $want): $(tail -2 "$WORK/sig.err")"; fi
done
# The trace of what ran is still written (as after a failure), whole.
if [ -f "$WORK/sig.jsonl" ] && tail -1 "$WORK/sig.jsonl" | grep -q '"ev":"end"'; then ok sig_trace_whole
else bad sig_trace_whole "$(tail -c 200 "$WORK/sig.jsonl" 2>&1)"; fi
no_temps sig_generate_no_temps "$WORK"

# compile under a signal at many moments: either it stopped (128 + n, and no
# program unless the rename had happened, then a whole one) or it finished
# (0, a program that verifies); never a temporary left, never an exit 0
# without a program.
G=$(smollm2_gguf)
src=${G:-$M}
extra=()
[ -z "$G" ] && extra=(--tokenizer "$T" --max-seq 30000 --check)
# Under qemu-user (a cross build's wrapper script, tests/CMakeLists.txt) a
# signal that lands while the emulator itself starts can hang it for good
# (seen once in CI: a SIGHUP'd compile never ended); such a run is killed
# after 60 s and counted apart, since it is the emulator's. Natively a run
# that outlives its signal that long is a failure.
emulated=0
[ "$(head -c 2 "$KILN")" = '#!' ] && grep -q qemu "$KILN" && emulated=1
alive() { # PID: not ended (a zombie has ended)
  local st
  st=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "${st:0:1}" != Z ]
}
stopped=0 finished=0 hung=0 broken=""
for sig in TERM INT HUP; do
  for d in 0.01 0.03 0.06 0.1 0.15 0.2 0.3; do
    rm -f "$WORK/c.kiln"
    "$KILN" compile "$src" "${extra[@]}" -o "$WORK/c.kiln" >/dev/null 2>"$WORK/c.err" &
    pid=$!
    sleep "$d"
    kill -"$sig" $pid 2>/dev/null
    i=0
    while alive $pid && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
    if alive $pid; then
      kill -KILL $pid 2>/dev/null
      wait $pid 2>/dev/null
      if [ $emulated = 1 ]; then hung=$((hung + 1)); else broken="$broken $sig@$d:hung"; fi
      rm -f "$WORK"/c.kiln.tmp.*
      continue
    fi
    wait $pid
    rc=$?
    if [ "$rc" = $((128 + $(kill -l "$sig"))) ]; then
      stopped=$((stopped + 1))
      if [ -e "$WORK/c.kiln" ] && ! "$KILN" info "$WORK/c.kiln" --verify >/dev/null 2>&1; then broken="$broken $sig@$d:partial"; fi
    elif [ "$rc" = 0 ]; then
      finished=$((finished + 1))
      "$KILN" info "$WORK/c.kiln" --verify >/dev/null 2>&1 || broken="$broken $sig@$d:rc0-bad"
    else
      broken="$broken $sig@$d:rc$rc($(tail -1 "$WORK/c.err"))"
    fi
    ls -a "$WORK" | grep -q 'c\.kiln\.tmp\.' && broken="$broken $sig@$d:temp-left"
    rm -f "$WORK"/c.kiln.tmp.*
  done
done
if [ -z "$broken" ] && [ "$stopped" -gt 0 ]; then
  h=""
  [ $hung -gt 0 ] && h=", $hung hung under the emulator and killed"
  ok "sig_compile ($stopped stopped, $finished finished$h)"
else bad sig_compile "stopped $stopped, finished $finished, broken:$broken"; fi

# chat waiting for its next line: SIGTERM ends it at once with 143.
 ( sleep 3 ) | "$KILN" chat -m "$P" --chat-template chatml -n 4 --temp 0 >/dev/null 2>"$WORK/chat.err" &
pid=$!
sleep 0.5
kill -TERM $pid
wait $pid
rc=$?
if [ "$rc" = 143 ]; then ok sig_chat_stdin; else bad sig_chat_stdin "exit $rc: $(tail -2 "$WORK/chat.err")"; fi

# A closed pipe: 141, nothing on stderr.
"$KILN" generate -m "$WORK/long.kiln" -p the -n 20000 --temp 0 --no-stats 2>"$WORK/pipe.err" | head -c 1 >/dev/null
rc=${PIPESTATUS[0]}
if [ "$rc" = 141 ] && [ ! -s "$WORK/pipe.err" ]; then ok epipe_quiet; else bad epipe_quiet "exit $rc: $(head -2 "$WORK/pipe.err")"; fi

# ---- 3. write errors --------------------------------------------------------------
if [ -w /dev/full ]; then
  msg="cannot write standard output: No space left on device"
  expect full_generate 1 "$msg" -- sh -c "'$KILN' generate -m '$P' -p hi -n 8 --temp 0 --no-stats >/dev/full"
  expect full_info_json 1 "$msg" -- sh -c "'$KILN' info '$P' --json >/dev/full"
  expect full_inspect 1 "$msg" -- sh -c "'$KILN' inspect '$WORK/t.jsonl' >/dev/full"
  expect full_tokenize 1 "$msg" -- sh -c "echo hello | '$KILN' tokenize -m '$P' >/dev/full"
else
  skipped full_stdout "no writable /dev/full"
fi

# A file that cannot be written whole is not written: an old one stays as
# it was, and the message says why. RLIMIT_FSIZE (1 KiB) works without root.
echo old >"$WORK/old.txt"
for f in trace stats html chrome program; do cp "$WORK/old.txt" "$WORK/lim.$f"; done
limited() { (trap '' XFSZ; ulimit -f 1; "$@"); }
expect fsize_trace 1 "File too large" -- limited "$KILN" generate -m "$P" -p hi -n 8 --temp 0 --no-stats --trace "$WORK/lim.trace"
expect fsize_html 1 "File too large" -- limited "$KILN" inspect "$WORK/t.jsonl" --html "$WORK/lim.html"
expect fsize_chrome 1 "File too large" -- limited "$KILN" inspect "$WORK/t.jsonl" --chrome "$WORK/lim.chrome"
expect fsize_compile 1 "File too large" -- limited "$KILN" compile "$M" --tokenizer "$T" -o "$WORK/lim.program"
for f in trace html chrome program; do same_bytes "fsize_${f}_kept" "$WORK/lim.$f" "$WORK/old.txt"; done
no_temps fsize_no_temps "$WORK"

# A full disk: a 64 KiB tmpfs (root only).
if [ "$(id -u)" = 0 ] && mkdir -p "$WORK/full" && mount -t tmpfs -o size=64k tmpfs "$WORK/full" 2>/dev/null; then
  FULL=$WORK/full
  echo old >"$FULL/t.jsonl"
  cp "$FULL/t.jsonl" "$WORK/t.old"
  head -c 40000 /dev/zero >"$FULL/filler"
  expect disk_trace 1 "No space left on device" -- "$KILN" generate -m "$P" -p hi -n 8 --temp 0 --no-stats --trace "$FULL/t.jsonl"
  same_bytes disk_trace_kept "$FULL/t.jsonl" "$WORK/t.old"
  expect disk_html 1 "No space left on device" -- "$KILN" inspect "$WORK/t.jsonl" --html "$FULL/r.html"
  expect disk_compile 1 "No space left on device" -- "$KILN" compile "$M" --tokenizer "$T" -o "$FULL/p.kiln"
  expect disk_debug_dump 1 "No space left on device" -- "$KILN" debug -m "$P" --reference ref --dump "$FULL/dump"
  if [ ! -e "$FULL/r.html" ] && [ ! -e "$FULL/p.kiln" ]; then ok disk_nothing_half; else bad disk_nothing_half "$(ls "$FULL")"; fi
  no_temps disk_no_temps "$FULL"
else
  skipped full_disk "needs root to mount a small tmpfs"
fi
finish
