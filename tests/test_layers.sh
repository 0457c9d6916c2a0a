#!/usr/bin/env bash
# test_layers.sh: the layering of docs/ARCHITECTURE.md §2, checked on the
# sources: each folder of src/ may include only the folders listed for it
# below (public headers, include/kiln/*.h, are open to all), and tools/
# only the public headers, its own headers and the one internal header
# devtools/devtools.h. A new dependency is a change to this table and to
# the drawing in ARCHITECTURE.md, made on purpose, not by accident.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

# layer: the layers it may include (besides itself)
declare -A ALLOW=(
  [base]=""
  [ir]="base"
  [quant]="base"
  [models]="ir base"
  [format]="ir quant base"
  [backends]="ir quant base"
  [runtime]="format backends ir quant base"
  [llm]="runtime ir base"
  [import]="llm models ir quant base"
  [devtools]="runtime backends ir quant base"
  [compiler]="devtools import models llm runtime format backends ir quant base"
)

pass=0 fail=0
check() { # file, included path
  local f=$1 inc=$2 layer dep
  case "$f" in
    tools/*)
      case "$inc" in
        kiln/*|devtools/devtools.h) return 0 ;;
        */*) echo "FAIL $f includes \"$inc\": tools/ may include the public headers and devtools/devtools.h only"
             return 1 ;;
        *) [ -f "tools/$inc" ] && return 0
           echo "FAIL $f includes \"$inc\", which is not a header of tools/"; return 1 ;;
      esac ;;
  esac
  layer=${f#src/}; layer=${layer%%/*}
  case "$inc" in kiln/*) return 0 ;; */*) dep=${inc%%/*} ;; *) return 0 ;; esac
  [ "$dep" = "$layer" ] && return 0
  if [ -z "${ALLOW[$layer]+x}" ]; then
    echo "FAIL $f: folder src/$layer/ is not in the layer table of tests/test_layers.sh"; return 1
  fi
  for a in ${ALLOW[$layer]}; do [ "$a" = "$dep" ] && return 0; done
  echo "FAIL $f includes \"$inc\": src/$layer/ may include only: ${ALLOW[$layer]:-nothing}"
  return 1
}

while IFS= read -r f; do
  bad=0
  while IFS= read -r inc; do
    check "$f" "$inc" || bad=1
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
  if [ $bad = 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
done < <(git ls-files 'src/*.c' 'src/*.h' 'tools/*.c' 'tools/*.h' 2>/dev/null || find src tools -name '*.[ch]')

# Every folder of src/ is in the table (a new one must say where it sits).
for d in src/*/; do
  d=${d#src/}; d=${d%/}
  [ -n "${ALLOW[$d]+x}" ] || { echo "FAIL src/$d/ is not in the layer table"; fail=$((fail + 1)); }
done
echo "$pass passed, $fail failed"
[ $fail = 0 ]
