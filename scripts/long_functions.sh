#!/usr/bin/env bash
# long_functions.sh [LIMIT] [FILES...]: prints every function longer than
# LIMIT lines (default 120; 0 prints them all), longest first, as
# "LINES FILE:LINE NAME". The length runs from the line of the name to the
# closing brace, as Universal Ctags' end field gives them. Exits 1 when one
# is over the limit. Default files: tools/*.c.
set -euo pipefail
limit=${1:-120}
shift || true
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- tools/*.c
ctags -x --kinds-c=f --fields=+ne --_xformat='%{end} %{line} %F %N' "$@" |
  awk -v lim="$limit" '{ n = $1 - $2 + 1; if (n > lim) { print n, $3 ":" $2, $4; over = 1 } }
                       END { exit over ? 1 : 0 }' | sort -rn
