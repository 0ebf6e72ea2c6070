/* SPDX-License-Identifier: MIT */
/*
 * transport/: the Linux calls both sides make on descriptors and shared
 * words - pidfds, futexes, sized and sealed memfds, dma-buf read
 * brackets - written once and
 * linked into the daemon and the client library (docs/architecture.md
 * says why here: proto/ makes no syscalls, and these are what the
 * transport of a tensor is made of). Errors are -errno.
 */
#ifndef TD_TRANSPORT_OS_H
#define TD_TRANSPORT_OS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <time.h>

/* older headers than the kernels these run on */
#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004U
#endif
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* pidfd_open(pid, 0): a pidfd (CLOEXEC) or -errno. */
int td__pidfd_open(pid_t pid);
/*
 * The CPUs the processes of a handoff share: $TENSORD_CPUS (a container
 * held to fewer than its host has), else those online, read once (not
 * the caller's affinity: a consumer pinned to one CPU still leaves the
 * others to the producer and the daemon). 0 unknown.
 */
uint32_t td__cpus(void);
/* pidfd_getfd(pidfd, fd, 0): a new CLOEXEC fd, -ESRCH for pidfd < 0. */
int td__pidfd_getfd(int pidfd, int fd);

/*
 * Futexes on words in shared memfd pages: shared (not PRIVATE), the key
 * is the page, so a wake through one mapping reaches sleepers on
 * another. Wait sleeps while *w == val, at most rel (NULL: no limit): 0
 * when woken, the word changed or a signal came (the caller re-checks),
 * -ETIMEDOUT.
 */
int td__futex_wait(const uint32_t *w, uint32_t val,
		   const struct timespec *rel);
void td__futex_wake(const uint32_t *w, int n);
/*
 * Sleep while *w1 == v1 and *w2 == v2 (futex_waitv, Linux 5.16), until
 * abs on CLOCK_MONOTONIC (NULL: no limit). 0 (woken, a word changed, a
 * signal: the caller re-checks), -ETIMEDOUT, or -ENOSYS where the kernel
 * or a seccomp filter does not have it.
 */
int td__futex_wait2(const uint32_t *w1, uint32_t v1, const uint32_t *w2,
		    uint32_t v2, const struct timespec *abs);
/*
 * A word per sleeper (a ring's or a bell's row): the sleeper stores
 * `asleep` in its own word *w, checks once more that there is nothing to
 * take, and sleeps while *w == asleep. The waker swaps `asleep` for 0, so
 * a sleep not yet begun does not begin, and wakes every thread asleep on
 * the word: normally one, but a thread of an owner whose row was freed
 * under it may still sleep there beside the row's next owner, and a wake
 * of one could go to it. False when *w did not hold `asleep` (nobody
 * asleep there, or woken already). `asleep` is the whole word as the
 * waker read it: bits above the low 8 (a ring row's owner token,
 * TD_RING_ROW_OWNER) stay as they were, only the low 8 become 0.
 */
bool td__futex_wake_word(_Atomic uint32_t *w, uint32_t asleep);
/*
 * A row changes hands (freed, given to a new owner): *w becomes `to`
 * whatever it held (0, or the new owner's token with low bits 0), and if
 * its low 8 bits were `asleep`, every thread asleep on it is woken (a
 * thread of the last owner, its connection dropped under it, would else
 * sleep on for good: no waker looks at a word whose low bits read 0).
 * Returns the word it replaced.
 */
uint32_t td__futex_unwait_word(_Atomic uint32_t *w, uint32_t to,
			       uint32_t asleep);

enum {
	TD__MEMFD_SEALABLE = 1, /* MFD_ALLOW_SEALING */
	TD__MEMFD_HUGETLB = 2,  /* MFD_HUGETLB */
	TD__MEMFD_RESERVE = 4,  /* fallocate every page now */
	TD__MEMFD_SEAL_SIZE = 8 /* F_SEAL_SHRINK | F_SEAL_GROW */
};

/*
 * memfd_create(name) (CLOEXEC), ftruncate to size, then what flags ask.
 * A new fd, or -errno with the failed step in *why (static text).
 */
int td__memfd_new(const char *name, uint64_t size, unsigned flags,
		  const char **why);
/* Seal a memfd's size (F_SEAL_SHRINK | F_SEAL_GROW). 0 or -errno. */
int td__memfd_seal_size(int fd);
/*
 * Make memfd fd immutable as a published plain plane is: F_SEAL_WRITE,
 * F_SEAL_SHRINK, F_SEAL_GROW and F_SEAL_SEAL. 0, at once where it carries
 * them already, or -errno with the reason in *why (static text): -EBUSY
 * while a writable mapping exists or something holds its pages (the
 * kernel waits about 150 ms for them first, and walks every page in
 * any case), -EPERM where F_SEAL_SEAL came without F_SEAL_WRITE.
 * libtensord seals its plain loans so before it sends their PUBLISH, on
 * the producer's time; the daemon seals what a request leaves to it off
 * its loop (daemon/sealer.c). td__memfd_seal_check never waits: 0 sealed
 * so already, 1 seals to add, or -errno with *why as above.
 */
int td__memfd_seal_check(int fd, const char **why);
int td__memfd_seal_publish(int fd, const char **why);
/*
 * A new read-only open file description of fd's file (/proc/self/fd/N
 * opened O_RDONLY | O_CLOEXEC): its holder can neither map it writable
 * nor add seals, nor open the file again read-write: the file's mode
 * becomes 0444 first (where fd's file is ours; descriptors open already
 * keep their access). A new fd or -errno.
 */
int td__reopen_ro(int fd);

/* Whether fd is a timerfd (its /proc/self/fd link). */
bool td__is_timerfd(int fd);

/*
 * Make timerfd fd readable now (a one-shot expiry). Unlike an eventfd's
 * write, this never blocks and nobody can fill the fd first, whatever the
 * other holders of the file do with it (O_NONBLOCK is theirs to change):
 * how a process wakes another's event loop through a fd they share. 0 or
 * -errno.
 */
int td__timerfd_fire(int fd);

/*
 * DMA_BUF_IOCTL_SYNC READ start (start true) or end on a dma-buf fd:
 * the bracket of CPU reads through a mapping of it. 0 or -errno
 * (EINTR/EAGAIN retried).
 */
int td__dmabuf_sync(int fd, bool start);

#endif
