/* inspect_html.c: `kiln inspect --chrome` (Chrome trace-event JSON, which
 * Perfetto and chrome://tracing load: one track, method > partition > node
 * > a delegate's ops
 * slices) and `--html` (one self-contained page: the data as JSON, an inline
 * script draws the timeline of a window of calls, time by op and backend,
 * the roofline, the memory and the tables; no network). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "inspect_trace.h"

/* ns as µs with three decimals, exactly */
static void put_us(FILE *f, uint64_t ns) {
    fprintf(f, "%llu.%03llu", (unsigned long long)(ns / 1000), (unsigned long long)(ns % 1000));
}

/* The Chrome trace and the HTML report are written whole or not at all
 * (kiln_outfile): `st` is what writing them returned. */
static kiln_status close_file(kiln_outfile *out, const char *what, kiln_status st) {
    if (st) {
        kiln_outfile_discard(out);
        return st;
    }
    if ((st = kiln_outfile_commit(out))) return kiln_error_wrap(st, "%s", what);
    return KILN_OK;
}

/* ---- Chrome trace events ------------------------------------------------------------ */

static void put_node(FILE *f, const insp_trace *t, const insp_node *n) {
    fprintf(f, ",\n{\"name\":");
    insp_json_str(f, t->str[n->name], 0);
    fprintf(f, ",\"cat\":");
    insp_json_str(f, t->str[n->op], 0);
    fprintf(f, ",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":");
    put_us(f, n->t0);
    fprintf(f, ",\"dur\":");
    put_us(f, n->t1 - n->t0);
    fprintf(f, ",\"args\":{\"op\":");
    insp_json_str(f, t->str[n->op], 0);
    fprintf(f, ",\"backend\":");
    insp_json_str(f, t->backends[n->backend], 0);
    fprintf(f, ",\"unit\":");
    insp_json_str(f, t->str[n->unit], 0);
    fprintf(f, ",\"fallback\":%s,\"node_id\":%d,\"flops\":%.17g,\"bytes\":%.17g}}",
            n->fallback ? "true" : "false", n->node_id, n->flops, n->bytes);
}

/* A delegate's op, as estimated from its cycles. */
static void put_op(FILE *f, const insp_trace *t, const insp_op *x) {
    fprintf(f, ",\n{\"name\":");
    insp_json_str(f, *t->str[x->type] ? t->str[x->type] : t->str[x->name], 0);
    fprintf(f, ",\"cat\":\"delegate op\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":");
    put_us(f, x->t0);
    fprintf(f, ",\"dur\":");
    put_us(f, x->t1 - x->t0);
    fprintf(f, ",\"args\":{\"name\":");
    insp_json_str(f, t->str[x->name], 0);
    fprintf(f, ",\"cycles\":%llu,\"estimated\":true}}", (unsigned long long)x->cycles);
}

/* node i, then its delegate ops (first[i], linked by next) */
static void put_node_ops(FILE *f, const insp_trace *t, int64_t i, const int64_t *first,
                         const int64_t *next) {
    put_node(f, t, &t->nodes[i]);
    for (int64_t k = first ? first[i] : -1; k >= 0; k = next[k])
        put_op(f, t, &t->ops[k]);
}

kiln_status insp_write_chrome(const insp_trace *t, const char *path) {
    /* each node's delegate ops, in order */
    int64_t *first = NULL, *next = NULL;
    if (t->n_ops) {
        first = malloc(sizeof *first * (size_t)t->n_nodes + 1);
        next = malloc(sizeof *next * (size_t)t->n_ops);
        if (!first || !next) {
            free(first);
            free(next);
            return kiln_error(KILN_ERR_NOMEM, "out of memory writing the Chrome trace");
        }
        for (int64_t i = 0; i < t->n_nodes; i++)
            first[i] = -1;
        for (int64_t k = t->n_ops - 1; k >= 0; k--) {
            int64_t n = t->ops[k].node_ev;
            next[k] = n >= 0 ? first[n] : -1;
            if (n >= 0) first[n] = k;
        }
    }
    kiln_outfile out;
    kiln_status st = kiln_outfile_open(&out, path);
    if (st) {
        free(first);
        free(next);
        return kiln_error_wrap(st, "the Chrome trace");
    }
    FILE *f = out.f;
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"trace\":");
    insp_json_str(f, t->path, 0);
    fprintf(f, ",\"program\":");
    insp_json_str(f, t->program, 0);
    fprintf(f, ",\"kiln\":");
    insp_json_str(f, t->kiln, 0);
    fprintf(f, "},\"traceEvents\":[\n");
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"args\":{\"name\":");
    char name[4200];
    snprintf(name, sizeof name, "kiln %s", t->program);
    insp_json_str(f, name, 0);
    fprintf(f, "}},\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"args\":{\"name\":"
               "\"session (the calling thread)\"}}");
    for (int64_t c = 0; c < t->n_calls; c++) {
        const insp_call *k = &t->calls[c];
        /* parents first, so equal start times nest as they should */
        fprintf(f, ",\n{\"name\":");
        insp_json_str(f, t->methods[k->method], 0);
        fprintf(f, ",\"cat\":\"method\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":");
        put_us(f, k->t0);
        fprintf(f, ",\"dur\":");
        put_us(f, k->t1 - k->t0);
        fprintf(f, ",\"args\":{\"call\":%lld,\"tokens\":%lld,\"ok\":%s}}", (long long)c,
                (long long)k->tokens, k->ok ? "true" : "false");
        int64_t node = k->first_node;
        for (int64_t j = k->first_part; j < k->first_part + k->n_parts; j++) {
            const insp_part *p = &t->parts[j];
            snprintf(name, sizeof name, "%s partition %d", t->backends[p->backend], p->partition);
            fprintf(f, ",\n{\"name\":");
            insp_json_str(f, name, 0);
            fprintf(f, ",\"cat\":\"partition\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":");
            put_us(f, p->t0);
            fprintf(f, ",\"dur\":");
            put_us(f, p->t1 - p->t0);
            fprintf(f, ",\"args\":{\"backend\":");
            insp_json_str(f, t->backends[p->backend], 0);
            fprintf(f, ",\"fallback\":%s,\"first_node\":%d,\"last_node\":%d",
                    p->fallback ? "true" : "false", p->first_node, p->last_node);
            if (p->host_ns) fprintf(f, ",\"host_ns\":%llu", (unsigned long long)p->host_ns);
            if (p->delegate_ns)
                fprintf(f, ",\"delegate_ns\":%llu,\"cycles\":%llu",
                        (unsigned long long)p->delegate_ns, (unsigned long long)p->cycles);
            fprintf(f, "}}");
            /* the delegate's own ops (no node's) */
            for (int64_t x = k->first_op; x < k->first_op + k->n_ops; x++)
                if (t->ops[x].node_ev < 0 && t->ops[x].partition == p->partition)
                    put_op(f, t, &t->ops[x]);
            /* its nodes: the call's nodes come in partition order */
            for (; node < k->first_node + k->n_nodes && t->nodes[node].partition == p->partition;
                 node++)
                put_node_ops(f, t, node, first, next);
        }
        /* nodes not in partition order (still inside their partitions: the
         * reader checked) */
        for (; node < k->first_node + k->n_nodes; node++)
            put_node_ops(f, t, node, first, next);
    }
    fprintf(f, "\n]}\n");
    free(first);
    free(next);
    return close_file(&out, "the Chrome trace", KILN_OK);
}

/* ---- the report's style and script (inline: the file needs no network) ---------- */

static const char CSS[] =
    "body { font: 14px/1.4 system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', "
    "sans-serif; margin: 0; background: #f4f5f7; color: #1d2330; }\n"
    "main { max-width: 1360px; margin: 0 auto; padding: 16px 24px 48px; }\n"
    "h1 { font-size: 22px; margin: 8px 0 4px; }\n"
    "h2 { font-size: 17px; margin: 0 0 8px; }\n"
    ".sub { color: #555d6e; margin: 2px 0; }\n"
    "section { background: #fff; border: 1px solid #dde1e8; border-radius: 8px; padding: 14px "
    "18px; margin: 14px 0; }\n"
    ".row2 { display: grid; grid-template-columns: 1fr 1fr; gap: 14px; }\n"
    ".row2 section { margin: 0; }\n"
    ".note { color: #555d6e; font-size: 12.5px; margin: 6px 0 0; }\n"
    ".warn { color: #9a3b00; }\n"
    "table { border-collapse: collapse; font-size: 12.5px; font-variant-numeric: tabular-nums; "
    "width: 100%; }\n"
    "th, td { padding: 3px 8px; border-bottom: 1px solid #eceef2; white-space: nowrap; }\n"
    "th { text-align: left; background: #f0f2f5; position: sticky; top: 0; font-weight: 600; }\n"
    "td.n, th.n { text-align: right; }\n"
    "tr.d0 td { background: #e8eefb; font-weight: 600; border-top: 2px solid #c5d2ee; }\n"
    "tr.d1 td { background: #f6f8fc; }\n"
    "tr.ex td { color: #6b7385; font-style: italic; }\n"
    "tr.fb td { color: #b0361e; }\n"
    ".tablebox { max-height: 640px; overflow: auto; border: 1px solid #eceef2; }\n"
    "svg text { font-family: inherit; }\n"
    ".legend { display: flex; flex-wrap: wrap; gap: 4px 14px; font-size: 12px; margin: 6px 0; }\n"
    ".legend span i { display: inline-block; width: 11px; height: 11px; border-radius: 2px; "
    "margin-right: 4px; vertical-align: -1px; }\n"
    "select { font: inherit; padding: 2px 4px; }\n";

static const char SCRIPT[] =
    "'use strict';\n"
    "const D = JSON.parse(document.getElementById('kiln-data').textContent);\n"
    "const NS = 'http://www.w3.org/2000/svg';\n"
    "function svg(tag, attrs, parent, text) {\n"
    "  const e = document.createElementNS(NS, tag);\n"
    "  for (const k in attrs) e.setAttribute(k, attrs[k]);\n"
    "  if (text !== undefined) e.textContent = text;\n"
    "  if (parent) parent.appendChild(e);\n"
    "  return e;\n"
    "}\n"
    "function h(tag, attrs, parent, text) {\n"
    "  const e = document.createElement(tag);\n"
    "  for (const k in attrs) e.setAttribute(k, attrs[k]);\n"
    "  if (text !== undefined) e.textContent = text;\n"
    "  if (parent) parent.appendChild(e);\n"
    "  return e;\n"
    "}\n"
    "function tip(e, text) { svg('title', {}, e, text); return e; }\n"
    "function fms(v) {\n"
    "  if (v === null || v === undefined) return '';\n"
    "  return v >= 100 ? v.toFixed(1) : v >= 10 ? v.toFixed(2) : v >= 1 ? v.toFixed(3) : "
    "v.toFixed(4);\n"
    "}\n"
    "function frate(v) {\n"
    "  if (v === null || v === undefined) return '';\n"
    "  return v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2);\n"
    "}\n"
    "function fbytes(v) {\n"
    "  if (v === null || v === undefined) return '';\n"
    "  if (v >= 1073741824) return (v / 1073741824).toFixed(2) + ' GiB';\n"
    "  if (v >= 1048576) return (v / 1048576).toFixed(1) + ' MiB';\n"
    "  if (v >= 1024) return (v / 1024).toFixed(1) + ' KiB';\n"
    "  return v + ' B';\n"
    "}\n"
    "function fnum(v) {\n"
    "  if (v >= 1e9) return (v / 1e9).toFixed(2) + ' G';\n"
    "  if (v >= 1e6) return (v / 1e6).toFixed(2) + ' M';\n"
    "  if (v >= 1e3) return (v / 1e3).toFixed(1) + ' k';\n"
    "  return String(v);\n"
    "}\n"
    "const PALETTE = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', "
    "'#b07aa1',\n"
    "  '#ff9da7', '#9c755f', '#8cd17d', '#86bcb6', '#d37295', '#a0cbe8', '#ffbe7d', '#499894', "
    "'#bab0ac'];\n"
    "const opTime = {};\n"
    "for (const r of D.opRows) opTime[r.op] = (opTime[r.op] || 0) + r.ms;\n"
    "const opsByTime = Object.keys(opTime).sort((a, b) => opTime[b] - opTime[a]);\n"
    "const opColor = {};\n"
    "opsByTime.forEach((op, i) => { opColor[op] = PALETTE[i % PALETTE.length]; });\n"
    "function colorOf(op) { return opColor[op] || '#999'; }\n"
    "const dopTime = {};\n"
    "for (const r of D.delegateOps) dopTime[r.op] = (dopTime[r.op] || 0) + r.ms;\n"
    "const dopsByTime = Object.keys(dopTime).sort((a, b) => dopTime[b] - dopTime[a]);\n"
    "const dopColor = {};\n"
    "dopsByTime.forEach((op, i) => { dopColor[op] = PALETTE[(i + 5) % PALETTE.length]; });\n"
    "function colorOfDop(op) { return dopColor[op || '(untyped)'] || '#999'; }\n"
    "function legend(parent, ops, color) {\n"
    "  const l = h('div', {class: 'legend'}, parent);\n"
    "  for (const op of ops) {\n"
    "    const s = h('span', {}, l);\n"
    "    h('i', {style: 'background:' + (color || colorOf)(op)}, s);\n"
    "    s.appendChild(document.createTextNode(op));\n"
    "  }\n"
    "}\n"
    "\n"
    "/* ---- header ------------------------------------------------------------------ */\n"
    "document.getElementById('title').textContent = 'kiln inspect: ' + D.trace;\n"
    "document.getElementById('summary').textContent = 'program ' + D.program + ' (kiln ' + D.kiln "
    "+\n"
    "  '), ' + D.calls + ' calls, ' + D.events + ' events, ' + fms(D.all_ms) + ' ms in method "
    "calls over ' +\n"
    "  fms(D.span_ms) + ' ms';\n"
    "{\n"
    "  const p = document.getElementById('peaks');\n"
    "  if (D.peaks) {\n"
    "    const k = D.peaks;\n"
    "    p.textContent = 'peaks: ' + k.source + ' (' + k.cpu + ', ' + k.threads + ' threads): "
    "memory read ' +\n"
    "      k.bw.toFixed(1) + ' GB/s, f32 ' + k.f32.toFixed(1) + ' GFLOP/s, int8 ' + "
    "k.i8.toFixed(1) + ' GOP/s';\n"
    "  } else {\n"
    "    p.textContent = 'peaks: none (' + D.peaks_note + '): no roofline lines, no % of peak';\n"
    "    p.className = 'sub warn';\n"
    "  }\n"
    "  const f = document.getElementById('fallback');\n"
    "  f.textContent = D.fallback.nodes ? 'fallback: ' + fms(D.fallback.ms) + ' ms in fallback ops "
    "(' +\n"
    "    D.fallback.ops.join(', ') + ': ' + D.fallback.nodes + ' node calls), ' +\n"
    "    D.fallback.pct.toFixed(1) + '% of all method time' : 'fallback: none';\n"
    "  if (D.fallback.nodes) f.className = 'sub warn';\n"
    "}\n"
    "\n"
    "/* ---- timeline ------------------------------------------------------------------ */\n"
    "function niceStep(span, n) {\n"
    "  const raw = span / n, p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;\n"
    "  return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;\n"
    "}\n"
    "function drawTimeline(a, b) {\n"
    "  const T = D.timeline, box = document.getElementById('timeline');\n"
    "  box.textContent = '';\n"
    "  const W = Math.max(box.clientWidth || 1300, 600), L = 78, w = W - L - 10;\n"
    "  const lanes = ['method', 'partition', 'node'].concat(T.ops.length ? ['delegate op'] : []);\n"
    "  const top = 22, lh = 30;\n"
    "  const s = svg('svg', {width: W, height: top + lanes.length * lh + 10, id: 'timeline-svg'}, "
    "box);\n"
    "  const x = t => L + (t - a) / (b - a) * w;\n"
    "  const step = niceStep((b - a) / 1000, 10);\n"
    "  for (let t = Math.ceil(a / 1000 / step) * step; t <= b / 1000; t += step) {\n"
    "    const X = x(t * 1000);\n"
    "    svg('line', {x1: X, x2: X, y1: top - 4, y2: top + lanes.length * lh, stroke: '#e3e6ec'}, "
    "s);\n"
    "    svg('text', {x: X, y: top - 8, 'font-size': 11, 'text-anchor': 'middle', fill: '#555'}, "
    "s,\n"
    "      +(t).toFixed(6) + ' ms');\n"
    "  }\n"
    "  lanes.forEach((n, i) => svg('text', {x: 4, y: top + i * lh + 17, 'font-size': 12, fill: "
    "'#333'}, s, n));\n"
    "  const rect = (t0, t1, lane, fill, text, stroke) => {\n"
    "    if (t1 < a || t0 > b) return;\n"
    "    const X0 = x(Math.max(t0, a)), X1 = x(Math.min(t1, b));\n"
    "    const r = svg('rect', {x: X0.toFixed(2), y: top + lane * lh + 2, width: Math.max(X1 - X0, "
    "0.6).toFixed(2),\n"
    "      height: lh - 6, fill: fill, stroke: stroke || 'none', 'stroke-width': 0.5}, s);\n"
    "    tip(r, text);\n"
    "    return r;\n"
    "  };\n"
    "  for (const c of T.calls) {\n"
    "    const r = rect(c[2], c[3], 0, c[5] ? '#c9d6ee' : '#f3b6a8',\n"
    "      D.methods[c[1]][0] + ' (call ' + c[0] + (c[4] >= 0 ? ', ' + c[4] + ' tokens' : '') + "
    "'): ' +\n"
    "      fms((c[3] - c[2]) / 1000) + ' ms' + (c[5] ? '' : ', failed'), '#7f93bd');\n"
    "    if (r && x(c[3]) - x(c[2]) > 60)\n"
    "      svg('text', {x: x(Math.max(c[2], a)) + 4, y: top + 17, 'font-size': 11, fill: '#223'}, "
    "s,\n"
    "        D.methods[c[1]][0] + ' #' + c[0]);\n"
    "  }\n"
    "  for (const p of T.parts)\n"
    "    rect(p[2], p[3], 1, p[4] ? '#e8a090' : '#d8dde8', T.backends[p[1]] + ' partition (call ' "
    "+ p[0] +\n"
    "      ', nodes ' + p[5] + '..' + p[6] + (p[4] ? ', fallback' : '') + '): ' + fms((p[3] - "
    "p[2]) / 1000) +\n"
    "      ' ms', '#98a2b8');\n"
    "  for (const n of T.nodes) {\n"
    "    const op = T.str[n[3]];\n"
    "    rect(n[0], n[1], 2, colorOf(op), T.str[n[2]] + ': ' + op + ' on ' + T.backends[n[5]] + ' "
    "(' +\n"
    "      T.str[n[4]] + (n[6] ? ', fallback' : '') + '), ' + fms((n[1] - n[0]) / 1000) + ' ms, ' "
    "+\n"
    "      fnum(n[7]) + 'flop, ' + fnum(n[8]) + 'B', n[6] ? '#b0361e' : undefined);\n"
    "  }\n"
    "  for (const o of T.ops)\n"
    "    rect(o[0], o[1], 3, colorOfDop(T.str[o[3]]), T.str[o[2]] + ': ' + (T.str[o[3]] || "
    "'(untyped)') +\n"
    "      ', ' + o[4] + ' cycles, ' + fms((o[1] - o[0]) / 1000) + ' ms (estimated from its "
    "cycles)');\n"
    "}\n"
    "{\n"
    "  const T = D.timeline, sel = document.getElementById('timeline-window');\n"
    "  const ops = [];\n"
    "  for (const n of T.nodes) { const op = T.str[n[3]]; if (!ops.includes(op)) ops.push(op); }\n"
    "  ops.sort((p, q) => opsByTime.indexOf(p) - opsByTime.indexOf(q));\n"
    "  legend(document.getElementById('timeline-legend'), ops);\n"
    "  if (T.ops.length) /* the delegate op lane's types */\n"
    "    legend(document.getElementById('timeline-legend'), dopsByTime, colorOfDop);\n"
    "  if (T.calls.length) {\n"
    "    const a = T.calls[0][2], b = T.calls[T.calls.length - 1][3];\n"
    "    h('option', {value: 'all'}, sel, 'calls ' + T.calls[0][0] + '..' + T.calls[T.calls.length "
    "- 1][0] +\n"
    "      ' (the whole window)');\n"
    "    T.calls.forEach((c, i) => h('option', {value: i}, sel, 'call ' + c[0] + ': ' + "
    "D.methods[c[1]][0] +\n"
    "      ', ' + fms((c[3] - c[2]) / 1000) + ' ms'));\n"
    "    sel.onchange = () => {\n"
    "      if (sel.value === 'all') drawTimeline(a, b);\n"
    "      else { const c = T.calls[+sel.value]; drawTimeline(c[2], c[3]); }\n"
    "    };\n"
    "    const first = T.calls[0];\n"
    "    sel.value = T.calls.length > 1 ? 'all' : '0';\n"
    "    drawTimeline(sel.value === 'all' ? a : first[2], sel.value === 'all' ? b : first[3]);\n"
    "  }\n"
    "  document.getElementById('timeline-note').textContent = T.note;\n"
    "}\n"
    "\n"
    "/* ---- bars ------------------------------------------------------------------------ */\n"
    "function bars(id, items, total) {\n"
    "  const box = document.getElementById(id);\n"
    "  const W = Math.max(box.clientWidth || 640, 400), lw = 150, rw = 130, bh = 20;\n"
    "  const s = svg('svg', {width: W, height: items.length * (bh + 6) + 4}, box);\n"
    "  const max = Math.max(...items.map(i => i.ms), 1e-9);\n"
    "  items.forEach((it, k) => {\n"
    "    const y = k * (bh + 6) + 2, bw = (W - lw - rw) * it.ms / max;\n"
    "    svg('text', {x: lw - 6, y: y + 15, 'text-anchor': 'end', 'font-size': 12}, s, it.name);\n"
    "    tip(svg('rect', {x: lw, y: y, width: Math.max(bw, 1), height: bh, fill: it.color, rx: 2}, "
    "s),\n"
    "      it.name + ': ' + fms(it.ms) + ' ms');\n"
    "    svg('text', {x: lw + bw + 6, y: y + 15, 'font-size': 12, fill: '#333'}, s,\n"
    "      fms(it.ms) + ' ms (' + (100 * it.ms / total).toFixed(1) + '%)');\n"
    "  });\n"
    "}\n"
    "bars('by-op', opsByTime.map(op => ({name: op, ms: opTime[op], color: colorOf(op)})), "
    "D.all_ms);\n"
    "bars('by-backend', D.backends.map(b => ({name: b.name + (b.fallback ? ' (fallback)' : ''), "
    "ms: b.ms,\n"
    "  color: b.fallback ? '#e15759' : '#4e79a7'})).concat([{name: '(executor)', ms: "
    "D.executor_ms,\n"
    "  color: '#bab0ac'}]), D.all_ms);\n"
    "if (D.delegateOps.length) {\n"
    "  /* each delegate's share: its ops' time against its partitions' time */\n"
    "  const part = {};\n"
    "  for (const b of D.backends) part[b.name] = b.ms;\n"
    "  const names = [...new Set(D.delegateOps.map(r => r.backend))];\n"
    "  const tot = names.reduce((a, n) => a + (part[n] || 0), 0);\n"
    "  bars('by-delegate-op', dopsByTime.map(op => ({name: op, ms: dopTime[op], color: "
    "colorOfDop(op)})),\n"
    "    tot || D.all_ms);\n"
    "  document.getElementById('delegate-note').textContent = 'ops inside the ' + names.join(', ') "
    "+\n"
    "    ' partitions (' + fms(tot) + ' ms, ' + (100 * tot / D.all_ms).toFixed(1) + '% of all "
    "method time), by ' +\n"
    "    'op type over every method, as shares of those partitions; durations apportion the "
    "delegate' +\n"
    "    String.fromCharCode(39) + 's own execute time by cycles (estimated; an emulator models "
    "its cycles)';\n"
    "} else document.getElementById('delegate-section').style.display = 'none';\n"
    "\n"
    "/* ---- roofline ------------------------------------------------------------------ */\n"
    "{\n"
    "  const box = document.getElementById('roofline');\n"
    "  const pts = [], skipped = [];\n"
    "  for (const r of D.opRows) {\n"
    "    const label = r.op + ' (' + D.methods[r.m][0] + ')';\n"
    "    if (r.flops > 0 && r.bytes > 0 && r.ms > 0)\n"
    "      pts.push({x: r.flops / r.bytes, y: r.flops / (r.ms * 1e6), r: r, label: label});\n"
    "    else skipped.push(label + (r.flops > 0 ? '' : ': no flops'));\n"
    "  }\n"
    "  const P = D.peaks;\n"
    "  const xs = pts.map(p => p.x), ys = pts.map(p => p.y);\n"
    "  if (P) { xs.push(P.f32 / P.bw, P.i8 / P.bw); ys.push(P.f32, P.i8); }\n"
    "  if (!xs.length) { xs.push(1); ys.push(1); }\n"
    "  const lx0 = Math.floor(Math.log10(Math.min(...xs) / 1.5)), lx1 = "
    "Math.ceil(Math.log10(Math.max(...xs) * 1.5));\n"
    "  const ly0 = Math.floor(Math.log10(Math.min(...ys) / 1.5)), ly1 = "
    "Math.ceil(Math.log10(Math.max(...ys) * 1.5));\n"
    "  const W = Math.max(box.clientWidth || 900, 500), H = 470, ml = 70, mr = 20, mt = 14, mb = "
    "48;\n"
    "  const pw = W - ml - mr, ph = H - mt - mb;\n"
    "  const X = v => ml + (Math.log10(v) - lx0) / (lx1 - lx0) * pw;\n"
    "  const Y = v => mt + ph - (Math.log10(v) - ly0) / (ly1 - ly0) * ph;\n"
    "  const s = svg('svg', {width: W, height: H, id: 'roofline-svg'}, box);\n"
    "  const tickText = e => { const v = Math.pow(10, e); return e >= 0 ? String(v) : "
    "v.toFixed(-e); };\n"
    "  for (let e = lx0; e <= lx1; e++) {\n"
    "    svg('line', {x1: X(Math.pow(10, e)), x2: X(Math.pow(10, e)), y1: mt, y2: mt + ph, stroke: "
    "'#e3e6ec'}, s);\n"
    "    svg('text', {x: X(Math.pow(10, e)), y: mt + ph + 16, 'font-size': 11, 'text-anchor': "
    "'middle'}, s, tickText(e));\n"
    "  }\n"
    "  for (let e = ly0; e <= ly1; e++) {\n"
    "    svg('line', {x1: ml, x2: ml + pw, y1: Y(Math.pow(10, e)), y2: Y(Math.pow(10, e)), stroke: "
    "'#e3e6ec'}, s);\n"
    "    svg('text', {x: ml - 6, y: Y(Math.pow(10, e)) + 4, 'font-size': 11, 'text-anchor': "
    "'end'}, s, tickText(e));\n"
    "  }\n"
    "  svg('rect', {x: ml, y: mt, width: pw, height: ph, fill: 'none', stroke: '#98a2b8'}, s);\n"
    "  svg('text', {x: ml + pw / 2, y: H - 8, 'text-anchor': 'middle', 'font-size': 12}, s,\n"
    "    'arithmetic intensity (flop per byte)');\n"
    "  svg('text', {x: 14, y: mt + ph / 2, 'text-anchor': 'middle', 'font-size': 12,\n"
    "    transform: 'rotate(-90 14 ' + (mt + ph / 2) + ')'}, s, 'GFLOP/s achieved');\n"
    "  const defs = svg('defs', {}, s);\n"
    "  const cp = svg('clipPath', {id: 'plot-clip'}, defs);\n"
    "  svg('rect', {x: ml, y: mt, width: pw, height: ph}, cp);\n"
    "  const g = svg('g', {'clip-path': 'url(#plot-clip)'}, s);\n"
    "  if (P) {\n"
    "    const xlo = Math.pow(10, lx0), xhi = Math.pow(10, lx1);\n"
    "    [[P.i8, '#59a14f', 'int8 peak'], [P.f32, '#4e79a7', 'f32 peak']].forEach(([pk, col, "
    "name]) => {\n"
    "      const ridge = pk / P.bw;\n"
    "      svg('path', {d: 'M' + X(xlo) + ',' + Y(P.bw * xlo) + ' L' + X(ridge) + ',' + Y(pk) + ' "
    "L' + X(xhi) +\n"
    "        ',' + Y(pk), fill: 'none', stroke: col, 'stroke-width': 2}, g);\n"
    "      /* the higher roof's label above its line, the lower's below */\n"
    "      const above = pk >= Math.max(P.i8, P.f32);\n"
    "      svg('text', {x: ml + pw - 6, y: Y(pk) + (above ? -6 : 15), 'text-anchor': 'end', "
    "'font-size': 11,\n"
    "        fill: col}, s, name + ' ' + pk.toFixed(1) + (name[0] === 'i' ? ' GOP/s' : ' GFLOP/s') "
    "+\n"
    "        ', ridge ' + ridge.toFixed(1) + ' flop/B');\n"
    "    });\n"
    "    const xm = Math.pow(10, lx0 + 0.25 * (lx1 - lx0));\n"
    "    svg('text', {x: X(xm), y: Y(P.bw * xm) - 8, 'font-size': 11, fill: '#a05a00',\n"
    "      transform: 'rotate(' + (-Math.atan2((ph / (ly1 - ly0)), (pw / (lx1 - lx0))) * 180 / "
    "Math.PI).toFixed(1) +\n"
    "      ' ' + X(xm) + ' ' + (Y(P.bw * xm) - 8) + ')'}, g, 'memory ' + P.bw.toFixed(1) + ' "
    "GB/s');\n"
    "  }\n"
    "  const pg = svg('g', {id: 'roof-points'}, s);\n"
    "  const shape = (m, cx, cy, col) => {\n"
    "    if (m % 3 === 0) return svg('circle', {cx: cx, cy: cy, r: 6, fill: col, stroke: '#222', "
    "'stroke-width': 0.7}, pg);\n"
    "    if (m % 3 === 1) return svg('rect', {x: cx - 5.5, y: cy - 5.5, width: 11, height: 11, "
    "fill: col, stroke: '#222', 'stroke-width': 0.7}, pg);\n"
    "    return svg('path', {d: 'M' + cx + ',' + (cy - 7) + ' l6.5,11 l-13,0 z', fill: col, "
    "stroke: '#222', 'stroke-width': 0.7}, pg);\n"
    "  };\n"
    "  /* labels: the most time first, each where it overlaps no earlier one (else none) */\n"
    "  const placed = [];\n"
    "  const free = (x0, y0, x1, y1) => !placed.some(b => x0 < b[2] && b[0] < x1 && y0 < b[3] && "
    "b[1] < y1);\n"
    "  pts.sort((p, q) => q.r.ms - p.r.ms);\n"
    "  for (const p of pts) placed.push([X(p.x) - 7, Y(p.y) - 7, X(p.x) + 7, Y(p.y) + 7]);\n"
    "  for (const p of pts) {\n"
    "    const r = p.r, cx = X(p.x), cy = Y(p.y);\n"
    "    tip(shape(r.m, cx, cy, colorOf(r.op)), p.label + ' on ' + r.backend + ', ' + r.unit + ': "
    "' +\n"
    "      p.x.toFixed(2) + ' flop/B, ' + p.y.toFixed(2) + ' GFLOP/s, ' + (r.bytes / (r.ms * "
    "1e6)).toFixed(2) +\n"
    "      ' GB/s, ' + fms(r.ms) + ' ms in ' + r.calls + ' calls' + (r.pct !== null ? ', ' + "
    "r.pct.toFixed(1) +\n"
    "      '% of the ' + r.bound + ' peak' : ''));\n"
    "    const tw = p.label.length * 5.6 + 4;\n"
    "    for (const [dx, dy] of [[9, 4], [9, 15], [9, -7], [-9 - tw, 4], [9, 26], [9, -18]]) {\n"
    "      const x0 = cx + dx, y0 = cy + dy - 9;\n"
    "      if (x0 + tw > ml + pw || !free(x0, y0, x0 + tw, y0 + 11)) continue;\n"
    "      placed.push([x0, y0, x0 + tw, y0 + 11]);\n"
    "      svg('text', {x: x0, y: cy + dy, 'font-size': 10.5, fill: '#333'}, pg, p.label);\n"
    "      break;\n"
    "    }\n"
    "  }\n"
    "  const lg = document.getElementById('roofline-legend');\n"
    "  legend(lg, [...new Set(pts.map(p => p.r.op))]);\n"
    "  const shapes = ['circle', 'square', 'triangle'];\n"
    "  h('div', {class: 'note'}, lg, 'markers: ' + D.methods.map((m, i) => m[0] + ' ' + shapes[i % "
    "3]).join(', ') +\n"
    "    '; one point per method, op and compute unit (time-weighted aggregate of its calls)' +\n"
    "    (skipped.length ? '; not plotted: ' + skipped.join(', ') : ''));\n"
    "}\n"
    "\n"
    "/* ---- memory ------------------------------------------------------------------------ */\n"
    "{\n"
    "  const M = D.memory, items = [\n"
    "    ['weights (file)', M.weights_file_bytes, '#4e79a7'], ['weights resident', "
    "M.weights_resident_bytes, '#a0cbe8'],\n"
    "    ['KV state allocated', M.state_bytes, '#f28e2b'],\n"
    "    ['KV state used' + (M.state_positions !== null ? ' (' + M.state_positions + ' positions)' "
    ": ''),\n"
    "      M.state_used_bytes, '#ffbe7d'],\n"
    "    ['activation arena', M.arena_bytes, '#59a14f'], ['input slots', M.input_bytes, "
    "'#76b7b2'],\n"
    "    ['peak RSS', M.peak_rss_bytes, '#b07aa1']].filter(i => i[1] !== null);\n"
    "  const box = document.getElementById('memory');\n"
    "  const W = Math.max(box.clientWidth || 640, 400), lw = 190, rw = 110, bh = 20;\n"
    "  const s = svg('svg', {width: W, height: items.length * (bh + 6) + 4}, box);\n"
    "  const max = Math.max(...items.map(i => i[1]), 1);\n"
    "  items.forEach((it, k) => {\n"
    "    const y = k * (bh + 6) + 2, bw = (W - lw - rw) * it[1] / max;\n"
    "    svg('text', {x: lw - 6, y: y + 15, 'text-anchor': 'end', 'font-size': 12}, s, it[0]);\n"
    "    tip(svg('rect', {x: lw, y: y, width: Math.max(bw, 1), height: bh, fill: it[2], rx: 2}, "
    "s), it[1] + ' bytes');\n"
    "    svg('text', {x: lw + bw + 6, y: y + 15, 'font-size': 12}, s, fbytes(it[1]));\n"
    "  });\n"
    "  h('div', {class: 'note'}, box, 'mapped file: ' + fbytes(M.weights_mapped_bytes) +\n"
    "    ' (weights are used in place from the mapping; resident = weight pages in RAM when the "
    "trace was written)');\n"
    "}\n"
    "\n"
    "/* ---- tables ------------------------------------------------------------------------- */\n"
    "function table(id, head, numeric, rows, rowClass) {\n"
    "  const box = document.getElementById(id), t = h('table', {}, box), tr = h('tr', {}, "
    "h('thead', {}, t));\n"
    "  head.forEach((c, i) => h('th', numeric[i] ? {class: 'n'} : {}, tr, c));\n"
    "  const tb = h('tbody', {}, t);\n"
    "  rows.forEach((r, k) => {\n"
    "    const row = h('tr', rowClass ? {class: rowClass(k)} : {}, tb);\n"
    "    r.forEach((c, i) => h('td', numeric[i] ? {class: 'n'} : {}, row, c === null ? '' : c));\n"
    "  });\n"
    "}\n"
    "table('methods-table', ['method', 'calls', 'failed', 'tokens', 'p10 ms', 'p50 ms', 'p90 ms', "
    "'avg ms',\n"
    "  'min ms', 'max ms', 'total ms', '% of all', 'GFLOP/s', 'GB/s'],\n"
    "  [0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],\n"
    "  D.methods.map(m => [m[0], m[1], m[2], m[3] === null ? '-' : m[3], fms(m[4]), fms(m[5]), "
    "fms(m[6]), fms(m[7]),\n"
    "    fms(m[8]), fms(m[9]), fms(m[10]), m[11].toFixed(1), frate(m[12]), frate(m[13])]));\n"
    "document.getElementById('rows-title').textContent = 'Breakdown by ' + D.by +\n"
    "  ': method > backend (its partitions) > ' + (D.by === 'node' ? 'node' : 'op and unit');\n"
    "table('rows-table', ['name', 'kind', 'op', 'backend', 'unit', 'fallback', 'calls', 'p50 ms', "
    "'avg ms',\n"
    "  'total ms', '% parent', 'GFLOP/s', 'GB/s', 'bound', '% peak'],\n"
    "  [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1],\n"
    "  D.rows.map(r => [String.fromCharCode(160).repeat(4 * r[0]) + r[1], r[2], r[3], r[4], r[5],\n"
    "    r[6] === null ? '' : r[6] ? 'yes' : 'no', r[7], fms(r[8]), fms(r[9]), fms(r[10]), "
    "r[11].toFixed(1),\n"
    "    frate(r[12]), frate(r[13]), r[14], r[15] === null ? '' : r[15].toFixed(1)]),\n"
    "  k => 'd' + D.rows[k][0] + (D.rows[k][2] === 'executor' || D.rows[k][2] === 'rest' ? ' ex' : "
    "'') +\n"
    "    (D.rows[k][6] ? ' fb' : ''));\n"
    "document.body.setAttribute('data-rendered', 'yes');\n";

/* ---- HTML ------------------------------------------------------------------------------ */

/* the timeline's window: from the first prefill (else the first call), a few
 * calls, bounded in nodes so the page stays light */
#define WINDOW_CALLS 8
#define WINDOW_NODES 6000

static void jnum(FILE *f, double v) {
    if (isfinite(v))
        fprintf(f, "%.9g", v);
    else
        fputs("null", f);
}

static void html_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else if (*s == '"')
            fputs("&quot;", f);
        else
            fputc(*s, f);
    }
}

