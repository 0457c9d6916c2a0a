/* test_base.c: checksums, half floats, bounds-checked buffers, errors, files
 * written whole or not at all. */
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "harness.h"

TEST(crc32c_known_vectors) {
    /* RFC 3720 check value and the iSCSI test patterns. */
    ASSERT_EQ_U(kiln_crc32c(0, "123456789", 9), 0xE3069283u);
    uint8_t zeros[32] = {0}, ones[32];
    memset(ones, 0xff, sizeof ones);
    ASSERT_EQ_U(kiln_crc32c(0, zeros, 32), 0x8A9136AAu);
    ASSERT_EQ_U(kiln_crc32c(0, ones, 32), 0x62A8AB43u);
    /* Incremental equals one shot, at every split and alignment. */
    uint8_t buf[300];
    for (int i = 0; i < 300; i++)
        buf[i] = (uint8_t)(i * 7 + 3);
    uint32_t whole = kiln_crc32c(0, buf + 1, 299);
    for (int cut = 0; cut <= 299; cut += 13)
        ASSERT_EQ_U(
            kiln_crc32c(kiln_crc32c(0, buf + 1, (size_t)cut), buf + 1 + cut, (size_t)(299 - cut)),
            whole);
}

TEST(f16_conversions) {
    ASSERT_EQ_U(kiln_f32_to_f16(1.0f), 0x3C00);
    ASSERT_EQ_U(kiln_f32_to_f16(-2.0f), 0xC000);
    ASSERT_EQ_U(kiln_f32_to_f16(65504.0f), 0x7BFF);
    ASSERT_EQ_U(kiln_f32_to_f16(65520.0f), 0x7C00);           /* rounds to inf */
    ASSERT_EQ_U(kiln_f32_to_f16(5.9604645e-8f), 0x0001);      /* smallest subnormal */
    ASSERT_EQ_U(kiln_f32_to_f16(1.0f + 1.0f / 2048), 0x3C00); /* tie to even */
    ASSERT_EQ_U(kiln_f32_to_f16(1.0f + 3.0f / 2048), 0x3C02);
    ASSERT(kiln_f16_to_f32(0x7E00) != kiln_f16_to_f32(0x7E00)); /* nan */
    /* Every finite half round-trips exactly. */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7C00) == 0x7C00) continue;
        float f = kiln_f16_to_f32((uint16_t)h);
        ASSERT_MSG(kiln_f32_to_f16(f) == h || (h == 0x8000 && f == 0),
                   "half 0x%04x -> %g -> 0x%04x", h, f, kiln_f32_to_f16(f));
    }
    ASSERT_EQ_U(kiln_f32_to_bf16(1.0f), 0x3F80);
    ASSERT_NEAR(kiln_bf16_to_f32(kiln_f32_to_bf16(3.14159f)), 3.140625, 0);
}

TEST(rbuf_refuses_reads_past_end) {
    uint8_t data[10] = {5, 0, 0, 0, 'h', 'e', 'l', 'l', 'o', 9};
    kiln_rbuf r;
    kiln_rbuf_init(&r, data, sizeof data, 100, "test blob");
    char *s = kiln_rbuf_strdup(&r, "greeting", 64);
    ASSERT_STR_EQ(s, "hello");
    kiln_free(s);
    ASSERT_EQ_I(kiln_rbuf_u8(&r, "tail"), 9);
    ASSERT_EQ_I(kiln_rbuf_u32(&r, "missing"), 0);
    ASSERT_EQ_I(kiln_rbuf_status(&r), KILN_ERR_FORMAT);
    ASSERT_CONTAINS(kiln_last_error(), "test blob, offset 110");
    ASSERT_CONTAINS(kiln_last_error(), "'missing' needs 4 bytes but only 0 are left");
    /* A count that cannot fit the bytes left is refused before any allocation. */
    uint8_t big[8] = {0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0};
    kiln_rbuf_init(&r, big, sizeof big, 0, "counts");
    ASSERT_EQ_I(kiln_rbuf_count(&r, "items", 4), 0);
    ASSERT(r.failed);
    ASSERT_CONTAINS(kiln_last_error(), "cannot fit");
    /* A string over its limit. */
    uint8_t longs[8] = {200, 0, 0, 0, 'a', 'b', 'c', 'd'};
    kiln_rbuf_init(&r, longs, sizeof longs, 0, "strings");
    ASSERT(kiln_rbuf_str(&r, "name", 16, NULL) == NULL);
    ASSERT_CONTAINS(kiln_last_error(), "length 200, more than the limit 16");
}

