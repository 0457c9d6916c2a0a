#!/usr/bin/env bash
# test_inspect.sh KILN: `kiln inspect` end to end: the report of a trace
# from a tiny model with fallback nodes (table, CSV, JSON, --by, --top,
# --peaks), the Chrome trace and the HTML report (rendered in headless
# Chromium when it is installed), damaged and foreign traces refused with
# the file, line and rule (and no crash on mutated ones), and the time to
# inspect a SmolLM2 generation when its GGUF is in the cache.
set -u
KILN=$1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
FIX=${KILN_MAKE_FIXTURE:?make_fixture path}
. "$(dirname "$0")/lib.sh"
# no machine.json unless a test gives one
export KILN_CACHE=$WORK/cache
mkdir -p "$KILN_CACHE"
HAVE_PY=0
command -v python3 >/dev/null && HAVE_PY=1

"$FIX" "$WORK" 5 >/dev/null || { echo "make_fixture failed"; exit 1; }
P=$WORK/m.kiln T=$WORK/t.trace
"$KILN" compile "$WORK/model.bin" --tokenizer "$WORK/tok.bin" -o "$P" --prefill 8 \
  --backend "test:refuse=rms_norm+swiglu" >/dev/null 2>&1 || { echo "compile failed"; exit 1; }
"$KILN" generate -m "$P" -p "hello" -n 6 --temp 0 --trace "$T" --no-stats >/dev/null 2>&1 ||
  { echo "generate --trace failed"; exit 1; }

# ---- usage ----------------------------------------------------------------------------
expect help 0 "example" -- "$KILN" inspect --help
expect no_trace 2 "no trace given" -- "$KILN" inspect
expect bad_by 2 "--by must be op, node, backend or method" -- "$KILN" inspect "$T" --by unit
expect bad_format 2 "--format must be table, csv or json" -- "$KILN" inspect "$T" --format xml
expect bad_top 2 "--top must be a count" -- "$KILN" inspect "$T" --top -1
expect unknown_option 2 "unknown option '--frob'" -- "$KILN" inspect "$T" --frob
expect missing_file 1 "cannot open '$WORK/nope.trace'" -- "$KILN" inspect "$WORK/nope.trace"

# ---- the report -------------------------------------------------------------------------
expect table 0 "by op: method > backend (its partitions) > op and unit" -- "$KILN" inspect "$T"
expect table_methods 0 "p10 ms" -- "$KILN" inspect "$T"
expect table_fallback 0 "ms in fallback ops (rms_norm, swiglu" -- "$KILN" inspect "$T"
expect table_memory 0 "KV state" -- "$KILN" inspect "$T"
expect table_no_peaks 0 "peaks: none (no $KILN_CACHE/machine.json" -- "$KILN" inspect "$T"
expect by_node 0 "blk.1.attn_q" -- "$KILN" inspect "$T" --by node
expect by_backend 0 "by backend: method > backend (its partitions);" -- "$KILN" inspect "$T" --by backend
expect by_method 0 "by method: method;" -- "$KILN" inspect "$T" --by method
expect top 0 "(other rows)" -- "$KILN" inspect "$T" --top 1
out=$("$KILN" inspect "$T" --by node --top 2)
rows=$(grep -c ' node  ' <<<"$out")
# 2 methods x 2 backends x at most 2 rows
if [ "$rows" -le 8 ] && [ "$rows" -ge 4 ]; then ok top_limits_rows; else bad top_limits_rows "$rows node rows"; fi

cat >"$WORK/peaks.json" <<'EOF'
{"cpu_model": "test cpu", "date": "2026-01-01T00:00:00Z", "n_threads": 4,
 "single_thread": {"n_threads": 1, "mem_read_gbps": 10, "f32_gflops": 50, "i8_gops": 100},
 "all_threads": {"n_threads": 4, "mem_read_gbps": 20, "f32_gflops": 160, "i8_gops": 400}}
EOF
expect peaks_given 0 "peaks: $WORK/peaks.json (test cpu" -- "$KILN" inspect "$T" --peaks "$WORK/peaks.json"
expect peaks_bound 0 "memory" -- "$KILN" inspect "$T" --peaks "$WORK/peaks.json"
echo '{"cpu_model": "x", "all_threads": {"n_threads": 4}}' >"$WORK/badpeaks.json"
expect peaks_damaged 1 "'$WORK/badpeaks.json': key 'single_thread' is missing" -- \
  "$KILN" inspect "$T" --peaks "$WORK/badpeaks.json"
