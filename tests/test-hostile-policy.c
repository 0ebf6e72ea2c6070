/* SPDX-License-Identifier: MIT */
/*
 * What a reader can make the daemon's policy cost (daemon/policy.c,
 * daemon/quota.c). Needs root to act as other uids.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tensord/tensord.h"
#include "testutil.h"

TestSuite(hostile_policy, .timeout = TU_TEST_TIMEOUT_S);

#define WRITER 60001u
#define NOBODY 65534u
#define NAME "cov/cam"
#define SCANNED "(rules scanned)"

static void become(uid_t uid)
{
	if (setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 ||
	    setresuid(uid, uid, uid) < 0)
		_exit(10);
}

static struct td_client *child_conn(const char *sock)
{
	struct td_client *c = NULL;

	if (setenv("TENSORD_GET_FOLLOW", "0", 1) < 0 ||
	    td_client_connect(sock, &c, NULL) < 0)
		_exit(11);
	return c;
}

/* The writer: a stream of NAME (recyclable buffers), then it stays
 * connected (the versions' buffers stay its own) until `in` closes. */
static int writer(const char *sock, int out, int in)
{
	static const uint64_t shape[1] = {64};
	struct td_client *c;
	char x;

	become(WRITER);
	c = child_conn(sock);
	for (int i = 0; i < 3; i++) {
		uint64_t size = 64;
		struct td_alloc *a = NULL;
		struct td_publish p = {.name = NAME, .dtype = TD_TENSOR_U8,
				       .ndim = 1, .shape = shape,
				       .fence_fd = -1};

		if (td_client_alloc_named(c, NAME, 1, &size, TD_ALLOC_STREAM,
					  &a, NULL) < 0 ||
		    td_client_publish_alloc(c, a, &p, NULL, NULL) < 0)
			return 12;
	}
	if (write(out, "w", 1) != 1)
		return 13;
	(void)read(in, &x, 1);
	td_client_close(c);
	return 0;
}

/* The reader: n GETs of NAME as nobody. */
static int reader(const char *sock, int n)
{
	struct td_client *c;

	become(NOBODY);
	c = child_conn(sock);
	for (int i = 0; i < n; i++) {
		struct td_tensor *t = NULL;

		if (td_client_get(c, NAME, &t, NULL) < 0)
			return 20 + (i > 0);
		td_tensor_release(t);
	}
	td_client_close(c);
	return 0;
}

static void run_reader(const struct tu_daemon *d, int n)
{
	pid_t pid = tu_fork();
	int st;

	if (pid == 0)
		_exit(reader(d->sock, n));
	st = tu_wait_child(pid, 30, "the reader");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "reader: %#x", st);
}

/* Lines of the daemon's log that say it scanned the rules. */
static int scans(const char *log)
{
	FILE *f = fopen(log, "r");
	char line[1024];
	int n = 0;

	cr_assert(f);
	while (fgets(line, sizeof(line), f))
		n += strstr(line, SCANNED) != NULL;
	fclose(f);
	return n;
}

static uint64_t reloads(const struct tu_daemon *d)
{
	struct td_client *c = NULL;
	struct td_status *st = NULL;
	uint64_t n;

	cr_assert_eq(td_client_connect(d->sock, &c, NULL), 0);
	cr_assert_eq(td_client_status(c, &st, NULL), 0);
	n = st->policy_reloads;
	td_status_free(st);
	td_client_close(c);
	return n;
}

/*
 * Whether a reader may read every name the producer of a recyclable
 * buffer may write decides whether the buffer is bound to the name it
 * was shown under (docs/fastpath.md, "Across names"). That answer scans
 * every allow rule, and while it is yes it was asked again at every GET:
 * under a 220 KB policy of 1022 long prefixes, the daemon's CPU per GET
 * went from 25 to 270 us. It is asked once per reader, writer and
 * policy now.
 */
Test(hostile_policy, a_reader_costs_one_rule_scan_per_writer_and_reload)
{
	char policy[64], log[64];
	const char *args[] = {"--socket-mode", "0666", "--policy", policy,
			      NULL};
	struct tu_daemon d;
	int to_w[2], from_w[2], st;
	uint64_t r0;
	pid_t w;
	FILE *f;
	char x;

	if (geteuid() != 0)
		cr_skip_test("needs root to act as other uids");
	snprintf(policy, sizeof(policy), "/tmp/td-hpol-%d", (int)getpid());
	snprintf(log, sizeof(log), "/tmp/td-hpol-%d.log", (int)getpid());
	f = fopen(policy, "w");
	cr_assert(f);
	fprintf(f, "allow uid=%u rw cov/\nallow uid=%u r cov/\n", WRITER,
		NOBODY);
	fclose(f);
	unlink(log);
	tu_daemon_start_log(&d, "debug", args, log, NULL);
	cr_assert_eq(chmod(d.dir, 0755), 0);
	cr_assert_eq(pipe(to_w), 0);
	cr_assert_eq(pipe(from_w), 0);
	w = tu_fork();
	if (w == 0) {
		close(to_w[1]);
		close(from_w[0]);
		_exit(writer(d.sock, from_w[1], to_w[0]));
	}
	close(to_w[0]);
	close(from_w[1]);
	cr_assert_eq(read(from_w[0], &x, 1), 1, "the writer did not publish");
	run_reader(&d, 20);
	cr_assert_eq(scans(log), 1, "%d rule scans for 20 GETs of one "
		     "writer's buffers", scans(log));
	/* a reload may change the answer: asked again, once */
	r0 = reloads(&d);
	cr_assert_eq(kill(d.pid, SIGHUP), 0);
	for (int i = 0; i < 500 && reloads(&d) == r0; i++)
		usleep(10 * 1000);
	cr_assert_eq(reloads(&d), r0 + 1);
	run_reader(&d, 5);
	cr_assert_eq(scans(log), 2, "%d rule scans", scans(log));
	close(to_w[1]);
	st = tu_wait_child(w, 30, "the writer");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "writer: %#x", st);
	close(from_w[0]);
	tu_daemon_stop(&d, true);
	unlink(policy);
	unlink(log);
}
