/* SPDX-License-Identifier: MIT */
/*
 * Operators: STATUS (library and `tensorctl status --json`), who sees
 * which clients, the refusal audit log and its bounds, and SIGHUP's
 * policy reload (a good file takes effect, a bad one keeps the old).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <json-c/json.h>
#include <tensord/tensord.h>

#include "rawclient.h"
#include "testutil.h"
#include "wire-status.h"

TestSuite(status, .timeout = TU_TEST_TIMEOUT_S);

#define NOBODY 65534

/* The daemon's stderr goes to a file: the log the tests read. */
struct logged {
	struct tu_daemon d;
	char log[64];
	int saved; /* our stderr, back after the daemon stopped */
};

static void start(struct logged *l, const char *const *extra)
{
	snprintf(l->log, sizeof(l->log), "/tmp/td-status-log-%d",
		 (int)getpid());
	int f = open(l->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	cr_assert(f >= 0);
	fflush(stderr);
	l->saved = dup(2);
	cr_assert(l->saved >= 0);
	cr_assert(dup2(f, 2) == 2);
	close(f);
	tu_daemon_start_args(&l->d, "warn", extra);
}

static void stop(struct logged *l)
{
	tu_daemon_stop(&l->d, true);
	dup2(l->saved, 2);
	close(l->saved);
}

static void done(struct logged *l)
{
	unlink(l->log);
}

/* Lines of the log containing needle. */
static int log_count(const struct logged *l, const char *needle)
{
	size_t len;
	uint8_t *buf = tu_read_file(l->log, &len);
	int n = 0;
	buf = realloc(buf, len + 1);
	buf[len] = 0;
	for (char *line = strtok((char *)buf, "\n"); line;
	     line = strtok(NULL, "\n"))
		n += strstr(line, needle) != NULL;
	free(buf);
	return n;
}

static struct td_client *cli(const struct logged *l)
{
	struct td_client *c;
	struct td_error e = {0};
	cr_assert_eq(td_client_connect(l->d.sock, &c, &e), 0, "%s", e.reason);
	return c;
}

static int put(struct td_client *c, const char *name, size_t n, bool pin)
{
	uint64_t shape[1] = {n};
	uint8_t *buf = calloc(1, n);
	struct td_publish p = {.name = name, .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = shape,
			       .flags = pin ? TD_PUBLISH_PIN : 0};
	int rc = td_client_put(c, &p, buf, n, NULL, NULL);
	free(buf);
	return rc;
}

static struct td_status *status(struct td_client *c)
{
	struct td_status *s;
	struct td_error e = {0};
	cr_assert_eq(td_client_status(c, &s, &e), 0, "%s", e.reason);
	return s;
}

static const struct td_status_client *row_of(const struct td_status *s,
					     pid_t pid)
{
	for (size_t i = 0; i < s->client_count; i++)
		if (s->clients[i].pid == (uint32_t)pid)
			return &s->clients[i];
	return NULL;
}

Test(status, reports_tensors_clients_leases_and_uids)
{
	struct logged l;
	start(&l, NULL);
	struct td_client *c = cli(&l), *other = cli(&l);
	cr_assert_eq(put(c, "s/pinned", 4096, true), 0);
	cr_assert_eq(put(c, "s/plain", 100, false), 0);
	struct td_tensor *t;
	cr_assert_eq(td_client_get(c, "s/pinned", &t, NULL), 0);

	struct td_status *s = status(c);
	cr_assert(!strncmp(s->ident, "tensord ", 8), "%s", s->ident);
	cr_assert_eq(s->scope, TD_STATUS_SCOPE_ALL, "root sees all");
	cr_assert_eq(s->daemon_uid, geteuid());
	cr_assert_eq(s->tensors, 2);
	cr_assert_eq(s->bytes, 4196);
	cr_assert_eq(s->rings, 0);
	cr_assert_eq(s->clients_total, 2);
	cr_assert_eq(s->client_count, 2, "both connections of this pid");
	int leased = 0;
	for (size_t i = 0; i < s->client_count; i++) {
		const struct td_status_client *k = &s->clients[i];
		cr_assert_eq(k->pid, (uint32_t)getpid());
		cr_assert_str_eq(k->comm, "test-status");
		if (k->leases) {
			leased++;
			cr_assert_eq(k->leases, 1);
			cr_assert_eq(k->bytes_held, 4096);
			/* HELLO, 2 x (ALLOC, PUBLISH), GET, STATUS */
			cr_assert_eq(k->requests, 7, "%llu",
				     (unsigned long long)k->requests);
		}
	}
	cr_assert_eq(leased, 1);
	cr_assert_eq(s->uid_count, 1);
	cr_assert_eq(s->uids[0].uid, geteuid());
	cr_assert_eq(s->uids[0].bytes, 4196);
	cr_assert_eq(s->uids[0].pinned, 4096);
	td_status_free(s);

	/* tensorctl status --json: one object with a clients array */
	char *out;
	char *argv[] = {getenv("TD_TENSORCTL"), "--socket", l.d.sock,
			"status", "--json", NULL};
	cr_assert_eq(tu_run_capture(argv, &out), 0, "%s", out);
	struct json_object *j = json_tokener_parse(out), *v;
	cr_assert(j, "%s", out);
	cr_assert(json_object_object_get_ex(j, "clients", &v));
	cr_assert(json_object_is_type(v, json_type_array));
	cr_assert_eq(json_object_array_length(v), 3, "%s", out);
	int tctl = 0;
	for (size_t i = 0; i < json_object_array_length(v); i++) {
		struct json_object *k = json_object_array_get_idx(v, i), *f;
		cr_assert(json_object_object_get_ex(k, "comm", &f));
		tctl += !strcmp(json_object_get_string(f), "tensorctl");
	}
	cr_assert_eq(tctl, 1, "tensorctl sees itself: %s", out);
	cr_assert(json_object_object_get_ex(j, "tensors", &v));
	cr_assert_eq(json_object_get_uint64(v), 2);
	cr_assert(json_object_object_get_ex(j, "uids", &v));
	cr_assert_eq(json_object_array_length(v), 1);
	json_object_put(j);
	free(out);

	td_tensor_release(t);
	td_client_close(other);
	td_client_close(c);
	stop(&l);
	done(&l);
}

/*
 * A follower that holds a version the name has left behind holds a
 * lease (docs/fastpath.md, "Following a name": not evicted, not
 * recycled, counted against the limits), and STATUS shows it in the
 * follower's row as a GET's lease is: tensorctl status used to say 0
 * leases and 0 B held for a slow consumer pinning a 6 MiB frame.
 */
Test(status, a_followers_hold_of_a_replaced_version_is_a_lease)
{
	struct logged l;
	start(&l, NULL);
	struct td_client *prod = cli(&l), *fc = cli(&l);
	uint64_t shape[1] = {4096};
	uint8_t buf[4096] = {0};
	struct td_publish p = {.name = "s/f", .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = shape};
	struct td_follow *f;
	struct td_tensor *t;
	struct td_error e = {0};

	cr_assert_eq(td_client_follow(fc, "s/f", &f, &e), 0, "%s", e.reason);
	/* a stream's few buffers get mapped: later versions come from the
	 * follow's shared memory, held by its row, not by a GET's lease */
	for (int i = 0; i < 8; i++) {
		cr_assert_eq(td_client_put_ex(prod, &p, buf, sizeof(buf),
					      TD_ALLOC_STREAM, NULL, &e),
			     0, "%s", e.reason);
		cr_assert_eq(td_follow_next(f, 5000, &t, &e), 0, "%s",
			     e.reason);
		if (i < 7)
			td_tensor_release(t);
	}
	/* t is held; the name moves on */
	cr_assert_eq(td_client_put_ex(prod, &p, buf, sizeof(buf),
				      TD_ALLOC_STREAM, NULL, &e),
		     0, "%s", e.reason);
	struct td_status *s = status(prod);
	uint32_t leases = 0;
	uint64_t held = 0;
	for (size_t i = 0; i < s->client_count; i++) {
		leases += s->clients[i].leases;
		held += s->clients[i].bytes_held;
	}
	cr_assert_eq(leases, 1, "the follower's hold is no lease in STATUS");
	cr_assert_eq(held, 4096);
	td_status_free(s);
	td_tensor_release(t);
	td_follow_close(f);
	td_client_close(fc);
	td_client_close(prod);
	stop(&l);
	done(&l);
}

static void nobody_status(const char *sock)
{
	struct td_client *c;
	struct td_status *s;
	if (td_client_connect(sock, &c, NULL) < 0)
		_exit(10);
	if (td_client_status(c, &s, NULL) < 0)
		_exit(11);
	if (s->scope != TD_STATUS_SCOPE_UID)
		_exit(12);
	/* the root clients are counted, not shown; its uid row only */
	if (s->clients_total != 2 || s->client_count != 1 ||
	    s->clients[0].uid != NOBODY ||
	    s->clients[0].pid != (uint32_t)getpid())
		_exit(13);
	for (size_t i = 0; i < s->uid_count; i++)
		if (s->uids[i].uid != NOBODY)
			_exit(14);
	td_status_free(s);
	td_client_close(c);
	_exit(0);
}

/* fn(socket) in a child of uid and gid NOBODY; it must exit 0. */
static void as_nobody(struct logged *l, void (*fn)(const char *sock))
{
	chmod(l->d.dir, 0755);
	pid_t pid = tu_fork();
	if (pid == 0) {
		if (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 ||
		    setuid(NOBODY) < 0)
			_exit(2);
		/* the uid change cleared the parent-death signal: again */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		fn(l->d.sock);
		_exit(0);
	}
	int st = tu_wait_child(pid, TU_WAIT_S, "the child as nobody");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d",
		  WEXITSTATUS(st));
}

