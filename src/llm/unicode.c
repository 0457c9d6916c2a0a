/* unicode.c: UTF-8 decoding that never loses a byte, lookups in the
 * generated tables (unicode_data.c) and NFC: canonical decomposition,
 * canonical ordering, canonical composition (Unicode UAX #15), with Hangul
 * syllables done by arithmetic. */
#include <string.h>

#include "llm/unicode.h"

int kiln_utf8_lead_len(uint8_t b) {
    if (b < 0x80) return 1;
    if (b < 0xC2) return 0; /* continuation bytes and the overlong C0/C1 */
    if (b < 0xE0) return 2;
    if (b < 0xF0) return 3;
    if (b < 0xF5) return 4;
    return 0;
}

uint32_t kiln_utf8_decode(const uint8_t *s, size_t n, size_t *used) {
    uint8_t b = s[0];
    int len = kiln_utf8_lead_len(b);
    *used = 1;
    if (len == 1) return b;
    if (len == 0 || (size_t)len > n) return KILN_UC_RAW + b;
    uint32_t cp = b & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return KILN_UC_RAW + b;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    /* Overlong forms, surrogates and code points past U+10FFFF are invalid. */
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || (cp >= 0xD800 && cp < 0xE000) || cp > 0x10FFFF) return KILN_UC_RAW + b;
    *used = (size_t)len;
    return cp;
}

size_t kiln_utf8_encode(uint32_t cp, uint8_t *o) {
    if (cp >= KILN_UC_RAW) {
        o[0] = (uint8_t)(cp - KILN_UC_RAW);
        return 1;
    }
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | cp >> 6);
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | cp >> 12);
        o[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | cp >> 18);
    o[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- table lookups ---------------------------------------------------------- */

/* The value (bits 24..31) of the run holding cp in a table of
 * start | value << 24 entries. */
static unsigned run_value(const uint32_t *runs, size_t n, uint32_t cp) {
    size_t lo = 0, hi = n; /* find the last run with start <= cp */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if ((runs[mid] & 0xFFFFFF) <= cp)
            lo = mid;
        else
            hi = mid;
    }
    return runs[lo] >> 24;
}

int kiln_uc_category(uint32_t cp) {
    if (cp > 0x10FFFF) return KILN_UC_Cn;
    return (int)run_value(kiln_ucd_cat_runs, kiln_ucd_cat_runs_len, cp);
}

static int is_space(uint32_t cp) {
    if (cp < 0x80) return cp == ' ' || (cp >= 9 && cp <= 13);
    for (size_t i = 0; i < kiln_ucd_space_len; i++)
        if (kiln_ucd_space[i] == cp) return 1;
    return 0;
}

uint32_t kiln_uc_props(uint32_t cp) {
    /* ASCII, the common case, from a table built on first use would need a
     * lock; the binary search is short enough. */
    return KILN_UC_BIT(kiln_uc_category(cp)) | (is_space(cp) ? KILN_UC_SPACE : 0);
}

