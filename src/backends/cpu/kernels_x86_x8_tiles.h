/* kernels_x86_x8_tiles.h: the tiles of the packed x8 kinds, written once over
 * kw_i / kw_f (KW_G groups of 8 rows, one 32-bit lane per row) and included
 * by kernels_x86_x8.h once per width, KW_WIDTH:
 *   1: one ymm per vector, one group (KW_G = 1);
 *   2: one zmm, two groups side by side (KW_G = 2; AVX-512);
 *   3: two ymm, two groups (KW_G = 2; the test tables of the AVX-512
 *      tilings on AVX2, KX_FORCE_WIDE_TILES).
 * KW_TILE(name) names each width's tiles. No include guard: every name it
 * defines as a macro it undefines at the end. */
#if KW_WIDTH == 1
#define KW_G 1
#define kw_i __m256i
#define kw_f __m256
/* one group: gs (the next group's offset) is not needed */
#define kw_loadg(p, gs) ((void)(gs), kx_load(p))
#define kw_cvtph(p, gs)                                                                            \
    ((void)(gs), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p))))
#define kw_i8to32(p, gs) _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(p)))
#define kw_u8to32(p, gs) _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(p)))
#define kw_set1_32 _mm256_set1_epi32
#define kw_set1_8 _mm256_set1_epi8
#define kw_and _mm256_and_si256
#define kw_or _mm256_or_si256
#define kw_xor _mm256_xor_si256
#define kw_add16 _mm256_add_epi16
#define kw_add32 _mm256_add_epi32
#define kw_sub32 _mm256_sub_epi32
#define kw_mullo32 _mm256_mullo_epi32
#define kw_madd16 _mm256_madd_epi16
#define kw_maddubs _mm256_maddubs_epi16
#define kw_abs8 _mm256_abs_epi8
#define kw_sign8 _mm256_sign_epi8
#define kw_blend_odd16(a, b) _mm256_blend_epi16((a), (b), 0xAA)
#define kw_srli16 _mm256_srli_epi16
#define kw_slli16 _mm256_slli_epi16
#define kw_slli32 _mm256_slli_epi32
#define kw_dpbusd kx_dpbusd
#define kw_dpwssd kx_dpwssd
#define kw_set1_ps _mm256_set1_ps
#define kw_cvt_ps _mm256_cvtepi32_ps
#define kw_mul _mm256_mul_ps
#define kw_add_ps _mm256_add_ps
#define kw_fmadd _mm256_fmadd_ps
#define kw_fnmadd _mm256_fnmadd_ps
#define kw_store(out, v, ng) ((void)(ng), _mm256_storeu_ps((out), (v)))
#elif KW_WIDTH == 2
#define KW_G 2
#define kw_i __m512i
#define kw_f __m512
#define kw_loadg kz_loadg
#define kw_cvtph kz_cvtph
#define kw_i8to32(p, gs) _mm512_cvtepi8_epi32(kz_8x2((p), (gs)))
#define kw_u8to32(p, gs) _mm512_cvtepu8_epi32(kz_8x2((p), (gs)))
#define kw_set1_32 _mm512_set1_epi32
#define kw_set1_8 _mm512_set1_epi8
#define kw_and _mm512_and_si512
#define kw_or _mm512_or_si512
#define kw_xor _mm512_xor_si512
#define kw_add16 _mm512_add_epi16
#define kw_add32 _mm512_add_epi32
#define kw_sub32 _mm512_sub_epi32
#define kw_mullo32 _mm512_mullo_epi32
#define kw_madd16 _mm512_madd_epi16
#define kw_maddubs _mm512_maddubs_epi16
#define kw_abs8 _mm512_abs_epi8
#define kw_sign8 kz_sign8
#define kw_blend_odd16(a, b) _mm512_mask_blend_epi16(0xAAAAAAAAu, (a), (b))
#define kw_srli16 _mm512_srli_epi16
#define kw_slli16 _mm512_slli_epi16
#define kw_slli32 _mm512_slli_epi32
#define kw_dpbusd _mm512_dpbusd_epi32
#define kw_dpwssd kz_dpwssd
#define kw_set1_ps _mm512_set1_ps
#define kw_cvt_ps _mm512_cvtepi32_ps
#define kw_mul _mm512_mul_ps
#define kw_add_ps _mm512_add_ps
#define kw_fmadd _mm512_fmadd_ps
#define kw_fnmadd _mm512_fnmadd_ps
#define kw_store(out, v, ng) _mm512_mask_storeu_ps((out), (ng) == 2 ? 0xFFFF : 0x00FF, (v))
#define kw_load64(p) _mm512_loadu_si512((const void *)(p))
#elif KW_WIDTH == 3
#define KW_G 2
#define kw_i kwp_i
#define kw_f kwp_f
#define kw_loadg kwp_loadg
#define kw_cvtph kwp_cvtph
#define kw_i8to32 kwp_i8to32
#define kw_u8to32 kwp_u8to32
#define kw_set1_32 kwp_set1_32
#define kw_set1_8 kwp_set1_8
#define kw_and kwp_and
#define kw_or kwp_or
#define kw_xor kwp_xor
#define kw_add16 kwp_add16
#define kw_add32 kwp_add32
#define kw_sub32 kwp_sub32
#define kw_mullo32 kwp_mullo32
#define kw_madd16 kwp_madd16
#define kw_maddubs kwp_maddubs
#define kw_abs8 kwp_abs8
#define kw_sign8 kwp_sign8
#define kw_blend_odd16 kwp_blend_odd16
#define kw_srli16 kwp_srli16
#define kw_slli16 kwp_slli16
#define kw_slli32 kwp_slli32
#define kw_dpbusd kwp_dpbusd
#define kw_dpwssd kwp_dpwssd
#define kw_set1_ps kwp_set1_ps
#define kw_cvt_ps kwp_cvt_ps
#define kw_mul kwp_mul
#define kw_add_ps kwp_add_ps
#define kw_fmadd kwp_fmadd
#define kw_fnmadd kwp_fnmadd
#define kw_store kwp_store
#define kw_load64(p) kwp_loadg((const uint8_t *)(p), 32)
#else
#error "KW_WIDTH must be 1, 2 or 3"
#endif
#define kw_zero() kw_set1_32(0)
#define kw_zero_ps() kw_set1_ps(0.0f)
/* the 4 activation bytes at p in every 32-bit lane */
#define kw_bcast4(p) kw_set1_32(kx_i32(p))
/* each 32-bit lane's value in both of its 16-bit halves (VPMADDWD by it) */
#define kw_dup16(v) kw_or((v), kw_slli32((v), 16))
/* the per-block step of every x8 kernel, one row per lane: acc + f32(is) * (dw * da) */
#define kw_x8_update(acc, is, dw, da) kw_fmadd(kw_cvt_ps(is), kw_mul((dw), kw_set1_ps(da)), (acc))

