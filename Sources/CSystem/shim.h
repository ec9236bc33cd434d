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
#include <pwd.h>
#include <grp.h>
#include <math.h>
#include <spawn.h>
#include <sys/wait.h>
#include <sys/syscall.h>

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
/* A user's uid and primary gid by name; 0 when there is no such user. */
static inline int csystem_user(const char *name, unsigned *uid, unsigned *gid) {
    struct passwd *p = getpwnam(name);
    if (!p) return 0;
    *uid = p->pw_uid;
    *gid = p->pw_gid;
    return 1;
}
/* A group's gid by name; 0 when there is no such group. */
static inline int csystem_group(const char *name, unsigned *gid) {
    struct group *g = getgrnam(name);
    if (!g) return 0;
    *gid = g->gr_gid;
    return 1;
}
/* Becomes uid/gid with exactly these supplementary groups (all three ids, real,
   effective and saved, so there is no way back); 0 or -errno. */
static inline int csystem_become(unsigned uid, unsigned gid, const unsigned *groups, int count) {
    gid_t g[32];
    if (count > 32) count = 32;
    for (int i = 0; i < count; i++) g[i] = groups[i];
    if (setgroups(count, g) != 0) return -errno;
    if (setresgid(gid, gid, gid) != 0) return -errno;
    if (setresuid(uid, uid, uid) != 0) return -errno;
    return 0;
}
/* The soft RLIMIT_RTPRIO (the highest SCHED_FIFO priority this process may ask for
   without CAP_SYS_NICE); -1 when unlimited. */
static inline int csystem_rtprio_limit(void) {
    struct rlimit r;
    if (getrlimit(RLIMIT_RTPRIO, &r) != 0) return 0;
    if (r.rlim_cur == RLIM_INFINITY) return -1;
    return r.rlim_cur > 99 ? 99 : (int)r.rlim_cur;
}
/* A tool program (Runtime's ToolRunner): started with posix_spawn in `dir`, stdin,
   stdout and stderr the given descriptors, no other descriptor open (closefrom 3), every
   signal at its default and none blocked (the loop blocks those its signalfd reads, and
   a child would inherit that), in a process group of its own so a timeout kills what it
   started too. 0, or an errno. */
static inline int csystem_spawn(const char *path, char *const argv[], char *const envp[], int in, int out, int err,
                                const char *dir, int *pid) {
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t none, all;
    int r = posix_spawn_file_actions_init(&fa);
    if (r) return r;
    r = posix_spawnattr_init(&at);
    if (r) { posix_spawn_file_actions_destroy(&fa); return r; }
    sigemptyset(&none);
    sigfillset(&all);
    if (!r) r = posix_spawn_file_actions_adddup2(&fa, in, 0);
    if (!r) r = posix_spawn_file_actions_adddup2(&fa, out, 1);
    if (!r) r = posix_spawn_file_actions_adddup2(&fa, err, 2);
    if (!r) r = posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    if (!r && dir) r = posix_spawn_file_actions_addchdir_np(&fa, dir);
    if (!r) r = posix_spawnattr_setsigmask(&at, &none);
    if (!r) r = posix_spawnattr_setsigdefault(&at, &all);
    if (!r) r = posix_spawnattr_setpgroup(&at, 0);
    if (!r) r = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
    if (!r) { pid_t p; r = posix_spawn(&p, path, &fa, &at, argv, envp); if (!r) *pid = p; }
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    return r;
}
/* A descriptor that becomes readable when process `pid` ends (Linux 5.3); -errno. */
static inline int csystem_pidfd_open(int pid) {
    long r = syscall(SYS_pidfd_open, pid, 0);
    return r < 0 ? -errno : (int)r;
}
/* waitpid without blocking: the pid, 0 while it runs, -errno; `code` is the exit status,
   or 128 + the signal that ended it. */
static inline int csystem_reap(int pid, int *code) {
    int status = 0;
    int r = waitpid(pid, &status, WNOHANG);
    if (r < 0) return -errno;
    if (r > 0) *code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return r;
}

#endif