/* Method index in the trace -> its index in r->methods (methods with calls). */
static int stat_index(const insp_report *r, int method) {
    for (int i = 0; i < r->n_methods; i++)
        if (r->methods[i].method == method) return i;
    return 0;
}

static kiln_status write_timeline(FILE *f, const insp_report *r) {
    const insp_trace *t = r->t;
    int64_t first = 0;
    for (int64_t c = 0; c < t->n_calls; c++)
        if (!strcmp(t->methods[t->calls[c].method], "prefill")) {
            first = c;
            break;
        }
    int64_t last = first, nodes = 0;
    for (int64_t c = first; c < t->n_calls && c < first + WINDOW_CALLS; c++) {
        if (c > first && nodes + t->calls[c].n_nodes > WINDOW_NODES) break;
        nodes += t->calls[c].n_nodes;
        last = c;
    }
    /* strings of the window's nodes, renumbered */
    int32_t *id = malloc(sizeof *id * (size_t)(t->n_str + 1));
    if (!id) return kiln_error(KILN_ERR_NOMEM, "out of memory writing the HTML report");
    for (int i = 0; i < t->n_str; i++)
        id[i] = -1;
    int32_t n_ids = 0;
    fprintf(f, "\"timeline\":{\"str\":[");
    if (t->n_calls)
        for (int64_t i = t->calls[first].first_node;
             i < t->calls[last].first_node + t->calls[last].n_nodes; i++) {
            const insp_node *n = &t->nodes[i];
            int32_t s[3] = {n->name, n->op, n->unit};
            for (int k = 0; k < 3; k++)
                if (id[s[k]] < 0) {
                    fputs(n_ids ? "," : "", f);
                    insp_json_str(f, t->str[s[k]], 1);
                    id[s[k]] = n_ids++;
                }
        }
    for (int64_t c = first; t->n_calls && c <= last; c++) /* and of its delegate ops */
        for (int64_t x = t->calls[c].first_op; x < t->calls[c].first_op + t->calls[c].n_ops; x++) {
            int32_t s[2] = {t->ops[x].name, t->ops[x].type};
            for (int k = 0; k < 2; k++)
                if (id[s[k]] < 0) {
                    fputs(n_ids ? "," : "", f);
                    insp_json_str(f, t->str[s[k]], 1);
                    id[s[k]] = n_ids++;
                }
        }
    fprintf(f, "],\"backends\":[");
    for (int b = 0; b < t->n_backends; b++) {
        fputs(b ? "," : "", f);
        insp_json_str(f, t->backends[b], 1);
    }
    uint64_t origin = t->n_calls ? t->calls[first].t0 : 0;
    /* [call, method, t0, t1, tokens, ok], µs from the window's start */
    fprintf(f, "],\n\"calls\":[");
    for (int64_t c = first; t->n_calls && c <= last; c++) {
        const insp_call *k = &t->calls[c];
        fprintf(f, "%s[%lld,%d,%.3f,%.3f,%lld,%d]", c > first ? "," : "", (long long)c,
                stat_index(r, k->method), (double)(k->t0 - origin) / 1e3,
                (double)(k->t1 - origin) / 1e3, (long long)k->tokens, k->ok);
    }
    /* [call, backend, t0, t1, fallback, first_node, last_node] */
    fprintf(f, "],\n\"parts\":[");
    int any = 0;
    for (int64_t c = first; t->n_calls && c <= last; c++)
        for (int64_t j = t->calls[c].first_part; j < t->calls[c].first_part + t->calls[c].n_parts;
             j++) {
            const insp_part *p = &t->parts[j];
            fprintf(f, "%s[%lld,%d,%.3f,%.3f,%d,%d,%d]", any++ ? "," : "", (long long)c, p->backend,
                    (double)(p->t0 - origin) / 1e3, (double)(p->t1 - origin) / 1e3, p->fallback,
                    p->first_node, p->last_node);
        }
    /* [t0, t1, name, op, unit, backend, fallback, flops, bytes] */
    fprintf(f, "],\n\"nodes\":[");
    any = 0;
    if (t->n_calls)
        for (int64_t i = t->calls[first].first_node;
             i < t->calls[last].first_node + t->calls[last].n_nodes; i++) {
            const insp_node *n = &t->nodes[i];
            fprintf(f, "%s[%.3f,%.3f,%d,%d,%d,%d,%d,%.6g,%.6g]", any++ ? ",\n" : "",
                    (double)(n->t0 - origin) / 1e3, (double)(n->t1 - origin) / 1e3, id[n->name],
                    id[n->op], id[n->unit], n->backend, n->fallback, n->flops, n->bytes);
        }
    /* [t0, t1, name, type, cycles]: a delegate's ops, times estimated from cycles */
    fprintf(f, "],\n\"ops\":[");
    any = 0;
    for (int64_t c = first; t->n_calls && c <= last; c++)
        for (int64_t x = t->calls[c].first_op; x < t->calls[c].first_op + t->calls[c].n_ops; x++) {
            const insp_op *o = &t->ops[x];
            fprintf(f, "%s[%.3f,%.3f,%d,%d,%llu]", any++ ? ",\n" : "",
                    (double)(o->t0 - origin) / 1e3, (double)(o->t1 - origin) / 1e3, id[o->name],
                    id[o->type], (unsigned long long)o->cycles);
        }
    char note[300];
    if (t->n_calls)
        snprintf(note, sizeof note,
                 "calls %lld..%lld of %lld (%lld nodes): the first prefill and the calls after "
                 "it; hover a slice for its figures, pick a call to zoom",
                 (long long)first, (long long)last, (long long)t->n_calls, (long long)nodes);
    else
        snprintf(note, sizeof note, "the trace holds no calls");
    fprintf(f, "],\"note\":");
    insp_json_str(f, note, 1);
    fprintf(f, "}");
    free(id);
    return KILN_OK;
}

