#!/usr/bin/env bash
# test_exports.sh SO NM CC CMAKE BUILD_DIR: libkiln.so exports exactly the
# functions the public headers declare, each marked KILN_API, and an outside
# program built against an install of BUILD_DIR (its headers, kiln.pc and
# the .so, nothing from src/) compiles, links and runs; internals do not link.
# Environment (set by tests/CMakeLists.txt): KILN_VERSION, KILN_LIBDIR,
# KILN_INCLUDEDIR, KILN_TEST_CFLAGS (compiler flags the library was built
# with: sanitizers, target), KILN_CROSS=1 (link only: the program is not run).
set -u
export LC_ALL=C # one collation for sort, comm and ls
SO=$1 NM=$2 CC=$3 CMAKE=$4 BUILD=$5
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
. "$HERE/lib.sh"
HEADERS="kiln.h kiln_compile.h kiln_llm.h kiln_trace.h"
read -r -a CFLAGS <<<"${KILN_TEST_CFLAGS:-}"

# ---- the headers' functions against the library's exports -------------------
# Preprocessed (comments, #if and macros resolved) with KILN_API spelled as a
# marker: every kiln_ name followed by '(' is a declared function, and the
# name before the first '(' after a marker is a KILN_API one.
for h in $HEADERS; do echo "#include \"kiln/$h\""; done >"$WORK/all.c"
if ! "$CC" "${CFLAGS[@]}" -E -P -DKILN_API=kiln_api_marker_ -I"$HERE/../include" "$WORK/all.c" \
    >"$WORK/pp.c" 2>"$WORK/pp.err"; then
  bad preprocess_headers "$(head -3 "$WORK/pp.err")"
  finish
fi
tr '\n' ' ' <"$WORK/pp.c" >"$WORK/pp1.c"
grep -oE '(^|[^A-Za-z0-9_])kiln_[A-Za-z0-9_]+[[:space:]]*\(' "$WORK/pp1.c" |
  sed -E 's/^[^k]*//; s/[[:space:]]*\($//' | grep -v '^kiln_api_marker_$' | sort -u >"$WORK/declared"
grep -oE 'kiln_api_marker_[^;(]*\(' "$WORK/pp1.c" |
  sed -E 's/.*[^A-Za-z0-9_]([A-Za-z0-9_]+)[[:space:]]*\($/\1/' | sort -u >"$WORK/marked"
if [ "$(wc -l <"$WORK/marked")" -lt 50 ]; then
  bad headers_parsed "only $(wc -l <"$WORK/marked") KILN_API functions found in $HEADERS"
else
  ok "headers_parsed ($(wc -l <"$WORK/marked") KILN_API functions)"
fi
unmarked=$(comm -23 "$WORK/declared" "$WORK/marked")
if [ -z "$unmarked" ]; then
  ok every_declaration_is_kiln_api
else
  bad every_declaration_is_kiln_api "declared without KILN_API:"
  echo "$unmarked" | sed 's/^/    /'
fi

# Names starting with '_' are the toolchain's (_init, _fini, sanitizer
# hooks): C reserves them, and Kiln defines none.
if ! "$NM" -D --defined-only "$SO" >"$WORK/nm" 2>"$WORK/nm.err"; then
  bad nm "$(head -3 "$WORK/nm.err")"
  finish
fi
awk '$2 == "T" && $3 !~ /^_/ { sub(/@.*/, "", $3); print $3 }' "$WORK/nm" | sort -u >"$WORK/exported"
missing=$(comm -23 "$WORK/marked" "$WORK/exported")
leaked=$(comm -13 "$WORK/marked" "$WORK/exported")
if [ -z "$missing$leaked" ]; then
  ok "exports_match_headers ($(wc -l <"$WORK/exported") functions)"
else
  bad exports_match_headers "$(basename "$SO"): $(echo "$missing" | grep -c .) KILN_API functions not exported, $(echo "$leaked" | grep -c .) exported functions not in the public headers"
  if [ -n "$missing" ]; then echo "  declared KILN_API but not exported:"; echo "$missing" | sed 's/^/    /'; fi
  if [ -n "$leaked" ]; then echo "  exported but not declared KILN_API:"; echo "$leaked" | sed 's/^/    /'; fi