/* A tensor of NOBODY's, left in the store. */
static void nobody_put(const char *sock)
{
	struct td_client *n = NULL;

	if (td_client_connect(sock, &n, NULL) < 0)
		_exit(2);
	_exit(put(n, "nobody/x", 64, false) == 0 ? 0 : 3);
}

Test(status, other_uids_see_only_their_own_clients)
{
	if (geteuid() != 0)
		cr_skip_test("needs root to act as a second uid");
	struct logged l;
	const char *extra[] = {"--socket-mode", "0666", NULL};
	start(&l, extra);
	struct td_client *c = cli(&l);
	cr_assert_eq(put(c, "root/x", 64, false), 0);
	as_nobody(&l, nobody_status);
	td_client_close(c);
	stop(&l);
	done(&l);
}

/*
 * Without --uid-max-bytes a uid other than root and the daemon's may use
 * half of --max-bytes: status showed "none" (its own --uid-max-bytes
 * default, 0) while the daemon refused at 4 MiB.
 */
Test(status, the_quota_in_force_is_shown_without_uid_max_bytes)
{
	if (geteuid() != 0)
		cr_skip_test("needs root to act as a second uid");
	struct logged l;
	const char *extra[] = {"--socket-mode", "0666", "--max-bytes", "8M",
			       NULL};
	start(&l, extra);
	struct td_client *c = cli(&l);
	cr_assert_eq(put(c, "root/x", 64, false), 0);
	as_nobody(&l, nobody_put);
	struct td_status *s = status(c);
	int seen = 0;
	for (size_t i = 0; i < s->uid_count; i++) {
		if (s->uids[i].uid == NOBODY) {
			cr_assert_eq(s->uids[i].quota, 4 << 20);
			seen++;
		} else if (s->uids[i].uid == 0) {
			cr_assert_eq(s->uids[i].quota, 0, "root: none");
			seen++;
		}
	}
	cr_assert_eq(seen, 2);
	td_status_free(s);
	td_client_close(c);
	stop(&l);
	done(&l);
}

