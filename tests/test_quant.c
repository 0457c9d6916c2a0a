/* test_quant.c: every block format against vectors computed by hand from
 * the layout (not by the code under test), and quantize -> dequantize
 * round trips within each format's error bound. */
#include "harness.h"
#include "ir/graph.h"
#include "quant/quant.h"

static void put_f16(uint8_t *p, float f) {
    uint16_t h = kiln_f32_to_f16(f);
    memcpy(p, &h, 2);
}

TEST(q8_0_hand_vector) {
    uint8_t b[34];
    put_f16(b, 0.5f);
    for (int j = 0; j < 32; j++)
        b[2 + j] = (uint8_t)(int8_t)(j - 16); /* -16..15 */
    float y[32];
    ASSERT_OK(kiln_dequant_row(KILN_Q8_0, b, y, 32));
    for (int j = 0; j < 32; j++)
        ASSERT_NEAR(y[j], 0.5 * (j - 16), 0);
}

TEST(q4_0_hand_vector) {
    uint8_t b[18];
    put_f16(b, 2.0f);
    for (int j = 0; j < 16; j++)
        b[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    float y[32];
    ASSERT_OK(kiln_dequant_row(KILN_Q4_0, b, y, 32));
    /* low nibble j -> value j, high nibble 15-j -> value j+16 */
    for (int j = 0; j < 16; j++) {
        ASSERT_NEAR(y[j], 2.0 * (j - 8), 0);
        ASSERT_NEAR(y[j + 16], 2.0 * ((15 - j) - 8), 0);
    }
}

TEST(q4_1_hand_vector) {
    uint8_t b[20];
    put_f16(b, 0.25f);
    put_f16(b + 2, -1.0f);
    for (int j = 0; j < 16; j++)
        b[4 + j] = (uint8_t)((j & 15) | (3 << 4));
    float y[32];
    ASSERT_OK(kiln_dequant_row(KILN_Q4_1, b, y, 32));
    for (int j = 0; j < 16; j++) {
        ASSERT_NEAR(y[j], 0.25 * j - 1.0, 0);
        ASSERT_NEAR(y[j + 16], 0.25 * 3 - 1.0, 0);
    }
}

TEST(q4_K_hand_vector) {
    uint8_t b[144];
    memset(b, 0, sizeof b);
    put_f16(b, 0.5f);      /* d */
    put_f16(b + 2, 0.25f); /* dmin */
    uint8_t *s = b + 4, *q = b + 16;
    /* Sub-block scales 1..8 and mins 8..1, packed by hand:
     * j<4: scale = s[j]&63, min = s[j+4]&63;
     * j>=4: scale = (s[j+4]&15) | (s[j-4]>>6)<<4, min = (s[j+4]>>4) | (s[j]>>6)<<4.
     * Scales 5..8 and mins 4..1 fit in 4 bits, so the top bits stay 0. */
    int sc[8] = {1, 2, 3, 4, 5, 6, 7, 40}, mn[8] = {8, 7, 6, 5, 4, 3, 2, 33};
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)sc[j];
        s[j + 4] = (uint8_t)mn[j];
    }
    for (int j = 4; j < 8; j++) {
        s[j + 4] = (uint8_t)((sc[j] & 15) | ((mn[j] & 15) << 4));
        s[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
        s[j] |= (uint8_t)((mn[j] >> 4) << 6);
    }
    for (int i = 0; i < 128; i++)
        q[i] = (uint8_t)((i % 16) | (((i + 5) % 16) << 4));
    float y[256];
    ASSERT_OK(kiln_dequant_row(KILN_Q4_K, b, y, 256));
    /* Values 64c..64c+31 use sub-block 2c and the low nibbles of q[32c..];
     * values 64c+32.. use sub-block 2c+1 and the high nibbles. */
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            int lo = (32 * c + l) % 16, hi = (32 * c + l + 5) % 16;
            ASSERT_NEAR(y[64 * c + l], 0.5 * sc[2 * c] * lo - 0.25 * mn[2 * c], 0);
            ASSERT_NEAR(y[64 * c + 32 + l], 0.5 * sc[2 * c + 1] * hi - 0.25 * mn[2 * c + 1], 0);
        }
}