expect peaks_missing 1 "cannot open '$WORK/none.json'" -- "$KILN" inspect "$T" --peaks "$WORK/none.json"
cp "$WORK/badpeaks.json" "$KILN_CACHE/machine.json"
expect peaks_cached_damaged 0 "warning: ignoring the machine's peaks" -- "$KILN" inspect "$T"
cp "$WORK/peaks.json" "$KILN_CACHE/machine.json"
expect peaks_cached 0 "peaks: $KILN_CACHE/machine.json (test cpu" -- "$KILN" inspect "$T"
rm -f "$KILN_CACHE/machine.json"

if [ $HAVE_PY = 1 ]; then
  # shares add up at every level; roofline figures follow from the peaks;
  # the fallback total is the fallback nodes' time; CSV has the JSON's rows
  "$KILN" inspect "$T" --format json --peaks "$WORK/peaks.json" >"$WORK/r.json" &&
    "$KILN" inspect "$T" --format csv --peaks "$WORK/peaks.json" >"$WORK/r.csv" &&
    if python3 - "$WORK/r.json" "$WORK/r.csv" <<'EOF'; then ok json_csv_consistent; else bad json_csv_consistent; fi
import csv, json, sys
d = json.load(open(sys.argv[1]))
rows = d["rows"]
assert [m["name"] for m in d["methods"]] == ["prefill", "decode"], d["methods"]
assert sum(m["calls"] for m in d["methods"]) == d["calls"]
assert abs(sum(r["pct_of_parent"] for r in rows if r["depth"] == 0) - 100) < 1e-6
# children of each row sum to 100% of it
for i, r in enumerate(rows):
    kids, j = [], i + 1
    while j < len(rows) and rows[j]["depth"] > r["depth"]:
        if rows[j]["depth"] == r["depth"] + 1: kids.append(rows[j])
        j += 1
    if kids:
        s = sum(k["pct_of_parent"] for k in kids)
        assert abs(s - 100) < 1e-6, (r["name"], s)
        t = sum(k["total_ms"] for k in kids)
        assert abs(t - r["total_ms"]) < 1e-6 * max(1, r["total_ms"]), (r["name"], t, r["total_ms"])
fb = [r for r in rows if r["depth"] == 2 and r["fallback"]]
assert {r["op"] for r in fb} == {"rms_norm", "swiglu"}, fb
assert sorted(d["fallback"]["ops"]) == ["rms_norm", "swiglu"]
assert abs(sum(r["total_ms"] for r in fb) - d["fallback"]["ms"]) < 1e-9
assert all(r["backend"] == "ref" for r in fb)
pk = d["peaks"]
# the trace says 1 thread (test and ref backends): the one-thread peaks
assert pk["n_threads"] == 1 and pk["mem_read_gbps"] == 10
for r in rows:
    if r["bound"] is None: continue
    peak = 100 if r["unit"] and " x q8" in r["unit"] else 50
    if r["kind"] in ("op", "node") and r["flops"] > 0:
        ridge = peak / 10
        want = "memory" if r["flops"] / r["bytes"] < ridge else "compute"
        assert r["bound"] == want, r
        pct = 100 * (r["gbps"] / 10 if want == "memory" else r["gflops"] / peak)
        assert abs(pct - r["pct_of_peak"]) < 1e-3 * max(1, pct), (r, pct)
    assert abs(r["gbps"] - r["bytes"] / (r["total_ms"] * 1e6)) < 1e-6 * max(1, r["gbps"])
m = d["memory"]
assert m["state_bytes"] > 0 and m["arena_bytes"] > 0 and m["peak_rss_bytes"] > 0
# positions in use: the prompt and every generated token (the last one never fed)
toks = {x["name"]: x for x in d["methods"]}
assert m["state_positions"] == toks["prefill"]["tokens"] + toks["decode"]["calls"] + 1, m
c = list(csv.DictReader(open(sys.argv[2])))
assert len(c) == len(rows), (len(c), len(rows))
assert [x["name"] for x in c] == [r["name"] for r in rows]
EOF
  "$KILN" inspect "$T" --format json | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["peaks"] is None