/* The STATUS of a raw client whose HELLO named features f: decoded
 * as a client that knows of the reserve (has_reserve) and of the
 * pinned figures (has_pinned) would. */
static int raw_status_ex(const struct logged *l, uint32_t f,
			 bool has_reserve, bool has_pinned,
			 struct td_wire_status_rep *m)
{
	static struct td_wire_status_client cl[TD_WIRE_STATUS_MAX_CLIENTS];
	static struct td_wire_status_uid ui[TD_WIRE_STATUS_MAX_UIDS];
	struct td_wire_status_req req = {0};
	struct rawrep r;
	int sock = raw_scm_conn_feat(&l->d, f);
	int rc;

	cr_assert_eq(raw_call(sock, TD_OP_STATUS, 2,
			      td_wire_status_req_encode(&req, RAW_BODY,
							RAW_CAP),
			      &r),
		     0);
	*m = (struct td_wire_status_rep){.clients = cl, .uids = ui,
					 .has_reserve = has_reserve,
					 .has_pinned = has_pinned};
	rc = td_wire_status_rep_decode(RAW_BODY, r.h.body_len, m,
				       TD_WIRE_STATUS_MAX_CLIENTS,
				       TD_WIRE_STATUS_MAX_UIDS, NULL);
	close(sock);
	return rc;
}

