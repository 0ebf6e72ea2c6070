/* SPDX-License-Identifier: MIT */
/*
 * Recyclable loans across names (docs/fastpath.md, "Across names"): a
 * buffer the daemon sent to a reader with other credentials stays bound
 * to the name it was read under. The reader here is user nobody in a
 * forked child, allowed by the policy to read cam/ only; it keeps every
 * buffer it was sent mapped, as a hostile reader would. The producer
 * (root, the daemon's own uid) then writes a secret under priv/ from an
 * unnamed recyclable loan, a rewrite take-back and a stream's lent loan:
 * none of them may land in a buffer the reader still maps. Nor from a
 * producer with the reader's own credentials that may write priv/ but
 * not read it, nor through the pages an HTTP response had queued. Loans
 * named for the name (td_client_alloc_named) still get those buffers
 * back, and may be published under that name only, which the daemon
 * enforces too (a raw client). tu_daemon_stop() checks fds and memfd
 * mappings.
 *
 * Needs root (a second uid for the reader).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rawclient.h"
#include "tensord/tensord.h"
#include "testchild.h"
#include "testclient.h"
#include "testutil.h"

TestSuite(loan_names, .timeout = TU_TEST_TIMEOUT_S);

#define NOBODY 65534
#define SIZE 4096u
#define SECRET 'S'

/* ---- the reader: user nobody, driven through a pipe ---- */

struct rcmd {
	char op; /* 'g' get, 'c' check, 'd' denied get, 'a' alloc,
		  * 'p' publish (a second connection), 'q' quit */
	uint8_t byte;
	char name[64];
};

struct reader {
	int cmd[2], rep[2];
	pid_t pid;
};

#define MAX_KEPT 64

/*
 * 'g': GET name (its bytes all `byte`), keep the plane's fd mapped,
 * release; answers the inode. 'c': 1 when no byte of any kept mapping
 * is `byte`, else 0. 'd': -rc of a GET of name. 'a': -rc of a named
 * recyclable alloc of name. 'p': publish an unnamed recyclable loan
 * filled with `byte` as name from a second connection (a producer with
 * the reader's credentials); answers its inode.
 */
static void reader_main(const struct tu_daemon *d, void *arg)
{
	struct reader *r = arg;
	const uint8_t *kept[MAX_KEPT];
	unsigned nkept = 0;
	struct td_client *c, *pc;

	CK(setgroups(0, NULL) == 0);
	CK(setgid(NOBODY) == 0);
	CK(setuid(NOBODY) == 0);
	/* a credential change clears the parent-death signal: again (it
	 * would read its commands for ever after a failed test) */
	CK(prctl(PR_SET_PDEATHSIG, SIGKILL) == 0);
	c = open_client(d);
	pc = open_client(d);
	for (;;) {
		struct td_entry ent = {0};
		struct td_error e = {0};
		struct td_tensor *t = NULL;
		struct td_alloc *a = NULL;
		uint64_t ans = 0, size = SIZE;
		struct rcmd m;
		struct stat st;
		int fd;

		CK(read(r->cmd[0], &m, sizeof(m)) == (ssize_t)sizeof(m));
		switch (m.op) {
		case 'g':
			CK(nkept < MAX_KEPT);
			CK(td_client_get(c, m.name, &t, &e) == 0);
			fd = dup(td_tensor_plane_fd(t, 0));
			CK(fd >= 0 && fstat(fd, &st) == 0 && st.st_size == SIZE);
			kept[nkept] = mmap(NULL, SIZE, PROT_READ, MAP_SHARED,
					   fd, 0);
			CK(kept[nkept] != MAP_FAILED);
			for (unsigned i = 0; i < SIZE; i++)
				CK_EQ(kept[nkept][i], m.byte);
			nkept++;
			td_tensor_release(t);
			/* answered after the RELEASE: the lease is gone */
			CK(td_client_stat(c, m.name, &ent, &e) == 0);
			td_entry_fini(&ent);
			ans = st.st_ino;
			break;
		case 'c':
			ans = 1;
			for (unsigned k = 0; k < nkept; k++)
				for (unsigned i = 0; i < SIZE; i++)
					if (kept[k][i] == m.byte)
						ans = 0;
			break;
		case 'd':
			ans = (uint64_t)-td_client_get(c, m.name, &t, &e);
			if (t)
				td_tensor_release(t);
			break;
		case 'a':
			ans = (uint64_t)-td_client_alloc_named(
				c, m.name, 1, &size, TD_ALLOC_RECYCLE, &a, &e);
			td_alloc_free(a);
			break;
		case 'p': {
			uint64_t shape[1] = {SIZE};
			struct td_publish pub = {.name = m.name,
						 .dtype = TD_TENSOR_U8,
						 .ndim = 1, .shape = shape};

			CK(td_client_alloc_ex(pc, 1, &size, TD_ALLOC_RECYCLE,
					      &a, &e) == 0);
			CK(fstat(td_alloc_fd(a, 0), &st) == 0);
			memset(td_alloc_data(a, 0), m.byte, SIZE);
			CK(td_client_publish_alloc(pc, a, &pub, NULL, &e) == 0);
			ans = st.st_ino;
			break;
		}
		default:
			td_client_close(pc);
			td_client_close(c);
			return; /* the fds and mappings go with the process */
		}
		CK(write(r->rep[1], &ans, sizeof(ans)) == (ssize_t)sizeof(ans));
	}
}