assert all(r["pct_of_peak"] is None and r["bound"] is None for r in d["rows"])
assert any(r["gbps"] is not None for r in d["rows"])' && ok json_no_peaks || bad json_no_peaks
else
  skipped json_csv_consistent "no python3"
  skipped json_no_peaks "no python3"
fi

# ---- Chrome trace and HTML ------------------------------------------------------------------
expect chrome 0 "wrote Chrome trace events" -- "$KILN" inspect "$T" --chrome "$WORK/c.json"
if [ $HAVE_PY = 1 ]; then
  if python3 - "$WORK/c.json" "$T" <<'EOF'; then ok chrome_nesting; else bad chrome_nesting; fi
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
n_events = sum(1 for l in open(sys.argv[2]) if '"ev":"node"' in l or '"ev":"partition"' in l or '"ev":"method"' in l)
x = [e for e in ev if e["ph"] == "X"]
assert len(x) == n_events, (len(x), n_events)
assert all(e["pid"] == 1 and e["tid"] == 1 for e in ev)
assert any(e["ph"] == "M" and e["name"] == "thread_name" for e in ev)
meth = [e for e in x if e["cat"] == "method"]
part = [e for e in x if e["cat"] == "partition"]
node = [e for e in x if e["cat"] not in ("method", "partition")]
assert node and all({"op", "backend", "unit", "fallback", "flops", "bytes"} <= set(e["args"]) for e in node)
assert any(e["args"]["fallback"] for e in node)
inside = lambda c, p: p["ts"] <= c["ts"] and c["ts"] + c["dur"] <= p["ts"] + p["dur"] + 1e-9
assert all(any(inside(p, m) for m in meth) for p in part)
assert all(any(inside(n, p) and p["args"]["backend"] == n["args"]["backend"] for p in part) for n in node)
EOF
else
  skipped chrome_nesting "no python3"
fi

expect html 0 "wrote the HTML report" -- "$KILN" inspect "$T" --html "$WORK/r.html" --peaks "$WORK/peaks.json"
# self-contained: no scripts, styles or images fetched (the only URL is the SVG namespace)
if grep -Eo '(src|href)=|https?://[^"'"'"' ]*' "$WORK/r.html" | grep -v '^http://www.w3.org/2000/svg$' | grep -q .; then
  bad html_self_contained "$(grep -Eo '(src|href)=|https?://[^"'"'"' ]*' "$WORK/r.html" | sort -u | head -3)"
else
  ok html_self_contained
fi
# a node name that would end the script element stays data
sed 's/"name":"blk.0.attn_q"/"name":"<\/script><b>x<\/b>"/' "$T" >"$WORK/odd.trace"
expect html_odd_name 0 "wrote the HTML report" -- "$KILN" inspect "$WORK/odd.trace" --by node --html "$WORK/odd.html"
if grep -q '</script><b>' "$WORK/odd.html"; then bad html_escapes_names; else ok html_escapes_names; fi

CHROMIUM=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -n "$CHROMIUM" ]; then
  for f in r odd; do
    dom=$(timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --user-data-dir="$WORK/chrome-$f" \
      --dump-dom "file://$WORK/$f.html" 2>/dev/null)
    if grep -q 'data-rendered="yes"' <<<"$dom" && grep -q 'id="timeline-svg"' <<<"$dom" &&
       grep -q 'id="roofline-svg"' <<<"$dom" && grep -q '<circle' <<<"$dom" &&
       grep -q 'blk.1.ffn_down' <<<"$dom"; then
      ok "html_renders_$f"
    else
      bad "html_renders_$f" "the script did not draw the report: $(head -c 300 <<<"$dom")"
    fi
  done
  grep -q '&lt;/script&gt;&lt;b&gt;x' <<<"$dom" && ok html_odd_name_shown || bad html_odd_name_shown
  timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --user-data-dir="$WORK/chrome-shot" \
    --hide-scrollbars --window-size=1400,2400 --screenshot="$WORK/r.png" "file://$WORK/r.html" >/dev/null 2>&1
  if [ -s "$WORK/r.png" ]; then ok html_screenshot; else bad html_screenshot; fi
  [ -n "${KILN_INSPECT_SHOT:-}" ] && cp "$WORK/r.png" "$KILN_INSPECT_SHOT"