static void write_file(const char *path, const char *text)
{
	char tmp[128];
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	FILE *f = fopen(tmp, "w");
	cr_assert(f);
	fputs(text, f);
	cr_assert_eq(fclose(f), 0);
	cr_assert_eq(rename(tmp, path), 0);
}

static int raw_status(const struct logged *l, uint32_t f, bool has_reserve,
		      struct td_wire_status_rep *m)
{
	return raw_status_ex(l, f, has_reserve, false, m);
}

/* Row of uid in m, or NULL. */
static const struct td_wire_status_uid *
raw_uid(const struct td_wire_status_rep *m, uint32_t uid)
{
	for (uint32_t i = 0; i < m->uid_count; i++)
		if (m->uids[i].uid == uid)
			return &m->uids[i];
	return NULL;
}

/* Uid's use of its pinned limit in s, and the limit into *lim; -1 for
 * a uid with no row. */
static long long pinned_use(const struct td_status *s, uint32_t uid,
			    uint64_t *lim)
{
	struct td_status_pinned pl;

	for (size_t i = 0; i < s->uid_count; i++)
		if (s->uids[i].uid == uid) {
			cr_assert_eq(td_status_uid_pinned(s, i, &pl), 0);
			*lim = pl.limit;
			return (long long)pl.use;
		}
	return -1;
}

/*
 * What a uid's pinned limit is checked against (other uids' versions it
 * leases) is in STATUS, with the limit, for a client that asks for it in
 * HELLO, for every uid the daemon counts (root here publishes nothing:
 * it had no row); apart from `pinned`, the uid's PIN versions. A client
 * that does not ask gets the rows its decoder reads. tensorctl shows
 * both, named apart.
 */
