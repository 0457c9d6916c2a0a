#!/usr/bin/env bash
# scripts/llama_cpp.sh - build llama.cpp's tools as a reference to compare Kiln against.
#
# What it does
#   1. Downloads the source distribution (sdist) of the PyPI package
#      llama-cpp-python==0.3.36 with
#        pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36
#      (PyPI is the only network source used; nothing is cloned).
#   2. Unpacks it; the llama.cpp source tree is vendor/llama.cpp inside it.
#   3. Configures and builds with cmake (-DGGML_NATIVE=ON -DCMAKE_BUILD_TYPE=Release
#      -DLLAMA_CURL=OFF, shared libllama), targets:
#        llama-bench, llama-completion (or llama-cli if this llama.cpp has no
#        llama-completion target), llama-perplexity, llama-quantize, llama,
#        and llama-mtmd-cli where the tree has it (images, bench/vl.sh).
#   4. Finds the llama.cpp commit and prints it with the bin dir.
#   Every step is skipped when already done, so a second run is fast. The build
#   step runs again (incrementally) whenever one of the expected outputs is missing.
#   Missing build tools (cmake, g++, make) are installed with apt-get.
#
# Usage
#   scripts/llama_cpp.sh                  build if needed, print a summary
#   scripts/llama_cpp.sh --print-bin-dir  build if needed, print only the bin dir
#                                         on stdout (progress goes to stderr)
#
# Environment
#   KILN_CACHE   cache root (default: $HOME/.cache/kiln); everything lives in
#                $KILN_CACHE/llama.cpp, outside the repository.
#   JOBS         parallel build jobs (default: $(nproc)).
#   PIP          pip command (default: pip, else "python3 -m pip").
#
# Outputs (under $KILN_CACHE/llama.cpp)
#   sdist/llama_cpp_python-0.3.36.tar.gz   the downloaded sdist
#   src/llama_cpp_python-0.3.36/           unpacked sdist (llama.cpp in vendor/llama.cpp)
#   build/                                 cmake build dir; binaries and libllama.so in build/bin
#   BIN_DIR                                one line: absolute path of the bin dir
#   COMMIT                                 one line: llama.cpp commit hash (or "unknown ...")
#   TOOLS                                  one line per built tool target
#
# How the commit is found
#   The sdist carries the llama.cpp submodule's git metadata
#   (.git/modules/vendor/llama.cpp/HEAD, a shallow clone). Its HEAD is read
#   directly (no git needed) and cross-checked against the CHANGELOG line
#   "update llama.cpp to ggml-org/llama.cpp@<hash>" for this release. The hash is
#   passed to cmake as LLAMA_BUILD_COMMIT so `llama-bench --version` shows it.
#   Note: because that clone is shallow, the build number llama.cpp derives from
#   `git rev-list --count` is not meaningful (it comes out as 1).

set -euo pipefail

PKG=llama-cpp-python
PKG_VERSION=0.3.36
SDIST_NAME=llama_cpp_python-${PKG_VERSION}

# All progress goes to stderr; fd 3 is the real stdout for the final answer.
exec 3>&1 1>&2

print_bin_dir_only=0
case "${1:-}" in
    "") ;;
    --print-bin-dir) print_bin_dir_only=1 ;;
    -h|--help) sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//' >&3; exit 0 ;;
    *) echo "usage: $0 [--print-bin-dir]" >&2; exit 2 ;;
esac

log() { echo "[llama_cpp.sh] $*" >&2; }
die() { log "error: $*"; exit 1; }

CACHE_ROOT=${KILN_CACHE:-$HOME/.cache/kiln}
CACHE=$CACHE_ROOT/llama.cpp
SDIST_DIR=$CACHE/sdist
SRC_PARENT=$CACHE/src
PKG_DIR=$SRC_PARENT/$SDIST_NAME
LLAMA_SRC=$PKG_DIR/vendor/llama.cpp
BUILD_DIR=$CACHE/build
BIN_DIR=$BUILD_DIR/bin
JOBS=${JOBS:-$(nproc)}
mkdir -p "$CACHE" "$SDIST_DIR" "$SRC_PARENT"

# ---------------------------------------------------------------- build tools
ensure_build_tools() {
    local missing=() tool
    for tool in cmake:cmake g++:g++ make:make; do
        command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool#*:}")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]} and no apt-get to install them"
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || die "missing ${missing[*]}; run as root or install them"
        sudo=sudo
    fi
    log "installing missing build tools: ${missing[*]}"
    $sudo apt-get update
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}"
}