else
  skipped html_renders "no chromium (apt-get install chromium)"
fi

# ---- damaged and foreign traces -------------------------------------------------------------
D=$WORK/d.trace
n=$(wc -l <"$T")
refuse() { # refuse NAME GREP: kiln inspect $D exits 1 naming the file and GREP
  expect "$1" 1 "$2" -- "$KILN" inspect "$D"
}
head -n 40 "$T" >"$D"
refuse truncated "'$D' line 40: the file ends without its end line"
head -c 3000 "$T" >"$D"
expect truncated_mid_line 1 "'$D' line" -- "$KILN" inspect "$D"
sed '5s/.*/hello/' "$T" >"$D"
refuse not_json "'$D' line 5, column 1: not JSON (each line of a trace is one JSON object)"
sed '5s/.*/[1, 2]/' "$T" >"$D"
refuse not_object "'$D' line 5: not an event: each line of a trace is one JSON object, found an array"
sed '1s/"kiln_trace":2/"kiln_trace":3/' "$T" >"$D"
refuse wrong_version "'$D' line 1: trace format version 3; this kiln reads versions 1 and 2"
# version 1 (no op events) is still read
sed '1s/"kiln_trace":2/"kiln_trace":1/' "$T" >"$D"
expect reads_version_1 0 "methods (" -- "$KILN" inspect "$D"
sed '1s/"kiln_trace":2/"kiln_trace":"1"/' "$T" >"$D"
refuse version_mistyped "key 'kiln_trace' should be an integer, found a string"
{ echo '{"name": "config"}'; tail -n +2 "$T"; } >"$D"
refuse foreign_json "'$D' line 1: not a Kiln trace: the first line is a JSON object without \"kiln_trace\""
sed '3s/"ev":"node"/"ev":"nodes"/' "$T" >"$D"
refuse unknown_ev "'$D' line 3: unknown event \"ev\":\"nodes\""
sed '3s/"op":"[a-z_]*",//' "$T" >"$D"
refuse missing_field "'$D' line 3: key 'op' is missing"
sed '3s/"flops":[0-9]*/"flops":"many"/' "$T" >"$D"
refuse mistyped_field "'$D' line 3: key 'flops' should be an integer in 0..18446744073709551615, found a string"
# integers are written as integers, within their field's 64-bit range (docs/TRACE.md)
U64="an integer in 0..18446744073709551615" I63="an integer in 0..9223372036854775807"
FRAC="found a number with a fraction or an exponent"
sed '3s/"bytes":[0-9]*/"bytes":18446744073709551616/' "$T" >"$D"
refuse bytes_beyond_u64 "'$D' line 3: key 'bytes' should be $U64, found an integer beyond 64 bits"
sed '3s/"bytes":[0-9]*/"bytes":18446744073709551615/' "$T" >"$D"
expect bytes_u64_max 0 "by op: method > backend" -- "$KILN" inspect "$D"
sed '3s/"flops":[0-9]*/"flops":1.5/' "$T" >"$D"
refuse flops_fraction "'$D' line 3: key 'flops' should be $U64, $FRAC"
sed '3s/"flops":[0-9]*/"flops":5e2/' "$T" >"$D"
refuse flops_exponent "'$D' line 3: key 'flops' should be $U64, $FRAC"
sed '3s/"flops":[0-9]*/"flops":576.0/' "$T" >"$D"
refuse flops_point_zero "'$D' line 3: key 'flops' should be $U64, $FRAC"
sed '3s/"flops":[0-9]*/"flops":-1/' "$T" >"$D"
refuse flops_negative "'$D' line 3: key 'flops' should be $U64, found -1"
sed '2s/"end_ns":[0-9]*/"end_ns":18446744073709551616/' "$T" >"$D"
refuse end_ns_beyond_u64 "'$D' line 2: key 'end_ns' should be $U64, found an integer beyond 64 bits"
sed '2s/"call":0/"call":9223372036854775808/' "$T" >"$D"
refuse call_beyond_i64 "'$D' line 2: key 'call' should be $I63, found 9223372036854775808"
sed '2s/"partition":0/"partition":2147483648/' "$T" >"$D"
refuse partition_beyond_i32 "'$D' line 2: key 'partition' should be an integer in 0..2147483647, found 2147483648"
sed '2s/"node_id":0/"node_id":0e0/' "$T" >"$D"
refuse node_id_exponent "'$D' line 2: key 'node_id' should be an integer in 0..2147483647, $FRAC"
M=$(grep -n -m1 '"ev":"method"' "$T" | cut -d: -f1)
sed "${M}s/\"tokens\":[0-9]*/\"tokens\":-9223372036854775809/" "$T" >"$D"
refuse tokens_beyond_i64 "'$D' line $M: key 'tokens' should be an integer, found an integer beyond 64 bits"
sed "${M}s/\"tokens\":[0-9]*/\"tokens\":6.0/" "$T" >"$D"
refuse tokens_fraction "'$D' line $M: key 'tokens' should be an integer, $FRAC"
sed '1s/"kiln_trace":2/"kiln_trace":1.0/' "$T" >"$D"
refuse version_fraction "'$D' line 1: key 'kiln_trace' should be an integer, $FRAC"
sed '1s/"calls":[0-9]*/"calls":1e1/' "$T" >"$D"
refuse calls_exponent "'$D' line 1: key 'calls' should be $I63, $FRAC"
sed '/"ev":"memory"/s/"arena_bytes":[0-9]*/"arena_bytes":1e4/' "$T" >"$D"
refuse memory_exponent "'$D' line $((n - 1)): key 'arena_bytes' should be $I63, $FRAC"
sed '$s/"dropped":0/"dropped":0.5/' "$T" >"$D"
refuse dropped_fraction "'$D' line $n: key 'dropped' should be $I63, $FRAC"
sed '$s/"dropped":0/"dropped":3/' "$T" >"$D"
expect dropped_said 0 "warning: the writer dropped 3 events" -- "$KILN" inspect "$D"
sed '3s/"ev":"node",//' "$T" >"$D"
refuse missing_ev "'$D' line 3: key 'ev' is missing"
sed '4d' "$T" >"$D"
refuse count_mismatch "the end line says $((n - 3)) events, $((n - 4)) event lines were read"
sed "\$s/\"events\":[0-9]*/\"events\":7/" "$T" >"$D"
refuse end_count_edited "'$D' line $n: the end line says 7 events"
{ cat "$T"; echo '{"ev":"end","events":0}'; } >"$D"
refuse after_end "'$D' line $((n + 1)): a line after the end line"
grep -v '"ev":"memory"' "$T" >"$D"
refuse no_memory "the end line comes without a memory line before it"
sed '2s/"call":0/"call":3/' "$T" >"$D"
refuse call_order "'$D' line 2: an event of call 3 where call 0's come"
sed '2s/"backend":"[a-z]*"/"backend":"npu"/' "$T" >"$D"
refuse unknown_backend "'$D' line 2: backend 'npu' is not one of the header's backends"
sed '2s/"end_ns":[0-9]*/"end_ns":99999999999999/' "$T" >"$D"
refuse outside_parent "does not lie in its partition"
: >"$D"
refuse empty "'$D' is empty: not a Kiln trace"
head -c 65536 /dev/urandom >"$D"
refuse random_binary "'$D' line 1"
printf '\x7fELF\x02\x01\x01\0\0\0' >"$D"
refuse elf_binary "'$D' line 1, column 1: not a Kiln trace (line 1 must be its JSON header)"

