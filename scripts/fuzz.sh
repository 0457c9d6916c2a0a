#!/usr/bin/env bash
# fuzz.sh [SECONDS]: builds Kiln's libFuzzer targets with clang (ASan + UBSan)
# in build-fuzz, writes a seed corpus from the test fixtures (small
# llama2.c, GGUF and safetensors checkpoints, tokenizers and tokenizer.json
# files, programs and their traces, .npy folders, chat templates), and runs
# each target for SECONDS (default 30): fuzz_program, fuzz_llama2c,
# fuzz_gguf, fuzz_json, fuzz_safetensors, fuzz_tokenizer_json, fuzz_chat,
# fuzz_npy, fuzz_trace. Exits non-zero when any target finds a crash, a
# leak, a timeout or an out-of-memory; the reproducer is left in
# build-fuzz/artifacts/ (replay it with `build-fuzz/tests/fuzz/fuzz_<target>
# FILE`). Environment: CC (default clang), KILN_FUZZ_BUILD (default
# <repo>/build-fuzz), KILN_FUZZ_TARGETS (a space-separated subset to run).
set -euo pipefail

secs=${1:-30}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_FUZZ_BUILD:-$root/build-fuzz}
cc=${CC:-clang}
case "$(basename "$cc")" in *clang*) ;; *) cc=clang ;; esac
cd "$root"

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_C_COMPILER="$cc" -DKILN_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-O1 -g" >/dev/null
names="fuzz_program fuzz_llama2c fuzz_gguf fuzz_json fuzz_safetensors fuzz_tokenizer_json fuzz_chat fuzz_npy fuzz_trace"
only=${KILN_FUZZ_TARGETS:-$names}
# shellcheck disable=SC2086
ninja -C "$build" $only make_seeds

seeds=$build/seeds
rm -rf "$seeds"
"$build/tests/fuzz/make_seeds" "$seeds"
# JSON (config.json, tokenizer.json, safetensors headers): the committed
# Hugging Face fixtures' small JSON files.
mkdir -p "$seeds/json"
for f in tests/data/hf/*/config.json tests/data/hf/*/generation_config.json tests/data/hf/*/tokenizer_config.json; do
  [ -f "$f" ] && cp "$f" "$seeds/json/$(echo "$f" | tr / _)"
done

# target  seed folder  largest input
targets=("fuzz_program program 65536" "fuzz_llama2c llama2c 16384" "fuzz_gguf gguf 32768"
  "fuzz_json json 65536" "fuzz_safetensors safetensors 16384" "fuzz_tokenizer_json tokenizer_json 16384"
  "fuzz_chat chat 4096" "fuzz_npy npy 4096" "fuzz_trace trace 65536")
mkdir -p "$build/artifacts"
failed=0
for t in "${targets[@]}"; do
  read -r name dir max_len <<<"$t"
  case " $only " in *" $name "*) ;; *) continue ;; esac
  mkdir -p "$build/corpus/$dir"
  echo "== $name: $secs s (seeds: $(ls "$seeds/$dir" | wc -l), max_len $max_len)"
  log=$build/artifacts/$name.log
  set +e
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    "$build/tests/fuzz/$name" -max_total_time="$secs" -max_len="$max_len" -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build/artifacts/$name-" \
      "$build/corpus/$dir" "$seeds/$dir" >"$log" 2>&1
  rc=$?
  set -e
  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb)|Done [0-9]+ runs" "$log" || true
  if [ "$rc" -ne 0 ]; then
    echo "!! $name failed (exit $rc); log: $log"
    grep -E "ERROR|SUMMARY|runtime error|Test unit written" "$log" | head -20 || true
    failed=1
  else
    echo "   $name: no crash"
  fi
done
exit "$failed"
