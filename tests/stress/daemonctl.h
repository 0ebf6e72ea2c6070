/* SPDX-License-Identifier: MIT */
/*
 * Start and stop a private tensord for the reliability suite, the stress
 * tool and the socket fuzzer: a mkdtemp() folder, its socket and log, the
 * daemon optionally under another uid, a lower RLIMIT_NOFILE, or a
 * wrapper ($TD_TENSORD_WRAP, e.g. "valgrind -q --error-exitcode=99").
 * Plain C (no criterion): everything returns 0 or -errno.
 */
#ifndef TD_TESTS_DAEMONCTL_H
#define TD_TESTS_DAEMONCTL_H

#include <stdint.h>
#include <sys/types.h>

struct tdc_daemon {
	pid_t pid;
	int ready; /* the connection that proved readiness, kept open */
	char dir[64];
	char sock[96];
	char log[128];
};

struct tdc_opts {
	const char *const *extra; /* more tensord arguments, NULL-ended */
	uid_t uid;                /* run as this uid (and its gid); 0 = as is */
	unsigned long nofile;     /* RLIMIT_NOFILE soft = hard; 0 = as is */
	const char *log_level;    /* NULL = "info" */
};

/* Start tensord ($TD_TENSORD or bin) and wait until it accepts. */
int tdc_start(struct tdc_daemon *d, const char *bin,
	      const struct tdc_opts *o);
/* How long tdc_stop() waits: generous for a daemon under valgrind,
 * whose leak check runs at exit. */
#define TDC_STOP_S 120
/*
 * SIGTERM and wait. Returns the exit status (0 = clean), 128 + signal when
 * it died of one, -ETIMEDOUT when it was still running TDC_STOP_S later
 * (it is SIGKILLed then), or -errno. The folder is removed unless
 * keep_dir.
 */
int tdc_stop(struct tdc_daemon *d, int keep_dir);
/* A new SOCK_SEQPACKET connection to path, or -errno. */
int tdc_connect(const char *path);
/* Open fds of pid (/proc/PID/fd), -errno when unreadable. */
int tdc_fd_count(pid_t pid);
/* How many times needle is in d's log (0 when it cannot be read). */
unsigned tdc_log_count(const struct tdc_daemon *d, const char *needle);
/* VmRSS of pid in KiB, -errno. */
long tdc_rss_kb(pid_t pid);
/*
 * Wait (bounded by tries x 10 ms) until pid's fd count is at most want;
 * returns the last count. Disconnects are handled by the daemon in later
 * loop turns, so a count read right after a close may still be high.
 */
int tdc_fd_settle(pid_t pid, int want, int tries);
void tdc_nap_ms(long ms);

#endif