TEST(q6_K_hand_vector) {
    uint8_t b[210];
    memset(b, 0, sizeof b);
    uint8_t *ql = b, *qh = b + 128;
    int8_t *sc = (int8_t *)(b + 192);
    put_f16(b + 208, 0.125f);
    for (int i = 0; i < 16; i++)
        sc[i] = (int8_t)(i - 8);
    /* Choose every 6-bit value v(i) = (i * 7) % 64 for i in 0..255 and pack
     * it by the layout: in half h (128 values), value l + 32k (k=0..3, l<32):
     * low 4 bits: k=0 ql[l] lo, k=1 ql[l+32] lo, k=2 ql[l] hi, k=3 ql[l+32] hi;
     * high 2 bits: qh[l] bits 2k..2k+1. */
    int v[256];
    for (int i = 0; i < 256; i++)
        v[i] = (i * 7) % 64;
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++)
            for (int k = 0; k < 4; k++) {
                int val = v[128 * h + 32 * k + l];
                uint8_t *dst = ql + 64 * h + l + (k & 1) * 32;
                *dst |= (uint8_t)((val & 15) << (k >= 2 ? 4 : 0));
                qh[32 * h + l] |= (uint8_t)((val >> 4) << (2 * k));
            }
    float y[256];
    ASSERT_OK(kiln_dequant_row(KILN_Q6_K, b, y, 256));
    for (int i = 0; i < 256; i++) /* scale index: 16 values per scale */
        ASSERT_NEAR(y[i], 0.125 * (double)sc[i / 16] * (v[i] - 32), 0);
}

TEST(quantize_round_trips) {
    unsigned long long s = 3;
    float x[256], y[256];
    uint8_t buf[1024];
    for (int i = 0; i < 256; i++)
        x[i] = kt_randf(&s) * 3.0f;
    x[5] = 0; /* and a block of zeros */
    static const struct {
        kiln_dtype t;
        /* bound on |err| / block max: half a step, except q4_0, whose
         * step is max/8 and whose top code (7) clips the far side by a step */
        double rel;
    } cases[] = {{KILN_F16, 1e-3},
                 {KILN_BF16, 8e-3},
                 {KILN_Q8_0, 1.0 / 254 + 1e-3},
                 {KILN_Q4_0, 1.0 / 8 + 1e-3}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        ASSERT_OK(kiln_quant_row(cases[c].t, x, buf, 256));
        ASSERT_OK(kiln_dequant_row(cases[c].t, buf, y, 256));
        for (int b = 0; b < 8; b++) {
            double amax = 0;
            for (int j = 0; j < 32; j++)
                amax = fmax(amax, fabs(x[32 * b + j]));
            for (int j = 0; j < 32; j++)
                ASSERT_MSG(fabs(y[32 * b + j] - x[32 * b + j]) <= cases[c].rel * amax,
                           "%s: value %d: %g -> %g", kiln_dtype_name(cases[c].t), 32 * b + j,
                           x[32 * b + j], y[32 * b + j]);
        }
    }
    float zeros[32] = {0};
    ASSERT_OK(kiln_quant_row(KILN_Q4_0, zeros, buf, 32));
    ASSERT_OK(kiln_dequant_row(KILN_Q4_0, buf, y, 32));
    for (int j = 0; j < 32; j++)
        ASSERT_NEAR(y[j], 0, 0);
    ASSERT_EQ_I(kiln_quant_row(KILN_Q6_K, x, buf, 256), KILN_ERR_UNSUPPORTED);
    ASSERT_CONTAINS(kiln_last_error(), "cannot quantize to q6_K");
}

/* Packs n rows of k values of `packed`'s plain dtype (rows ws bytes apart)
 * into dst and reads every row back: the whole row, and from value k0 (a
 * whole block) on, must equal the plain row bit for bit. NULL, or what
 * differed (in msg). */
