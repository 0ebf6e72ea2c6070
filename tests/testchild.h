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
	pid_t pid;

	fflush(NULL);
	pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		fn(d, arg);
		_exit(0);
	}
	return pid;
}

/* The child's exit status, or 128 + the signal that ended it. */
static inline int reap(pid_t pid)
{
	int st;

	cr_assert(waitpid(pid, &st, 0) == pid);
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

static inline void hear(int fd)
{
	char b;

	CK(read(fd, &b, 1) == 1);
}

#endif