/* ---- q4_0x8, q4_1x8 --------------------------------------------------------------- */
/* Per block and activation row t:
 *   AVX2: 8 VPMADDUBSW summed in i16 (|sum| <= 8 * 2 * 15 * 127 = 30480,
 *         no saturation), one VPMADDWD by 1.  VNNI: 8 VPDPBUSD.
 *   acc_t += f32(isum) * (dw * da) ; msum_t += m * sa ; out = acc + msum
 * with m = q4_1's minimums or q4_0's -8 * dw (exact): the scalar table's
 * formula, lane for lane.
 * Each tile: T activation rows x KW_G groups from w (the next group gs bytes
 * on; gs = 0 repeats the group), ng of them stored. pf: with one activation
 * row (narrow tiles only), how far on the block the next step reads lies. */
KX_INLINE void KW_TILE(kx_tile_x8)(int q41, const int T, int64_t nb, const uint8_t *w, size_t gs,
                                   size_t pf, const uint8_t *a, size_t as, float *out, int64_t ldo,
                                   int ng) {
    const size_t ab = sizeof(kiln_cpu_block_q8), aq = offsetof(kiln_cpu_block_q8, q);
    const size_t bb = q41 ? 160 : 144, head = q41 ? 32 : 16;
    const kw_i m4 = kw_set1_8(0x0F);
    kw_f acc[KX_X8_T], msum[KX_X8_T];
    KX_UNROLL for (int t = 0; t < T; t++) acc[t] = msum[t] = kw_zero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + (size_t)b * bb;
        if (pf) kx_prefetch_next(blk + pf, (int)bb);
        const kw_f dw = kw_cvtph(blk, gs);
        const kw_f mw = q41 ? kw_cvtph(blk + 16, gs) : kw_mul(dw, kw_set1_ps(-8.0f));
        kw_i s[KX_X8_T];
        KX_UNROLL for (int m = 0; m < 4; m++) {
            const kw_i v = kw_loadg(blk + head + 32 * m, gs);
            const kw_i lo = kw_and(v, m4), hi = kw_and(kw_srli16(v, 4), m4);
            KX_UNROLL for (int t = 0; t < T; t++) {
                const uint8_t *q = a + t * as + b * ab + aq;
#if KX_VNNI
                s[t] = kw_dpbusd(m ? s[t] : kw_zero(), lo, kw_bcast4(q + 4 * m));
                s[t] = kw_dpbusd(s[t], hi, kw_bcast4(q + 16 + 4 * m));
#else
                kw_i p = kw_add16(kw_maddubs(lo, kw_bcast4(q + 4 * m)),
                                  kw_maddubs(hi, kw_bcast4(q + 16 + 4 * m)));
                s[t] = m ? kw_add16(s[t], p) : p;
#endif
            }
        }
        KX_UNROLL for (int t = 0; t < T; t++) {
            const uint8_t *pa = a + t * as + b * ab;
#if !KX_VNNI
            s[t] = kw_madd16(s[t], kw_set1_32(0x00010001));
#endif
            acc[t] = kw_x8_update(acc[t], s[t], dw, kx_f32(pa));
            msum[t] = kw_fmadd(mw, kw_set1_ps(kx_f32(pa + 4)), msum[t]);
        }
    }
    KX_UNROLL for (int t = 0; t < T; t++) kw_store(out + t * ldo, kw_add_ps(acc[t], msum[t]), ng);
}

