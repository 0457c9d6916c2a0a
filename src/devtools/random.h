/* random.h: deterministic pseudo-random numbers for the developer tools
 * (`kiln run`, `kiln debug`) and the compiler's partition check, so they all
 * draw the same token streams from a seed. Internal. */
#ifndef KILN_DEVTOOLS_RANDOM_H
#define KILN_DEVTOOLS_RANDOM_H

#include <stdint.h>

/* splitmix64's finalizer: deterministic pseudo-random bits from a counter. */
uint64_t kiln_mix64(uint64_t x);
/* The random token at context position `pos` for `seed`, in 0..vocab-1:
 * the same for every session and every way of splitting a history into
 * calls (kiln run, kiln debug, compile --check). */
int32_t kiln_token_at(uint64_t seed, int64_t pos, int64_t vocab);

#endif /* KILN_DEVTOOLS_RANDOM_H */
