/* SPDX-License-Identifier: MIT */
/* A test's own policy file, for the tests that act as other uids. */
#ifndef TD_TESTS_POLICYFILE_H
#define TD_TESTS_POLICYFILE_H

#include <criterion/criterion.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "tensord/tensord.h"
#include "testutil.h"

/*
 * The file /tmp/td-<tag>-<pid>, its path into path (n bytes), holding
 * the policy fmt formats; the caller unlinks it (a test that fails
 * before leaves it, one that passes not: tu_tmp_note).
 */
__attribute__((format(printf, 4, 5))) static inline void
tu_policy_file(char *path, size_t n, const char *tag, const char *fmt, ...)
{
	va_list ap;
	FILE *f;

	snprintf(path, n, "/tmp/td-%s-%d", tag, (int)getpid());
	f = fopen(path, "w");
	cr_assert(f, "policy file %s", path);
	tu_tmp_note(path);
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fclose(f);
}

/* The policy reloads the daemon counts, as c's STATUS says. */
static inline uint64_t tu_policy_reloads(struct td_client *c)
{
	struct td_status *st = NULL;
	uint64_t n;

	cr_assert_eq(td_client_status(c, &st, NULL), 0);
	n = st->policy_reloads;
	td_status_free(st);
	return n;
}

/* The policy file at path rewritten with text, SIGHUP to the daemon
 * pid, and a wait (at most 10 s) until c's STATUS counts one more
 * reload. */
static inline void tu_policy_reload(struct td_client *c, pid_t pid,
				    const char *path, const char *text)
{
	uint64_t n0 = tu_policy_reloads(c);
	FILE *f = fopen(path, "w");

	cr_assert(f, "policy file %s", path);
	cr_assert_gt(fputs(text, f), -1);
	cr_assert_eq(fclose(f), 0);
	cr_assert_eq(kill(pid, SIGHUP), 0);
	for (int i = 0; i < 2000 && tu_policy_reloads(c) == n0; i++)
		usleep(5000);
	cr_assert_eq(tu_policy_reloads(c), n0 + 1,
		     "the policy was not reloaded");
}

#endif
