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

struct td_malloc_counts;
/*
 * A page the malloc-count shim (tests/malloc-count.c) counts into, shared
 * with the daemon or tool it is preloaded in (LD_PRELOAD=$TD_MALLOC_COUNT,
 * TD_MALLOC_COUNT_FILE=path): its file is path, a mkstemp template
 * ("/tmp/td-heap-XXXXXX") filled in. munmap() its 4096 bytes and unlink
 * path when done.
 */
volatile struct td_malloc_counts *tu_counts_map(char *path);

/*
 * The value of metric `name` (a counter of the daemon's /metrics, e.g.
 * "tensord_store_visits_total") from a daemon serving HTTP on the unix
 * socket at path (`--http unix:PATH`); asserts that it is there.
 */
unsigned long long tu_metric_unix(const char *path, const char *name);
/* Whether that /metrics response holds text anywhere. */
bool tu_metrics_has(const char *path, const char *text);

/* A field of /proc/self/task/TID/status: the state letter (key
 * "State:") or a number (e.g. "voluntary_ctxt_switches:"); -1 when the
 * thread is gone. */
long tu_task_field(pid_t tid, const char *key);

/*
 * A test's files under /tmp (docs/testing.md, "Temporary files"):
 * tu_mkdtemp() and tu_mkstemp() make one as mkdtemp()/mkstemp() do and
 * tu_tmp_note() notes one made otherwise (a path under /tmp/td-; others
 * are not noted). Once all its tests ended, the test binary's runner
 * removes what each test that did not fail noted, folders with what is
 * in them (not one with a file system mounted in it); a failed test's
 * stay for the post-mortem (a daemon's log, a snapshot).
 */
char *tu_mkdtemp(char *tmpl);
int tu_mkstemp(char *tmpl);
void tu_tmp_note(const char *path);

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
/* A tmpfs mounted at mnt (which exists) with mount options opts, in a
 * mount namespace of this process's own (unshared, made private): 0, or
 * -errno where none can be made (root needed). */
int tu_private_tmpfs(const char *mnt, const char *opts);
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
 * buffer mappings are compared (LeakSanitizer covers the heap); so too
 * under TSan, whose runtime maps shadow and per-thread state as it goes.
 */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TU_CHECK_ALL_MAPS 0
#else
#define TU_CHECK_ALL_MAPS 1
#endif

/*
 * A child's peak resident size (tu_ctl_run) under bound. Under ASan the
 * shadow of every mapping it read and its runtime are in that peak,
 * whatever the child holds (a save of 4 x 64 MiB: 6 MiB plain, 53-64
 * MiB with ASan): the plain build checks the bounds, the sanitized one
 * the rest.
 */
#ifdef __SANITIZE_ADDRESS__
#define TU_BOUNDED(peak, bound) ((void)(peak), (void)(bound), true)
#else
#define TU_BOUNDED(peak, bound) ((peak) < (bound))
#endif

/*
 * How long a test waits for what takes well under a second when all is
 * well (a child's exit, a command, a reply, a rendezvous) before it fails
 * saying what it waited for: a hang must be a named failure, never the
 * suite's timeout, which hides the test that broke and costs the whole
 * run. Generous for ASan on a loaded machine; it asserts nothing about
 * speed.
 */
#define TU_WAIT_S 60

/*
 * Every suite's timeout for each of its tests (criterion kills the test's
 * process and names the test): the last bound, for waits that must stay
 * without deadline (only such a wait finds a lost wake-up: one with a
 * deadline finds the version after it) and for any wait not bounded
 * otherwise. Far above any test's run under ASan on a loaded machine, and
 * below meson's 300 s for a whole suite. A test may set its own.
 */
#define TU_TEST_TIMEOUT_S 240

/* Set in a child of tu_fork(): who is to fail how (testchild.h). */
extern bool tu_in_child;
/*
 * fork() for a test (stdio flushed first): the child is SIGKILLed when
 * this process ends, so a test that fails or times out leaves no helper
 * blocked for ever holding the suite's stdout and stderr, which meson
 * waits for. The signal comes when the calling thread ends (fork from
 * the test's own), and a change of uid clears it: a child that changes
 * its uid sets it again (prctl(PR_SET_PDEATHSIG, SIGKILL)).
 */
pid_t tu_fork(void);
/*
 * A child of tu_fork() becomes uid and gid, with no other groups, and
 * still dies with its parent: the uid change cleared PR_SET_PDEATHSIG,
 * set again here (a child left running as nobody after its test's
 * daemon died outlived the suite). 0, or -errno.
 */
int tu_become(uid_t uid, gid_t gid);

/* How tu_ctl_run() runs tensorctl: stdin from in (NULL: /dev/null),
 * stdout to out and stderr to err (files, made or emptied; out == err:
 * one file for both), as uid (0: ours). */