fi
others=$(awk '$2 != "T" && $3 !~ /^_/' "$WORK/nm")
if [ -z "$others" ]; then
  ok no_data_exported
else
  bad no_data_exported "the public headers declare no variables, yet $(basename "$SO") exports:"
  echo "$others" | sed 's/^/    /'
fi

# ---- an outside program against the installed library ----------------------
P=$WORK/prefix INC=$WORK/prefix/${KILN_INCLUDEDIR:-include} LIB=$WORK/prefix/${KILN_LIBDIR:-lib}
if ! "$CMAKE" --install "$BUILD" --prefix "$P" >"$WORK/install.log" 2>&1; then
  bad install "$(tail -3 "$WORK/install.log")"
  finish
fi
got=$(cd "$INC/kiln" && ls | tr '\n' ' ')
if [ "$got" = "$HEADERS " ]; then ok installed_headers; else bad installed_headers "$INC/kiln holds: $got"; fi
# Each header on its own, included as <kiln/h> or, from -I .../kiln, as <h>.
for h in $HEADERS; do
  echo "#include <kiln/$h>" >"$WORK/one.c"
  echo "#include <$h>" >"$WORK/one_flat.c"
  expect "header_alone_$h" 0 "" -- "$CC" "${CFLAGS[@]}" -std=c11 -Wall -Wextra -Werror -pedantic \
    -fsyntax-only -I"$INC" "$WORK/one.c"
  expect "header_alone_flat_$h" 0 "" -- "$CC" "${CFLAGS[@]}" -std=c11 -Wall -Wextra -Werror -pedantic \
    -fsyntax-only -I"$INC/kiln" "$WORK/one_flat.c"
done

# kiln.pc was configured for the real prefix: point it at this one.
if command -v pkg-config >/dev/null; then
  if flags=$(PKG_CONFIG_PATH=$LIB/pkgconfig pkg-config --define-variable=prefix="$P" --cflags --libs kiln 2>&1); then
    ok pkg_config
  else
    bad pkg_config "$flags"
    flags="-I$INC -L$LIB -lkiln"
  fi
else
  skipped pkg_config "no pkg-config"
  flags="-I$INC -L$LIB -lkiln"
fi
read -r -a FLAGS <<<"$flags"
cat >"$WORK/outside.c" <<'EOF'
#include <stdio.h>

#include <kiln/kiln.h>
#include <kiln/kiln_compile.h>
#include <kiln/kiln_llm.h>
#include <kiln/kiln_trace.h>

int main(void) {
    printf("%s %s\n", kiln_version(), kiln_strerror(KILN_ERR_FORMAT));
    return 0;
}
EOF
expect outside_links 0 "" -- "$CC" "${CFLAGS[@]}" -std=c11 -Wall -Wextra -Werror -pedantic \
  "$WORK/outside.c" -o "$WORK/outside" "${FLAGS[@]}"
# kiln_version undefined in the program: it came from the .so, not libkiln.a.
if [ -f "$WORK/outside" ]; then
  if "$NM" "$WORK/outside" | grep -qE ' U kiln_version(@|$)'; then ok outside_uses_so
  else bad outside_uses_so "kiln_version is not taken from libkiln.so: $("$NM" "$WORK/outside" | grep kiln_version)"; fi
  if [ "${KILN_CROSS:-0}" = 1 ]; then
    skipped outside_runs "cross build"
  else
    expect outside_runs 0 "${KILN_VERSION:-} format error" -- env LD_LIBRARY_PATH="$LIB" "$WORK/outside"
  fi
fi

# An internal function is not reachable through the .so.
cat >"$WORK/internal.c" <<'EOF'
#include <stddef.h>

#include <kiln/kiln.h>

void *kiln_malloc(size_t size);

int main(void) { return kiln_malloc(1) != NULL; }
EOF
expect internal_does_not_link 1 "kiln_malloc" -- "$CC" "${CFLAGS[@]}" -std=c11 "$WORK/internal.c" \
  -o "$WORK/internal" "${FLAGS[@]}"
finish