static uint64_t ask(struct reader *r, char op, const char *name,
		    uint8_t byte)
{
	struct rcmd m = {.op = op, .byte = byte};
	uint64_t ans;

	snprintf(m.name, sizeof(m.name), "%s", name ? name : "");
	cr_assert_eq(write(r->cmd[1], &m, sizeof(m)), (ssize_t)sizeof(m));
	/* this process holds rep[1] too: a dead reader is no EOF */
	tu_await_readable(r->rep[0], TU_WAIT_S, "the reader's answer");
	cr_assert_eq(read(r->rep[0], &ans, sizeof(ans)),
		     (ssize_t)sizeof(ans), "the reader died; see stderr");
	return ans;
}

/* The reader GETs name (all bytes b) and keeps it mapped: its inode. */
static ino_t reader_get(struct reader *r, const char *name, uint8_t b)
{
	return (ino_t)ask(r, 'g', name, b);
}

/* Nothing the reader keeps mapped shows the secret. */
static void reader_clean(struct reader *r, int line)
{
	cr_assert_eq(ask(r, 'c', NULL, SECRET), 1,
		     "line %d: the reader sees the secret", line);
}

/* ---- the daemon, under a policy that lets nobody read cam/ only ---- */

struct world {
	struct tu_daemon d;
	char policy[64];
	struct reader r;
};

/* extra: more tensord arguments (NULL-ended, at most 4; NULL none) */
static void world_start_ex(struct world *w, const char *rules,
			   const char *const *extra)
{
	const char *args[10] = {"--socket-mode", "0666", "--policy",
				w->policy};
	int fd;

	for (int i = 0; extra && extra[i] && i < 4; i++)
		args[4 + i] = extra[i];
	if (geteuid() != 0)
		cr_skip_test("needs CAP_SETUID (root): the reader runs as "
			     "another uid");
	snprintf(w->policy, sizeof(w->policy), "/tmp/td-names-XXXXXX");
	fd = tu_mkstemp(w->policy);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, rules, strlen(rules)), (ssize_t)strlen(rules));
	close(fd);
	cr_assert_eq(chmod(w->policy, 0644), 0);
	tu_daemon_start_args(&w->d, "warn", args);
	/* nobody must reach the socket */
	cr_assert_eq(chmod(w->d.dir, 0755), 0);
	cr_assert_eq(pipe(w->r.cmd), 0);
	cr_assert_eq(pipe(w->r.rep), 0);
	w->r.pid = spawn(&w->d, reader_main, &w->r);
}

static void world_start(struct world *w)
{
	world_start_ex(w, "allow uid=65534 r cam/\n", NULL);
}

static void world_stop(struct world *w)
{
	struct rcmd q = {.op = 'q'};

	cr_assert_eq(write(w->r.cmd[1], &q, sizeof(q)), (ssize_t)sizeof(q));
	cr_assert_eq(reap(w->r.pid), 0, "the reader failed; see stderr");
	for (int i = 0; i < 2; i++) {
		close(w->r.cmd[i]);
		close(w->r.rep[i]);
	}
	unlink(w->policy);
	tu_daemon_stop(&w->d, true);
}

/* ---- the producer: root ---- */