struct tu_ctl_how {
	const char *in, *out, *err;
	uid_t uid;
};

/*
 * $TD_TENSORCTL --socket SOCK ARGS... (NULL-ended) as h says: its exit
 * status (128 + a signal), its peak resident size in bytes in *peak
 * (NULL: not wanted; wait4's ru_maxrss, the kernel's VmHWM of the child,
 * shared pages of mappings included). Forked from the test, which holds
 * no large private memory: the fork's copy before exec counts, and
 * stays small.
 */
int tu_ctl_run(const char *sock, struct tu_ctl_how h, uint64_t *peak,
	       ...);
/*
 * Reap child pid within secs seconds: true, its wait status in *st (may
 * be NULL). false when it was still running then: it is SIGKILLed and
 * reaped (*st says so); the caller says what that means.
 */
bool tu_reap_within(pid_t pid, int secs, int *st);
/* The same, and a child still running after secs fails the test, `what`
 * naming it. Its wait status. */
int tu_wait_child(pid_t pid, int secs, const char *what);
/* Until fd is readable (or at its end), at most secs seconds; otherwise
 * the test fails saying what did not come. */
void tu_await_readable(int fd, int secs, const char *what);
/*
 * Read fds[0..n) (n <= 4) of child pid to their ends, all at once so that
 * none fills while another is read, into out[k] (malloc'ed, NUL-ended;
 * the fds are closed), then reap pid: its wait status. All within secs,
 * or pid is SIGKILLed and the test fails, `what` naming it.
 */
int tu_collect(pid_t pid, int n, const int *fds, char **out, int secs,
	       const char *what);

/*
 * Run argv (argv[0] a path) with stdout captured into a malloc'ed NUL-
 * terminated string (*out) and return its exit status (or 128+signal).
 * One not done within TU_WAIT_S fails the test.
 */
int tu_run_capture(char *const argv[], char **out);
/* The same with stderr captured too, into the same string. */
int tu_run_capture_all(char *const argv[], char **out);
/* tu_run_capture() for what may take longer (an interpreter that starts
 * slowly): within secs. */
int tu_run_capture_in(char *const argv[], char **out, int secs);
/*
 * Start argv (argv[0] a path) with its stdout on a pipe, read through *out
 * (fclose it); returns the pid (tu_wait_child it). The program is killed
 * by SIGALRM after TU_WAIT_S (its output then ends), so a reader that
 * waits for a line that never comes fails instead of hanging.
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
 * SIGTERM; assert a clean exit (status 0) within TU_WAIT_S (one that does
 * not exit is SIGKILLed and the test fails saying so), remove the folder,
 * and assert this process's fd count (and with check_maps its mapping
 * count) is back where tu_daemon_start() found it. A daemon stopped
 * already is left alone, so a test body calls this (criterion does not
 * count asserts that fail in a .fini) and its .fini may call it again
 * to clean up after a body that failed first.
 */
void tu_daemon_stop(struct tu_daemon *d, bool check_maps);
/* the same, the daemon's exit status expected to be want (0 above) */
void tu_daemon_stop_status(struct tu_daemon *d, bool check_maps, int want);
/* SIGKILL the daemon (a crash, a restart to come), reap it and remove
 * its socket and folder; no check of its exit or of fds. */
void tu_daemon_kill(struct tu_daemon *d);
/*
 * A SOCK_SEQPACKET listener bound at path (replaced) that nobody serves:
 * connections queue up to backlog and nobody answers (a wrong or stopped
 * daemon). The caller closes it and unlinks path.
 */
int tu_mute_listener(const char *path, int backlog);
/*
 * tu_mute_listener(path, 0) whose queue is full: *first is the one
 * connection a backlog of 0 queues, and the next connect() to path waits
 * (a stopped daemon many clients tried). The caller closes both.
 */
int tu_full_listener(const char *path, int *first);
/* Point the symlink `link` at target, atomically (rename(2)): a socket
 * path that a restarted daemon takes over. */
void tu_link_to(const char *link, const char *target);
/*
 * The LD_PRELOAD shim tests/raise-before-open.c in this process's
 * environment, for the programs it execs next (a sanitized one is told
 * its runtime need not come first), with var=value for its orders.
 * tu_shim_off(var) takes both out again.
 */
void tu_shim_on(const char *var, const char *value);
void tu_shim_off(const char *var);

/*
 * Run $TD_TENSORCTL --socket d->sock ARGS... (NULL-ended) with stdout and
 * stderr in *out (malloc'ed; NULL: dropped); its exit status.
 */
int tu_tensorctl(const struct tu_daemon *d, char **out, ...);

/* Deterministic PRNG (xorshift64*), seeded per test. */
uint64_t tu_rand(uint64_t *state);

#endif
