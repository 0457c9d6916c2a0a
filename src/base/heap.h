/* heap.h: a binary heap of fixed-size items ordered by a caller's rule,
 * growing as needed; the BPE merge queues of both tokenizers use it. */
#ifndef KILN_HEAP_H
#define KILN_HEAP_H

#include <stddef.h>

#define KILN_HEAP_MAX_ITEM 64 /* bytes of one item, at most */

typedef struct kiln_heap {
    unsigned char *a;
    size_t size;                                 /* bytes per item */
    int (*before)(const void *x, const void *y); /* 1: x comes out first */
    int n, cap;
    int failed; /* an allocation failed: pushes are dropped, check before trusting pops */
} kiln_heap;

/* An empty heap of `size`-byte items (size <= KILN_HEAP_MAX_ITEM). */
kiln_heap kiln_heap_make(size_t size, int (*before)(const void *, const void *));
void kiln_heap_push(kiln_heap *h, const void *item);
/* Takes the first item into *item; the heap must not be empty. */
void kiln_heap_pop(kiln_heap *h, void *item);
void kiln_heap_free(kiln_heap *h);

#endif