static struct td_client *producer(const struct tu_daemon *d,
				  const char *import)
{
	struct td_client *c = NULL;
	struct td_error e = {0};

	cr_assert_eq(setenv("TENSORD_IMPORT", import, 1), 0);
	cr_assert_eq(td_client_connect(d->sock, &c, &e), 0, "%s", e.reason);
	return c;
}

/* A loan of one SIZE plane for name (NULL: unnamed) with flags. */
static struct td_alloc *loan(struct td_client *c, const char *name,
			     uint32_t flags)
{
	struct td_alloc *a = NULL;
	struct td_error e = {0};
	uint64_t size = SIZE;

	cr_assert_eq(td_client_alloc_named(c, name, 1, &size, flags, &a, &e),
		     0, "%s", e.reason);
	return a;
}

static ino_t loan_ino(const struct td_alloc *a)
{
	struct stat st;

	cr_assert_eq(fstat(td_alloc_fd(a, 0), &st), 0);
	return st.st_ino;
}

/* Fill a with b and publish it as name: 0 and *v, or -errno. */
static int publish(struct td_client *c, struct td_alloc *a, const char *name,
		   uint8_t b, uint64_t *v)
{
	uint64_t shape[1] = {SIZE};
	struct td_publish p = {.name = name, .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = shape};
	struct td_error e = {0};

	memset(td_alloc_data(a, 0), b, SIZE);
	return td_client_publish_alloc(c, a, &p, v, &e);
}

static uint64_t publish_ok(struct td_client *c, struct td_alloc *a,
			   const char *name, uint8_t b)
{
	uint64_t v = 0;

	cr_assert_eq(publish(c, a, name, b, &v), 0, "publish %s", name);
	return v;
}

static uint64_t current(struct td_client *c, const char *name)
{
	struct td_entry ent = {0};
	struct td_error e = {0};
	uint64_t v;

	cr_assert_eq(td_client_stat(c, name, &ent, &e), 0, "%s", e.reason);
	v = ent.version;
	td_entry_fini(&ent);
	return v;
}

/* ---- the tests ---- */

static void unnamed_loans(const char *import)
{
	struct world w;
	struct td_client *c;
	struct td_alloc *a;
	uint64_t v;
	ino_t seen;

	world_start(&w);
	c = producer(&w.d, import);
	a = loan(c, NULL, TD_ALLOC_RECYCLE);
	seen = loan_ino(a);
	publish_ok(c, a, "cam/x", 'A');
	cr_assert_eq(reader_get(&w.r, "cam/x", 'A'), seen);
	/* the next version retires it: free, bound to cam/x */
	publish_ok(c, loan(c, NULL, 0), "cam/x", 'B');

	/* a loan named for another name does not get it */
	a = loan(c, "priv/z", TD_ALLOC_RECYCLE);
	cr_assert_neq(loan_ino(a), seen);
	publish_ok(c, a, "priv/z", SECRET);
	reader_clean(&w.r, __LINE__);

	/* a loan named cam/x does: still recycled */
	a = loan(c, "cam/x", TD_ALLOC_RECYCLE);
	cr_assert_eq(loan_ino(a), seen, "a loan for cam/x was not recycled");
	publish_ok(c, a, "cam/x", 'C');
	publish_ok(c, loan(c, NULL, 0), "cam/x", 'D');

	/* an unnamed loan does not */
	a = loan(c, NULL, TD_ALLOC_RECYCLE);
	cr_assert_neq(loan_ino(a), seen, "an unnamed loan got a buffer the "
		      "reader of cam/x maps");
	publish_ok(c, a, "priv/y", SECRET);
	reader_clean(&w.r, __LINE__);
	cr_assert_eq(ask(&w.r, 'd', "priv/y", 0), EACCES);

	/* a named loan may be published under its name only */
	v = current(c, "priv/y");
	a = loan(c, "cam/x", TD_ALLOC_RECYCLE);
	cr_assert_eq(publish(c, a, "priv/y", 'E', NULL), -EINVAL);
	cr_assert_eq(current(c, "priv/y"), v);
	td_client_close(c);
	world_stop(&w);
}

Test(loan_names, an_unnamed_loan_never_gets_a_buffer_another_uid_maps_pidfd)
{
	unnamed_loans("pidfd");
}