/* ---- q8_0x8 ---------------------------------------------------------------------- */
/* As q4_0x8, with 8 vectors of 4 int8 columns per 8 rows per block.
 *   AVX2: |w| (u8) x sign(qa, w) by VPMADDUBSW (|pair| <= 2 * 128 * 127, no
 *         saturation), VPMADDWD by 1 per vector, summed in int32.
 *   VNNI: (w + 128) (u8, one XOR per weight vector for the whole tile) x
 *         qa by VPDPBUSD, started from -128 * sum(qa) (the activation
 *         block's exact sum). Measured on Zen 4, one core, pp GOP/s: 147
 *         when the activations took the +128 (offset once per block into a
 *         stack buffer the broadcasts reload: those 4-byte reloads of a
 *         32-byte store stall), 176 with one XOR per broadcast (or |w| x
 *         sign(qa, w), as AVX2 does), and this.
 *   acc_t += f32(isum) * (dw * da): dot_q8_0's formula, lane for lane; the
 *   integer sums are exact, so both give the same bits. */
KX_INLINE void KW_TILE(kx_tile_q8x8)(const int T, int64_t nb, const uint8_t *w, size_t gs,
                                     size_t pf, const uint8_t *a, size_t as, float *out,
                                     int64_t ldo, int ng) {
    const size_t ab = sizeof(kiln_cpu_block_q8), aq = offsetof(kiln_cpu_block_q8, q);
    kw_f acc[KX_X8_T];
    KX_UNROLL for (int t = 0; t < T; t++) acc[t] = kw_zero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + (size_t)b * 272;
        if (pf) kx_prefetch_next(blk + pf, 272);
        const kw_f dw = kw_cvtph(blk, gs);
        kw_i s[KX_X8_T];
#if KX_VNNI
        kw_i wu[8];
        KX_UNROLL for (int m = 0; m < 8; m++) wu[m] =
            kw_xor(kw_loadg(blk + 16 + 32 * m, gs), kw_set1_8((char)0x80));
        KX_UNROLL for (int t = 0; t < T; t++) {
            const uint8_t *pa = a + t * as + b * ab;
            int32_t sum;
            memcpy(&sum, pa + offsetof(kiln_cpu_block_q8, sum), 4);
            s[t] = kw_set1_32(-128 * sum);
            KX_UNROLL for (int m = 0; m < 8; m++) s[t] =
                kw_dpbusd(s[t], wu[m], kw_bcast4(pa + aq + 4 * m));
        }
#else
        KX_UNROLL for (int m = 0; m < 8; m++) {
            const kw_i v = kw_loadg(blk + 16 + 32 * m, gs), u = kw_abs8(v);
            KX_UNROLL for (int t = 0; t < T; t++) {
                const uint8_t *q = a + t * as + b * ab + aq;
                kw_i p = kw_madd16(kw_maddubs(u, kw_sign8(kw_bcast4(q + 4 * m), v)),
                                   kw_set1_32(0x00010001));
                s[t] = m ? kw_add32(s[t], p) : p;
            }
        }
#endif
        KX_UNROLL for (int t = 0; t < T; t++) acc[t] =
            kw_x8_update(acc[t], s[t], dw, kx_f32(a + t * as + b * ab));
    }
    KX_UNROLL for (int t = 0; t < T; t++) kw_store(out + t * ldo, acc[t], ng);
}