static const char *check_pack_round_trip(kiln_dtype packed, const uint8_t *plain, uint8_t *dst,
                                         size_t ws, int n, int64_t k, int64_t k0, char *msg,
                                         size_t msz) {
    kiln_dtype from = kiln_dtype_plain(packed);
    float *a = malloc((size_t)k * sizeof *a), *b = malloc((size_t)k * sizeof *b);
    const char *bad = NULL;
    if (kiln_pack_rows(packed, plain, ws, n, k, dst, ws)) {
        snprintf(msg, msz, "packing %s: %s", kiln_dtype_name(packed), kiln_last_error());
        bad = msg;
    }
    for (int r = 0; r < n && !bad; r++) {
        if (kiln_dequant_row(from, plain + (size_t)r * ws, a, k) ||
            kiln_weight_dequant(packed, dst, ws, r, 0, k, b)) {
            snprintf(msg, msz, "reading %s row %d: %s", kiln_dtype_name(packed), r,
                     kiln_last_error());
            bad = msg;
        } else if (memcmp(a, b, (size_t)k * sizeof *a) != 0) {
            snprintf(msg, msz, "%s row %d differs after packing", kiln_dtype_name(from), r);
            bad = msg;
        } else if (kiln_weight_dequant(packed, dst, ws, r, k0, k - k0, b) ||
                   memcmp(a + k0, b, (size_t)(k - k0) * sizeof *a) != 0) {
            snprintf(msg, msz, "%s row %d from value %lld differs", kiln_dtype_name(from), r,
                     (long long)k0);
            bad = msg;
        }
    }
    free(a);
    free(b);
    return bad;
}

/* q4_0x8, q4_1x8, q8_0x8 (FORMAT.md §6.1): packing moves bytes, so every row read back from
 * the packed copy equals the plain row bit for bit, from any block on; the
 * layout's bytes sit where the format says; the shape rules hold. */