# ------------------------------------------------------------------- download
download_sdist() {
    local tarball=$SDIST_DIR/$SDIST_NAME.tar.gz
    if [ -s "$tarball" ]; then
        log "sdist already downloaded: $tarball"
    else
        local pip_cmd
        if [ -n "${PIP:-}" ]; then pip_cmd=$PIP
        elif command -v pip >/dev/null 2>&1; then pip_cmd=pip
        else pip_cmd="python3 -m pip"; fi
        log "downloading $PKG==$PKG_VERSION sdist from PyPI"
        $pip_cmd download --no-deps --no-binary :all: "$PKG==$PKG_VERSION" -d "$SDIST_DIR"
        [ -s "$tarball" ] || die "pip download did not produce $tarball"
    fi
    log "sdist sha256: $(sha256sum "$tarball" | cut -d' ' -f1)"
}

# --------------------------------------------------------------------- unpack
unpack_sdist() {
    local tarball=$SDIST_DIR/$SDIST_NAME.tar.gz stamp=$PKG_DIR/.kiln-unpacked
    if [ -f "$stamp" ] && [ -f "$LLAMA_SRC/CMakeLists.txt" ]; then
        log "sdist already unpacked: $PKG_DIR"
        return 0
    fi
    log "unpacking $tarball"
    rm -rf "$PKG_DIR" "$SRC_PARENT/.tmp-unpack"
    mkdir -p "$SRC_PARENT/.tmp-unpack"
    tar -xzf "$tarball" -C "$SRC_PARENT/.tmp-unpack"
    [ -f "$SRC_PARENT/.tmp-unpack/$SDIST_NAME/vendor/llama.cpp/CMakeLists.txt" ] \
        || die "sdist has no vendor/llama.cpp/CMakeLists.txt"
    mv "$SRC_PARENT/.tmp-unpack/$SDIST_NAME" "$PKG_DIR"
    rmdir "$SRC_PARENT/.tmp-unpack"
    touch "$stamp"
}