/* The data's head: what the trace is, and the peaks. */
static void data_head(FILE *f, const insp_report *r) {
    const insp_trace *t = r->t;
    const char *by[] = {"op", "node", "backend", "method"};
    uint64_t span = t->n_calls ? t->calls[t->n_calls - 1].t1 - t->calls[0].t0 : 0;
    fprintf(f, "{\"trace\":");
    insp_json_str(f, t->path, 1);
    fprintf(f, ",\"program\":");
    insp_json_str(f, t->program, 1);
    fprintf(f, ",\"kiln\":");
    insp_json_str(f, t->kiln, 1);
    fprintf(f, ",\"calls\":%lld,\"events\":%lld,\"by\":\"%s\",\"all_ms\":", (long long)t->n_calls,
            (long long)t->n_events, by[r->by]);
    jnum(f, r->all_ms);
    fprintf(f, ",\"span_ms\":");
    jnum(f, insp_ms(span));
    const insp_peaks *pk = r->peaks;
    fprintf(f, ",\n\"peaks\":");
    if (pk->have) {
        fprintf(f, "{\"source\":");
        insp_json_str(f, pk->source, 1);
        fprintf(f, ",\"cpu\":");
        insp_json_str(f, pk->m.cpu_model, 1);
        fprintf(f, ",\"threads\":%d,\"bw\":", pk->r->n_threads);
        jnum(f, pk->r->mem_read_gbps);
        fprintf(f, ",\"f32\":");
        jnum(f, pk->r->f32_gflops);
        fprintf(f, ",\"i8\":");
        jnum(f, pk->r->i8_gops);
        fprintf(f, "}");
    } else {
        fprintf(f, "null,\"peaks_note\":");
        insp_json_str(f, pk->source, 1);
    }
}