TEST(q4_0x8_packs_losslessly) {
    enum { N = 24, K = 96, RB = K / 32 * 18, WS = RB + 6 };
    static uint8_t plain[N * WS], packed[N * WS];
    float x[K], a[K], b[K];
    char msg[256];
    unsigned long long s = 11;
    for (int r = 0; r < N; r++) {
        for (int i = 0; i < K; i++)
            x[i] = kt_randf(&s) * (float)(1 + r);
        ASSERT_OK(kiln_quant_row(KILN_Q4_0, x, plain + r * WS, K));
    }
    const char *bad =
        check_pack_round_trip(KILN_Q4_0_X8, plain, packed, WS, N, K, 32, msg, sizeof msg);
    ASSERT_MSG(!bad, "%s", bad);
    for (int r = 0; r < N; r++) { /* kiln_weight_dequant reads plain dtypes too */
        ASSERT_OK(kiln_dequant_row(KILN_Q4_0, plain + r * WS, a, K));
        ASSERT_OK(kiln_weight_dequant(KILN_Q4_0, plain, WS, r, 64, 32, b));
        ASSERT_MSG(memcmp(a + 64, b, 32 * sizeof(float)) == 0, "plain row %d from block 2 differs",
                   r);
    }
    /* group 1, block 2, row j = 3: scale at 2j, byte 4m+e of the row's block at 16 + 32m + 4j + e
     */
    const uint8_t *blk = packed + 8 * WS + 2 * 144, *row = plain + 11 * WS + 2 * 18;
    ASSERT(memcmp(blk + 6, row, 2) == 0);
    for (int m = 0; m < 4; m++)
        ASSERT(memcmp(blk + 16 + 32 * m + 12, row + 2 + 4 * m, 4) == 0);
    /* q4_1x8: random q4_1 bytes (no writer) with finite scales and minimums */
    enum { RB1 = K / 32 * 20, WS1 = RB1 + 2 };
    static uint8_t plain1[N * WS1], packed1[N * WS1];
    for (int i = 0; i < N * WS1; i++)
        plain1[i] = (uint8_t)kt_rand(&s);
    for (int r = 0; r < N; r++)
        for (int bk = 0; bk < K / 32; bk++) {
            put_f16(plain1 + r * WS1 + 20 * bk, kt_randf(&s));
            put_f16(plain1 + r * WS1 + 20 * bk + 2, kt_randf(&s));
        }
    bad = check_pack_round_trip(KILN_Q4_1_X8, plain1, packed1, WS1, N, K, 64, msg, sizeof msg);
    ASSERT_MSG(!bad, "%s", bad);
    /* group 2, block 1, row j = 5: d at 2j, m at 16 + 2j, nibbles at 32 + 32m + 4j */
    const uint8_t *blk1 = packed1 + 16 * WS1 + 160, *row1 = plain1 + 21 * WS1 + 20;
    ASSERT(memcmp(blk1 + 10, row1, 2) == 0 && memcmp(blk1 + 26, row1 + 2, 2) == 0);
    for (int m = 0; m < 4; m++)
        ASSERT(memcmp(blk1 + 32 + 32 * m + 20, row1 + 4 + 4 * m, 4) == 0);
    ASSERT_EQ_I(kiln_dtype_packed(KILN_Q4_1), KILN_Q4_1_X8);
    /* q8_0x8: d[8], then row j's byte 4m + e of int8s at 16 + 32m + 4j + e, m in 0..7 */
    enum { RB8 = K / 32 * 34, WS8 = RB8 + 4 };
    static uint8_t plain8[N * WS8], packed8[N * WS8];
    for (int r = 0; r < N; r++) {
        for (int i = 0; i < K; i++)
            x[i] = kt_randf(&s) * (float)(1 + r);
        ASSERT_OK(kiln_quant_row(KILN_Q8_0, x, plain8 + r * WS8, K));
    }
    bad = check_pack_round_trip(KILN_Q8_0_X8, plain8, packed8, WS8, N, K, 64, msg, sizeof msg);
    ASSERT_MSG(!bad, "%s", bad);
    /* group 1, block 2, row j = 6 */
    const uint8_t *blk8 = packed8 + 8 * WS8 + 2 * 272, *row8 = plain8 + 14 * WS8 + 2 * 34;
    ASSERT(memcmp(blk8 + 12, row8, 2) == 0);
    for (int m = 0; m < 8; m++)
        ASSERT(memcmp(blk8 + 16 + 32 * m + 24, row8 + 2 + 4 * m, 4) == 0);
    /* q4_Kx8: random q4_K bytes (every 6-bit scale and min code) with finite d, dmin */
    enum { KK = 512, RBK = KK / 256 * 144, WSK = RBK + 6 };
    static uint8_t plaink[N * WSK], packedk[N * WSK];
    for (int i = 0; i < N * WSK; i++)
        plaink[i] = (uint8_t)kt_rand(&s);
    for (int r = 0; r < N; r++)
        for (int sbk = 0; sbk < KK / 256; sbk++) {
            put_f16(plaink + r * WSK + 144 * sbk, kt_randf(&s));
            put_f16(plaink + r * WSK + 144 * sbk + 2, kt_randf(&s));
        }
    bad = check_pack_round_trip(KILN_Q4_K_X8, plaink, packedk, WSK, N, KK, 256, msg, sizeof msg);
    ASSERT_MSG(!bad, "%s", bad);
    /* group 2, super-block 1, row j = 5: d at 2j, dmin at 16 + 2j, the row's byte 32c + 4m + e
     * of nibbles at 128 + 32 (8c + m) + 4j + e; every (scale, min) pair as the plain block's */
    const uint8_t *blkk = packedk + 16 * WSK + 1152, *rowk = plaink + 21 * WSK + 144;
    ASSERT(memcmp(blkk + 10, rowk, 2) == 0 && memcmp(blkk + 26, rowk + 2, 2) == 0);
    for (int c = 0; c < 4; c++)
        for (int m = 0; m < 8; m++)
            ASSERT(memcmp(blkk + 128 + 32 * (8 * c + m) + 20, rowk + 16 + 32 * c + 4 * m, 4) == 0);
    for (int sb = 0; sb < 8; sb++) {
        int sc, mn;
        kiln_q4kx8_scale_min(blkk, sb, 5, &sc, &mn);
        int esc = sb < 4 ? rowk[4 + sb] & 63 : (rowk[8 + sb] & 15) | (rowk[sb] >> 6) << 4;
        int emn = sb < 4 ? rowk[8 + sb] & 63 : (rowk[8 + sb] >> 4) | (rowk[4 + sb] >> 6) << 4;
        ASSERT_MSG(sc == esc && mn == emn, "sub-block %d: scale %d min %d, plain %d %d", sb, sc, mn,
                   esc, emn);
    }
    /* q6_Kx8: random q6_K bytes with finite d; every value read back through the packed
     * accessor equals the plain one (q6_K's own reader, one value at a time) */
    enum { RB6 = KK / 256 * 210, WS6 = RB6 + 2 };
    static uint8_t plain6[N * WS6], packed6[N * WS6];
    for (int i = 0; i < N * WS6; i++)
        plain6[i] = (uint8_t)kt_rand(&s);
    for (int r = 0; r < N; r++)
        for (int sbk = 0; sbk < KK / 256; sbk++)
            put_f16(plain6 + r * WS6 + 210 * sbk + 208, kt_randf(&s));
    bad = check_pack_round_trip(KILN_Q6_K_X8, plain6, packed6, WS6, N, KK, 256, msg, sizeof msg);
    ASSERT_MSG(!bad, "%s", bad);
    /* group 1, super-block 1, row j = 3: d at 2j, scale s at 16 + 8s + j, and each value
     * (dequantized by the plain reader as d * sc * (q - 32)) from the packed accessor */
    const uint8_t *blk6 = packed6 + 8 * WS6 + 1680, *row6 = plain6 + 11 * WS6 + 210;
    ASSERT(memcmp(blk6 + 6, row6 + 208, 2) == 0);
    for (int sb = 0; sb < 16; sb++)
        ASSERT_EQ_I(blk6[16 + 8 * sb + 3], row6[192 + sb]);
    float ak[256];
    ASSERT_OK(kiln_dequant_row(KILN_Q6_K, row6, ak, 256));
    for (int i = 0; i < 256; i++) {
        float d = kiln_f16_to_f32((uint16_t)(row6[208] | row6[209] << 8));
        float want =
            d * (float)(int8_t)row6[192 + i / 16] * (float)(kiln_q6kx8_value(blk6, 3, i) - 32);
        ASSERT_MSG(ak[i] == want, "q6_Kx8 value %d: %g, plain %g", i, want, ak[i]);
    }
    ASSERT_EQ_I(kiln_dtype_packed(KILN_Q6_K), KILN_Q6_K_X8);
    ASSERT_EQ_I(kiln_dtype_plain(KILN_Q6_K_X8), KILN_Q6_K);
    ASSERT_EQ_I(kiln_pack_rows(KILN_Q4_K_X8, plaink, WSK, N, 96, packedk, WSK),
                KILN_ERR_INVALID_ARG);
    ASSERT_CONTAINS(kiln_last_error(), "whole super-blocks");
    ASSERT_EQ_I(kiln_dtype_packed(KILN_Q4_K), KILN_Q4_K_X8);
    ASSERT_EQ_I(kiln_dtype_plain(KILN_Q4_K_X8), KILN_Q4_K);
    ASSERT_EQ_I(kiln_pack_rows(KILN_Q4_0_X8, plain, WS, 12, K, packed, WS), KILN_ERR_INVALID_ARG);
    ASSERT_CONTAINS(kiln_last_error(), "whole groups of 8 rows");
    ASSERT_EQ_I(kiln_dtype_packed(KILN_Q4_0), KILN_Q4_0_X8);
    ASSERT_EQ_I(kiln_dtype_packed(KILN_Q8_0), KILN_Q8_0_X8);
    ASSERT_EQ_I(kiln_dtype_packed(KILN_F16), KILN_F16);
    ASSERT_EQ_I(kiln_dtype_row_group(KILN_Q4_0_X8), 8);
    ASSERT_EQ_U(kiln_shape_bytes(KILN_Q4_0_X8, 2, (const int64_t[]){16, 64}), 16 * 36);
    ASSERT_EQ_U(kiln_shape_bytes(KILN_Q4_0_X8, 2, (const int64_t[]){12, 64}), 0);
    ASSERT_EQ_U(kiln_shape_bytes(KILN_Q4_0_X8, 1, (const int64_t[]){64}), 0);
}

TEST_MAIN(q8_0_hand_vector, q4_0_hand_vector, q4_1_hand_vector, q4_K_hand_vector, q6_K_hand_vector,
          quantize_round_trips, q4_0x8_packs_losslessly)
