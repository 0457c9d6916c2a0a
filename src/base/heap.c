/* heap.c: a binary heap over fixed-size items (see heap.h). */
#include <string.h>

#include "base/base.h"
#include "base/heap.h"

#define AT(h, i) ((h)->a + (size_t)(i) * (h)->size)

kiln_heap kiln_heap_make(size_t size, int (*before)(const void *, const void *)) {
    kiln_heap h;
    memset(&h, 0, sizeof h);
    h.size = size;
    h.before = before;
    return h;
}

void kiln_heap_push(kiln_heap *h, const void *x) {
    if (h->failed) return;
    if (h->n == h->cap) {
        int cap = h->cap ? h->cap * 2 : 64;
        unsigned char *a = kiln_realloc(h->a, h->size * (size_t)cap);
        if (!a) {
            h->failed = 1;
            return;
        }
        h->a = a;
        h->cap = cap;
    }
    int i = h->n++;
    while (i > 0 && h->before(x, AT(h, (i - 1) / 2))) {
        memcpy(AT(h, i), AT(h, (i - 1) / 2), h->size);
        i = (i - 1) / 2;
    }
    memcpy(AT(h, i), x, h->size);
}

void kiln_heap_pop(kiln_heap *h, void *top) {
    unsigned char last[KILN_HEAP_MAX_ITEM];
    memcpy(top, AT(h, 0), h->size);
    memcpy(last, AT(h, --h->n), h->size);
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && h->before(AT(h, c + 1), AT(h, c))) c++;
        if (!h->before(AT(h, c), last)) break;
        memcpy(AT(h, i), AT(h, c), h->size);
        i = c;
    }
    if (h->n) memcpy(AT(h, i), last, h->size);
}

void kiln_heap_free(kiln_heap *h) {
    kiln_free(h->a);
    h->a = NULL;
    h->n = h->cap = 0;
}