/* methods: [name, calls, failed, tokens, p10, p50, p90, avg, min, max, total,
 * %, GFLOP/s, GB/s] */
static void data_methods(FILE *f, const insp_report *r) {
    const insp_trace *t = r->t;
    fprintf(f, ",\n\"methods\":[");
    for (int i = 0; i < r->n_methods; i++) {
        const insp_method_stat *s = &r->methods[i];
        fprintf(f, "%s[", i ? "," : "");
        insp_json_str(f, t->methods[s->method], 1);
        fprintf(f, ",%lld,%lld,", (long long)s->calls, (long long)s->failed);
        if (s->tokens >= 0)
            fprintf(f, "%lld", (long long)s->tokens);
        else
            fputs("null", f);
        double v[10] = {s->p10,
                        s->p50,
                        s->p90,
                        s->avg,
                        s->min,
                        s->max,
                        s->total,
                        r->all_ms > 0 ? 100 * s->total / r->all_ms : 0,
                        s->total > 0 ? s->flops / (s->total * 1e6) : NAN,
                        s->total > 0 ? s->bytes / (s->total * 1e6) : NAN};
        for (int k = 0; k < 10; k++) {
            fputc(',', f);
            jnum(f, v[k]);
        }
        fputc(']', f);
    }
    fputc(']', f);
}

