/* fuzz_trace.c: libFuzzer target for `kiln inspect`'s trace reader
 * (tools/inspect_trace.c, compiled in with the report builder and the
 * writers). The bytes are written to a file and read as a trace
 * (docs/TRACE.md); a trace that reads is turned into every report (by op,
 * node, backend and method; all rows and the top 2), each row's roofline
 * taken against made-up peaks, and the Chrome trace and the HTML report
 * written to /dev/null. Any crash, sanitizer report or leak is a bug. */
#include <string.h>

#include "fuzz_common.h"
#include "inspect_trace.h"

static void reports(const insp_trace *t) {
    static insp_peaks pk, none; /* none: no machine.json */
    pk.have = 1;
    snprintf(pk.source, sizeof pk.source, "fuzz");
    pk.m.all = (kiln_machine_rates){4, 20, 160, 400};
    pk.m.one = (kiln_machine_rates){1, 10, 50, 100};
    pk.r = &pk.m.all;
    insp_report by_op;
    fz_clear_error();
    kiln_status st = insp_report_build(t, &pk, BY_OP, 0, &by_op);
    if (st) {
        fz_check_failure(st);
        return;
    }
    for (int by = BY_OP; by <= BY_METHOD; by++)
        for (int top = 0; top <= 2; top += 2) {
            insp_report r;
            fz_clear_error();
            st = insp_report_build(t, by == BY_NODE ? &none : &pk, by, top, &r);
            if (st) {
                fz_check_failure(st);
                continue;
            }
            for (int64_t i = 0; i < r.n_rows; i++) {
                insp_roof roof;
                insp_row_roof(&r.rows[i], r.peaks, &roof);
                if (!insp_kind_name(r.rows[i].kind)) abort();
            }
            if (by == BY_BACKEND && top == 2) {
                fz_clear_error();
                if ((st = insp_write_html(&r, &by_op, "/dev/null"))) fz_check_failure(st);
            }
            insp_report_free(&r);
        }
    insp_report_free(&by_op);
    fz_clear_error();
    if ((st = insp_write_chrome(t, "/dev/null"))) fz_check_failure(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[512];
    if (fz_write_temp(data, size, "trace", path, sizeof path)) return 0;
    insp_trace t;
    fz_clear_error();
    kiln_status st = insp_trace_read(path, &t);
    unlink(path);
    if (st)
        fz_check_failure(st);
    else
        reports(&t);
    insp_trace_free(&t);
    return 0;
}