uint32_t kiln_uc_fold(uint32_t cp) {
    if (cp < 0x80) return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
    size_t lo = 0, hi = kiln_ucd_fold_len / 2;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uint32_t c = kiln_ucd_fold[2 * mid];
        if (c == cp) return kiln_ucd_fold[2 * mid + 1];
        if (c < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return cp;
}

void kiln_uc_fold_each(uint32_t folded, void (*fn)(uint32_t, void *), void *user) {
    fn(folded, user);
    for (size_t i = 0; i < kiln_ucd_fold_len / 2; i++)
        if (kiln_ucd_fold[2 * i + 1] == folded && kiln_ucd_fold[2 * i] != folded)
            fn(kiln_ucd_fold[2 * i], user);
}

/* ---- NFC ----------------------------------------------------------------------- */

enum {
    S_BASE = 0xAC00,
    L_BASE = 0x1100,
    V_BASE = 0x1161,
    T_BASE = 0x11A7,
    L_COUNT = 19,
    V_COUNT = 21,
    T_COUNT = 28,
    N_COUNT = V_COUNT * T_COUNT,
    S_COUNT = L_COUNT * N_COUNT
};

static unsigned ccc(uint32_t cp) {
    if (cp < 0x300 || cp > 0x10FFFF) return 0;
    return run_value(kiln_ucd_ccc_runs, kiln_ucd_ccc_runs_len, cp);
}

/* The one-level canonical decomposition of cp: 1 or 2 code points in d, or 0. */
static int decompose1(uint32_t cp, uint32_t d[2]) {
    size_t lo = 0, hi = kiln_ucd_decomp_len / 3;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uint32_t c = kiln_ucd_decomp[3 * mid];
        if (c == cp) {
            d[0] = kiln_ucd_decomp[3 * mid + 1];
            d[1] = kiln_ucd_decomp[3 * mid + 2];
            return d[1] ? 2 : 1;
        }
        if (c < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

/* Appends the full canonical decomposition of cp to out; returns the count. */
static size_t decompose(uint32_t cp, uint32_t *out) {
    if (cp >= S_BASE && cp < S_BASE + S_COUNT) {
        uint32_t s = cp - S_BASE, t = s % T_COUNT;
        out[0] = L_BASE + s / N_COUNT;
        out[1] = V_BASE + (s % N_COUNT) / T_COUNT;
        if (!t) return 2;
        out[2] = T_BASE + t;
        return 3;
    }
    uint32_t d[2];
    int k = cp >= kiln_ucd_nfc_min && cp <= 0x10FFFF ? decompose1(cp, d) : 0;
    if (!k) {
        out[0] = cp;
        return 1;
    }
    size_t n = decompose(d[0], out);
    if (k == 2) n += decompose(d[1], out + n);
    return n;
}

/* The primary composite of (a, b), or 0. */
static uint32_t compose(uint32_t a, uint32_t b) {
    if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 && b > T_BASE &&
        b < T_BASE + T_COUNT)
        return a + (b - T_BASE);
    size_t lo = 0, hi = kiln_ucd_comp_len / 3;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uint32_t x = kiln_ucd_comp[3 * mid], y = kiln_ucd_comp[3 * mid + 1];
        if (x == a && y == b) return kiln_ucd_comp[3 * mid + 2];
        if (x < a || (x == a && y < b))
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

int kiln_uc_nfc_quick(const uint32_t *cp, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (cp[i] >= kiln_ucd_nfc_min && cp[i] < KILN_UC_RAW) return 0;
    return 1;
}

size_t kiln_uc_nfc(const uint32_t *cp, size_t n, uint32_t *out) {
    /* 1. Full canonical decomposition. */
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        m += decompose(cp[i], out + m);
    /* 2. Canonical ordering: a stable insertion sort of each run of
     * non-starters by combining class. */
    for (size_t i = 1; i < m; i++) {
        unsigned c = ccc(out[i]);
        if (!c) continue;
        uint32_t x = out[i];
        size_t j = i;
        while (j > 0 && ccc(out[j - 1]) > c) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = x;
    }
    /* 3. Canonical composition: each character combines with the last
     * starter unless a character in between blocks it (same or higher
     * class, or a starter). */
    if (m == 0) return 0;
    size_t starter = 0, w = 1;
    int have_starter = ccc(out[0]) == 0;
    unsigned last_cc = have_starter ? 0 : 256;
    for (size_t i = 1; i < m; i++) {
        uint32_t c = out[i];
        unsigned cc = ccc(c);
        uint32_t comp = 0;
        int blocked = w - 1 != starter && (last_cc == 0 || last_cc >= cc);
        if (have_starter && !blocked) comp = compose(out[starter], c);
        if (comp) {
            out[starter] = comp;
            continue;
        }
        if (cc == 0) {
            starter = w;
            have_starter = 1;
        }
        last_cc = cc;
        out[w++] = c;
    }
    return w;
}