/* rows: [depth, name, kind, op, backend, unit, fallback, calls, p50, avg,
 * total, %, GFLOP/s, GB/s, bound, % peak] */
static void data_rows(FILE *f, const insp_report *r) {
    const insp_trace *t = r->t;
    const insp_peaks *pk = r->peaks;
    fprintf(f, ",\n\"rows\":[");
    for (int64_t i = 0; i < r->n_rows; i++) {
        const insp_row *w = &r->rows[i];
        insp_roof rf;
        int k = insp_row_roof(w, pk, &rf);
        fprintf(f, "%s[%d,", i ? ",\n" : "", w->depth);
        insp_json_str(f, w->name, 1);
        fprintf(f, ",\"%s\",", insp_kind_name(w->kind));
        insp_json_str(f, w->op ? w->op : "", 1);
        fputc(',', f);
        insp_json_str(f, w->backend >= 0 ? t->backends[w->backend] : "", 1);
        fputc(',', f);
        insp_json_str(f, w->unit ? w->unit : "", 1);
        fprintf(f, ",%s,", w->fallback < 0 ? "null" : w->fallback ? "true" : "false");
        if (w->kind == ROW_EXECUTOR)
            fputs("null", f);
        else
            fprintf(f, "%lld", (long long)w->calls);
        double v[5] = {w->p50, w->avg, w->total, w->pct, k >= 1 ? rf.gflops : NAN};
        for (int j = 0; j < 5; j++) {
            fputc(',', f);
            jnum(f, v[j]);
        }
        fputc(',', f);
        jnum(f, k >= 1 ? rf.gbps : NAN);
        fprintf(f, ",\"%s\",", k == 2 ? rf.memory_bound ? "memory" : "compute" : "");
        jnum(f, k == 2 ? rf.pct : NAN);
        fputc(']', f);
    }
    fputc(']', f);
}