# --------------------------------------------------------------------- commit
# Prints the full commit hash, or nothing if it cannot be found.
find_commit() {
    local head_file=$PKG_DIR/.git/modules/vendor/llama.cpp/HEAD hash="" ref
    if [ -f "$head_file" ]; then
        hash=$(tr -d '[:space:]' <"$head_file")
        if [[ $hash == ref:* ]]; then      # symbolic ref: resolve it
            ref=${hash#ref:}
            hash=$(tr -d '[:space:]' <"$PKG_DIR/.git/modules/vendor/llama.cpp/$ref" 2>/dev/null || true)
        fi
    fi
    if ! [[ $hash =~ ^[0-9a-f]{40}$ ]] && command -v git >/dev/null 2>&1; then
        hash=$(git -C "$LLAMA_SRC" rev-parse HEAD 2>/dev/null || true)
    fi
    [[ $hash =~ ^[0-9a-f]{40}$ ]] || hash=""
    echo "$hash"
}

# Short hash from this release's CHANGELOG entry, or nothing.
changelog_commit() {
    [ -f "$PKG_DIR/CHANGELOG.md" ] || return 0
    awk -v ver="## [$PKG_VERSION]" '
        index($0, ver) == 1 { inside = 1; next }
        inside && /^## \[/   { exit }
        inside && match($0, /ggml-org\/llama\.cpp@[0-9a-f]+/) {
            print substr($0, RSTART + 19, RLENGTH - 19); exit
        }' "$PKG_DIR/CHANGELOG.md"
}

# Uses git (if present) on the sdist's shallow submodule clone to check that the
# unpacked tree is exactly that commit. Refreshing the index also stops ggml's
# cmake from calling the tree "-dirty" only because tar gave files new mtimes.
check_tree() {
    command -v git >/dev/null 2>&1 || { log "git not installed; source tree not checked against the commit"; return 0; }
    git -C "$LLAMA_SRC" rev-parse HEAD >/dev/null 2>&1 || { log "no usable git metadata in the sdist"; return 0; }
    git -C "$LLAMA_SRC" update-index -q --refresh >/dev/null 2>&1 || true
    if [ -z "$(git -C "$LLAMA_SRC" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
        log "vendored llama.cpp tree matches its git HEAD exactly"
    else
        log "warning: vendored llama.cpp tree differs from its git HEAD:"
        git -C "$LLAMA_SRC" status --short --untracked-files=no | head -20 >&2
    fi
}

# ---------------------------------------------------------------------- build
TOOL_TARGETS=()

choose_targets() {
    local help
    help=$(cmake --build "$BUILD_DIR" --target help 2>/dev/null || true)
    has_target() { grep -Eq "(^|[[:space:]])$1(:|$|[[:space:]])" <<<"$help"; }
    local gen_tool
    if has_target llama-completion; then gen_tool=llama-completion
    elif has_target llama-cli; then gen_tool=llama-cli
    else die "neither llama-completion nor llama-cli is a target in this llama.cpp"; fi
    log "text generation tool: $gen_tool ($( [ $gen_tool = llama-completion ] \
        && echo 'llama-completion target exists' || echo 'no llama-completion target, using llama-cli'))"
    TOOL_TARGETS=(llama-bench "$gen_tool" llama-perplexity llama-quantize)
    local t
    for t in "${TOOL_TARGETS[@]}" llama; do
        has_target "$t" || die "target $t not found in this llama.cpp"
    done
    # images (bench/vl.sh), where this llama.cpp has the multimodal tool
    if has_target llama-mtmd-cli; then TOOL_TARGETS+=(llama-mtmd-cli)
    else log "no llama-mtmd-cli target: bench/vl.sh runs Kiln alone"; fi
}

outputs_present() {
    [ -f "$CACHE/TOOLS" ] || return 1
    local t
    while read -r t; do
        [ -n "$t" ] && { [ -x "$BIN_DIR/$t" ] || return 1; }
    done <"$CACHE/TOOLS"
    [ -s "$CACHE/TOOLS" ] && compgen -G "$BIN_DIR/libllama.so*" >/dev/null
}

configure_and_build() {
    local commit=$1
    if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
        log "configuring llama.cpp in $BUILD_DIR"
        local extra=()
        [ -n "$commit" ] && extra+=("-DLLAMA_BUILD_COMMIT=${commit:0:7}")
        cmake -S "$LLAMA_SRC" -B "$BUILD_DIR" \
            -DGGML_NATIVE=ON \
            -DCMAKE_BUILD_TYPE=Release \
            -DLLAMA_CURL=OFF \
            -DBUILD_SHARED_LIBS=ON \
            -DLLAMA_BUILD_TESTS=OFF \
            -DLLAMA_BUILD_EXAMPLES=OFF \
            -DLLAMA_USE_PREBUILT_UI=OFF \
            "${extra[@]}"
    fi
    choose_targets
    log "building ${TOOL_TARGETS[*]} llama with -j$JOBS"
    local t0=$SECONDS
    cmake --build "$BUILD_DIR" --config Release -j"$JOBS" --target "${TOOL_TARGETS[@]}" llama
    log "build took $((SECONDS - t0)) s"
    printf '%s\n' "${TOOL_TARGETS[@]}" >"$CACHE/TOOLS"
    outputs_present || die "build finished but expected outputs are missing in $BIN_DIR"
}

# ----------------------------------------------------------------------- main
if outputs_present && [ -f "$PKG_DIR/.kiln-unpacked" ]; then
    log "already built: $BIN_DIR"
    commit=$(find_commit)
else
    ensure_build_tools
    [ -f "$PKG_DIR/.kiln-unpacked" ] || download_sdist
    unpack_sdist
    commit=$(find_commit)
    check_tree
    configure_and_build "$commit"
fi

cl=$(changelog_commit)
if [ -n "$commit" ]; then
    if [ -n "$cl" ] && [[ $commit != "$cl"* ]]; then
        log "warning: submodule HEAD $commit differs from CHANGELOG's llama.cpp@$cl"
    fi
    commit_line=$commit
elif [ -n "$cl" ]; then
    commit_line="$cl (short hash from CHANGELOG.md; full hash unknown)"
else
    commit_line="unknown (llama.cpp vendored in $PKG $PKG_VERSION)"
fi

BIN_DIR_ABS=$(cd "$BIN_DIR" && pwd -P)
echo "$commit_line" >"$CACHE/COMMIT"
echo "$BIN_DIR_ABS" >"$CACHE/BIN_DIR"

if [ $print_bin_dir_only -eq 1 ]; then
    echo "$BIN_DIR_ABS" >&3
    exit 0
fi

{
    echo "llama.cpp (from $PKG $PKG_VERSION sdist)"
    echo "  source : $LLAMA_SRC"
    echo "  commit : $commit_line"
    echo "  bin dir: $BIN_DIR_ABS"
    echo "  tools  : $(tr '\n' ' ' <"$CACHE/TOOLS")"
    echo "  library: $(cd "$BIN_DIR_ABS" && ls libllama.so* | tr '\n' ' ')"
    echo "  files  : $CACHE/COMMIT, $CACHE/BIN_DIR"
} >&3