# mutated traces: refused (exit 1) or read (0), never a crash
if [ $HAVE_PY = 1 ]; then
  python3 - "$T" "$WORK/mut" <<'EOF'
import random, sys
src = open(sys.argv[1], "rb").read()
lines = src.split(b"\n")
rng = random.Random(7)
for i in range(60):
    b = bytearray(src)
    k = i % 4
    if k == 0:
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    elif k == 1:
        b = b[: rng.randrange(len(b))]
    elif k == 2:
        ls = list(lines)
        a, c = rng.randrange(len(ls)), rng.randrange(len(ls))
        ls[a], ls[c] = ls[c], ls[a]
        b = b"\n".join(ls)
    else:
        ls = list(lines)
        j = rng.randrange(len(ls))
        ls[j] = ls[j].replace(b":", b":-", 1) if rng.random() < 0.5 else ls[j].replace(b"false", b"0")
        b = b"\n".join(ls)
    open("%s.%02d" % (sys.argv[2], i), "wb").write(bytes(b))
EOF
  crashed=
  for f in "$WORK"/mut.*; do
    "$KILN" inspect "$f" --html "$WORK/m.html" --chrome "$WORK/m.json" >/dev/null 2>"$WORK/m.err"
    rc=$?
    if [ $rc != 0 ] && [ $rc != 1 ]; then crashed="$crashed $(basename "$f") (exit $rc)"; fi
    if [ $rc = 1 ] && ! grep -q "kiln inspect: error: '$f'" "$WORK/m.err"; then
      crashed="$crashed $(basename "$f") (message without the file: $(head -c 200 "$WORK/m.err"))"
    fi
  done
  if [ -z "$crashed" ]; then ok mutated_traces; else bad mutated_traces "$crashed"; fi