/* The op aggregates (roofline, time by op) and the backends, from the
 * by-op rows. */
static void data_ops(FILE *f, const insp_report *r, const insp_report *by_op) {
    const insp_trace *t = r->t;
    const insp_peaks *pk = r->peaks;
    fprintf(f, ",\n\"opRows\":[");
    int any = 0;
    double parts[256] = {0}, executor = 0;
    int fb[256] = {0};
    for (int64_t i = 0; i < by_op->n_rows; i++) {
        const insp_row *w = &by_op->rows[i];
        if (w->kind == ROW_PARTITION && w->backend >= 0 && w->backend < 256) {
            parts[w->backend] += w->total;
            fb[w->backend] = w->fallback > 0;
        }
        if (w->kind == ROW_EXECUTOR && w->depth == 1) executor += w->total;
        if (w->kind != ROW_OP) continue;
        insp_roof rf;
        int k = insp_row_roof(w, pk, &rf);
        fprintf(f, "%s{\"m\":%d,\"op\":", any++ ? ",\n" : "", stat_index(r, w->method));
        insp_json_str(f, w->op, 1);
        fprintf(f, ",\"unit\":");
        insp_json_str(f, w->unit, 1);
        fprintf(f, ",\"backend\":");
        insp_json_str(f, t->backends[w->backend], 1);
        fprintf(f, ",\"fb\":%d,\"calls\":%lld,\"ms\":", w->fallback > 0, (long long)w->calls);
        jnum(f, w->total);
        fprintf(f, ",\"flops\":");
        jnum(f, w->flops);
        fprintf(f, ",\"bytes\":");
        jnum(f, w->bytes);
        fprintf(f, ",\"pct\":");
        jnum(f, k == 2 ? rf.pct : NAN);
        fprintf(f, ",\"bound\":\"%s\"}", k == 2 ? rf.memory_bound ? "memory" : "compute" : "");
    }
    /* a delegate's ops by type over every method: {backend, op, calls, ms} */
    fprintf(f, "],\n\"delegateOps\":[");
    any = 0;
    for (int64_t i = 0; i < by_op->n_rows; i++) {
        const insp_row *w = &by_op->rows[i];
        if (w->kind != ROW_DELEGATE_OP) continue;
        fprintf(f, "%s{\"backend\":", any++ ? ",\n" : "");
        insp_json_str(f, w->backend >= 0 ? t->backends[w->backend] : "", 1);
        fprintf(f, ",\"op\":");
        insp_json_str(f, w->name, 1);
        fprintf(f, ",\"calls\":%lld,\"ms\":", (long long)w->calls);
        jnum(f, w->total);
        fputc('}', f);
    }
    fprintf(f, "],\n\"backends\":[");
    any = 0;
    for (int b = 0; b < t->n_backends && b < 256; b++) {
        if (!(parts[b] > 0)) continue;
        fprintf(f, "%s{\"name\":", any++ ? "," : "");
        insp_json_str(f, t->backends[b], 1);
        fprintf(f, ",\"fallback\":%d,\"ms\":", fb[b]);
        jnum(f, parts[b]);
        fputc('}', f);
    }
    fprintf(f, "],\"executor_ms\":");
    jnum(f, executor);
}

