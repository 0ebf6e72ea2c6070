/* SPDX-License-Identifier: MIT */
/*
 * tensord through its public client API (libclient/include/tensord/tensord.h),
 * against a daemon the bench starts on a socket in its temp dir.
 *
 * Producer: td_client_alloc_named(TD_ALLOC_REWRITE) one plane -> write ->
 * td_client_publish_alloc(), what a streaming user of the plain API whose
 * producer waits for its consumers does (docs/fastpath.md, "Recycled
 * loans", "Streams", "Rewriting the latest version"). Mostly that is a
 * stream: once the version before is replaced and released, the daemon
 * hands its buffer back in the PUBLISH reply, the producer alternates two
 * buffers it keeps mapped, with no fd, mmap or fresh memory per handoff
 * (only the first two handoffs of a run take first-touch faults), and one
 * round trip. From 8 MiB in write mode (the producer writes for longer
 * than 200 us) the ALLOC takes back the version the consumer has
 * released: one buffer, warm in the caches, for an ALLOC round trip more.
 * tensord-nowait: the same producer with td_client_publish_alloc_nowait()
 * (docs/fastpath.md, "A publish nobody waits for"): the reply, and the
 * loan in it, is read at the next alloc, so the producer goes from its
 * PUBLISH straight to waiting for the acks.
 * Consumer: td_client_get_newer(last version, wait forever) -> check the
 * bytes in place -> td_tensor_release_nowait() -> ack. Its mapping cache
 * (by buffer id) hits those two buffers, so it maps nothing per handoff
 * either; the cache is dropped with the client at the end of the run.
 * So a handoff was three requests: PUBLISH and GET round trips, a
 * RELEASE nobody waits for. Since td_client_get_newer follows a name it
 * is asked for again (docs/fastpath.md, "get_newer rides a follow"), the
 * consumer's side sends nothing once warm, as tensord-follow's;
 * tensord-get keeps the GET path measured (TENSORD_GET_FOLLOW=0).
 *
 * tensord-scm: the same with TENSORD_IMPORT=scm in both children, the
 * path a daemon running as its own user serves (descriptors travel with
 * SCM_RIGHTS; warm, none travels at all).
 *
 * tensord-names: the same, the producer's handoffs going to NAMES
 * names in turn (handoff seq to name seq % NAMES, each consumer taking
 * each with its own get_newer), as a producer of several camera streams
 * through one client does (docs/fastpath.md, "Several streams on one
 * connection": a lent loan and a stage per name). Against tensord in
 * the same run it reads what streaming several names costs over one.
 *
 * tensord-follow, tensord-follow-scm: the same producer; the consumer
 * follows the name (td_client_follow, td_follow_next -> check ->
 * td_tensor_release; docs/fastpath.md, "Following a name"): warm, a
 * handoff is the producer's PUBLISH and nothing from the consumer.
 *
 * Ack: tensord has no reply channel, so the consumer acks with 8 bytes on
 * an AF_UNIX SOCK_SEQPACKET socketpair the harness made (one syscall each
 * way, as in the socket baselines). The fast path (ring/control block)
 * will replace this method's internals, not the harness.
 */
#include "bench.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tensord/tensord.h>

/* One daemon for every tensord-* method here: refcounted start/stop
 * (each method that starts it has the stop that releases it). */
static int daemon_pid = -1;
static int daemon_refs, daemon_rc;
static char daemon_why[BENCH_WHY_MAX];
static char sock_path[300];

static int td_start(const struct bench_env *env, char *why, size_t why_len)
{
	if (daemon_refs++ == 0)
		daemon_rc = bench_tensord_start(env, "tensord", sock_path,
						sizeof(sock_path), &daemon_pid,
						daemon_why,
						sizeof(daemon_why));
	snprintf(why, why_len, "%s", daemon_why);
	return daemon_rc;
}

static void td_stop(void)
{
	if (daemon_refs > 0 && --daemon_refs > 0)
		return;
	if (daemon_pid > 0)
		bench_reap(daemon_pid, 5000);
	daemon_pid = -1;
}

static int td_service_pid(void)
{
	return daemon_pid;
}

