// POSIX and Linux headers for Linnet. Embedded Swift has no Glibc module, so every
// product module reaches the system through this one map, in both build modes.
// Shims exist only for macros Swift cannot import (errno, CMSG, FD bits).
#ifndef CSYSTEM_SHIM_H
#define CSYSTEM_SHIM_H
// No _GNU_SOURCE: with it glibc declares socket addresses as transparent unions that
// Swift cannot pass a sockaddr pointer to.
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include <math.h>

static inline int csystem_errno(void) { return errno; }
static inline void csystem_set_errno(int value) { errno = value; }
static inline int csystem_fcntl_int(int fd, int cmd, int arg) { return fcntl(fd, cmd, arg); }
static inline int csystem_open(const char *path, int flags, unsigned mode) { return open(path, flags, (mode_t)mode); }
static inline int csystem_openat(int dir, const char *path, int flags, unsigned mode) { return openat(dir, path, flags, (mode_t)mode); }
/* prctl is variadic. */
static inline int csystem_set_dumpable(int on) { return prctl(PR_SET_DUMPABLE, (unsigned long)on, 0, 0, 0); }
static inline int csystem_get_dumpable(void) { return prctl(PR_GET_DUMPABLE, 0, 0, 0, 0); }
/* SIG_IGN is a cast macro Swift cannot import. */
static inline void csystem_ignore_signal(int sig) { signal(sig, SIG_IGN); }
/* POSIX declares environ only to applications that declare it themselves. */
extern char **environ;
static inline char **csystem_environ(void) { return environ; }
/* The soft RLIMIT_RTPRIO (the highest SCHED_FIFO priority this process may ask for
   without CAP_SYS_NICE); -1 when unlimited. */
static inline int csystem_rtprio_limit(void) {
    struct rlimit r;
    if (getrlimit(RLIMIT_RTPRIO, &r) != 0) return 0;
    if (r.rlim_cur == RLIM_INFINITY) return -1;
    return r.rlim_cur > 99 ? 99 : (int)r.rlim_cur;
}
#endif
