/* random.c: the deterministic random numbers of the developer tools: one
 * splitmix64 and one random-token rule, shared by `kiln run`, `kiln debug`
 * and the compiler's partition check so their token streams agree. */
#include "devtools/random.h"

uint64_t kiln_mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

int32_t kiln_token_at(uint64_t seed, int64_t pos, int64_t vocab) {
    return (int32_t)(kiln_mix64(kiln_mix64(seed) + (uint64_t)pos) % (uint64_t)vocab);
}