static int td_prepare(struct bench_run *r)
{
	if (!bench_method_acks(r))
		return 0;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, r->fds) < 0)
		return bench_fail(r, -errno, "socketpair: %s",
				  strerror(errno));
	return 0;
}

static void td_unprepare(struct bench_run *r)
{
	for (int i = 0; i < 2; i++) {
		if (r->fds[i] >= 0)
			close(r->fds[i]);
		r->fds[i] = -1;
	}
}

/* tensord-names: NAMES names, or $TD_BENCH_NAMES (2..NAMES_MAX) */
#define NAMES 4
#define NAMES_MAX 16

struct td_priv {
	struct td_client *c;
	struct td_follow *f; /* consumer of tensord-follow */
	int ack;
	bool nowait; /* producer: td_client_publish_alloc_nowait */
	unsigned names; /* tensord-names: NAMES, else 1 */
	uint64_t last[NAMES_MAX]; /* consumer: version last seen, per name */
	char name[64];
	char each[NAMES_MAX][72]; /* tensord-names: name/0 .. name/3 */
};

/* The name handoff seq goes to. */
static const char *td_name(const struct td_priv *x, uint64_t seq)
{
	return x->names > 1 ? x->each[seq % x->names] : x->name;
}

static int td_setup_as(struct bench_run *r, const char *import, bool follow)
{
	struct td_priv *x = calloc(1, sizeof(*x));
	int mine = r->role == BENCH_PRODUCER ? 0 : 1;
	struct td_error err;
	int rc;

	if (!x)
		return bench_fail(r, -ENOMEM, "out of memory");
	r->priv = x;
	x->ack = r->fds[mine];
	if (r->fds[!mine] >= 0)
		close(r->fds[!mine]);
	r->fds[0] = r->fds[1] = -1;
	if (import && setenv("TENSORD_IMPORT", import, 1) < 0)
		return bench_fail(r, -errno, "setenv: %s", strerror(errno));
	snprintf(x->name, sizeof(x->name), "bench/run%u", r->run_id);
	x->names = 1;
	for (unsigned i = 0; i < NAMES_MAX; i++)
		snprintf(x->each[i], sizeof(x->each[i]), "%s/%u", x->name, i);
	rc = td_client_connect(sock_path, &x->c, &err);
	if (rc < 0)
		return bench_fail(r, rc, "td_client_connect: %.200s",
				  err.reason);
	if (follow && r->role != BENCH_PRODUCER) {
		rc = td_client_follow(x->c, x->name, &x->f, &err);
		if (rc < 0)
			return bench_fail(r, rc, "td_client_follow: %.200s",
					  err.reason);
	}
	return 0;
}

static int td_setup(struct bench_run *r)
{
	return td_setup_as(r, NULL, false);
}

/* tensord-nowait: the producer waits for no PUBLISH reply */
static int td_setup_nowait(struct bench_run *r)
{
	int rc = td_setup_as(r, NULL, false);

	if (rc == 0)
		((struct td_priv *)r->priv)->nowait = true;
	return rc;
}

/* tensord-names: NAMES names in turn */
static int td_setup_names(struct bench_run *r)
{
	const char *env = getenv("TD_BENCH_NAMES");
	unsigned n = env ? (unsigned)strtoul(env, NULL, 10) : NAMES;
	int rc = td_setup_as(r, NULL, false);

	if (n < 2 || n > NAMES_MAX)
		return bench_fail(r, -EINVAL,
				  "TD_BENCH_NAMES: 2..%u names, not \"%s\"",
				  NAMES_MAX, env);
	if (rc == 0)
		((struct td_priv *)r->priv)->names = n;
	return rc;
}

static int td_setup_scm(struct bench_run *r)
{
	return td_setup_as(r, "scm", false);
}

/* tensord-get: the GET path the plain API took before it followed by
 * itself (TENSORD_GET_FOLLOW=0, read at connect) */
static int td_setup_get(struct bench_run *r)
{
	if (setenv("TENSORD_GET_FOLLOW", "0", 1) < 0)
		return bench_fail(r, -errno, "setenv: %s", strerror(errno));
	return td_setup_as(r, NULL, false);
}

static int td_setup_follow(struct bench_run *r)
{
	return td_setup_as(r, NULL, true);
}