else
  skipped mutated_traces "no python3"
fi

# ---- a profiled delegate (testd: ops it reports, like QNN's): version 2 ------------------------
DP=$WORK/d.kiln DT=$WORK/d.trace
"$KILN" compile "$WORK/model.bin" --tokenizer "$WORK/tok.bin" -o "$DP" --prefill 8 \
  --backend "testd:refuse=swiglu,cpu" >/dev/null 2>&1 &&
  "$KILN" generate -m "$DP" -p "hello" -n 4 --temp 0 --trace "$DT" --no-stats >/dev/null 2>&1
expect delegate_ops 0 "delegate op" -- "$KILN" inspect "$DT" --by node
expect delegate_share 0 "delegate testd: " -- "$KILN" inspect "$DT"
expect delegate_outside 0 "(in the delegate, outside its ops)" -- "$KILN" inspect "$DT"
if [ $HAVE_PY = 1 ]; then
  # each node's delegate ops share its time: their % add up to 100 under it
  "$KILN" inspect "$DT" --by node --format json >"$WORK/d.json"
  if python3 - "$WORK/d.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
seen = 0
for i, r in enumerate(rows):
    if r["depth"] != 2 or r["backend"] != "testd" or r["kind"] != "node":
        continue
    kids = []
    for k in rows[i + 1:]:
        if k["depth"] != 3:
            break
        kids.append(k)
    assert kids and all(k["kind"] == "delegate op" for k in kids), (r, kids)
    assert abs(sum(k["pct_of_parent"] for k in kids) - 100) < 0.5, (r["name"], kids)
    seen += 1
assert seen > 0
PY
  then ok delegate_ops_add_up; else bad delegate_ops_add_up; fi
  "$KILN" inspect "$DT" --chrome "$WORK/d.chrome.json" >/dev/null 2>&1
  if python3 -c "
import json, sys
ev = json.load(open(sys.argv[1]))['traceEvents']
ops = [e for e in ev if e.get('cat') == 'delegate op']
assert ops and all(e['args']['estimated'] for e in ops)
" "$WORK/d.chrome.json"; then ok delegate_ops_chrome; else bad delegate_ops_chrome; fi
else
  skipped delegate_ops_add_up "no python3"
fi
# --html: the delegate's ops as a timeline lane and by type; a trace without any hides that chart
expect delegate_html 0 "wrote the HTML report" -- "$KILN" inspect "$DT" --html "$WORK/d.html"
if grep -q '"delegateOps":\[{"backend":"testd","op":"' "$WORK/d.html" && grep -q '"ops":\[\[' "$WORK/d.html" &&
   grep -q '"delegateOps":\[\]' "$WORK/r.html"; then ok delegate_html_data
