#!/usr/bin/env bash
# test_qnn_cli.sh KILN: --qnn-lib DIR on every subcommand that opens a
# program, and on compile: listed in the help; a folder is taken and the
# command goes on; a missing path, a file, an empty value or no value is a
# usage error (exit 2) naming the flag and the path, before anything is
# opened. Needs no QNN library: no program here has a qnn partition.
set -u
KILN=$1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
. "$(dirname "$0")/lib.sh"

FIX=${KILN_MAKE_FIXTURE:?make_fixture path}
"$FIX" "$WORK" 5 >/dev/null || { echo "make_fixture failed"; exit 1; }
M=$WORK/model.bin T=$WORK/tok.bin P=$WORK/m.kiln
"$KILN" compile "$M" --tokenizer "$T" --prefill 8 --max-seq 64 -o "$P" >/dev/null 2>&1 ||
  { echo "compile failed"; exit 1; }
mkdir "$WORK/qnn"
printf 'one two three four five six seven eight nine ten %.0s' $(seq 40) >"$WORK/text.txt"
NO=$WORK/nonexistent F=$WORK/text.txt

# Each subcommand with the arguments it needs to get past its own checks.
args() {
  case $1 in
  compile) echo "$M --tokenizer $T --prefill 8 --max-seq 64 -o $WORK/out.kiln" ;;
  info) echo "$P" ;;
  generate) echo "-m $P -p hi -n 2 --temp 0" ;;
  chat) echo "-m $P -n 2 --temp 0" ;;
  run) echo "-m $P --iteration 1" ;;
  bench) echo "-m $P -p 4 -n 2 -r 1" ;;
  perplexity) echo "-m $P -f $F -c 16 --limit 1" ;;
  debug) echo "-m $P -n 2" ;;
  tokenize) echo "-m $P" ;;
  esac
}
CMDS="compile info generate chat run bench perplexity debug tokenize"
for c in $CMDS; do
  read -r -a a <<<"$(args "$c")"
  expect "help_$c" 0 "--qnn-lib DIR" -- "$KILN" "$c" --help
  expect "missing_$c" 2 "kiln $c: --qnn-lib '$NO': no such folder" -- "$KILN" "$c" "${a[@]}" --qnn-lib "$NO"
  expect "file_$c" 2 "kiln $c: --qnn-lib '$F' is not a folder" -- "$KILN" "$c" "${a[@]}" --qnn-lib "$F"
  expect "empty_$c" 2 "--qnn-lib needs a value, got ''" -- "$KILN" "$c" "${a[@]}" --qnn-lib ""
  expect "no_value_$c" 2 "--qnn-lib needs a value" -- "$KILN" "$c" "${a[@]}" --qnn-lib
done
expect missing_root_path 2 "--qnn-lib '/nonexistent': no such folder" -- "$KILN" info "$P" --qnn-lib /nonexistent
# Checked before the program is opened: a missing program is not reached.
expect checked_before_open 2 "--qnn-lib '$NO'" -- "$KILN" info "$WORK/none.kiln" --qnn-lib "$NO"
# The flag is the first thing after the parse: nothing is written.
if [ -e "$WORK/out.kiln" ]; then bad compile_wrote_nothing; else ok compile_wrote_nothing; fi

# A folder: the command runs as without the flag (no qnn partition to load).
for c in compile:wrote info:"method 1: decode" generate: run:"iteration 1" perplexity:PPL bench:tg2; do
  read -r -a a <<<"$(args "${c%%:*}")"
  expect "ok_${c%%:*}" 0 "${c#*:}" -- "$KILN" "${c%%:*}" "${a[@]}" --qnn-lib "$WORK/qnn"
done
ln -s "$WORK/qnn" "$WORK/qnn-link"
expect ok_link_to_folder 0 "" -- "$KILN" info "$P" --qnn-lib "$WORK/qnn-link"
printf 'hi' >"$WORK/hi.txt"
if "$KILN" tokenize -m "$P" --qnn-lib "$WORK/qnn" <"$WORK/hi.txt" >/dev/null 2>&1; then
  ok ok_tokenize
else
  bad ok_tokenize
fi
# inspect reads traces, never a program: no --qnn-lib.
expect inspect_has_no_flag 2 "unknown option '--qnn-lib'" -- "$KILN" inspect "$F" --qnn-lib "$WORK/qnn"
finish
