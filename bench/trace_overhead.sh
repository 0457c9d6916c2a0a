#!/usr/bin/env bash
# bench/trace_overhead.sh: what recording a trace costs. Runs `kiln bench`
# on one program with and without --trace, alternating ROUNDS times, and
# prints each test's median t/s both ways and the ratio (traced / plain).
# The trace is written after the timed runs, so this is the recording cost
# inside the calls (clock reads and one record per node).
#
#   bench/trace_overhead.sh PROGRAM.kiln [-t N]
# Environment: ROUNDS [5], TESTS_P [128], TEST_N [64], REPS [3], KILN [build-rel/kiln]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PROG=${1:?usage: bench/trace_overhead.sh PROGRAM.kiln [-t N]}
shift
KILN=${KILN:-$ROOT/build-rel/kiln}
if [ ! -x "$KILN" ]; then
  cmake -S "$ROOT" -B "$ROOT/build-rel" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  ninja -C "$ROOT/build-rel" kiln >/dev/null
fi
ROUNDS=${ROUNDS:-5} TESTS_P=${TESTS_P:-128} TEST_N=${TEST_N:-64} REPS=${REPS:-3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
for r in $(seq "$ROUNDS"); do
  "$KILN" bench -m "$PROG" -p "$TESTS_P" -n "$TEST_N" -r "$REPS" -o json "$@" >"$WORK/plain.$r.json"
  "$KILN" bench -m "$PROG" -p "$TESTS_P" -n "$TEST_N" -r "$REPS" -o json --trace "$WORK/t.trace" "$@" \
    >"$WORK/traced.$r.json" 2>/dev/null
done
python3 - "$WORK" "$ROUNDS" "$(basename "$PROG")" <<'PY'
import json, statistics, sys
work, rounds, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def runs(kind):
    out = {}
    for r in range(1, rounds + 1):
        for row in json.load(open("%s/%s.%d.json" % (work, kind, r))):
            test = "pp%d" % row["n_prompt"] if row["n_prompt"] else "tg%d" % row["n_gen"]
            out.setdefault(test, []).append(row["avg_ts"])
    return out
plain, traced = runs("plain"), runs("traced")
print("| program | test | plain t/s (median) | traced t/s (median) | traced / plain |")
print("|---|---|---|---|---|")
for test in plain:
    p, t = statistics.median(plain[test]), statistics.median(traced[test])
    print("| %s | %s | %.1f | %.1f | %.3f |" % (name, test, p, t, t / p))
PY
