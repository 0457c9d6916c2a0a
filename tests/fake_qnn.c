/* fake_qnn.c: a stand-in libQnnHtp.so for the delegate's load checks. Its one
 * provider reports the core API FAKE_MAJOR.FAKE_MINOR.0 and has no working
 * functions, so Kiln must refuse it by its version before calling any. Built
 * twice (tests/CMakeLists.txt): 3.0 (another major) and 2.39 (too old). */
#include <stddef.h>

#include "backends/qnn/qnn_abi.h"

static const qnn_provider provider = {
    .backend_id = 6,
    .provider_name = "FAKE_FOR_KILN_TESTS",
    .api = {.core = {FAKE_MAJOR, FAKE_MINOR, 0}, .backend = {5, 0, 0}},
};
static const qnn_provider *list[1] = {&provider};

__attribute__((visibility("default"))) qnn_err QnnInterface_getProviders(const qnn_provider ***out,
                                                                         uint32_t *n) {
    *out = (const qnn_provider **)list;
    *n = 1;
    return 0;
}