/* ---- q4_Kx8 ---------------------------------------------------------------------- */
/* 8 rows per 32-byte vector as q4_0x8, per super-block of 256 columns. The
 * 64 scales and 64 mins (6 bits, x = 8 * sub-block + row) are unpacked once
 * per super-block for the whole tile: low nibbles by AND / shift, top bits by
 * per-half variable shifts, stored as u8 and widened per sub-block to one
 * 32-bit lane per row.
 *   AVX2: per sub-block and activation row, 8 VPMADDUBSW summed in i16
 *         (|sum| <= 8 * 2 * 15 * 127 = 30480), then one VPMADDWD by the
 *         rows' scales (the scale in both 16-bit halves of the lane).
 *   VNNI: 8 VPDPBUSD into int32, then one VPMULLD by the scales.
 * mins: sum_j mn_j * (bsums[2j] + bsums[2j+1]) by one VPDPWSSD (VNNI; else
 * VPMADDWD and an add) per sub-block.
 *   acc_t += f32(is) * (d * da) ; acc_t -= f32(ms) * (dmin * da)
 * dot_q4_K's formula, lane for lane (exact integer sums). */
KX_INLINE void KW_TILE(kx_tile_q4kx8)(const int T, int64_t nb, const uint8_t *w, size_t gs,
                                      size_t pf, const uint8_t *a, size_t as, float *out,
                                      int64_t ldo, int ng) {
    const size_t ab = sizeof(kiln_cpu_block_q8k), aq = offsetof(kiln_cpu_block_q8k, q),
                 abs_ = offsetof(kiln_cpu_block_q8k, bsums);
    const kw_i m4 = kw_set1_8(0x0F);
    kw_f acc[KX_X8_T];
    KX_UNROLL for (int t = 0; t < T; t++) acc[t] = kw_zero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + (size_t)b * 1152;
        _Alignas(32) uint8_t sc[KW_G][64], mn[KW_G][64]; /* per group */
        for (int g = 0; g < KW_G; g++) {
            kx_q4kx8_unpack(blk + g * gs + 32, blk + g * gs + 96, sc[g]);
            kx_q4kx8_unpack(blk + g * gs + 64, blk + g * gs + 112, mn[g]);
        }
        kw_i is[KX_X8_T];
        KX_UNROLL for (int t = 0; t < T; t++) is[t] = kw_zero();
        for (int j = 0; j < 8; j++) { /* sub-block j: nibbles (j & 1) of vectors 8 (j / 2) .. */
            if (pf) kx_prefetch_next(blk + pf + 144 * j, 144); /* spread, as q6_Kx8's */
            const uint8_t *qs = blk + 128 + 256 * (j / 2);
            kw_i s[KX_X8_T];
            KX_UNROLL for (int m = 0; m < 8; m++) {
                kw_i v = kw_loadg(qs + 32 * m, gs);
                v = kw_and(j & 1 ? kw_srli16(v, 4) : v, m4);
                KX_UNROLL for (int t = 0; t < T; t++) {
                    const kw_i q = kw_bcast4(a + t * as + b * ab + aq + 32 * j + 4 * m);
#if KX_VNNI
                    s[t] = kw_dpbusd(m ? s[t] : kw_zero(), v, q);
#else
                    kw_i p = kw_maddubs(v, q);
                    s[t] = m ? kw_add16(s[t], p) : p;
#endif
                }
            }
            const kw_i scv = kw_u8to32(sc[0] + 8 * j, 64);
#if KX_VNNI
            KX_UNROLL for (int t = 0; t < T; t++) is[t] = kw_add32(is[t], kw_mullo32(s[t], scv));
#else
            const kw_i scd = kw_dup16(scv);
            KX_UNROLL for (int t = 0; t < T; t++) is[t] = kw_add32(is[t], kw_madd16(s[t], scd));
#endif
        }
        const kw_f dw = kw_cvtph(blk, gs), dm = kw_cvtph(blk + 16, gs);
        kw_i mv[8];
        KX_UNROLL for (int j = 0; j < 8; j++) {
            const kw_i m = kw_u8to32(mn[0] + 8 * j, 64);
            mv[j] = kw_dup16(m);
        }
        KX_UNROLL for (int t = 0; t < T; t++) {
            const uint8_t *pa = a + t * as + b * ab;
            kw_i ms = kw_zero();
            KX_UNROLL for (int j = 0; j < 8; j++) ms =
                kw_dpwssd(ms, mv[j], kw_bcast4(pa + abs_ + 4 * j));
            const float da = kx_f32(pa);
            acc[t] = kw_x8_update(acc[t], is[t], dw, da);
            acc[t] = kw_fnmadd(kw_cvt_ps(ms), kw_mul(dm, kw_set1_ps(da)), acc[t]);
        }
    }
    KX_UNROLL for (int t = 0; t < T; t++) kw_store(out + t * ldo, acc[t], ng);
}