static int td_setup_follow_scm(struct bench_run *r)
{
	return td_setup_as(r, "scm", true);
}

static int td_producer_step(struct bench_run *r, uint64_t seq)
{
	struct td_priv *x = r->priv;
	uint64_t size = r->size, shape[1] = { r->size }, version;
	struct td_publish pub;
	struct td_alloc *a;
	struct td_error err;
	void *p;
	int rc;

	rc = td_client_alloc_named(x->c, td_name(x, seq), 1, &size,
				   TD_ALLOC_REWRITE, &a, &err);
	if (rc < 0)
		return bench_fail(r, rc, "td_client_alloc_named: %.200s",
				  err.reason);
	p = td_alloc_data(a, 0);
	if (!p) {
		td_alloc_free(a);
		return bench_fail(r, -EIO, "td_alloc_data: NULL");
	}
	bench_payload_write(p, r->size, seq, r->write);
	memset(&pub, 0, sizeof(pub));
	pub.name = td_name(x, seq);
	pub.dtype = TD_TENSOR_U8;
	pub.ndim = 1;
	pub.shape = shape;
	if (x->nowait)
		rc = td_client_publish_alloc_nowait(x->c, a, &pub, &err);
	else
		rc = td_client_publish_alloc(x->c, a, &pub, &version, &err);
	if (rc < 0)
		return bench_fail(r, rc, "td_client_publish_alloc%s: %.200s",
				  x->nowait ? "_nowait" : "", err.reason);
	if (!bench_method_acks(r))
		return 0;
	rc = bench_ack_recv(x->ack, seq);
	if (rc < 0)
		return bench_fail(r, rc, "ack %" PRIu64 ": %s", seq,
				  strerror(-rc));
	return 0;
}

static int td_consumer_step(struct bench_run *r, uint64_t seq)
{
	struct td_priv *x = r->priv;
	uint64_t *last = &x->last[x->names > 1 ? seq % x->names : 0];
	struct td_tensor *t;
	struct td_error err;
	const void *p;
	int rc;

	if (x->f)
		rc = td_follow_next(x->f, -1, &t, &err);
	else
		rc = td_client_get_newer(x->c, td_name(x, seq), *last, -1, &t,
					 &err);
	if (rc < 0)
		return bench_fail(r, rc, "%s: %.200s",
				  x->f ? "td_follow_next"
				       : "td_client_get_newer",
				  err.reason);
	*last = td_tensor_version(t);
	p = td_tensor_plane_data(t, 0);
	if (!p || td_tensor_plane_size(t, 0) != r->size)
		rc = bench_fail(r, -EPROTO, "plane 0: %p, %" PRIu64 " bytes",
				p, td_tensor_plane_size(t, 0));
	else if (bench_payload_check(p, r->size, seq, r->write) < 0)
		rc = bench_fail(r, -EBADMSG, "payload %" PRIu64 " corrupt",
				seq);
	td_tensor_release_nowait(t);
	if (rc < 0 || !bench_method_acks(r))
		return rc;
	rc = bench_ack_send(x->ack, seq);
	if (rc < 0)
		return bench_fail(r, rc, "ack send: %s", strerror(-rc));
	return 0;
}

static void td_teardown(struct bench_run *r)
{
	struct td_priv *x = r->priv;

	if (!x)
		return;
	/*
	 * Every run publishes under its own name and the daemon keeps a
	 * name's latest version until it is deleted: without this, each run
	 * would leave one payload behind (6 GiB after the 1 GiB runs). The
	 * end barrier has passed, so the consumer released everything.
	 */
	for (unsigned i = 0; x->c && r->role == BENCH_PRODUCER &&
			     i < x->names;
	     i++)
		td_client_delete(x->c, td_name(x, i), NULL, NULL);
	td_follow_close(x->f);
	td_client_close(x->c);
	if (x->ack >= 0)
		close(x->ack);
	free(x);
	r->priv = NULL;
}