Test(loan_names, an_unnamed_loan_never_gets_a_buffer_another_uid_maps_scm)
{
	unnamed_loans("scm");
}

Test(loan_names, a_rewrite_takes_back_only_for_its_own_name)
{
	struct world w;
	struct td_client *c;
	struct td_alloc *a;
	uint64_t v;
	ino_t seen;

	/* every REWRITE loan asks for the take-back */
	cr_assert_eq(setenv("TENSORD_REWRITE_MIN", "1", 1), 0);
	cr_assert_eq(setenv("TENSORD_REWRITE_FILL_US", "0", 1), 0);
	world_start(&w);
	c = producer(&w.d, "auto");
	a = loan(c, NULL, TD_ALLOC_REWRITE);
	seen = loan_ino(a);
	publish_ok(c, a, "cam/r", 'A');
	cr_assert_eq(reader_get(&w.r, "cam/r", 'A'), seen);

	/* named for cam/r: the version is taken back, its buffer rewritten */
	a = loan(c, "cam/r", TD_ALLOC_REWRITE);
	cr_assert_eq(loan_ino(a), seen, "no take-back for cam/r's own loan");
	v = publish_ok(c, a, "cam/r", 'C');

	/* named for another name: no take-back either */
	a = loan(c, "cam/q", TD_ALLOC_REWRITE);
	cr_assert_neq(loan_ino(a), seen);
	cr_assert_eq(current(c, "cam/r"), v);
	td_alloc_free(a);

	/* unnamed: no take-back, cam/r stays as it is */
	a = loan(c, NULL, TD_ALLOC_REWRITE);
	cr_assert_neq(loan_ino(a), seen, "an unnamed rewrite took back a "
		      "buffer the reader of cam/r maps");
	cr_assert_eq(current(c, "cam/r"), v);
	publish_ok(c, a, "priv/r", SECRET);
	reader_clean(&w.r, __LINE__);

	/* a loan for cam/b does not take cam/a back (nobody read it) */
	v = publish_ok(c, loan(c, "cam/a", TD_ALLOC_REWRITE), "cam/a", 'a');
	a = loan(c, "cam/b", TD_ALLOC_REWRITE);
	cr_assert_eq(current(c, "cam/a"), v, "cam/b's loan took cam/a back");
	publish_ok(c, a, "cam/b", 'b');
	td_client_close(c);
	world_stop(&w);
	unsetenv("TENSORD_REWRITE_MIN");
	unsetenv("TENSORD_REWRITE_FILL_US");
}

/*
 * A stream read by another uid: named, it settles on a few buffers (the
 * PUBLISH replies lend them back); unnamed, every loan is a buffer that
 * uid was never sent.
 */
static void stream(const char *name, bool named)
{
	struct world w;
	struct td_client *c;
	ino_t inos[24];
	unsigned distinct = 0;

	world_start(&w);
	c = producer(&w.d, "auto");
	for (unsigned i = 0; i < 24; i++) {
		struct td_alloc *a =
			loan(c, named ? name : NULL, TD_ALLOC_STREAM);
		bool known = false;

		inos[i] = loan_ino(a);
		for (unsigned k = 0; k < i; k++)
			known |= inos[k] == inos[i];
		distinct += !known;
		publish_ok(c, a, name, (uint8_t)('a' + i % 20));
		cr_assert_eq(reader_get(&w.r, name, (uint8_t)('a' + i % 20)),
			     inos[i]);
	}
	if (named) {
		cr_assert_leq(distinct, 3, "a named stream used %u buffers",
			      distinct);
	} else {
		struct td_status *st = NULL;

		cr_assert_eq(distinct, 24, "an unnamed stream reused a buffer "
			     "the reader maps");
		/* the buffers it may not have are dropped, not hoarded: the
		 * current version and one free buffer at most */
		cr_assert_eq(td_client_status(c, &st, NULL), 0);
		cr_assert_leq(st->bytes, 2 * SIZE, "%llu bytes held",
			      (unsigned long long)st->bytes);
		td_status_free(st);
		/* and writing elsewhere from it shows the reader nothing */
		publish_ok(c, loan(c, NULL, TD_ALLOC_STREAM), "priv/s",
			   SECRET);
		reader_clean(&w.r, __LINE__);
	}
	td_client_close(c);
	world_stop(&w);
}

