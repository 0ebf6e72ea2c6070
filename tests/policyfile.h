/* SPDX-License-Identifier: MIT */
/* A test's own policy file, for the tests that act as other uids. */
#ifndef TD_TESTS_POLICYFILE_H
#define TD_TESTS_POLICYFILE_H

#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

/*
 * The file /tmp/td-<tag>-<pid>, its path into path (n bytes), holding
 * the policy fmt formats; the caller unlinks it.
 */
__attribute__((format(printf, 4, 5))) static inline void
tu_policy_file(char *path, size_t n, const char *tag, const char *fmt, ...)
{
	va_list ap;
	FILE *f;

	snprintf(path, n, "/tmp/td-%s-%d", tag, (int)getpid());
	f = fopen(path, "w");
	cr_assert(f, "policy file %s", path);
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fclose(f);
}

#endif