else bad delegate_html_data "$(grep -o '"delegateOps":.\{0,60\}' "$WORK/d.html" | head -1)"; fi
if [ -n "$CHROMIUM" ]; then
  dom=$(timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --user-data-dir="$WORK/chrome-d" \
    --dump-dom "file://$WORK/d.html" 2>/dev/null)
  bars=$(grep -o '<div id="by-delegate-op"><svg[^>]*>.*</svg></div>' <<<"$dom" | grep -o '<rect' | wc -l)
  if grep -q 'data-rendered="yes"' <<<"$dom" && grep -q '>delegate op</text>' <<<"$dom" && [ "$bars" -ge 2 ] &&
     grep -q 'id="delegate-note">ops inside the testd partitions' <<<"$dom"; then ok "delegate_html_renders ($bars op types)"
  else bad delegate_html_renders "$bars bars: $(grep -o 'id="delegate-section".\{0,200\}' <<<"$dom" | head -1)"; fi
  dom=$(timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --user-data-dir="$WORK/chrome-r2" \
    --dump-dom "file://$WORK/r.html" 2>/dev/null)
  if grep -q 'id="delegate-section" style="display: none;"' <<<"$dom"; then ok delegate_html_hidden_without
  else bad delegate_html_hidden_without "$(grep -o '<section id="delegate-section"[^>]*>' <<<"$dom")"; fi
fi
# the version 2 rules
OP=$(grep -n -m1 '"ev":"op"' "$DT" | cut -d: -f1)
D=$WORK/dd.trace
sed '1s/"kiln_trace":2/"kiln_trace":1/' "$DT" >"$D"
refuse op_in_version_1 "'$D' line $OP: an op event in a version 1 trace"
sed "${OP}s/\"start_ns\":[0-9]*/\"start_ns\":1/" "$DT" >"$D"
refuse op_outside_its_node "'$D' line $OP: op '"
sed "${OP}s/,\"cycles\":[0-9]*//" "$DT" >"$D"
refuse op_without_cycles "'$D' line $OP: key 'cycles'"
sed "${OP}s/\"estimated\":true/\"estimated\":1/" "$DT" >"$D"
refuse op_estimated_mistyped "'$D' line $OP: key 'estimated'"
PL=$(grep -n -m1 '"delegate_ns"' "$DT" | cut -d: -f1)
sed "${PL}s/\"delegate_ns\":[0-9]*/\"delegate_ns\":99999999999999/" "$DT" >"$D"
refuse delegate_ns_too_big "'$D' line $PL: delegate_ns 99999999999999 and host_ns"
sed "${PL}s/,\"cycles\":[0-9]*//" "$DT" >"$D"
refuse delegate_fields_together "'$D' line $PL: key 'cycles'"

# ---- a real generation: SmolLM2, 128 tokens (its speed is measured, not asserted) ------------
GGUF=$(KILN_CACHE=$HOME/.cache/kiln smollm2_gguf) # this test's own KILN_CACHE is empty
if [ -n "$GGUF" ]; then
  "$KILN" compile "$GGUF" -o "$WORK/smol.kiln" >/dev/null 2>&1 &&
    "$KILN" generate -m "$WORK/smol.kiln" -p "Once upon a time" -n 128 --temp 0 -t 1 \
      --trace "$WORK/smol.trace" --no-stats >/dev/null 2>&1
  if [ -s "$WORK/smol.trace" ]; then
    s=$(date +%s%N)
    "$KILN" inspect "$WORK/smol.trace" >"$WORK/smol.txt" 2>&1
    rc=$?
    ms=$(( ($(date +%s%N) - s) / 1000000 ))
    if [ $rc = 0 ]; then
      ok "smollm2_inspect ($(wc -l <"$WORK/smol.trace") lines in $ms ms)"
    else
      bad smollm2_inspect "exit $rc: $(head -3 "$WORK/smol.txt")"
    fi
    if grep -q "avx2 q4_1x8\|q4_1x8" "$WORK/smol.txt" || grep -q " matmul " "$WORK/smol.txt"; then
      ok smollm2_matmul_rows
    else
      bad smollm2_matmul_rows "$(head -20 "$WORK/smol.txt")"
    fi
    expect smollm2_html 0 "wrote the HTML report" -- "$KILN" inspect "$WORK/smol.trace" --html "$WORK/smol.html"
    # the page carries a window of calls, not all of them
    size=$(wc -c <"$WORK/smol.html")
    if [ "$size" -lt 2000000 ]; then ok "smollm2_html_small ($size bytes)"; else bad smollm2_html_small "$size bytes"; fi
  else
    bad smollm2_trace "generate --trace on SmolLM2 failed"
  fi
else
  skipped smollm2 "no $GGUF"
fi

finish
