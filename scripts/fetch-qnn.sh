#!/usr/bin/env bash
# fetch-qnn.sh [DIR]: puts Qualcomm's QNN runtime for x86-64 Linux into DIR
# (default ${XDG_CACHE_HOME:-~/.cache}/kiln/qnn, the folder the qnn backend
# looks in after --qnn-lib and $KILN_QNN_LIB): libQnnHtp.so (with the HTP
# emulator it runs on x86), libHtpPrepare.so (prepares a graph for an HTP),
# libQnnSystem.so (reads context binaries), and the libc++, libc++abi and
# libunwind they are linked against.
#
# They come from PyPI's onnxruntime-qnn 2.7.0 wheel (QAIRT 2.51), fetched with
# pip. They are Qualcomm's proprietary code, under the license the wheel
# carries (Qualcomm_LICENSE.pdf, copied beside them): Kiln fetches them and
# never commits or ships them.
#
# The folder is flat, as the qnn backend wants it. libHtpPrepare.so's own
# RPATH ($ORIGIN/../onnxruntime_qnn.libs) then finds no libc++: it loads
# after libQnnHtp.so (or libQnnSystem.so), whose RPATH $ORIGIN brings the
# libc++ in, as the backend does; alone it needs LD_LIBRARY_PATH=DIR.
#
# Idempotent: when DIR already holds libQnnHtp.so it says so and exits 0
# (libQnnHtp.so is installed last, so its presence means a whole set). Exit
# 1 when pip, the network or the wheel fails, 2 on a usage error.
#
#   bash scripts/fetch-qnn.sh                 # into the cache folder
#   bash scripts/fetch-qnn.sh /opt/qnn-x86    # anywhere; then --qnn-lib /opt/qnn-x86
set -euo pipefail
WHEEL_PKG=onnxruntime-qnn
WHEEL_VERSION=2.7.0
LIBS="libQnnSystem.so libHtpPrepare.so libQnnHtp.so" # libQnnHtp.so last: it marks a whole set

say() { echo "fetch-qnn.sh: $*" >&2; }
die() {
  say "error: $*"
  exit 1
}

case ${1:-} in
-h | --help)
  sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
  ;;
-*)
  say "unknown option '$1' (usage: fetch-qnn.sh [DIR])"
  exit 2
  ;;
esac
[ $# -le 1 ] || {
  say "one folder at most (usage: fetch-qnn.sh [DIR])"
  exit 2
}
DIR=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln/qnn}

if [ -f "$DIR/libQnnHtp.so" ]; then
  say "QNN libraries already in $DIR"
  echo "$DIR"
  exit 0
fi
if [ "$(uname -s)" != Linux ] || [ "$(uname -m)" != x86_64 ]; then
  die "these are Qualcomm's x86-64 Linux libraries (the HTP emulated), and this is" \
    "$(uname -s) $(uname -m); on a device take libQnnHtp.so and the rest from its" \
    "vendor partition or the QAIRT SDK (README.md, 'Running on a Snapdragon NPU')"
fi
command -v python3 >/dev/null || die "python3 is needed (python3 -m pip downloads the wheel)"
python3 -m pip --version >/dev/null 2>&1 || die "pip is needed: python3 -m pip does not run (apt-get install python3-pip)"
say "fetching Qualcomm's QNN runtime (proprietary, not part of Kiln) from PyPI's" \
  "$WHEEL_PKG==$WHEEL_VERSION wheel (about 100 MB)"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kiln-qnn.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The wheel for this (x86-64 Linux) Python; pip's own words kept for the error.
if ! python3 -m pip download --disable-pip-version-check --no-deps --only-binary=:all: \
  -d "$tmp" "$WHEEL_PKG==$WHEEL_VERSION" >"$tmp/pip.log" 2>&1; then
  tail -5 "$tmp/pip.log" | sed 's/^/  pip: /' >&2
  die "pip could not download $WHEEL_PKG==$WHEEL_VERSION (no network, or no such wheel" \
    "for this Python); nothing was written to $DIR"
fi
whl=$(find "$tmp" -maxdepth 1 -name 'onnxruntime_qnn-*.whl' | head -1)
[ -n "$whl" ] || die "pip gave no onnxruntime_qnn wheel: $(ls "$tmp")"
python3 -m zipfile -e "$whl" "$tmp/x" || die "cannot unpack $(basename "$whl")"

pkg=$tmp/x/onnxruntime_qnn libs=$tmp/x/onnxruntime_qnn.libs
for f in $LIBS; do
  [ -f "$pkg/$f" ] || die "the wheel has no onnxruntime_qnn/$f (is it $WHEEL_PKG $WHEEL_VERSION?)"
done
for p in 'libc++-*' 'libc++abi-*' 'libunwind-*'; do
  [ -n "$(find "$libs" -maxdepth 1 -name "$p" 2>/dev/null)" ] || die "the wheel has no onnxruntime_qnn.libs/$p"
done
mkdir -p "$DIR" || die "cannot make the folder '$DIR'"
# Each file whole or not at all (copied beside, then renamed), the runtime
# they need first and libQnnHtp.so last.
put() {
  if ! { cp "$1" "$DIR/.$2.part.$$" && mv -f "$DIR/.$2.part.$$" "$DIR/$2"; }; then
    rm -f "$DIR/.$2.part.$$"
    die "cannot write $DIR/$2"
  fi
}
lic=$(find "$tmp/x" -name 'Qualcomm_LICENSE*' | head -1)
[ -n "$lic" ] && put "$lic" "$(basename "$lic")"
for f in "$libs"/*; do put "$f" "$(basename "$f")"; done
for f in $LIBS; do put "$pkg/$f" "$f"; done

say "Qualcomm's QNN libraries are in $DIR: proprietary, fetched, never commit them${lic:+
  (their license: $DIR/$(basename "$lic"))}"
if [ "$DIR" = "${XDG_CACHE_HOME:-$HOME/.cache}/kiln/qnn" ]; then
  say "kiln looks there by default (after --qnn-lib DIR and \$KILN_QNN_LIB)"
else
  say "tell kiln: kiln ... --qnn-lib $DIR, or export KILN_QNN_LIB=$DIR"
fi
echo "$DIR"
