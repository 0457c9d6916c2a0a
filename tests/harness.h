/* harness.h: Kiln's in-tree test harness. No dependency, cross-compiles,
 * runs under qemu. A test file defines tests with TEST(name) and lists them
 * in TEST_MAIN(...); the runner prints one line per test and a closing
 * "N passed, N failed, N skipped" line, and exits non-zero on any failure.
 *
 *   TEST(crc_known_vector) { ASSERT_EQ_U(kiln_crc32c(0, "123456789", 9), 0xE3069283u); }
 *   TEST_MAIN(crc_known_vector)
 */
#ifndef KILN_TEST_HARNESS_H
#define KILN_TEST_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    void (*fn)(void);
} kt_test;

extern int kt_failed_here; /* the current test failed */
extern int kt_skipped_here;
extern const char *kt_current;

#define TEST(name) void kt_##name(void)
#define KT_ENTRY(name) {#name, kt_##name},

#define KT_FAIL(...)                                                                               \
    do {                                                                                           \
        fprintf(stderr, "  %s:%d: ", __FILE__, __LINE__);                                          \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        kt_failed_here = 1;                                                                        \
        return;                                                                                    \
    } while (0)

#define ASSERT(c)                                                                                  \
    do {                                                                                           \
        if (!(c)) KT_FAIL("assertion failed: %s", #c);                                             \
    } while (0)
#define ASSERT_MSG(c, ...)                                                                         \
    do {                                                                                           \
        if (!(c)) KT_FAIL(__VA_ARGS__);                                                            \
    } while (0)
#define ASSERT_EQ_I(a, b)                                                                          \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ != b_) KT_FAIL("%s == %s: %lld != %lld", #a, #b, a_, b_);                           \
    } while (0)
#define ASSERT_EQ_U(a, b)                                                                          \
    do {                                                                                           \
        unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b);             \
        if (a_ != b_) KT_FAIL("%s == %s: 0x%llx != 0x%llx", #a, #b, a_, b_);                       \
    } while (0)