/* The fallback and the memory. */
static void data_tail(FILE *f, const insp_report *r) {
    const insp_trace *t = r->t;
    fprintf(f, ",\n\"fallback\":{\"ms\":");
    jnum(f, r->fallback_ms);
    fprintf(f, ",\"pct\":");
    jnum(f, r->all_ms > 0 ? 100 * r->fallback_ms / r->all_ms : 0);
    fprintf(f, ",\"nodes\":%lld,\"ops\":[", (long long)r->fallback_nodes);
    for (const char *p = r->fallback_ops; *p;) {
        const char *e = strstr(p, ", ");
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char op[256];
        snprintf(op, sizeof op, "%.*s", (int)(n < 255 ? n : 255), p);
        fputs(p > r->fallback_ops ? "," : "", f);
        insp_json_str(f, op, 1);
        p += n + (e ? 2 : 0);
    }
    const insp_memory *m = &t->mem;
    fprintf(f,
            "]},\n\"memory\":{\"weights_file_bytes\":%lld,\"weights_mapped_bytes\":%lld,"
            "\"weights_resident_bytes\":%lld,\"state_bytes\":%lld,",
            (long long)m->weights_file, (long long)m->weights_mapped,
            (long long)m->weights_resident, (long long)m->state);
    if (m->has_used)
        fprintf(f, "\"state_used_bytes\":%lld,\"state_positions\":%lld,", (long long)m->state_used,
                (long long)m->state_positions);
    else
        fprintf(f, "\"state_used_bytes\":null,\"state_positions\":null,");
    fprintf(f, "\"arena_bytes\":%lld,\"input_bytes\":%lld,\"peak_rss_bytes\":%lld},\n",
            (long long)m->arena, (long long)m->input, (long long)m->peak_rss);
}

