/* clock.c: the monotonic clock in milliseconds that the generation loop's
 * timings, the partition check, the benchmarks and the machine peaks read. */
#include <time.h>

#include "base/base.h"

double kiln_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