#define ASSERT_NEAR(a, b, tol)                                                                     \
    do {                                                                                           \
        double a_ = (double)(a), b_ = (double)(b);                                                 \
        if (!(fabs(a_ - b_) <= (tol)))                                                             \
            KT_FAIL("%s ~ %s: %.9g vs %.9g (tol %g)", #a, #b, a_, b_, (double)(tol));              \
    } while (0)
#define ASSERT_STR_EQ(a, b)                                                                        \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        if (!a_ || !b_ || strcmp(a_, b_))                                                          \
            KT_FAIL("%s == %s: \"%s\" != \"%s\"", #a, #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)"); \
    } while (0)
#define ASSERT_CONTAINS(hay, needle)                                                               \
    do {                                                                                           \
        const char *h_ = (hay), *n_ = (needle);                                                    \
        if (!h_ || !strstr(h_, n_))                                                                \
            KT_FAIL("\"%s\" does not contain \"%s\"", h_ ? h_ : "(null)", n_);                     \
    } while (0)
/* A kiln call that must succeed: prints the library's message otherwise. */
#define ASSERT_OK(call)                                                                            \
    do {                                                                                           \
        int st_ = (int)(call);                                                                     \
        if (st_ != 0) KT_FAIL("%s failed (%d): %s", #call, st_, kiln_last_error());                \
    } while (0)
#define SKIP(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "  skipped: ");                                                            \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        kt_skipped_here = 1;                                                                       \
        return;                                                                                    \
    } while (0)

int kt_run(const kt_test *tests, int n, int argc, char **argv);

/* TEST_MAIN(a, b, c): main() running the listed tests (up to 32). */
#define TEST_MAIN(...)                                                                             \
    int main(int argc, char **argv) {                                                              \
        static const kt_test tests_[] = {KT_FOREACH(KT_ENTRY, __VA_ARGS__)};                       \
        return kt_run(tests_, (int)(sizeof tests_ / sizeof *tests_), argc, argv);                  \
    }

#define KT_NARGS(...)                                                                              \
    KT_NARGS_(__VA_ARGS__, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, \
              14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define KT_NARGS_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, _17, _18, \
                  _19, _20, _21, _22, _23, _24, _25, _26, _27, _28, _29, _30, _31, _32, N, ...)    \
    N
#define KT_CAT(a, b) KT_CAT_(a, b)
#define KT_CAT_(a, b) a##b
#define KT_FOREACH(f, ...) KT_CAT(KT_FE_, KT_NARGS(__VA_ARGS__))(f, __VA_ARGS__)
#define KT_FE_1(f, x) f(x)
#define KT_FE_2(f, x, ...) f(x) KT_FE_1(f, __VA_ARGS__)
#define KT_FE_3(f, x, ...) f(x) KT_FE_2(f, __VA_ARGS__)
#define KT_FE_4(f, x, ...) f(x) KT_FE_3(f, __VA_ARGS__)
#define KT_FE_5(f, x, ...) f(x) KT_FE_4(f, __VA_ARGS__)
#define KT_FE_6(f, x, ...) f(x) KT_FE_5(f, __VA_ARGS__)
#define KT_FE_7(f, x, ...) f(x) KT_FE_6(f, __VA_ARGS__)
#define KT_FE_8(f, x, ...) f(x) KT_FE_7(f, __VA_ARGS__)
#define KT_FE_9(f, x, ...) f(x) KT_FE_8(f, __VA_ARGS__)
#define KT_FE_10(f, x, ...) f(x) KT_FE_9(f, __VA_ARGS__)
#define KT_FE_11(f, x, ...) f(x) KT_FE_10(f, __VA_ARGS__)
#define KT_FE_12(f, x, ...) f(x) KT_FE_11(f, __VA_ARGS__)
#define KT_FE_13(f, x, ...) f(x) KT_FE_12(f, __VA_ARGS__)
#define KT_FE_14(f, x, ...) f(x) KT_FE_13(f, __VA_ARGS__)
#define KT_FE_15(f, x, ...) f(x) KT_FE_14(f, __VA_ARGS__)
#define KT_FE_16(f, x, ...) f(x) KT_FE_15(f, __VA_ARGS__)
#define KT_FE_17(f, x, ...) f(x) KT_FE_16(f, __VA_ARGS__)
#define KT_FE_18(f, x, ...) f(x) KT_FE_17(f, __VA_ARGS__)
#define KT_FE_19(f, x, ...) f(x) KT_FE_18(f, __VA_ARGS__)
#define KT_FE_20(f, x, ...) f(x) KT_FE_19(f, __VA_ARGS__)
#define KT_FE_21(f, x, ...) f(x) KT_FE_20(f, __VA_ARGS__)
#define KT_FE_22(f, x, ...) f(x) KT_FE_21(f, __VA_ARGS__)
#define KT_FE_23(f, x, ...) f(x) KT_FE_22(f, __VA_ARGS__)
#define KT_FE_24(f, x, ...) f(x) KT_FE_23(f, __VA_ARGS__)
#define KT_FE_25(f, x, ...) f(x) KT_FE_24(f, __VA_ARGS__)
#define KT_FE_26(f, x, ...) f(x) KT_FE_25(f, __VA_ARGS__)
#define KT_FE_27(f, x, ...) f(x) KT_FE_26(f, __VA_ARGS__)
#define KT_FE_28(f, x, ...) f(x) KT_FE_27(f, __VA_ARGS__)
#define KT_FE_29(f, x, ...) f(x) KT_FE_28(f, __VA_ARGS__)
#define KT_FE_30(f, x, ...) f(x) KT_FE_29(f, __VA_ARGS__)
#define KT_FE_31(f, x, ...) f(x) KT_FE_30(f, __VA_ARGS__)
#define KT_FE_32(f, x, ...) f(x) KT_FE_31(f, __VA_ARGS__)

/* ---- helpers for tests ----------------------------------------------------- */
/* A fresh temporary directory for this test binary (removed at exit). */
const char *kt_tmpdir(void);
/* kt_tmpdir()/name, in a static rotating buffer. */
const char *kt_path(const char *name);
/* Reads a whole file; returns malloc'd bytes (NUL-terminated) or NULL. */
char *kt_read_file(const char *path, size_t *len);
int kt_write_file(const char *path, const void *data, size_t len);
/* The shared data folder (../shared/data from the source tree, or
 * $KILN_SHARED_DATA), or NULL when absent. */
const char *kt_shared_data(void);
/* Deterministic random numbers for fixtures. */
unsigned kt_rand(unsigned long long *state);
float kt_randf(unsigned long long *state); /* uniform in [-1, 1) */

#endif