Test(status, the_pinned_limits_use_is_shown_to_clients_that_know_it)
{
	if (geteuid() != 0)
		cr_skip_test("needs root to act as a second uid");
	struct logged l;
	char pol[64];
	snprintf(pol, sizeof(pol), "/tmp/td-status-pinned-%d", (int)getpid());
	write_file(pol, "allow any rw *\nlimit uid=0 pinned 5M\n");
	const char *extra[] = {"--socket-mode", "0666", "--policy", pol,
			       "--max-bytes", "64M", NULL};
	const struct td_wire_status_uid *u;
	struct td_wire_status_rep m;
	struct td_tensor *t;
	struct td_error e = {0};
	uint64_t lim = 0;
	char *out;

	start(&l, extra);
	as_nobody(&l, nobody_put);
	struct td_client *c = cli(&l);
	struct td_status *s = status(c);
	cr_assert_eq(pinned_use(s, 0, &lim), 0, "root holds nothing yet");
	cr_assert_eq(lim, 5 << 20);
	td_status_free(s);
	/* a lease of another uid's version: 64 bytes against the limit */
	cr_assert_eq(td_client_get(c, "nobody/x", &t, &e), 0, "%s", e.reason);
	cr_assert_eq(put(c, "root/pin", 4096, true), 0);
	s = status(c);
	cr_assert_eq(pinned_use(s, 0, &lim), 64);
	cr_assert_eq(lim, 5 << 20);
	cr_assert_eq(pinned_use(s, NOBODY, &lim), 0);
	cr_assert_eq(lim, 16 << 20, "nobody's: the default, --max-bytes / 4");
	for (size_t i = 0; i < s->uid_count; i++)
		if (s->uids[i].uid == 0)
			cr_assert_eq(s->uids[i].pinned, 4096,
				     "its PIN versions, the other figure");
	td_status_free(s);

	/* the old layout to a client that did not ask, its rows only for
	 * uids charged bytes */
	cr_assert_eq(raw_status_ex(&l, TD_WIRE_FEAT_STATUS, false, false, &m),
		     0);
	cr_assert_lt(raw_status_ex(&l, TD_WIRE_FEAT_STATUS, false, true, &m),
		     0, "no pinned figures for a client that did not ask");
	cr_assert_eq(raw_status_ex(&l, TD_WIRE_FEAT_STATUS_PINNED, false, true,
				   &m),
		     0);
	u = raw_uid(&m, 0);
	cr_assert(u && u->pinned_use == 64 && u->pinned_limit == 5 << 20);
	cr_assert_eq(raw_status_ex(&l, TD_WIRE_FEAT_STATUS_PINNED |
					       TD_WIRE_FEAT_STATUS_RESERVE,
				   true, true, &m),
		     0, "both tails together");

	char *argv[] = {getenv("TD_TENSORCTL"), "--socket", l.d.sock,
			"status", "--bytes", NULL};
	cr_assert_eq(tu_run_capture(argv, &out), 0, "%s", out);
	cr_assert(strstr(out, "PIN-FLAGGED PINNED-USE PINNED-LIMIT"), "%s",
		  out);
	cr_assert(strstr(out, "4096 B       64 B    5242880 B"), "%s", out);
	free(out);
	char *jargv[] = {getenv("TD_TENSORCTL"), "--socket", l.d.sock,
			 "status", "--json", NULL};
	cr_assert_eq(tu_run_capture(jargv, &out), 0, "%s", out);
	struct json_object *j = json_tokener_parse(out), *ui, *v;
	int seen = 0;
	cr_assert(j, "%s", out);
	cr_assert(json_object_object_get_ex(j, "uids", &ui), "%s", out);
	for (size_t i = 0; i < json_object_array_length(ui); i++) {
		struct json_object *r = json_object_array_get_idx(ui, i);
		cr_assert(json_object_object_get_ex(r, "uid", &v));
		if (json_object_get_uint64(v) != 0)
			continue;
		seen++;
		cr_assert(json_object_object_get_ex(r, "pinned_use", &v));
		cr_assert_eq(json_object_get_uint64(v), 64);
		cr_assert(json_object_object_get_ex(r, "pinned_limit", &v));
		cr_assert_eq(json_object_get_uint64(v), 5 << 20);
		cr_assert(json_object_object_get_ex(r, "pinned", &v));
		cr_assert_eq(json_object_get_uint64(v), 4096);
	}
	cr_assert_eq(seen, 1, "%s", out);
	json_object_put(j);
	free(out);

	/* released: nothing against the limit */
	td_tensor_release(t);
	s = status(c);
	cr_assert_eq(pinned_use(s, 0, &lim), 0);
	td_status_free(s);
	td_client_close(c);
	stop(&l);
	done(&l);
	unlink(pol);
}

#define IDLE_UIDS 300 /* more than TD_WIRE_STATUS_MAX_UIDS */
#define IDLE_UID0 70000

/*
 * A child that connects as IDLE_UIDS uids that do nothing, then as
 * NOBODY, which leases root/x; it says so on ready and keeps it all
 * until hold closes.
 */
static pid_t idle_crowd(struct logged *l, const int ready[2],
			const int hold[2])
{
	chmod(l->d.dir, 0755);
	pid_t pid = tu_fork();
	if (pid != 0)
		return pid;
	static struct td_client *c[IDLE_UIDS + 1];
	struct td_tensor *t;
	char b;
	close(ready[0]);
	close(hold[1]); /* hold's EOF is the parent's close */
	for (int i = 0; i <= IDLE_UIDS; i++) {
		/* the connection is the uid's (SO_PEERCRED: the euid) */
		if (seteuid(i < IDLE_UIDS ? IDLE_UID0 + i : NOBODY) < 0)
			_exit(2);
		if (td_client_connect(l->d.sock, &c[i], NULL) < 0)
			_exit(3);
		if (seteuid(0) < 0)
			_exit(4);
	}
	if (td_client_get(c[IDLE_UIDS], "root/x", &t, NULL) < 0)
		_exit(5);
	if (write(ready[1], "r", 1) != 1)
		_exit(6);
	(void)!read(hold[0], &b, 1);
	_exit(0);
}

/*
 * Rows of pinned figures are for the uids with one to show: a reader
 * that published nothing but holds other uids' bytes has one, a uid
 * that is only connected (with the limit every uid has) none. Every
 * connected uid used to take a row, so on a host with more connected
 * uids than STATUS's 256 rows the reader that pinned, come last, was
 * not shown. The old layout's rows (uids charged bytes) stay as they
 * were for a client that does not ask for the pinned figures.
 */
