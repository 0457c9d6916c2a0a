/* qnn_dir_stub.c: TEMPORARY stand-in for kiln_qnn_set_library_dir, so that
 * the kiln command links on the qnn-tools branch. The real one lives in
 * src/backends/qnn/; delete this file (and its line in CMakeLists.txt) when
 * that lands. */
#include "kiln/kiln.h"

kiln_status kiln_qnn_set_library_dir(const char *dir) {
    (void)dir;
    return KILN_OK;
}
