#!/usr/bin/env bash
# bench/run.sh: times Kiln's methods on stories260K (needs ../shared/data)
# and prints a markdown table with the date and machine. Medians of R runs.
set -euo pipefail
cd "$(dirname "$0")/.."
S=${STORIES:-../shared/data/models/stories260K}
R=${R:-7}
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target kiln bench_methods >/dev/null
./build/kiln compile "$S/stories260K.bin" --tokenizer "$S/tok512.bin" -o build/stories260K.kiln 2>/dev/null
echo "date: $(date -u +%Y-%m-%d), machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
echo "kiln $(git describe --always --dirty 2>/dev/null || echo unknown), backend ref, 1 thread"
echo
echo "| program | test | t/s (median) | min .. max |"
echo "|---|---|---|---|"
for pp in 128 384; do
  ./build/bench_methods build/stories260K.kiln "$pp" 128 "$R"
done
