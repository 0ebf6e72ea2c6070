/* SPDX-License-Identifier: MIT */
/*
 * Forked test parties (producers, consumers, victims) for the suites that
 * run libtensord in child processes against a tu_daemon: checks that print
 * and _exit (criterion is not there in a child), fork/reap, one-byte pipe
 * rendezvous. Header-only: testutil does not link libtensord.
 */
#ifndef TD_TESTCHILD_H
#define TD_TESTCHILD_H

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tensord/tensord.h"
#include "testutil.h"

#define CK(cond)                                                               \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "child %d: %s:%d: %s\n", getpid(),     \
				__FILE__, __LINE__, #cond);                    \
			_exit(10);                                             \
		}                                                              \
	} while (0)

#define CK_EQ(a, b)                                                            \
	do {                                                                   \
		long long a_ = (long long)(a), b_ = (long long)(b);            \
		if (a_ != b_) {                                                \
			fprintf(stderr, "child %d: %s:%d: %s = %lld, not "     \
					"%lld\n",                              \
				getpid(), __FILE__, __LINE__, #a, a_, b_);     \
			_exit(11);                                             \
		}                                                              \
	} while (0)

/* A client of d, or exit 12 with the reason. */
static inline struct td_client *open_client(const struct tu_daemon *d)
{
	struct td_client *c = NULL;
	struct td_error e = {0};
	int rc = td_client_connect(d->sock, &c, &e);

	if (rc < 0) {
		fprintf(stderr, "connect: %d %s\n", rc, e.reason);
		_exit(12);
	}
	return c;
}

typedef void (*child_fn)(const struct tu_daemon *d, void *arg);

/* fn(d, arg) in a child that dies with this process; its pid. */
static inline pid_t spawn(const struct tu_daemon *d, child_fn fn, void *arg)
{
	pid_t pid = tu_fork();

	if (pid == 0) {
		fn(d, arg);
		_exit(0);
	}
	return pid;
}

/*
 * The child's exit status, or 128 + the signal that ended it. One still
 * running after TU_WAIT_S (stuck, or waiting for a word that never came)
 * is killed and fails the test.
 */
static inline int reap(pid_t pid)
{
	int st = tu_wait_child(pid, TU_WAIT_S, "a child of the test");

	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	return 128 + WTERMSIG(st);
}

/* one byte through a pipe: "I got this far" */
static inline void say(int fd)
{
	char b = 1;

	CK(write(fd, &b, 1) == 1);
}

/*
 * The test waits at most TU_WAIT_S: the pipe has its write end here too,
 * so a child that died before it said its byte would never end the read.
 * A child waits as long as it takes: it dies with the test.
 */
static inline void hear(int fd)
{
	char b;

	if (tu_in_child) {
		CK(read(fd, &b, 1) == 1);
		return;
	}
	tu_await_readable(fd, TU_WAIT_S, "a child's word on a pipe");
	cr_assert_eq(read(fd, &b, 1), 1, "the pipe ended before the word");
}

#endif