/* The report as one JSON object for the page's script (its last member
 * followed by ",\n": the page adds more). */
static void write_data(FILE *f, const insp_report *r, const insp_report *by_op) {
    data_head(f, r);
    data_methods(f, r);
    data_rows(f, r);
    data_ops(f, r, by_op);
    data_tail(f, r);
}

kiln_status insp_write_html(const insp_report *r, const insp_report *by_op, const char *path) {
    kiln_outfile out;
    kiln_status st = kiln_outfile_open(&out, path);
    if (st) return kiln_error_wrap(st, "the HTML report");
    FILE *f = out.f;
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>kiln "
          "inspect: ",
          f);
    html_text(f, r->t->path);
    fprintf(f, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<main>\n", CSS);
    fputs("<h1 id=\"title\"></h1>\n<p class=\"sub\" id=\"summary\"></p>\n"
          "<p class=\"sub\" id=\"peaks\"></p>\n<p class=\"sub\" id=\"fallback\"></p>\n"
          "<noscript><p class=\"warn\">This report draws itself with JavaScript; the data is "
          "in the kiln-data script element.</p></noscript>\n"
          "<section><h2>Timeline</h2><div>window: <select id=\"timeline-window\"></select></div>"
          "<div id=\"timeline-legend\"></div><div id=\"timeline\"></div>"
          "<p class=\"note\" id=\"timeline-note\"></p></section>\n"
          "<div class=\"row2\"><section><h2>Time by op</h2><div id=\"by-op\"></div>"
          "<p class=\"note\">all methods, all backends; share of all method time</p></section>\n"
          "<section><h2>Time by backend</h2><div id=\"by-backend\"></div>"
          "<p class=\"note\">partitions of each backend; (executor): the method calls' time "
          "outside partitions</p></section></div>\n"
          "<section id=\"delegate-section\"><h2>Delegate time by op</h2>"
          "<div id=\"by-delegate-op\"></div><p class=\"note\" id=\"delegate-note\"></p></section>\n"
          "<section><h2>Roofline</h2><div id=\"roofline\"></div><div id=\"roofline-legend\">"
          "</div></section>\n"
          "<section><h2>Memory</h2><div id=\"memory\"></div></section>\n"
          "<section><h2>Methods</h2><div class=\"tablebox\" id=\"methods-table\"></div>"
          "</section>\n"
          "<section><h2 id=\"rows-title\"></h2><div class=\"tablebox\" id=\"rows-table\"></div>"
          "<p class=\"note\">% parent: the share of the row above (a method's: of all method "
          "time); (executor) and (between nodes): time outside partitions and between "
          "nodes</p></section>\n"
          "<script type=\"application/json\" id=\"kiln-data\">",
          f);
    write_data(f, r, by_op);
    st = write_timeline(f, r);
    fprintf(f, "}</script>\n<script>\n%s</script>\n</main>\n</body>\n</html>\n", SCRIPT);
    return close_file(&out, "the HTML report", st);
}
