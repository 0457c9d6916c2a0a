/* compare.h: how close one tensor's values are to a reference's, as the
 * debugging engine (debugger.h) reports it to `kiln debug` and the
 * compiler's partition check. Internal. */
#ifndef KILN_COMPARE_H
#define KILN_COMPARE_H

#include <stdint.h>

#include "base/base.h"

typedef struct kiln_cmp {
    double cos;     /* cosine similarity (1 when both are all zeros) */
    double max_abs; /* max |a - r| */
    double rel;     /* max |a - r| / max |r| (INFINITY when r is all zeros and a is not) */
    double snr_db;  /* 10 log10(sum r^2 / sum (a - r)^2) */
} kiln_cmp;

/* Elements [first, first + n) of a (dtype ta) against the same elements of
 * r (dtype tr), accumulated in double. f32, f16, bf16 and i32 are read;
 * any other dtype, or a non-finite value on either side, makes every
 * figure NaN (past any threshold). */
void kiln_compare_values(kiln_dtype ta, const void *a, kiln_dtype tr, const void *r, uint64_t first,
                         uint64_t n, kiln_cmp *out);

#endif