const struct bench_method bench_tensord = {
	.name = "tensord",
	.desc = "tensord public client API, daemon started by the bench: "
		"td_client_alloc_named(TD_ALLOC_REWRITE)/write/"
		"td_client_publish_alloc, "
		"td_client_get_newer/check/td_tensor_release_nowait; "
		"ack: 8 bytes on an AF_UNIX SOCK_SEQPACKET socketpair",
	.start = td_start,
	.stop = td_stop,
	.prepare = td_prepare,
	.unprepare = td_unprepare,
	.setup = td_setup,
	.producer_step = td_producer_step,
	.consumer_step = td_consumer_step,
	.teardown = td_teardown,
	.service_pid = td_service_pid,
	.kinds = BENCH_STREAMS,
};

/* The same daemon, both children on the SCM_RIGHTS path. */
const struct bench_method bench_tensord_scm = {
	.name = "tensord-scm",
	.desc = "as tensord, with TENSORD_IMPORT=scm in producer and "
		"consumer (descriptors by SCM_RIGHTS, as across users)",
	.start = td_start,
	.stop = td_stop,
	.prepare = td_prepare,
	.unprepare = td_unprepare,
	.setup = td_setup_scm,
	.producer_step = td_producer_step,
	.consumer_step = td_consumer_step,
	.teardown = td_teardown,
	.service_pid = td_service_pid,
};

/* The same, the producer waiting for no PUBLISH reply. */
const struct bench_method bench_tensord_nowait = {
	.name = "tensord-nowait",
	.desc = "as tensord, the producer publishing with "
		"td_client_publish_alloc_nowait (the reply read at the next "
		"alloc)",
	.start = td_start,
	.stop = td_stop,
	.prepare = td_prepare,
	.unprepare = td_unprepare,
	.setup = td_setup_nowait,
	.producer_step = td_producer_step,
	.consumer_step = td_consumer_step,
	.teardown = td_teardown,
	.service_pid = td_service_pid,
	.kinds = BENCH_KIND(BENCH_FANOUT),
};

/* The same, every consumer call a GET (no following by itself). */
const struct bench_method bench_tensord_get = {
	.name = "tensord-get",
	.desc = "as tensord, with TENSORD_GET_FOLLOW=0: every "
		"td_client_get_newer a GET round trip and a RELEASE",
	.start = td_start,
	.stop = td_stop,
	.prepare = td_prepare,
	.unprepare = td_unprepare,
	.setup = td_setup_get,
	.producer_step = td_producer_step,
	.consumer_step = td_consumer_step,
	.teardown = td_teardown,
	.service_pid = td_service_pid,
	.kinds = BENCH_STREAMS,
};

/* The same, the handoffs going to four names in turn. */
const struct bench_method bench_tensord_names = {
	.name = "tensord-names",
	.desc = "as tensord, handoff i published under name i % 4 and taken "
		"with get_newer of that name (four streams through one "
		"client)",
	.start = td_start,
	.stop = td_stop,
	.prepare = td_prepare,
	.unprepare = td_unprepare,
	.setup = td_setup_names,
	.producer_step = td_producer_step,
	.consumer_step = td_consumer_step,
	.teardown = td_teardown,
	.service_pid = td_service_pid,
	.kinds = BENCH_KIND(BENCH_FANOUT),
};

/* The same producer; consumers follow the name. */
const struct bench_method bench_tensord_follow = {
	.name = "tensord-follow",
	.desc = "as tensord, consumers td_client_follow/td_follow_next/"
		"check/td_tensor_release (shared memory, no message)",
	.start = td_start,
	.stop = td_stop,
	.prepare = td_prepare,
	.unprepare = td_unprepare,
	.setup = td_setup_follow,
	.producer_step = td_producer_step,
	.consumer_step = td_consumer_step,
	.teardown = td_teardown,
	.service_pid = td_service_pid,
	.kinds = BENCH_STREAMS,
};

const struct bench_method bench_tensord_follow_scm = {
	.name = "tensord-follow-scm",
	.desc = "as tensord-follow, with TENSORD_IMPORT=scm in producer and "
		"consumers",
	.start = td_start,
	.stop = td_stop,
	.prepare = td_prepare,
	.unprepare = td_unprepare,
	.setup = td_setup_follow_scm,
	.producer_step = td_producer_step,
	.consumer_step = td_consumer_step,
	.teardown = td_teardown,
	.service_pid = td_service_pid,
};
