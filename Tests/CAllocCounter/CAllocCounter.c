// Interposes the malloc family by defining it in the test executable: the dynamic
// linker binds every malloc/free in the process (Swift runtime included) to these, and
// they forward to glibc's exported __libc_* implementations, so no dlsym (which could
// itself allocate) is needed.
#include "CAllocCounter.h"
#include <errno.h>
#include <stdint.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);

// Under AddressSanitizer or ThreadSanitizer (scripts/sanitize.sh) the runtime owns the
// malloc family: defining it here as well would bypass the sanitizer's allocator, and
// the first call comes from the sanitizer's own start-up, before thread-local storage
// works (a crash before main). So there the counter is compiled out and says so.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ALLOC_COUNTER_DISABLED 1
#endif
#endif

#ifdef ALLOC_COUNTER_DISABLED
int alloc_counter_available(void) { return 0; }
void alloc_counter_begin(void) {}
long alloc_counter_end(void) { return 0; }
long alloc_counter_total(void) { return 0; }
#else
int alloc_counter_available(void) { return 1; }

static __thread int counting;
static __thread long count;
static long total;

static inline void note(void) {
    __atomic_fetch_add(&total, 1, __ATOMIC_RELAXED);
    if (counting) count++;
}

void alloc_counter_begin(void) { count = 0; counting = 1; }
long alloc_counter_end(void) { counting = 0; return count; }
long alloc_counter_total(void) { return __atomic_load_n(&total, __ATOMIC_RELAXED); }

void *malloc(size_t n) { note(); return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { note(); return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { note(); return __libc_realloc(p, n); }
void free(void *p) { if (p) note(); __libc_free(p); }
void *memalign(size_t align, size_t n) { note(); return __libc_memalign(align, n); }
void *aligned_alloc(size_t align, size_t n) { note(); return __libc_memalign(align, n); }
void *valloc(size_t n) { note(); return __libc_memalign(4096, n); }
int posix_memalign(void **out, size_t align, size_t n) {
    note();
    if (align < sizeof(void *) || (align & (align - 1)) != 0) return EINVAL;
    void *p = __libc_memalign(align, n);
    if (!p && n) return ENOMEM;
    *out = p;
    return 0;
}
#endif