Test(status, idle_uids_leave_the_pinned_rows_to_the_uids_that_pin)
{
	if (geteuid() != 0)
		cr_skip_test("needs root to act as other uids");
	struct logged l;
	char pol[64];
	snprintf(pol, sizeof(pol), "/tmp/td-status-crowd-%d", (int)getpid());
	write_file(pol, "allow any rw *\n");
	const char *extra[] = {"--socket-mode", "0666", "--policy", pol,
			       NULL};
	struct td_wire_status_rep m;
	int ready[2], hold[2];
	uint64_t lim = 0;
	char b;

	start(&l, extra);
	struct td_client *c = cli(&l);
	cr_assert_eq(put(c, "root/x", 64, false), 0);
	cr_assert(pipe(ready) == 0 && pipe(hold) == 0);
	pid_t pid = idle_crowd(&l, ready, hold);
	close(ready[1]);
	close(hold[0]);
	tu_await_readable(ready[0], TU_WAIT_S, "the idle uids' child");
	cr_assert_eq(read(ready[0], &b, 1), 1, "the idle uids' child failed");

	struct td_status *s = status(c);
	cr_assert_eq(pinned_use(s, NOBODY, &lim), 64,
		     "the reader's row is crowded out (%zu rows)",
		     s->uid_count);
	cr_assert_eq(pinned_use(s, 0, &lim), 0, "root's row: its bytes");
	cr_assert_eq(s->uid_count, 2, "idle uids have rows: %zu",
		     s->uid_count);
	td_status_free(s);
	/* the old layout: the uids charged bytes, root alone */
	cr_assert_eq(raw_status_ex(&l, TD_WIRE_FEAT_STATUS, false, false, &m),
		     0);
	cr_assert_eq(m.uid_count, 1);
	cr_assert_eq(m.uids[0].uid, 0);

	close(hold[1]);
	close(ready[0]);
	int st = tu_wait_child(pid, TU_WAIT_S, "the idle uids' child");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d",
		  WEXITSTATUS(st));
	td_client_close(c);
	stop(&l);
	done(&l);
	unlink(pol);
}

/*
 * The byte reserve of --max-bytes (1/16 of it) is in STATUS for a client
 * that asks for it in HELLO, and in tensorctl status; a client that does
 * not ask gets the reply its decoder reads.
 */
Test(status, the_byte_reserve_is_shown_to_clients_that_know_it)
{
	struct logged l;
	const char *extra[] = {"--max-bytes", "64M", NULL};
	struct td_wire_status_rep m;
	char *out;

	start(&l, extra);
	struct td_client *c = cli(&l);
	struct td_status *s = status(c);
	cr_assert_eq(s->max_bytes, 64 << 20);
	cr_assert_eq(s->byte_reserve, 4 << 20, "%llu",
		     (unsigned long long)s->byte_reserve);
	td_status_free(s);

	cr_assert_eq(raw_status(&l, TD_WIRE_FEAT_STATUS, false, &m), 0,
		     "an older client's decoder reads the reply");
	cr_assert_eq(raw_status(&l, TD_WIRE_FEAT_STATUS, true, &m), -ENODATA,
		     "no tail for a client that did not ask");
	cr_assert_eq(raw_status(&l, TD_WIRE_FEAT_STATUS_RESERVE, true, &m), 0);
	cr_assert_eq(m.byte_reserve, 4 << 20);

	char *argv[] = {getenv("TD_TENSORCTL"), "--socket", l.d.sock,
			"status", NULL};
	cr_assert_eq(tu_run_capture(argv, &out), 0, "%s", out);
	cr_assert(strstr(out, "of 64.0 MiB (4.0 MiB of it for root and the "
			      "daemon's uid only)"),
		  "%s", out);
	free(out);
	char *jargv[] = {getenv("TD_TENSORCTL"), "--socket", l.d.sock,
			 "status", "--json", NULL};
	cr_assert_eq(tu_run_capture(jargv, &out), 0, "%s", out);
	struct json_object *j = json_tokener_parse(out), *v;
	cr_assert(j, "%s", out);
	cr_assert(json_object_object_get_ex(j, "byte_reserve", &v), "%s", out);
	cr_assert_eq(json_object_get_uint64(v), 4 << 20);
	json_object_put(j);
	free(out);
	td_client_close(c);
	stop(&l);
	done(&l);
}

