/* SPDX-License-Identifier: MIT */
/*
 * Not a suite: the program tmp-cleanup.sh runs to check testutil's
 * temporary files (tu_tmp_note). One test passes and one fails on
 * purpose; each makes a folder with a file and a folder in it, a file,
 * and a folder from a child process, and writes their paths to
 * $TD_TMPDEMO_OUT/<test name>. The two cases of a third, parameterized
 * test run side by side and share a name: the first one's end must not
 * take the other's folder.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <fcntl.h>
#include <stdio.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

static void make_some(const char *who)
{
	const char *out = getenv("TD_TMPDEMO_OUT");
	char dir[] = "/tmp/td-tmpdemo-XXXXXX", file[] = "/tmp/td-tmpdemo-XXXXXX";
	char sub[64], list[256];
	FILE *f;
	int fd, st;
	pid_t pid;

	cr_assert(out, "TD_TMPDEMO_OUT is not set (run by tmp-cleanup.sh)");
	snprintf(list, sizeof(list), "%s/%s", out, who);
	f = fopen(list, "w");
	cr_assert(f);
	cr_assert(tu_mkdtemp(dir));
	snprintf(sub, sizeof(sub), "%s/sub", dir);
	cr_assert_eq(mkdir(sub, 0700), 0);
	snprintf(sub, sizeof(sub), "%s/sub/file", dir);
	fd = creat(sub, 0600);
	cr_assert_geq(fd, 0);
	close(fd);
	fd = tu_mkstemp(file);
	cr_assert_geq(fd, 0);
	close(fd);
	fprintf(f, "%s\n%s\n", dir, file);
	fflush(f);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		char d2[] = "/tmp/td-tmpdemo-XXXXXX";

		if (!tu_mkdtemp(d2))
			_exit(1);
		fprintf(f, "%s\n", d2);
		fflush(f);
		_exit(0);
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	fprintf(f, "list %s\n", getenv("TU_TMP_LIST"));
	cr_assert_eq(fclose(f), 0);
}

Test(demo, passes)
{
	make_some("passes");
}

Test(demo, fails)
{
	make_some("fails");
	cr_assert_fail("fails on purpose: its files must stay");
}

ParameterizedTestParameters(demo, parameterized)
{
	static int cases[] = {0, 1};

	return cr_make_param_array(int, cases, 2);
}

/*
 * Case 0 ends as soon as case 1 made its folder; case 1 looks at its
 * folder once case 0 ended, and writes "lost" where it is gone.
 */
ParameterizedTest(int *c, demo, parameterized)
{
	const char *out = getenv("TD_TMPDEMO_OUT");
	char dir[] = "/tmp/td-tmpdemo-XXXXXX", mine[256], other[256];
	FILE *f;

	cr_assert(out, "TD_TMPDEMO_OUT is not set (run by tmp-cleanup.sh)");
	snprintf(mine, sizeof(mine), "%s/parameterized-%d", out, *c);
	snprintf(other, sizeof(other), "%s/parameterized-%d", out, !*c);
	cr_assert(tu_mkdtemp(dir));
	f = fopen(mine, "w");
	cr_assert(f);
	fprintf(f, "%s\n", dir);
	cr_assert_eq(fclose(f), 0);
	if (*c == 0) {
		for (int i = 0; i < 1000 && access(other, F_OK); i++)
			poll(NULL, 0, 10);
		return;
	}
	/* case 0 has ended, and its runner's report of it is made */
	poll(NULL, 0, 500);
	if (access(dir, F_OK)) {
		f = fopen(mine, "a");
		cr_assert(f);
		fprintf(f, "lost\n");
		fclose(f);
	}
}
