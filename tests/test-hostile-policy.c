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
#include "policyfile.h"
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
	char x;

	if (geteuid() != 0)
		cr_skip_test("needs root to act as other uids");
	tu_policy_file(policy, sizeof(policy), "hpol",
		       "allow uid=%u rw cov/\nallow uid=%u r cov/\n", WRITER,
		       NOBODY);
	snprintf(log, sizeof(log), "/tmp/td-hpol-%d.log", (int)getpid());
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

/* ---- LIST under a policy: the names a reader may read, exactly ---- */

#define LS_META 4000 /* a page of LIST holds some 15 entries */
#define LS_MAX 256

static char ls_names[LS_MAX][32];
static unsigned ls_count;

static bool ls_readable(const char *n)
{
	return strncmp(n, "b/", 2) == 0 || strncmp(n, "d/x", 3) == 0 ||
	       strncmp(n, "f/", 2) == 0;
}

static int ls_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* The reader: LIST of each prefix as NOBODY against what it may read. */
static int ls_reader(const char *sock)
{
	static const char *const prefixes[] = {"", "b/", "c/", "d/", "d/x",
					       "d/x1", "f/", "g/"};
	struct td_client *c;

	become(NOBODY);
	c = child_conn(sock);
	for (unsigned k = 0; k < sizeof(prefixes) / sizeof(*prefixes); k++) {
		const char *pf = prefixes[k];
		struct td_entry *list = NULL;
		struct td_error e = {0};
		size_t count = 0, want = 0;

		if (td_client_list(c, pf, &list, &count, &e) < 0) {
			fprintf(stderr, "list \"%s\": %s\n", pf, e.reason);
			return 30;
		}
		for (unsigned i = 0; i < ls_count; i++) {
			const char *n = ls_names[i];

			if (strncmp(n, pf, strlen(pf)) != 0 || !ls_readable(n))
				continue;
			if (want >= count || strcmp(list[want].name, n) != 0) {
				fprintf(stderr, "list \"%s\" #%zu: \"%s\", "
					"want \"%s\"\n", pf, want,
					want < count ? list[want].name : "-",
					n);
				return 31;
			}
			/* rings are listed as rings */
			if (!(list[want].flags & TD_ENTRY_RING) !=
			    !strstr(n, "ring")) {
				fprintf(stderr, "\"%s\": flags %#x\n", n,
					list[want].flags);
				return 32;
			}
			want++;
		}
		if (want != count) {
			fprintf(stderr, "list \"%s\": %zu names, want %zu\n",
				pf, count, want);
			return 33;
		}
		td_entry_list_free(list, count);
	}
	td_client_close(c);
	return 0;
}

/*
 * Runs of readable names (b/, d/x, f/) between runs of others' (a/, c/,
 * d/w, d/y, e/, g/), rings among both, over many pages (big metadata,
 * few entries a page): LIST jumps the runs it may not read and must
 * list exactly the names it may, in order, whichever prefix it asks.
 */
Test(hostile_policy, a_list_shows_exactly_the_readable_names_across_runs)
{
	static const char *const runs[] = {"a/", "b/", "c/", "d/w", "d/x",
					   "d/y", "e/", "f/", "g/"};
	static const char *const rings[] = {"a/ring", "b/n0007ring",
					    "d/x0ring", "d/yring",
					    "f/ring9", "zring"};
	static uint8_t meta[LS_META];
	char policy[64];
	const char *args[] = {"--socket-mode", "0666", "--policy", policy,
			      NULL};
	struct td_ring *rr[sizeof(rings) / sizeof(*rings)];
	struct td_entry *all = NULL;
	struct td_client *c = NULL;
	struct td_error e = {0};
	struct tu_daemon d;
	size_t count = 0;
	unsigned readable = 0;
	pid_t pid;
	int st;

	if (geteuid() != 0)
		cr_skip_test("needs root to act as other uids");
	/* the reader's prefixes, and others' between them */
	tu_policy_file(policy, sizeof(policy), "hpls",
		       "allow uid=%u r b/\nallow uid=%u r d/x\n"
		       "allow uid=%u r f/\nallow uid=%u rw a/\n"
		       "allow uid=%u rw d/\nallow uid=%u r c/\n",
		       NOBODY, NOBODY, NOBODY, WRITER, WRITER, WRITER);
	tu_daemon_start_args(&d, "warn", args);
	cr_assert_eq(chmod(d.dir, 0755), 0);
	cr_assert_eq(td_client_connect(d.sock, &c, &e), 0, "%s", e.reason);
	memset(meta, 0x6d, sizeof(meta));
	ls_count = 0;
	for (unsigned r = 0; r < sizeof(runs) / sizeof(*runs); r++) {
		/* the readable runs short, the others long */
		unsigned n = ls_readable(runs[r]) ? 22 : 30;

		for (unsigned k = 0; k < n; k++) {
			static const uint64_t shape[1] = {8};
			static const uint8_t bytes[8];
			char *name = ls_names[ls_count++];
			struct td_publish p = {.name = name,
					       .dtype = TD_TENSOR_U8,
					       .ndim = 1, .shape = shape,
					       .fence_fd = -1, .meta = meta,
					       .meta_len = sizeof(meta)};

			snprintf(name, 32, "%sn%04u", runs[r], k);
			cr_assert_eq(td_client_put(c, &p, bytes, sizeof(bytes),
						   NULL, &e),
				     0, "put %s: %s", name, e.reason);
		}
	}
	for (unsigned r = 0; r < sizeof(rings) / sizeof(*rings); r++) {
		uint64_t size = 64;
		struct td_ring_desc desc = {.dtype = TD_TENSOR_U8, .ndim = 1,
					    .shape = &size, .slot_count = 2};

		cr_assert_eq(td_ring_create(c, rings[r], &desc, &rr[r], &e), 0,
			     "ring %s: %s", rings[r], e.reason);
		strcpy(ls_names[ls_count++], rings[r]);
	}
	qsort(ls_names, ls_count, sizeof(*ls_names), ls_cmp);
	for (unsigned i = 0; i < ls_count; i++)
		readable += ls_readable(ls_names[i]);
	cr_assert_gt(readable, 60);
	/* the operator lists everything */
	cr_assert_eq(td_client_list(c, "", &all, &count, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(count, ls_count);
	td_entry_list_free(all, count);
	pid = tu_fork();
	if (pid == 0)
		_exit(ls_reader(d.sock));
	st = tu_wait_child(pid, 60, "the lister");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "lister: %#x", st);
	for (unsigned r = 0; r < sizeof(rings) / sizeof(*rings); r++)
		td_ring_close(rr[r]);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	unlink(policy);
}
