// Allocation counting for the Audio real-time tests. The test executable defines the
// malloc family itself; they forward to glibc's internal entry points and, while the
// calling thread has counting switched on, count the calls made on that thread.
#ifndef CALLOCCOUNTER_H
#define CALLOCCOUNTER_H

#include <stddef.h>

/// 1 when the interposition is compiled in; 0 in sanitizer builds, whose runtime owns
/// malloc (then every count below is 0).
int alloc_counter_available(void);
/// Starts counting allocation calls made on the current thread (resets the count).
void alloc_counter_begin(void);
/// Stops counting on the current thread and returns the number of malloc, calloc,
/// realloc, free, posix_memalign, aligned_alloc, memalign and valloc calls since begin.
long alloc_counter_end(void);
/// Total allocation calls in the process so far (all threads); shows the interposition is live.
long alloc_counter_total(void);

#endif