Test(status, ten_thousand_refusals_log_one_line_per_kind)
{
	struct logged l;
	const char *extra[] = {"--max-bytes", "1M", NULL};
	start(&l, extra);
	struct td_client *c = cli(&l);
	struct td_entry ent;
	for (int i = 0; i < 10000; i++)
		cr_assert_eq(td_client_stat(c, "bad//name", &ent, NULL),
			     -EINVAL);
	for (int i = 0; i < 100; i++)
		cr_assert_eq(put(c, "big", 2u << 20, false), -ENOSPC);
	/* answers that are no refusal are neither counted nor logged */
	cr_assert_eq(td_client_stat(c, "absent", &ent, NULL), -ENOENT);

	struct td_status *s = status(c);
	cr_assert_eq(s->refused[TD_REFUSAL_INPUT], 10000);
	cr_assert_eq(s->refused[TD_REFUSAL_QUOTA], 100);
	cr_assert_eq(s->refused[TD_REFUSAL_PERMISSION], 0);
	const struct td_status_client *k = row_of(s, getpid());
	cr_assert(k);
	cr_assert_eq(k->refusals, 10100);
	td_status_free(s);
	td_client_close(c);
	stop(&l);

	cr_assert_eq(log_count(&l, "refused input: pid"), 1);
	cr_assert_eq(log_count(&l, "refused quota: pid"), 1);
	cr_assert_eq(log_count(&l, "refused "), 2);
	char want[64];
	snprintf(want, sizeof(want), "pid %d uid %u (test-status)",
		 (int)getpid(), (unsigned)geteuid());
	cr_assert_eq(log_count(&l, want), 2, "pid, uid and command named");
	/* the request named once: the reason already starts with it */
	snprintf(want, sizeof(want), "(test-status): STAT: name: ");
	cr_assert_eq(log_count(&l, want), 1, "the line names STAT once");
	cr_assert_eq(log_count(&l, "STAT: STAT:"), 0);
	done(&l);
}

Test(status, reconnecting_refusers_are_bounded_by_the_rate_limit)
{
	struct logged l;
	start(&l, NULL);
	struct td_entry ent;
	enum { CONNS = 300 };
	for (int i = 0; i < CONNS; i++) {
		struct td_client *c = cli(&l);
		cr_assert_eq(td_client_stat(c, "bad//name", &ent, NULL),
			     -EINVAL);
		td_client_close(c);
	}
	struct td_client *c = cli(&l);
	struct td_status *s = status(c);
	uint64_t suppressed = s->log_suppressed;
	td_status_free(s);
	td_client_close(c);
	stop(&l);
	int lines = log_count(&l, "refused input: pid");
	/* each connection's first refusal is either logged or counted */
	cr_assert_eq((uint64_t)lines + suppressed, CONNS, "%d + %llu", lines,
		     (unsigned long long)suppressed);
	cr_assert_geq(lines, 1);
	done(&l);
}

/* SIGHUP, then wait (bounded, as a hang guard) until the log says so. */
static void hup(struct logged *l, const char *needle, int before)
{
	cr_assert_eq(kill(l->d.pid, SIGHUP), 0);
	for (int i = 0; i < 2000 && log_count(l, needle) == before; i++)
		usleep(10000);
	cr_assert_eq(log_count(l, needle), before + 1, "log: %s", needle);
}

Test(status, sighup_reloads_the_policy_and_a_bad_file_keeps_the_old)
{
	struct logged l;
	char path[64];
	snprintf(path, sizeof(path), "/tmp/td-status-policy-%d",
		 (int)getpid());
	write_file(path, "quota uid=0 64K\n");
	const char *extra[] = {"--policy", path, NULL};
	start(&l, extra);
	struct td_client *c = cli(&l);
	cr_assert_eq(put(c, "q/a", 32 << 10, true), 0);
	cr_assert_eq(put(c, "q/b", 64 << 10, true), -EDQUOT, "64K in force");

	write_file(path, "quota uid=0 1M\n");
	hup(&l, "reloaded (0 allow rules, 1 quotas, 0 limits)", 0);
	cr_assert_eq(put(c, "q/b", 64 << 10, true), 0, "1M in force");
	struct td_status *s = status(c);
	cr_assert_eq(s->policy_reloads, 1);
	cr_assert_eq(s->uids[0].quota, 1 << 20);
	td_status_free(s);

	write_file(path, "quota uid=0 lots\n");
	hup(&l, "previous policy stays in force", 0);
	cr_assert_eq(log_count(&l, ": --policy "), 1, "the reason is logged");
	cr_assert_eq(put(c, "q/c", 2 << 20, true), -EDQUOT,
		     "still 1M, not none");
	cr_assert_eq(put(c, "q/c", 64 << 10, true), 0);
	s = status(c);
	cr_assert_eq(s->policy_reloads, 1);
	cr_assert_eq(s->uids[0].quota, 1 << 20);
	td_status_free(s);

	unlink(path);
	hup(&l, "previous policy stays in force", 1);
	cr_assert_eq(put(c, "q/d", 64 << 10, true), 0, "still loaded");
	td_client_close(c);
	stop(&l);
	done(&l);
}