/* ---- q6_Kx8 ---------------------------------------------------------------------- */
/* Per 16-column sub-block s, two ql vectors and one qh vector give the 4
 * vectors of 6-bit values (0..63) of its 16 columns x 8 rows (nibble |
 * 2-bit field << 4, by AND and shifts).
 *   AVX2: VPMADDUBSW per vector, summed two by two in i16 (|sum| <= 2 * 2 *
 *         63 * 127 = 32004), then VPMADDWD by the rows' scales.
 *   VNNI: 4 VPDPBUSD into int32, then VPMULLD by the scales.
 * The -32 comes off as sum_s (-32 sc_s) * bsums[s]: one VPDPWSSD (VNNI;
 * else VPMADDWD and an add) per two sub-blocks and activation row, the
 * scales' i16 pairs formed once per tile (|32 sc| <= 4096); acc_t +=
 * f32(is) * (d * da): dot_q6_K's formula, lane for lane. */
KX_INLINE void KW_TILE(kx_tile_q6kx8)(const int T, int64_t nb, const uint8_t *w, size_t gs,
                                      size_t pf, const uint8_t *a, size_t as, float *out,
                                      int64_t ldo, int ng) {
    const size_t ab = sizeof(kiln_cpu_block_q8k), aq = offsetof(kiln_cpu_block_q8k, q),
                 abs_ = offsetof(kiln_cpu_block_q8k, bsums);
    const kw_i m4 = kw_set1_8(0x0F), m2 = kw_set1_8(0x30);
    kw_f acc[KX_X8_T];
    KX_UNROLL for (int t = 0; t < T; t++) acc[t] = kw_zero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + (size_t)b * 1680;
        kw_i is[KX_X8_T], prevn = kw_zero();
        KX_UNROLL for (int t = 0; t < T; t++) is[t] = kw_zero();
        for (int s = 0; s < 16; s++) {
            /* the next group's block, 2 lines per sub-block: all at once,
             * at the block's start, left the loads waiting (Zen 4, one core,
             * avx2, k = 1024: 8-14 -> 20-24 GB/s) */
            if (pf && s < 14) kx_prefetch_next(blk + pf + 128 * s, 128);
            const kw_i l0 = kw_loadg(blk + 144 + 64 * s, gs), l1 = kw_loadg(blk + 176 + 64 * s, gs),
                       h = kw_loadg(blk + 1168 + 32 * s, gs);
            const kw_i wv[4] = {kw_or(kw_and(l0, m4), kw_and(kw_slli16(h, 4), m2)),
                                kw_or(kw_and(kw_srli16(l0, 4), m4), kw_and(kw_slli16(h, 2), m2)),
                                kw_or(kw_and(l1, m4), kw_and(h, m2)),
                                kw_or(kw_and(kw_srli16(l1, 4), m4), kw_and(kw_srli16(h, 2), m2))};
            const kw_i sc = kw_i8to32(blk + 16 + 8 * s, gs);
#if !KX_VNNI
            const kw_i scd = kw_blend_odd16(sc, kw_slli32(sc, 16));
#endif
            KX_UNROLL for (int t = 0; t < T; t++) {
                const uint8_t *q = a + t * as + b * ab + aq + 16 * s;
#if KX_VNNI
                kw_i d = kw_dpbusd(kw_zero(), wv[0], kw_bcast4(q));
                KX_UNROLL for (int u = 1; u < 4; u++) d = kw_dpbusd(d, wv[u], kw_bcast4(q + 4 * u));
                is[t] = kw_add32(is[t], kw_mullo32(d, sc));
#else
                kw_i p01 =
                    kw_add16(kw_maddubs(wv[0], kw_bcast4(q)), kw_maddubs(wv[1], kw_bcast4(q + 4)));
                kw_i p23 = kw_add16(kw_maddubs(wv[2], kw_bcast4(q + 8)),
                                    kw_maddubs(wv[3], kw_bcast4(q + 12)));
                is[t] = kw_add32(is[t], kw_add32(kw_madd16(p01, scd), kw_madd16(p23, scd)));
#endif
            }
            const kw_i scn = kw_sub32(kw_zero(), kw_slli32(sc, 5)); /* -32 sc */
            if (s & 1) { /* -32 sc of s-1, s as i16 pairs against bsums s-1, s */
                const kw_i pv = kw_blend_odd16(prevn, kw_slli32(scn, 16));
                KX_UNROLL for (int t = 0; t < T; t++) is[t] =
                    kw_dpwssd(is[t], pv, kw_bcast4(a + t * as + b * ab + abs_ + 2 * (s - 1)));
            }
            prevn = scn;
        }
        const kw_f dw = kw_cvtph(blk, gs);
        KX_UNROLL for (int t = 0; t < T; t++) acc[t] =
            kw_x8_update(acc[t], is[t], dw, kx_f32(a + t * as + b * ab));
    }
    KX_UNROLL for (int t = 0; t < T; t++) kw_store(out + t * ldo, acc[t], ng);
}

