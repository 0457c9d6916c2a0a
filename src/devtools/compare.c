/* compare.c: tensor values against a reference (compare.h). */
#include <math.h>

#include "devtools/compare.h"

static double elem(kiln_dtype t, const void *p, uint64_t k) {
    switch (t) {
    case KILN_F32:
        return ((const float *)p)[k];
    case KILN_F16:
        return kiln_f16_to_f32(((const uint16_t *)p)[k]);
    case KILN_BF16:
        return kiln_bf16_to_f32(((const uint16_t *)p)[k]);
    case KILN_I32:
        return ((const int32_t *)p)[k];
    default:
        return NAN;
    }
}

void kiln_compare_values(kiln_dtype ta, const void *a, kiln_dtype tr, const void *r, uint64_t first,
                         uint64_t n, kiln_cmp *out) {
    out->cos = out->max_abs = out->rel = out->snr_db = NAN;
    double dot = 0, na = 0, nr = 0, se = 0, maxd = 0, maxr = 0;
    for (uint64_t k = first; k < first + n; k++) {
        double x = elem(ta, a, k), y = elem(tr, r, k);
        if (!isfinite(x) || !isfinite(y)) return;
        double d = fabs(x - y);
        dot += x * y;
        na += x * x;
        nr += y * y;
        se += d * d;
        if (d > maxd) maxd = d;
        if (fabs(y) > maxr) maxr = fabs(y);
    }
    double c = na == 0 && nr == 0 ? 1 : na == 0 || nr == 0 ? 0 : dot / sqrt(na * nr);
    out->cos = c > 1 ? 1 : c < -1 ? -1 : c;
    out->max_abs = maxd;
    out->rel = maxr > 0 ? maxd / maxr : maxd > 0 ? INFINITY : 0;
    out->snr_db = se == 0 ? INFINITY : nr == 0 ? -INFINITY : 10 * log10(nr / se);
}