Test(loan_names, a_named_stream_read_by_another_uid_stays_recycled)
{
	stream("cam/s", true);
}

Test(loan_names, an_unnamed_stream_read_by_another_uid_is_never_recycled)
{
	stream("cam/s", false);
}

Test(loan_names, a_named_alloc_needs_write_permission_on_its_name)
{
	struct world w;

	world_start(&w);
	/* nobody may read cam/ but write nothing */
	cr_assert_eq(ask(&w.r, 'a', "cam/x", 0), EACCES);
	world_stop(&w);
}

/* The daemon refuses a named alloc's PUBLISH under another name itself. */
Test(loan_names, the_daemon_refuses_a_named_loan_under_another_name)
{
	struct td_wire_alloc_req q = {
		.flags = TD_WIRE_REQ_SCM | TD_WIRE_ALLOC_RECYCLE |
			 TD_WIRE_ALLOC_NAMED,
		.plane_count = 1,
		.sizes = {SIZE},
		.name = {"cam/x", 5}};
	struct td_wire_publish_req p = {.name = {"priv/y", 6}};
	struct td_wire_alloc_rep ar;
	struct td_wire_error er;
	struct rawrep r;
	struct world w;
	int64_t n;
	int sock;

	world_start(&w);
	sock = raw_scm_conn(&w.d);
	n = td_wire_alloc_req_encode(&q, RAW_BODY, RAW_CAP);
	cr_assert_eq(raw_call(sock, TD_OP_ALLOC, 2, n, &r), 0);
	cr_assert_eq(td_wire_alloc_rep_decode(RAW_BODY, r.h.body_len, &ar,
					      NULL),
		     0);
	td__scm_close(r.fds, r.nfds);
	p.alloc_id = ar.alloc_id;
	n = td_wire_publish_req_encode(&p, RAW_BODY, RAW_CAP);
	cr_assert_eq(raw_call(sock, TD_OP_PUBLISH, 3, n, &r), -EINVAL);
	cr_assert_eq(td_wire_error_decode(RAW_BODY, r.h.body_len, &er, NULL),
		     0);
	cr_assert(memmem(er.reason.ptr, er.reason.len, "is for \"cam/x\"",
			 14),
		  "%.*s", (int)er.reason.len, er.reason.ptr);
	td__scm_close(r.fds, r.nfds);
	close(sock);
	world_stop(&w);
}

/*
 * A producer with the reader's very credentials: the policy lets that uid
 * write priv/ but not read it, so a connection of its own reading cam/x
 * still binds the buffer (only the daemon's uid, or a daemon without a
 * policy, reads every name).
 */
Test(loan_names, a_reader_with_the_producers_credentials_binds_too)
{
	struct world w;
	ino_t seen;

	world_start_ex(&w, "allow uid=65534 r cam/\nallow uid=65534 w cam/\n"
			   "allow uid=65534 w priv/\n",
		       NULL);
	seen = (ino_t)ask(&w.r, 'p', "cam/x", 'A');
	cr_assert_eq(reader_get(&w.r, "cam/x", 'A'), seen);
	ask(&w.r, 'p', "cam/x", 'B'); /* retires A: its buffer is free */
	cr_assert_neq((ino_t)ask(&w.r, 'p', "priv/y", SECRET), seen,
		      "the same uid's unnamed loan got the buffer its reader "
		      "maps");
	reader_clean(&w.r, __LINE__);
	cr_assert_eq(ask(&w.r, 'd', "priv/y", 0), EACCES);
	world_stop(&w);
}

/* ---- the HTTP store: a response's queued pages ---- */

static unsigned short http_port;