TEST(wbuf_round_trip) {
    kiln_wbuf b = {0};
    kiln_wbuf_u32(&b, 0xdeadbeef);
    kiln_wbuf_u64(&b, 1ull << 40);
    kiln_wbuf_f32(&b, 1.5f);
    kiln_wbuf_str(&b, "kiln");
    ASSERT(!b.failed);
    kiln_rbuf r;
    kiln_rbuf_init(&r, b.data, b.len, 0, "round trip");
    ASSERT_EQ_U(kiln_rbuf_u32(&r, "a"), 0xdeadbeef);
    ASSERT_EQ_U(kiln_rbuf_u64(&r, "b"), 1ull << 40);
    ASSERT_NEAR(kiln_rbuf_f32(&r, "c"), 1.5, 0);
    char *s = kiln_rbuf_strdup(&r, "d", 10);
    ASSERT_STR_EQ(s, "kiln");
    kiln_free(s);
    ASSERT_EQ_I(r.pos, r.len);
    kiln_wbuf_free(&b);
}

TEST(error_wrap_keeps_context) {
    kiln_error(KILN_ERR_FORMAT, "tensor 'x': bad");
    ASSERT_EQ_I(kiln_error_wrap(KILN_ERR_FORMAT, "reading '%s'", "m.bin"), KILN_ERR_FORMAT);
    ASSERT_STR_EQ(kiln_last_error(), "reading 'm.bin': tensor 'x': bad");
    ASSERT_STR_EQ(kiln_strerror(KILN_ERR_VERSION), "format version mismatch");
}

TEST(overflow_checks) {
    uint64_t out;
    ASSERT(!kiln_mul_ok(1ull << 33, 1ull << 33, &out));
    ASSERT(kiln_mul_ok(1ull << 31, 1ull << 31, &out) && out == 1ull << 62);
    ASSERT(!kiln_add_ok(UINT64_MAX, 1, &out));
    ASSERT_EQ_U(kiln_dtype_row_bytes(KILN_Q4_0, 64), 36);
    ASSERT_EQ_U(kiln_dtype_row_bytes(KILN_Q4_0, 33), 0); /* not whole blocks */
    ASSERT_EQ_U(kiln_dtype_row_bytes(KILN_Q6_K, 256), 210);
    ASSERT(kiln_dtype_name((kiln_dtype)77) == NULL);
}

static int file_is(const char *path, const char *text) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char buf[64] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    return n == strlen(text) && !memcmp(buf, text, n);
}

/* kiln_outfile: nothing at the path until commit; discard leaves the old
 * file; a link's target is replaced and the link kept; the mode kept; the
 * temporary is what kiln_remove_temp_files removes. */
TEST(outfile_whole_or_nothing) {
    char path[512], link[512], tmp[600];
    snprintf(path, sizeof path, "%s", kt_path("out.txt"));
    snprintf(link, sizeof link, "%s", kt_path("out.link"));
    unlink(path);
    unlink(link);
    kiln_outfile o;
    ASSERT_OK(kiln_outfile_open(&o, path));
    ASSERT(o.tmp && o.f);
    fputs("new", o.f);
    ASSERT(access(path, F_OK) != 0); /* not there before the commit */
    ASSERT_OK(kiln_outfile_commit(&o));
    ASSERT(file_is(path, "new"));
    chmod(path, 0600);
    /* discarded: the old bytes stay, no temporary */
    ASSERT_OK(kiln_outfile_open(&o, path));
    snprintf(tmp, sizeof tmp, "%s", o.tmp);
    fputs("half", o.f);
    kiln_outfile_discard(&o);
    ASSERT(file_is(path, "new"));
    ASSERT(access(tmp, F_OK) != 0);
    /* through a link: the target replaced, the link still a link, mode kept */
    ASSERT(symlink(path, link) == 0);
    ASSERT_OK(kiln_outfile_open(&o, link));
    fputs("via link", o.f);
    ASSERT_OK(kiln_outfile_commit(&o));
    struct stat s;
    ASSERT(lstat(link, &s) == 0 && S_ISLNK(s.st_mode));
    ASSERT(file_is(path, "via link"));
    ASSERT(stat(path, &s) == 0 && (s.st_mode & 0777) == 0600);
    /* a signal handler's view: the open temporary goes, the commit fails */
    ASSERT_OK(kiln_outfile_open(&o, path));
    snprintf(tmp, sizeof tmp, "%s", o.tmp);
    ASSERT(access(tmp, F_OK) == 0);
    kiln_remove_temp_files();
    ASSERT(access(tmp, F_OK) != 0);
    ASSERT(kiln_outfile_commit(&o) == KILN_ERR_IO);
    ASSERT(file_is(path, "via link"));
    /* a folder is refused by name; /dev/null is written directly */
    ASSERT(kiln_outfile_open(&o, kt_tmpdir()) == KILN_ERR_IO);
    ASSERT(strstr(kiln_last_error(), "is a folder"));
    ASSERT_OK(kiln_outfile_open(&o, "/dev/null"));
    ASSERT(!o.tmp);
    fputs("x", o.f);
    ASSERT_OK(kiln_outfile_commit(&o));
    unlink(link);
    unlink(path);
}

TEST_MAIN(crc32c_known_vectors, f16_conversions, rbuf_refuses_reads_past_end, wbuf_round_trip,
          error_wrap_keeps_context, overflow_checks, outfile_whole_or_nothing)
