#!/usr/bin/env bash
# bench/run.sh: `kiln bench` on stories260K (needs ../shared/data), with the
# date, machine and commit: a quick look at prefill and decode speed on the
# default backend; then bench_tokenizer: encoding speed on 14 KB to 1 MB of
# text with the tokenizers of the shared data. Side-by-side comparisons with
# llama.cpp: bench/compare.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
D=${KILN_SHARED_DATA:-../shared/data}
S=${STORIES:-$D/models/stories260K}
R=${R:-7}
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target kiln bench_tokenizer >/dev/null
./build/kiln compile "$S/stories260K.bin" --tokenizer "$S/tok512.bin" -o build/stories260K.kiln 2>/dev/null
echo "date: $(date -u +%Y-%m-%d), machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
echo "kiln $(git describe --always --dirty 2>/dev/null || echo unknown)"
echo
./build/kiln bench -m build/stories260K.kiln -p 128,384 -n 128 -t 1 -r "$R"
echo
./build/bench_tokenizer -d "$D" -r "$R"
