// LD_PRELOAD allocation counter for the release binary (bench/network.sh): counts the
// calls to malloc, calloc, realloc, posix_memalign, aligned_alloc and memalign in the
// whole process and writes the total to $ALLOC_COUNT_FILE at exit. It forwards to
// glibc's own entry points, so behaviour and memory are unchanged. A count per
// call-second comes from two calls of different lengths: (A(long) − A(short)) / Δs,
// so start-up, the handshake and teardown cancel.
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static atomic_long count;

void *malloc(size_t n) { atomic_fetch_add_explicit(&count, 1, memory_order_relaxed); return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { atomic_fetch_add_explicit(&count, 1, memory_order_relaxed); return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { atomic_fetch_add_explicit(&count, 1, memory_order_relaxed); return __libc_realloc(p, n); }
void *memalign(size_t a, size_t n) { atomic_fetch_add_explicit(&count, 1, memory_order_relaxed); return __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { atomic_fetch_add_explicit(&count, 1, memory_order_relaxed); return __libc_memalign(a, n); }
int posix_memalign(void **out, size_t a, size_t n) {
    atomic_fetch_add_explicit(&count, 1, memory_order_relaxed);
    void *p = __libc_memalign(a, n);
    if (!p) return 12; // ENOMEM
    *out = p;
    return 0;
}

__attribute__((destructor)) static void report(void) {
    const char *path = getenv("ALLOC_COUNT_FILE");
    if (!path) return;
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "%ld\n", atomic_load(&count));
    fclose(f);
}
