/* SPDX-License-Identifier: MIT */
/* Helpers shared by the criterion suites. */
#ifndef TD_TESTS_TESTUTIL_H
#define TD_TESTS_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* Read a whole file; aborts the test (cr_assert) on failure. free() it. */
uint8_t *tu_read_file(const char *path, size_t *len);
/* Like tu_read_file but returns NULL when the file does not exist. */
uint8_t *tu_try_read_file(const char *path, size_t *len);
/* $TD_TEST_DATA/rel, in a static buffer valid until the next call. */
const char *tu_data_path(const char *rel);
/* A text file as a NUL-terminated malloc'ed string ("" if absent). */
char *tu_slurp(const char *path);
/* Upstream vectors folder ($TD_VECTORS_DIR/sub); NULL if it is absent. */
const char *tu_vectors_path(const char *sub);
/*
 * The same, or skip the test saying which folder is absent and that the
 * `what` conformance was not run. Static buffer, valid until the next call.
 */
const char *tu_vectors_or_skip(const char *sub, const char *what);

/* Number of open fds in this process (/proc/self/fd). */
/*
 * From now on, in this process and the children it makes, syscall nr
 * fails with err (a seccomp filter, as systemd's SystemCallFilter= or a
 * container profile makes). 0, or -errno when filters are unavailable.
 */
int tu_deny_syscall(long nr, int err);
/* The same, only when its argument argi (its low 32 bits) is value. */
int tu_deny_syscall_arg(long nr, unsigned argi, uint32_t value, int err);
int tu_fd_count(void);
/* Descriptors another process (a daemon) has open now. */
int tu_pid_fd_count(pid_t pid);
/* Number of mappings in this process (/proc/self/maps lines). */
int tu_map_count(void);
/*
 * Number of tensor-buffer mappings: lines naming a memfd or a dma-buf,
 * which is all libtensord ever maps (no tensord code maps anonymous
 * memory).
 */
int tu_buf_map_count(void);
/* This process's writable mapping of a memfd, by the name /proc/self/maps
 * gives it ("memfd:tensord-ring-hdr"); the last one, asserted to exist. */
void *tu_find_mapping(const char *memfd_name);
/*
 * Whether every mapping can be compared. Under ASan its allocator maps a
 * region the first time a size class is used and keeps it, so there only
 * buffer mappings are compared (LeakSanitizer covers the heap).
 */
#ifdef __SANITIZE_ADDRESS__
#define TU_CHECK_ALL_MAPS 0
#else
#define TU_CHECK_ALL_MAPS 1
#endif

/*
 * Run argv (argv[0] a path) with stdout captured into a malloc'ed NUL-
 * terminated string (*out) and return its exit status (or 128+signal).
 */
int tu_run_capture(char *const argv[], char **out);
/* The same with stderr captured too, into the same string. */
int tu_run_capture_all(char *const argv[], char **out);
/*
 * Start argv (argv[0] a path) with its stdout on a pipe, read through *out
 * (fclose it); returns the pid (waitpid it).
 */
pid_t tu_spawn_stdout(char *const argv[], FILE **out);

/* A private tensord ($TD_TENSORD) on a socket in a mkdtemp() folder. */
struct tu_daemon {
	pid_t pid;
	char dir[64];
	char sock[108];
	int fds0, maps0; /* this process's fds and mappings before it */
	int bufmaps0;    /* its memfd/dma-buf mappings before it */
};

/*
 * Record this process's fd and mapping counts, start the daemon (dying
 * with this process) and wait until it accepts (bounded at 20 s for one
 * that never comes up; nothing about speed is asserted).
 */
void tu_daemon_start(struct tu_daemon *d, const char *log_level);
/* The same with more tensord arguments (NULL-ended; NULL: none). */
void tu_daemon_start_args(struct tu_daemon *d, const char *log_level,
			  const char *const *extra);
/*
 * The same, and: the daemon's stderr appended to log (NULL: ours), and
 * child() run in the child right before exec (NULL: nothing).
 */
void tu_daemon_start_log(struct tu_daemon *d, const char *log_level,
			 const char *const *extra, const char *log,
			 void (*child)(void));
/*
 * SIGTERM; assert a clean exit (status 0), remove the folder, and assert
 * this process's fd count (and with check_maps its mapping count) is back
 * where tu_daemon_start() found it.
 */
void tu_daemon_stop(struct tu_daemon *d, bool check_maps);
/* Point the symlink `link` at target, atomically (rename(2)): a socket
 * path that a restarted daemon takes over. */
void tu_link_to(const char *link, const char *target);

/*
 * Run $TD_TENSORCTL --socket d->sock ARGS... (NULL-ended) with stdout and
 * stderr in *out (malloc'ed; NULL: dropped); its exit status.
 */
int tu_tensorctl(const struct tu_daemon *d, char **out, ...);

/* Deterministic PRNG (xorshift64*), seeded per test. */
uint64_t tu_rand(uint64_t *state);

#endif