static int tcp_to_daemon(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons(http_port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int big = 4 << 20;

	cr_assert_geq(fd, 0);
	/* room for the whole body: the response completes unread */
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* Everything until EOF (malloc'd, *len bytes). */
static char *read_all(int fd, size_t *len)
{
	size_t cap = 1 << 20;
	char *b = malloc(cap);
	ssize_t r;

	cr_assert(b);
	*len = 0;
	/* bounded: a response the daemon never ends fails the test */
	for (;;) {
		tu_await_readable(fd, TU_WAIT_S, "the HTTP response's end");
		r = recv(fd, b + *len, cap - *len, 0);
		if (r <= 0)
			break;
		*len += (size_t)r;
		if (*len == cap)
			cr_assert((b = realloc(b, cap *= 2)));
	}
	return b;
}

static long http_leases(void)
{
	static const char req[] = "GET /metrics HTTP/1.1\r\nHost: t\r\n"
				  "Connection: close\r\n\r\n";
	static const char key[] = "\ntensord_http_leases ";
	int fd = tcp_to_daemon();
	size_t n;
	char *b, *p;
	long v = -1;

	cr_assert_eq(send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL),
		     (ssize_t)sizeof(req) - 1);
	b = read_all(fd, &n);
	close(fd);
	p = memmem(b, n, key, sizeof(key) - 1);
	if (p)
		v = strtol(p + sizeof(key) - 1, NULL, 10);
	free(b);
	return v;
}

/*
 * An HTTP reader allowed cam/ asks for cam/x's chunk and reads nothing
 * yet; the response completes into its socket's queue and lets the
 * version go. The producer's next loan may then get that buffer (HTTP
 * maps nothing): what the reader reads later must be cam/x's bytes, not
 * what the producer wrote under priv/y since. A recyclable chunk is
 * copied into the response, never sent from its pages (sendfile queues
 * the pages themselves).
 */
Test(loan_names, an_http_response_never_carries_a_later_write)
{
	static const char req[] = "GET /zarr/cam_x/c/0 HTTP/1.1\r\n"
				  "Host: t\r\nConnection: close\r\n\r\n";
	char addr[32];
	const char *http[] = {"--http", addr, "--http-prefix", "", NULL};
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sa);
	struct world w;
	struct td_client *c;
	size_t n, secret = 0, body_len;
	char *resp, *body;
	int fd, h;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	close(fd);
	http_port = ntohs(sa.sin_port);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", http_port);
	world_start_ex(&w, "allow uid=65534 r cam/\nallow http r cam/\n",
		       http);
	c = producer(&w.d, "auto");
	publish_ok(c, loan(c, NULL, TD_ALLOC_RECYCLE), "cam/x", 'A');

	h = tcp_to_daemon();
	cr_assert_eq(send(h, req, sizeof(req) - 1, MSG_NOSIGNAL),
		     (ssize_t)sizeof(req) - 1);
	/* a bounded wait for the response to be done (a hang guard) */
	for (int i = 0; i < 500 && http_leases() != 0; i++)
		usleep(10000);
	cr_assert_eq(http_leases(), 0, "the response still holds cam/x");

	publish_ok(c, loan(c, NULL, 0), "cam/x", 'B');
	for (int i = 0; i < 4; i++)
		publish_ok(c, loan(c, NULL, TD_ALLOC_RECYCLE), "priv/y",
			   SECRET);

	resp = read_all(h, &n);
	close(h);
	body = memmem(resp, n, "\r\n\r\n", 4);
	cr_assert(body, "no HTTP response");
	body += 4;
	body_len = (size_t)(resp + n - body);
	cr_assert_eq(body_len, SIZE);
	for (size_t i = 0; i < body_len; i++)
		secret += body[i] == SECRET;
	cr_assert_eq(secret, 0, "the HTTP reader of cam/ got %zu bytes of "
		     "priv/y", secret);
	cr_assert_eq(body[0], 'A');
	free(resp);
	td_client_close(c);
	world_stop(&w);
}

/*
 * A recycled buffer holds what it carried last, where a tensor does not
 * cover it (padding, a shorter tensor): a loan named cam/x never gets a
 * buffer that carried priv/y, read or not.
 */
Test(loan_names, a_named_loan_gets_only_buffers_that_carried_its_name)
{
	struct world w;
	struct td_client *c;
	struct td_alloc *a;
	ino_t priv, cam;

	world_start(&w);
	c = producer(&w.d, "auto");
	a = loan(c, NULL, TD_ALLOC_RECYCLE);
	priv = loan_ino(a);
	publish_ok(c, a, "priv/y", SECRET);
	a = loan(c, "cam/x", TD_ALLOC_RECYCLE);
	cam = loan_ino(a);
	publish_ok(c, a, "cam/x", 'A');
	/* both retired: both free */
	publish_ok(c, loan(c, NULL, 0), "priv/y", 'B');
	publish_ok(c, loan(c, NULL, 0), "cam/x", 'C');

	a = loan(c, "cam/x", TD_ALLOC_RECYCLE);
	cr_assert_neq(loan_ino(a), priv, "cam/x's loan got priv/y's buffer");
	cr_assert_eq(loan_ino(a), cam, "cam/x's own buffer was not recycled");
	publish_ok(c, a, "cam/x", 'D');
	cr_assert_eq(reader_get(&w.r, "cam/x", 'D'), cam);
	reader_clean(&w.r, __LINE__);
	td_client_close(c);
	world_stop(&w);
}

/* Until a SIGHUP (bounded wait): the reloads the daemon counted. */
static uint64_t reloads(const struct td_status *st)
{
	return st->policy_reloads;
}

/*
 * A reload that takes a reader's access to priv/ away: the buffers it
 * was sent under priv/ (and maps still) are lent to no loan again, not
 * even one named priv/y.
 */
Test(loan_names, a_policy_reload_retires_the_buffers_readers_were_sent)
{
	static const char narrower[] = "allow uid=65534 r cam/\n";
	struct world w;
	struct td_client *c;
	struct td_alloc *a;
	ino_t seen;
	int fd;

	world_start_ex(&w, "allow uid=65534 r cam/\nallow uid=65534 r priv/\n",
		       NULL);
	c = producer(&w.d, "auto");
	a = loan(c, "priv/y", TD_ALLOC_RECYCLE);
	seen = loan_ino(a);
	publish_ok(c, a, "priv/y", 'A');
	cr_assert_eq(reader_get(&w.r, "priv/y", 'A'), seen);
	publish_ok(c, loan(c, NULL, 0), "priv/y", 'B');

	fd = open(w.policy, O_WRONLY | O_TRUNC);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, narrower, sizeof(narrower) - 1),
		     (ssize_t)sizeof(narrower) - 1);
	close(fd);
	cr_assert_eq(kill(w.d.pid, SIGHUP), 0);
	cr_assert_eq(tc_status_until(c, reloads, 1), 1, "no reload");
	cr_assert_eq(ask(&w.r, 'd', "priv/y", 0), EACCES);

	a = loan(c, "priv/y", TD_ALLOC_RECYCLE);
	cr_assert_neq(loan_ino(a), seen, "a buffer the revoked reader maps "
		      "was lent again");
	publish_ok(c, a, "priv/y", SECRET);
	reader_clean(&w.r, __LINE__);
	td_client_close(c);
	world_stop(&w);
}