/*
 * The policy file replaced by a FIFO: SIGHUP's reload opened it
 * blocking, and the daemon's loop waited in open() for a writer that
 * never came: no client served, SIGTERM unheard. Now it is refused like
 * any file that is not a regular one, and the old policy stays.
 */
Test(status, a_fifo_in_place_of_the_policy_does_not_hang_the_reload)
{
	struct logged l;
	char path[64], fifo[80];

	snprintf(path, sizeof(path), "/tmp/td-status-policy-%d",
		 (int)getpid());
	snprintf(fifo, sizeof(fifo), "%s.fifo", path);
	write_file(path, "quota uid=0 64K\n");
	const char *extra[] = {"--policy", path, NULL};
	start(&l, extra);
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	cr_assert_eq(rename(fifo, path), 0);
	hup(&l, "previous policy stays in force", 0);
	cr_assert_eq(log_count(&l, "not a regular file"), 1);
	struct td_client *c = cli(&l);
	cr_assert_eq(put(c, "q/b", 128 << 10, true), -EDQUOT, "64K in force");
	td_client_close(c);
	unlink(path);
	stop(&l);
	done(&l);
}

/* Start a daemon whose --policy is path, with the LD_PRELOAD shim's
 * var=value order in its environment (the file changed under its read). */
static void start_shimmed(struct logged *l, const char *path,
			  const char *var, const char *value)
{
	const char *extra[] = {"--policy", path, NULL};

	tu_shim_on(var, value);
	start(l, extra);
	tu_shim_off(var);
}

/*
 * A policy file that changes while the daemon reads it (a deploy tool
 * appending rules, an editor writing in place). The daemon read the
 * size fstat gave: a file that grew was loaded cut at its old size, as
 * if its first lines were the whole policy (here: the quota appended
 * was left out, and a 128 KiB put went through); one that shrank was a
 * bare "read failed: Input/output error" and a daemon that did not
 * start. Now it reads to the end, sees the change in a second fstat,
 * and reads the file again.
 */
Test(status, a_policy_that_changes_while_read_is_read_again)
{
	struct logged l;
	char path[64];
	struct td_client *c;

	snprintf(path, sizeof(path), "/tmp/td-status-grow-%d", (int)getpid());
	write_file(path, "# the quota comes next\n");
	cr_assert_eq(setenv("TD_APPEND_TEXT", "quota uid=0 64K\n", 1), 0);
	start_shimmed(&l, path, "TD_APPEND_AFTER_FSTAT", path);
	unsetenv("TD_APPEND_TEXT");
	cr_assert_eq(log_count(&l, "changed while it was read"), 1);
	c = cli(&l);
	cr_assert_eq(put(c, "q/b", 128 << 10, true), -EDQUOT,
		     "the appended quota is in force");
	td_client_close(c);
	stop(&l);
	done(&l);

	/* shrunk to nothing under the read: the empty file is the policy */
	write_file(path, "quota uid=0 64K\n");
	start_shimmed(&l, path, "TD_TRUNCATE_AFTER_FSTAT", path);
	cr_assert_eq(log_count(&l, "changed while it was read"), 1);
	cr_assert_eq(log_count(&l, "Input/output error"), 0);
	c = cli(&l);
	cr_assert_eq(put(c, "q/b", 128 << 10, true), 0, "no quota in force");
	td_client_close(c);
	stop(&l);
	done(&l);
	unlink(path);
}