/* ---- AMX: q8_0x8, q4_0x8, q4_1x8 (kernels_x86_amx.h) -------------------------- */
/* 16 activation rows x two groups (KXA_M x 16 weight rows) per call, the
 * integer sums of one block by two TDPBSSD (q8_0x8: s8 x s8, no +128 as
 * VPDPBUSD needs) or TDPBSUD (q4: s8 x the nibbles as u8, unpacked per block
 * into B's layout: the low nibbles are columns 0..15, the high 16..31),
 * stored so that activation row t's 16 sums are one 64-byte row. Then each
 * row's step is the VNNI tiles' (acc + f32(is) * (dw * da), q4's msum
 * separately, out = acc + msum), and the integer sums are the same exact
 * integers, so every output has the avx512-vnni table's bits. */
#if KX_AMX && KW_G == 2
KX_INLINE void KW_TILE(kxa_tile_x8)(int q8, int q41, int64_t nb, const uint8_t *w, size_t gs,
                                    const uint8_t *a, size_t as, float *out, int64_t ldo) {
    const size_t ab = sizeof(kiln_cpu_block_q8), aq = offsetof(kiln_cpu_block_q8, q);
    const size_t bb = q8 ? 272 : q41 ? 160 : 144, head = q8 || !q41 ? 16 : 32;
    _Alignas(64) int32_t is[KXA_M][16];
    _Alignas(64) uint8_t nib[2][256];
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    kw_f acc[KXA_M], msum[KXA_M];
    KX_UNROLL for (int t = 0; t < KXA_M; t++) acc[t] = msum[t] = kw_zero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + (size_t)b * bb;
        kxa_load(0, a + (size_t)b * ab + aq, as);
        kxa_zero(3);
        kxa_zero(4);
        if (q8) {
            kxa_load(1, blk + head, 32);
            kxa_load(2, blk + gs + head, 32);
            kxa_dpbssd(3, 0, 1);
            kxa_dpbssd(4, 0, 2);
        } else {
            for (int g = 0; g < 2; g++)
                KX_UNROLL for (int m = 0; m < 4; m++) {
                    const __m256i v = kx_load(blk + g * gs + head + 32 * m);
                    _mm256_storeu_si256((__m256i *)(void *)(nib[g] + 32 * m),
                                        _mm256_and_si256(v, m4));
                    _mm256_storeu_si256((__m256i *)(void *)(nib[g] + 128 + 32 * m),
                                        _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
                }
            kxa_load(1, nib[0], 32);
            kxa_load(2, nib[1], 32);
            kxa_dpbsud(3, 0, 1);
            kxa_dpbsud(4, 0, 2);
        }
        kxa_store(3, &is[0][0], 64);
        kxa_store(4, &is[0][8], 64);
        const kw_f dw = kw_cvtph(blk, gs);
        const kw_f mw = q8 ? dw : q41 ? kw_cvtph(blk + 16, gs) : kw_mul(dw, kw_set1_ps(-8.0f));
        KX_UNROLL for (int t = 0; t < KXA_M; t++) {
            const uint8_t *pa = a + t * as + (size_t)b * ab;
            acc[t] = kw_x8_update(acc[t], kw_load64(is[t]), dw, kx_f32(pa));
            if (!q8) msum[t] = kw_fmadd(mw, kw_set1_ps(kx_f32(pa + 4)), msum[t]);
        }
    }
    KX_UNROLL for (int t = 0; t < KXA_M; t++)
        kw_store(out + t * ldo, q8 ? acc[t] : kw_add_ps(acc[t], msum[t]), 2);
}
#endif

#undef KW_G
#undef kw_i
#undef kw_f
#undef kw_loadg
#undef kw_cvtph
#undef kw_i8to32
#undef kw_u8to32
#undef kw_set1_32
#undef kw_set1_8
#undef kw_and
#undef kw_or
#undef kw_xor
#undef kw_add16
#undef kw_add32
#undef kw_sub32
#undef kw_mullo32
#undef kw_madd16
#undef kw_maddubs
#undef kw_abs8
#undef kw_sign8
#undef kw_blend_odd16
#undef kw_srli16
#undef kw_slli16
#undef kw_slli32
#undef kw_dpbusd
#undef kw_dpwssd
#undef kw_set1_ps
#undef kw_cvt_ps
#undef kw_mul
#undef kw_add_ps
#undef kw_fmadd
#undef kw_fnmadd
#undef kw_store
#undef kw_load64
#undef kw_zero
#undef kw_zero_ps
#undef kw_bcast4
#undef kw_dup16
#undef kw_x8_update
#undef KW_TILE
#undef KW_WIDTH