/*
 * A reader that may read every name its producer may write (here the
 * same uid, `rw cam/`) binds nothing: an old client's unnamed stream
 * stays recycled. A policy reload retires what it was shown all the
 * same (the new rules might not let it read what the buffers carry
 * next).
 */
Test(loan_names, a_reader_of_all_its_producer_writes_binds_nothing)
{
	static const char rules[] = "allow uid=65534 rw cam/\n";
	struct world w;
	struct td_client *c;
	ino_t inos[12];
	unsigned distinct = 0;
	ino_t after;
	int fd;

	world_start_ex(&w, rules, NULL);
	for (unsigned i = 0; i < 12; i++) {
		bool known = false;

		inos[i] = (ino_t)ask(&w.r, 'p', "cam/s", (uint8_t)('a' + i));
		cr_assert_eq(reader_get(&w.r, "cam/s", (uint8_t)('a' + i)),
			     inos[i]);
		for (unsigned k = 0; k < i; k++)
			known |= inos[k] == inos[i];
		distinct += !known;
	}
	cr_assert_leq(distinct, 3, "an unnamed stream read by a reader of all "
		      "its writes used %u buffers", distinct);

	/* the same rules reloaded: what was shown is lent no more */
	fd = open(w.policy, O_WRONLY | O_TRUNC);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, rules, sizeof(rules) - 1),
		     (ssize_t)sizeof(rules) - 1);
	close(fd);
	c = producer(&w.d, "auto");
	cr_assert_eq(kill(w.d.pid, SIGHUP), 0);
	cr_assert_eq(tc_status_until(c, reloads, 1), 1, "no reload");
	after = (ino_t)ask(&w.r, 'p', "cam/s", 'z');
	for (unsigned k = 0; k < 12; k++)
		cr_assert_neq(after, inos[k], "a buffer shown before the "
			      "reload was lent again");
	td_client_close(c);
	world_stop(&w);
}
