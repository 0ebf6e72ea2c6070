/* SPDX-License-Identifier: MIT */
/*
 * Rings in the catalogue (docs/fastpath.md, "Rings in the catalogue"):
 * LIST and STAT describe a ring, GET of a ring name leases its latest slot
 * through the slot's `leases` word, and a name is a tensor or a ring,
 * never both. A real tensord on a temporary socket; other processes
 * (fork, tensorctl) where a test needs a second party or a crash. Every
 * test ends with the fds and mappings it started with (tu_daemon_stop).
 * No timing is asserted; where a test needs "the other side got this
 * far" it waits on a pipe.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "scm.h"
#include "tensord/tensord.h"
#include "testchild.h"
#include "testutil.h"
#include "wire.h"

TestSuite(ring_catalog, .timeout = TU_TEST_TIMEOUT_S);


static struct td_ring *make_ring(struct td_client *c, const char *name,
				 uint32_t slots, uint64_t size)
{
	struct td_ring_desc desc = {
		.dtype = TD_TENSOR_U8,
		.ndim = 1,
		.shape = &size,
		.slot_count = slots,
	};
	struct td_ring *r = NULL;
	struct td_error e = {0};
	int rc = td_ring_create(c, name, &desc, &r, &e);

	if (rc < 0) {
		fprintf(stderr, "td_ring_create %s: %d %s\n", name, rc,
			e.reason);
		_exit(13);
	}
	return r;
}

/* Bytes derived from (version, offset), so a stale or torn slot shows. */
static void pattern_fill(uint8_t *p, uint64_t n, uint64_t version)
{
	for (uint64_t i = 0; i < n; i++)
		p[i] = (uint8_t)(version * 131 + i * 7 + (i >> 8));
}

static bool pattern_ok(const uint8_t *p, uint64_t n, uint64_t version)
{
	for (uint64_t i = 0; i < n; i++)
		if (p[i] != (uint8_t)(version * 131 + i * 7 + (i >> 8)))
			return false;
	return true;
}

/* Acquire, zero every plane, publish; the version. */
static uint64_t publish_next(struct td_ring *r)
{
	struct td_slot s;
	uint64_t v = 0;

	CK(td_ring_acquire(r, 20000, &s) == 0);
	for (uint32_t i = 0; i < s.plane_count; i++)
		memset(s.planes[i], 0, s.sizes[i]);
	CK(td_ring_publish(r, &v) == 0);
	return v;
}

/*
 * Publish version `want` (a producer numbers its versions 1, 2, ...),
 * plane i filled with the pattern of want + i; the slot it went to.
 */
static uint32_t publish_pattern(struct td_ring *r, uint64_t want)
{
	struct td_slot s;
	uint64_t v = 0;

	CK(td_ring_acquire(r, 20000, &s) == 0);
	for (uint32_t i = 0; i < s.plane_count; i++)
		pattern_fill(s.planes[i], s.sizes[i], want + i);
	CK(td_ring_publish(r, &v) == 0);
	CK(v == want);
	return s.index;
}

static void put_tensor(struct td_client *c, const char *name)
{
	uint64_t shape = 8;
	uint8_t buf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	struct td_publish p = {
		.name = name,
		.dtype = TD_TENSOR_U8,
		.ndim = 1,
		.shape = &shape,
	};
	struct td_error e = {0};

	cr_assert_eq(td_client_put(c, &p, buf, sizeof(buf), NULL, &e), 0,
		     "put %s: %s", name, e.reason);
}

/* Size of the mapping of this process that contains p, 0 if none. */
static uint64_t mapping_size(const void *p)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	uint64_t at = (uint64_t)(uintptr_t)p, size = 0;

	cr_assert(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long long lo, hi;

		if (sscanf(line, "%llx-%llx", &lo, &hi) == 2 && at >= lo &&
		    at < hi) {
			size = hi - lo;
			break;
		}
	}
	fclose(f);
	return size;
}

/* ---- LIST and STAT ---- */

Test(ring_catalog, list_shows_a_ring_among_tensors_in_name_order)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r;
	struct td_entry *list;
	struct td_error e = {0};
	size_t n;

	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	put_tensor(c, "cat/a");
	put_tensor(c, "cat/z");
	r = make_ring(c, "cat/m", 2, 4096);
	put_tensor(c, "other/x");

	cr_assert_eq(td_client_list(c, "cat/", &list, &n, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(n, 3);
	cr_assert_str_eq(list[0].name, "cat/a");
	cr_assert_str_eq(list[1].name, "cat/m");
	cr_assert_str_eq(list[2].name, "cat/z");
	cr_assert(!(list[0].flags & TD_ENTRY_RING));
	cr_assert(!(list[2].flags & TD_ENTRY_RING));
	cr_assert(list[1].flags & TD_ENTRY_RING);
	cr_assert_eq(list[1].version, 0, "nothing published yet");
	cr_assert_eq(list[1].dtype, TD_TENSOR_U8);
	cr_assert_eq(list[1].ndim, 1);
	cr_assert_eq(list[1].shape[0], 4096);
	cr_assert_eq(list[1].bytes, 4096);
	cr_assert_eq(list[1].lease_count, 0);
	td_entry_list_free(list, n);

	publish_next(r);
	publish_next(r);
	cr_assert_eq(td_client_list(c, "cat/m", &list, &n, &e), 0);
	cr_assert_eq(n, 1);
	cr_assert_eq(list[0].version, 2);
	td_entry_list_free(list, n);
	/* the whole catalogue: the ring once, between the tensors */
	cr_assert_eq(td_client_list(c, NULL, &list, &n, &e), 0);
	cr_assert_eq(n, 4);
	cr_assert_str_eq(list[1].name, "cat/m");
	cr_assert_str_eq(list[3].name, "other/x");
	td_entry_list_free(list, n);

	/* a closed ring leaves the catalogue with its producer */
	td_ring_close(r);
	cr_assert_eq(td_client_list(c, "cat/", &list, &n, &e), 0);
	cr_assert_eq(n, 2);
	cr_assert_str_eq(list[1].name, "cat/z");
	td_entry_list_free(list, n);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

Test(ring_catalog, stat_describes_a_ring_and_counts_its_get_leases)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r;
	struct td_entry ent;
	struct td_tensor *t;
	struct td_error e = {0};
	uint64_t shape[2] = {3, 500};
	uint64_t sizes[2] = {1000, 500};
	struct td_ring_desc desc = {
		.dtype = TD_TENSOR_U8,
		.ndim = 2,
		.shape = shape,
		.plane_count = 2,
		.plane_sizes = sizes,
		.slot_count = 3,
	};

	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	cr_assert_eq(td_ring_create(c, "st/r", &desc, &r, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_client_stat(c, "st/r", &ent, &e), 0, "%s", e.reason);
	cr_assert(ent.flags & TD_ENTRY_RING);
	cr_assert_eq(ent.version, 0);
	cr_assert_eq(ent.dtype, TD_TENSOR_U8);
	cr_assert_eq(ent.ndim, 2);
	cr_assert_eq(ent.shape[0], 3);
	cr_assert_eq(ent.shape[1], 500);
	cr_assert_eq(ent.bytes, 1500, "one slot's planes");
	cr_assert_eq(ent.lease_count, 0);
	td_entry_fini(&ent);

	publish_pattern(r, 1);
	publish_pattern(r, 2);
	cr_assert_eq(td_client_get(c, "st/r", &t, &e), 0, "%s", e.reason);
	cr_assert_eq(td_tensor_version(t), 2);
	cr_assert_eq(td_tensor_plane_count(t), 2);
	cr_assert_eq(td_tensor_plane_size(t, 0), 1000);
	cr_assert_eq(td_tensor_plane_size(t, 1), 500);
	cr_assert(pattern_ok(td_tensor_plane_data(t, 0), 1000, 2));
	cr_assert(pattern_ok(td_tensor_plane_data(t, 1), 500, 3));
	cr_assert_eq(td_client_stat(c, "st/r", &ent, &e), 0);
	cr_assert_eq(ent.version, 2);
	cr_assert_eq(ent.lease_count, 1);
	td_entry_fini(&ent);
	td_tensor_release(t);
	cr_assert_eq(td_client_stat(c, "st/r", &ent, &e), 0);
	cr_assert_eq(ent.lease_count, 0);
	td_entry_fini(&ent);

	td_ring_close(r);
	cr_assert_eq(td_client_stat(c, "st/r", &ent, &e), -ENOENT);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* ---- GET ---- */

Test(ring_catalog, get_returns_the_latest_bytes_in_place_mapping_one_slot)
{
	const uint64_t size = 256 << 10;
	struct tu_daemon d;
	struct td_client *c, *rc;
	struct td_ring *r;
	struct td_tensor *t, *t2;
	struct td_error e = {0};
	const uint8_t *p;

	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	rc = open_client(&d);
	r = make_ring(c, "get/r", 4, size);
	cr_assert_eq(td_client_get(rc, "get/r", &t, &e), -ENOENT,
		     "no version yet: like a name with no version");
	publish_pattern(r, 1);
	publish_pattern(r, 2);

	cr_assert_eq(td_client_get(rc, "get/r", &t, &e), 0, "%s", e.reason);
	cr_assert_eq(td_tensor_version(t), 2);
	cr_assert_eq(td_tensor_dtype(t), TD_TENSOR_U8);
	cr_assert_eq(td_tensor_ndim(t), 1);
	cr_assert_eq(td_tensor_shape(t)[0], size);
	cr_assert_eq(td_tensor_plane_count(t), 1);
	cr_assert_eq(td_tensor_plane_size(t, 0), size);
	cr_assert_geq(td_tensor_plane_fd(t, 0), 0);
	p = td_tensor_plane_data(t, 0);
	cr_assert(p && pattern_ok(p, size, 2), "the latest bytes, intact");
	/* the slot's pages, not the ring's four slots */
	cr_assert_eq(mapping_size(p), size, "mapped %" PRIu64 " bytes",
		     mapping_size(p));
	/* a second lease on the same version: same bytes */
	cr_assert_eq(td_client_get(rc, "get/r", &t2, &e), 0);
	cr_assert_eq(td_tensor_version(t2), 2);
	cr_assert(pattern_ok(td_tensor_plane_data(t2, 0), size, 2));
	td_tensor_release(t2);
	td_tensor_release(t);

	td_ring_close(r);
	td_client_close(rc);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

struct lease_kill {
	int got[2];
};

static void lk_holder(const struct tu_daemon *d, void *arg)
{
	struct lease_kill *k = arg;
	struct td_client *c = open_client(d);
	struct td_tensor *t = NULL;

	CK(td_client_get(c, "lk/r", &t, NULL) == 0);
	CK(pattern_ok(td_tensor_plane_data(t, 0), 4096,
		      td_tensor_version(t)));
	say(k->got[1]);
	pause(); /* holding, until SIGKILL */
}

/*
 * Two slots, no subscriber: lease the latest, publish into the other;
 * now every slot is leased or latest, so the producer must wait. The
 * lease ends by RELEASE, by the client's disconnect, and by SIGKILL.
 */
Test(ring_catalog, the_producer_never_rewrites_a_slot_leased_by_get)
{
	struct tu_daemon d;
	struct lease_kill k;
	struct td_client *c, *rc;
	struct td_ring *r;
	struct td_tensor *t;
	struct td_slot s;
	struct td_error e = {0};
	uint32_t leased;
	pid_t pid;

	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	rc = open_client(&d);
	r = make_ring(c, "lk/r", 2, 4096);

	/* 1: RELEASE */
	leased = publish_pattern(r, 1);
	cr_assert_eq(td_client_get(rc, "lk/r", &t, &e), 0, "%s", e.reason);
	cr_assert_eq(td_tensor_version(t), 1);
	cr_assert_neq(publish_pattern(r, 2), leased);
	cr_assert_eq(td_ring_acquire(r, 0, &s), -ETIMEDOUT,
		     "slot %u is leased, the other is the latest", leased);
	cr_assert(pattern_ok(td_tensor_plane_data(t, 0), 4096, 1));
	td_tensor_release(t);
	cr_assert_eq(td_ring_acquire(r, 0, &s), 0);
	cr_assert_eq(s.index, leased);
	pattern_fill(s.planes[0], 4096, 3);
	cr_assert_eq(td_ring_publish(r, NULL), 0);

	/* 2: the leasing client disconnects without releasing */
	cr_assert_eq(td_client_get(rc, "lk/r", &t, &e), 0);
	cr_assert_eq(td_tensor_version(t), 3);
	leased = s.index;
	cr_assert_neq(publish_pattern(r, 4), leased);
	cr_assert_eq(td_ring_acquire(r, 0, &s), -ETIMEDOUT);
	td_client_close(rc);
	/* the daemon drops the lease and wakes the waiting producer */
	cr_assert_eq(td_ring_acquire(r, 20000, &s), 0);
	cr_assert_eq(s.index, leased);
	td_tensor_release(t); /* nothing left to tell the daemon */
	pattern_fill(s.planes[0], 4096, 5);
	cr_assert_eq(td_ring_publish(r, NULL), 0);

	/* 3: the leasing process is killed */
	cr_assert(pipe2(k.got, O_CLOEXEC) == 0);
	pid = spawn(&d, lk_holder, &k);
	hear(k.got[0]);
	cr_assert_neq(publish_pattern(r, 6), leased);
	cr_assert_eq(td_ring_acquire(r, 0, &s), -ETIMEDOUT);
	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(reap(pid), 128 + SIGKILL);
	cr_assert_eq(td_ring_acquire(r, 20000, &s), 0);
	cr_assert_eq(s.index, leased);
	cr_assert_eq(td_ring_publish(r, NULL), 0);

	close(k.got[0]);
	close(k.got[1]);
	td_ring_close(r);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

struct gone {
	int ready[2];
	int go[2];
};

static void gone_producer(const struct tu_daemon *d, void *arg)
{
	struct gone *g = arg;
	struct td_client *c = open_client(d);
	struct td_ring *r = make_ring(c, "po/r", 2, 8192);

	publish_pattern(r, 1);
	say(g->ready[1]);
	hear(g->go[0]);
	_exit(0); /* no close: an exit is all the daemon sees */
}

Test(ring_catalog, a_lease_outlives_the_rings_producer)
{
	struct tu_daemon d;
	struct gone g;
	struct td_client *c;
	struct td_tensor *t, *t2 = NULL;
	struct td_entry ent;
	struct td_ring *again;
	struct td_error e = {0};
	pid_t pid;
	int i;

	tu_daemon_start(&d, "warn");
	cr_assert(pipe2(g.ready, O_CLOEXEC) == 0);
	cr_assert(pipe2(g.go, O_CLOEXEC) == 0);
	c = open_client(&d);
	pid = spawn(&d, gone_producer, &g);
	hear(g.ready[0]);
	cr_assert_eq(td_client_get(c, "po/r", &t, &e), 0, "%s", e.reason);
	say(g.go[1]);
	cr_assert_eq(reap(pid), 0);
	/* the daemon sees the hang-up when it sees it: the name goes */
	for (i = 0; i < 2000; i++) {
		if (td_client_stat(c, "po/r", &ent, NULL) == -ENOENT)
			break;
		td_entry_fini(&ent);
		usleep(10000);
	}
	cr_assert_lt(i, 2000, "the ring left the catalogue");
	cr_assert(pattern_ok(td_tensor_plane_data(t, 0), 8192, 1),
		  "leased bytes outlive their producer");
	/* the name is free for a new ring while the old one is leased */
	again = make_ring(c, "po/r", 2, 64);
	cr_assert_eq(td_client_get(c, "po/r", &t2, &e), -ENOENT,
		     "the new ring has no version yet");
	td_ring_close(again);
	cr_assert(pattern_ok(td_tensor_plane_data(t, 0), 8192, 1));
	td_tensor_release(t);
	close(g.ready[0]);
	close(g.ready[1]);
	close(g.go[0]);
	close(g.go[1]);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* ---- names, modes, waiting ---- */

Test(ring_catalog, a_name_is_a_tensor_or_a_ring_never_both)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r, *r2 = NULL;
	struct td_error e = {0};
	uint64_t shape = 8, v;
	uint8_t buf[8] = {0};
	struct td_publish p = {
		.name = "nm/r",
		.dtype = TD_TENSOR_U8,
		.ndim = 1,
		.shape = &shape,
	};
	struct td_ring_desc desc = {
		.dtype = TD_TENSOR_U8,
		.ndim = 1,
		.shape = &shape,
		.slot_count = 2,
	};

	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	put_tensor(c, "nm/t");
	cr_assert_eq(td_ring_create(c, "nm/t", &desc, &r2, &e), -EEXIST);
	cr_assert(strstr(e.reason, "tensor"), "%s", e.reason);
	cr_assert_null(r2);
	/* a subscribe to a tensor is refused at once, as a follow of a
	 * ring: no ring can come there while the tensor has the name, and
	 * one that waited (for ever, or its timeout) waited on a mistake */
	for (int ms = 0; ms <= 1; ms++) {
		struct td_sub *s = NULL;

		e = (struct td_error){0};
		cr_assert_eq(td_ring_subscribe(c, "nm/t", ms ? -1 : 0, &s, &e),
			     -EINVAL, "%s", e.reason);
		cr_assert(strstr(e.reason, "is a tensor, not a ring"), "%s",
			  e.reason);
		cr_assert_null(s);
	}

	r = make_ring(c, "nm/r", 2, 8);
	cr_assert_eq(td_client_put(c, &p, buf, sizeof(buf), NULL, &e),
		     -EEXIST);
	cr_assert(strstr(e.reason, "ring"), "%s", e.reason);
	cr_assert_eq(td_client_delete(c, "nm/r", NULL, &e), -EBUSY);
	cr_assert(strstr(e.reason, "ring"), "%s", e.reason);
	cr_assert_eq(td_client_watch(c, "nm/r", 0, NULL, &e), -EOPNOTSUPP);
	cr_assert(strstr(e.reason, "ring"), "%s", e.reason);
	/* a prefix watch is fine: it reports tensors */
	cr_assert_eq(td_client_watch(c, "nm/", TD_WATCH_PREFIX, NULL, &e), 0);

	/* once the ring is gone the name takes a tensor again */
	td_ring_close(r);
	cr_assert_eq(td_client_put(c, &p, buf, sizeof(buf), &v, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_client_delete(c, "nm/r", NULL, &e), 0);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

struct later {
	const char *name;
	bool create;       /* create the ring here, after the pipe */
	uint64_t versions; /* publish this many */
	int go[2];
	int done[2];
};

static void later_producer(const struct tu_daemon *d, void *arg)
{
	struct later *x = arg;
	struct td_client *c = open_client(d);
	struct td_ring *r = NULL;

	if (!x->create)
		r = make_ring(c, x->name, 2, 4096);
	say(x->done[1]);
	hear(x->go[0]);
	/* give the parent's GET time to park (not needed for correctness:
	 * a GET that comes later gets the same version) */
	usleep(50000);
	if (x->create)
		r = make_ring(c, x->name, 2, 4096);
	for (uint64_t v = 1; v <= x->versions; v++)
		publish_pattern(r, v);
	hear(x->go[0]);
	td_ring_close(r);
	td_client_close(c);
}

Test(ring_catalog, get_modes_on_a_ring_and_waiting_for_a_publish)
{
	struct tu_daemon d;
	struct td_client *c, *pc;
	struct td_ring *r;
	struct td_tensor *t;
	struct td_error e = {0};
	struct later x = {.name = "gm/late", .create = true, .versions = 1};
	pid_t pid;

	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	pc = open_client(&d);
	r = make_ring(pc, "gm/r", 2, 4096);
	cr_assert_eq(td_client_get_newer(c, "gm/r", 0, 0, &t, &e),
		     -ETIMEDOUT);
	cr_assert_eq(td_client_get_version(c, "gm/r", 1, &t, &e), -ENOENT);

	publish_pattern(r, 1);
	cr_assert_eq(td_client_get_version(c, "gm/r", 1, &t, &e), 0, "%s",
		     e.reason);
	cr_assert(pattern_ok(td_tensor_plane_data(t, 0), 4096, 1));
	td_tensor_release(t);
	cr_assert_eq(td_client_get_newer(c, "gm/r", 0, 0, &t, &e), 0);
	cr_assert_eq(td_tensor_version(t), 1);
	td_tensor_release(t);
	cr_assert_eq(td_client_get_newer(c, "gm/r", 1, 0, &t, &e),
		     -ETIMEDOUT);
	publish_pattern(r, 2);
	/* 1 and 2 fill both slots; 3 goes where 1 was */
	publish_pattern(r, 3);
	cr_assert_eq(td_client_get_version(c, "gm/r", 1, &t, &e), -ENOENT,
		     "version 1 was rewritten");
	cr_assert_eq(td_client_get_version(c, "gm/r", 2, &t, &e), 0, "%s",
		     e.reason);
	cr_assert(pattern_ok(td_tensor_plane_data(t, 0), 4096, 2));
	td_tensor_release(t);
	td_ring_close(r);

	/* a GET parked before the ring exists, served by the ring's poll */
	cr_assert(pipe2(x.go, O_CLOEXEC) == 0);
	cr_assert(pipe2(x.done, O_CLOEXEC) == 0);
	pid = spawn(&d, later_producer, &x);
	hear(x.done[0]);
	say(x.go[1]);
	cr_assert_eq(td_client_get_newer(c, "gm/late", 0, 20000, &t, &e), 0,
		     "%s", e.reason);
	cr_assert_eq(td_tensor_version(t), 1);
	cr_assert(pattern_ok(td_tensor_plane_data(t, 0), 4096, 1));
	td_tensor_release(t);
	say(x.go[1]);
	cr_assert_eq(reap(pid), 0);

	close(x.go[0]);
	close(x.go[1]);
	close(x.done[0]);
	close(x.done[1]);

	/* a newer-than wait on a live ring */
	x = (struct later){.name = "gm/wait", .versions = 3};
	cr_assert(pipe2(x.go, O_CLOEXEC) == 0 && pipe2(x.done, O_CLOEXEC) == 0);
	pid = spawn(&d, later_producer, &x);
	hear(x.done[0]);
	say(x.go[1]);
	cr_assert_eq(td_client_get_newer(c, "gm/wait", 0, 20000, &t, &e), 0,
		     "%s", e.reason);
	cr_assert_geq(td_tensor_version(t), 1);
	cr_assert(pattern_ok(td_tensor_plane_data(t, 0), 4096,
			     td_tensor_version(t)));
	td_tensor_release(t);
	say(x.go[1]);
	cr_assert_eq(reap(pid), 0);
	close(x.go[0]);
	close(x.go[1]);
	close(x.done[0]);
	close(x.done[1]);
	td_client_close(pc);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* An async GET's outcome (td_client_get_newer_async). */
struct parked {
	int calls;
	int status;
	uint64_t version;
	bool pattern; /* the ring pattern of its version, all 4096 bytes */
	uint8_t first; /* a tensor's first byte */
	char reason[TD_REASON_MAX + 1];
};

static void on_parked(struct td_client *c, int status, struct td_tensor *t,
		      const struct td_error *err, void *ud)
{
	struct parked *g = ud;

	(void)c;
	g->calls++;
	g->status = status;
	snprintf(g->reason, sizeof(g->reason), "%s", err ? err->reason : "");
	if (t) {
		const uint8_t *b = td_tensor_plane_data(t, 0);

		g->version = td_tensor_version(t);
		g->first = b ? b[0] : 0;
		g->pattern = b && td_tensor_plane_size(t, 0) == 4096 &&
			     pattern_ok(b, 4096, g->version);
		td_tensor_release(t);
	}
}

/* Park an async GET NEWER than `after` on name, then make sure the daemon
 * has parked it: a STAT after it is answered, the GET is not. */
static void park(struct td_client *c, const char *name, uint64_t after,
		 struct parked *g)
{
	struct td_entry ent;
	struct td_error e = {0};

	*g = (struct parked){0};
	cr_assert_eq(td_client_get_newer_async(c, name, after, -1, on_parked,
					       g, &e),
		     0, "%s", e.reason);
	cr_assert_eq(td_client_stat(c, "nothing/here", &ent, &e), -ENOENT);
	cr_assert_geq(td_client_process(c, NULL), 0);
	cr_assert_eq(g->calls, 0, "parked, not answered: %d %s", g->status,
		     g->reason);
}

/* Process c's replies until g's GET is answered (20 s at most). */
static void answered(struct td_client *c, struct parked *g)
{
	while (!g->calls) {
		struct pollfd p = {.fd = td_client_fd(c), .events = POLLIN};

		cr_assert_gt(poll(&p, 1, 20000), 0, "the parked GET hangs");
		cr_assert_geq(td_client_process(c, NULL), 0);
	}
}

/*
 * The daemon retries only the GETs parked on a live ring every
 * millisecond, not every GET parked in it: a GET joins that poll when its
 * name becomes a ring, parked before the ring was made or after the ring
 * of its name closed, and leaves it, still parked, when the ring closes.
 */
Test(ring_catalog, gets_parked_on_a_name_follow_the_rings_made_and_closed_there)
{
	struct tu_daemon d;
	struct td_client *c, *pc;
	struct td_ring *r;
	struct parked g;

	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	pc = open_client(&d);

	/* parked on a name that is nothing yet; then a ring is made */
	park(c, "ad/r", 0, &g);
	r = make_ring(pc, "ad/r", 2, 4096);
	publish_pattern(r, 1);
	answered(c, &g);
	cr_assert_eq(g.status, 0, "%s", g.reason);
	cr_assert_eq(g.version, 1);
	cr_assert(g.pattern, "the bytes of the ring's version 1");

	/* parked on the live ring, which closes: still parked, and served
	 * by the next ring of the name */
	park(c, "ad/r", 1, &g);
	td_ring_close(r);
	usleep(20000); /* the poll finds the ring gone (either way is right) */
	cr_assert_geq(td_client_process(c, NULL), 0);
	cr_assert_eq(g.calls, 0, "a GET outlives the ring it waited on");
	r = make_ring(pc, "ad/r", 2, 4096);
	publish_pattern(r, 1);
	publish_pattern(r, 2);
	answered(c, &g);
	cr_assert_eq(g.status, 0, "%s", g.reason);
	cr_assert_eq(g.version, 2);
	cr_assert(g.pattern, "the bytes of the new ring's version 2");
	td_ring_close(r);

	/* parked on a ring that closes; then a tensor of the name */
	r = make_ring(pc, "ad/t", 2, 4096);
	park(c, "ad/t", 0, &g);
	td_ring_close(r);
	usleep(20000);
	put_tensor(pc, "ad/t");
	answered(c, &g);
	cr_assert_eq(g.status, 0, "%s", g.reason);
	cr_assert_eq(g.first, 1, "the tensor's bytes");

	td_client_close(pc);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/*
 * With no subscriber and no GET yet, the producer rewrites the latest
 * slot in place (docs/fastpath.md). A GET then must not lease the slot
 * being written: it waits (bounded) for that version's publish.
 */
Test(ring_catalog, a_slot_being_rewritten_is_never_leased)
{
	struct tu_daemon d;
	struct td_client *c, *rc;
	struct td_ring *r;
	struct td_tensor *t;
	struct td_slot s;
	struct td_error e = {0};
	uint32_t first;

	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	rc = open_client(&d);
	r = make_ring(c, "rw/r", 2, 4096);
	first = publish_pattern(r, 1);
	cr_assert_eq(td_ring_acquire(r, 0, &s), 0);
	cr_assert_eq(s.index, first, "nobody wants version 1: rewritten");
	pattern_fill(s.planes[0], 4096, 99); /* half-written, say */
	cr_assert_eq(td_client_get(rc, "rw/r", &t, &e), -ETIMEDOUT);
	cr_assert(strstr(e.reason, "rewriting"), "%s", e.reason);
	pattern_fill(s.planes[0], 4096, 2);
	cr_assert_eq(td_ring_publish(r, NULL), 0);
	cr_assert_eq(td_client_get(rc, "rw/r", &t, &e), 0, "%s", e.reason);
	cr_assert_eq(td_tensor_version(t), 2);
	cr_assert(pattern_ok(td_tensor_plane_data(t, 0), 4096, 2));
	td_tensor_release(t);
	/* GETs now keep the latest readable: the next write goes elsewhere */
	cr_assert_eq(td_ring_acquire(r, 0, &s), 0);
	cr_assert_neq(s.index, first);
	cr_assert_eq(td_ring_publish(r, NULL), 0);
	td_ring_close(r);
	td_client_close(rc);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* ---- tensorctl ---- */

static int ctl(const struct tu_daemon *d, char **out, const char *a1,
	       const char *a2, const char *a3, const char *a4)
{
	const char *bin = getenv("TD_TENSORCTL");
	char *argv[] = {(char *)bin,  "--socket",   (char *)d->sock,
			(char *)a1,   (char *)a2,   (char *)a3,
			(char *)a4,   NULL};
	char *buf = NULL;
	int rc;

	cr_assert(bin, "TD_TENSORCTL is not set");
	rc = tu_run_capture(argv, &buf);
	if (out)
		*out = buf;
	else
		free(buf);
	return rc;
}

Test(ring_catalog, tensorctl_ls_stat_get_show_a_ring)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r;
	char path[128], *out = NULL;
	uint8_t want[24], *back;
	size_t len;

	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	r = make_ring(c, "ctl/r", 2, 24);
	put_tensor(c, "ctl/t");
	publish_pattern(r, 1);
	pattern_fill(want, sizeof(want), 1);

	cr_assert_eq(ctl(&d, &out, "ls", NULL, NULL, NULL), 0);
	cr_assert(strstr(out, "ctl/r") && strstr(out, ", ring"), "%s", out);
	cr_assert(strstr(out, "ctl/t"), "%s", out);
	free(out);
	cr_assert_eq(ctl(&d, &out, "ls", "--json", NULL, NULL), 0);
	cr_assert(strstr(out, "\"name\":\"ctl/r\"") &&
			  strstr(out, "\"ring\":true") &&
			  strstr(out, "\"ring\":false"),
		  "%s", out);
	free(out);
	cr_assert_eq(ctl(&d, &out, "stat", "ctl/r", "--json", NULL), 0);
	cr_assert(strstr(out, "\"ring\":true"), "%s", out);
	cr_assert(strstr(out, "\"version\":1"), "%s", out);
	cr_assert(strstr(out, "\"shape\":[24]"), "%s", out);
	cr_assert(strstr(out, "\"slots\":2"), "%s", out);
	cr_assert(strstr(out, "\"subscribers\":0"), "%s", out);
	free(out);
	cr_assert_eq(ctl(&d, &out, "stat", "ctl/r", NULL, NULL), 0);
	cr_assert(strstr(out, "2 slots"), "%s", out);
	free(out);

	snprintf(path, sizeof(path), "%s/out.bin", d.dir);
	cr_assert_eq(ctl(&d, NULL, "get", "ctl/r", "-o", path), 0);
	back = tu_read_file(path, &len);
	cr_assert_eq(len, sizeof(want));
	cr_assert(memcmp(back, want, len) == 0, "the ring's latest bytes");
	free(back);
	unlink(path);
	cr_assert_eq(ctl(&d, &out, "get", "ctl/r", "--json", NULL), 0);
	cr_assert(strstr(out, "\"version\":1") &&
			  strstr(out, "\"dtype\":\"u8\""),
		  "%s", out);
	free(out);
	cr_assert_eq(ctl(&d, NULL, "rm", "ctl/r", NULL, NULL), 1,
		     "a ring is not removed by name");

	td_ring_close(r);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* ---- a client of version 1: no flags, so no RING bit ---- */

static uint8_t rx_buf[TD_WIRE_MAX_MSG], tx_buf[TD_WIRE_MAX_MSG];

/* One raw request/reply; the reply body in rx_buf + 32, its length. */
static size_t raw_call(int sock, uint16_t op, size_t body_len,
		       int32_t *status)
{
	struct td_wire_hdr h = {
		.magic = TD_WIRE_MAGIC,
		.version = TD_WIRE_VERSION,
		.opcode = op,
		.request_id = op,
		.body_len = (uint32_t)body_len,
	};
	int fds[TD_WIRE_MAX_FDS];
	struct td__scm_rx rx = {.fds = fds, .cap = TD_WIRE_MAX_FDS};
	ssize_t n;

	td_wire_hdr_encode(&h, tx_buf);
	cr_assert_eq(td__scm_send(sock, tx_buf, TD_WIRE_HDR_LEN + body_len,
				  NULL, 0, 0),
		     (ssize_t)(TD_WIRE_HDR_LEN + body_len));
	/* a reply the daemon never sends fails the test */
	tu_await_readable(sock, TU_WAIT_S, "tensord's reply");
	n = td__scm_recv(sock, rx_buf, sizeof(rx_buf), 0, &rx);
	td__scm_close(fds, rx.nfds); /* HELLO's pidfd */
	cr_assert_geq(n, TD_WIRE_HDR_LEN);
	cr_assert_eq(td_wire_hdr_decode(rx_buf, (size_t)n, &h, NULL), 0);
	*status = h.status;
	return h.body_len;
}

Test(ring_catalog, a_version_1_client_sees_a_ring_as_a_plain_entry)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct td_wire_hello_req hello = {TD_IMPORT_SCM, -1, {"v1", 2}, 0};
	struct td_wire_list_req lq = {{"v1/", 3}, {"", 0}, 0};
	struct td_wire_name_req sq = {{"v1/r", 4}};
	struct td_wire_list_rd lr;
	struct td_wire_entry ent;
	int32_t status;
	size_t n;
	int64_t len;
	int sock;

	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	r = make_ring(c, "v1/r", 2, 64);
	publish_pattern(r, 1);

	sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	memcpy(sa.sun_path, d.sock, sizeof(d.sock));
	cr_assert(connect(sock, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	len = td_wire_hello_req_encode(&hello, tx_buf + TD_WIRE_HDR_LEN,
				       sizeof(tx_buf) - TD_WIRE_HDR_LEN);
	raw_call(sock, TD_OP_HELLO, (size_t)len, &status);
	cr_assert_eq(status, 0);

	/* the LIST body of version 1: prefix and after, nothing more */
	len = td_wire_list_req_encode(&lq, tx_buf + TD_WIRE_HDR_LEN,
				      sizeof(tx_buf) - TD_WIRE_HDR_LEN);
	cr_assert_eq(len, 2 + 3 + 2);
	n = raw_call(sock, TD_OP_LIST, (size_t)len, &status);
	cr_assert_eq(status, 0);
	cr_assert_eq(td_wire_list_rep_init(&lr, rx_buf + TD_WIRE_HDR_LEN, n,
					   NULL),
		     0);
	cr_assert_eq(lr.count, 1);
	cr_assert_eq(td_wire_list_rep_next(&lr, &ent), 1);
	cr_assert_eq(ent.flags, 0, "no RING bit for a client that did not ask");
	cr_assert_eq(ent.version, 1);
	cr_assert_eq(ent.shape[0], 64);

	len = td_wire_name_req_encode(&sq, tx_buf + TD_WIRE_HDR_LEN,
				      sizeof(tx_buf) - TD_WIRE_HDR_LEN);
	n = raw_call(sock, TD_OP_STAT, (size_t)len, &status);
	cr_assert_eq(status, 0);
	cr_assert_eq(td_wire_entry_decode(rx_buf + TD_WIRE_HDR_LEN, n, &ent,
					  NULL),
		     0);
	cr_assert_eq(ent.flags, 0);
	cr_assert_eq(ent.version, 1);

	close(sock);
	td_ring_close(r);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/*
 * td_sub_plane_fd: a subscriber's own copy-on-write mapping of a held
 * slot reads the slot's bytes, and its writes reach neither the producer
 * nor another subscriber. The fd is the subscription's (closed with it).
 * td_tensor_plane_offset says the same of a GET's plane.
 */
Test(ring_catalog, a_held_slot_maps_copy_on_write_through_its_plane_fd)
{
	const uint64_t size = 3 * 4096 + 100;
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r;
	struct td_sub *s, *s2;
	struct td_view v, v2, bad;
	struct td_tensor *t;
	struct stat st, st2;
	uint8_t byte[2];
	uint64_t off = 0, lo;
	uint8_t *m;
	int fd;

	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	r = make_ring(c, "cow/r", 4, size);
	cr_assert_eq(td_ring_subscribe(c, "cow/r", 0, &s, NULL), 0);
	cr_assert_eq(td_ring_subscribe(c, "cow/r", 0, &s2, NULL), 0);
	publish_pattern(r, 1);
	publish_pattern(r, 2);
	cr_assert_eq(td_sub_next(s, 0, &v), 0);
	cr_assert_eq(td_sub_next(s2, 0, &v2), 0);
	fd = td_sub_plane_fd(s, &v, 0, &off);
	cr_assert_geq(fd, 0);
	cr_assert_eq(fstat(fd, &st), 0);
	cr_assert_eq(fcntl(fd, F_GETFL) & O_ACCMODE, O_RDONLY);
	cr_assert_geq((uint64_t)st.st_size, off + size);
	lo = off & ~(uint64_t)4095;
	m = mmap(NULL, off - lo + size, PROT_READ | PROT_WRITE, MAP_PRIVATE,
		 fd, (off_t)lo);
	cr_assert_neq(m, MAP_FAILED);
	cr_assert(pattern_ok(m + (off - lo), size, 2), "the slot's bytes");
	memset(m + (off - lo), 0xee, size);
	cr_assert(pattern_ok(v.planes[0], size, 2), "not written through");
	cr_assert(pattern_ok(v2.planes[0], size, 2), "nor for another one");
	cr_assert_eq(td_sub_plane_fd(s, &v, 1, &off), -EINVAL);
	bad = v;
	bad.slot = 64;
	cr_assert_eq(td_sub_plane_fd(s, &bad, 0, &off), -EINVAL);
	cr_assert_eq(td_sub_plane_fd(s2, &v, 0, &off), -EINVAL,
		     "a view of another subscription");
	cr_assert_eq(td_sub_plane_fd(NULL, &v, 0, &off), -EINVAL);
	munmap(m, off - lo + size);
	/* a GET of the ring leases the same slot: same file, same offset */
	cr_assert_eq(td_client_get(c, "cow/r", &t, NULL), 0);
	cr_assert_eq(td_tensor_version(t), 2);
	cr_assert_eq(td_tensor_plane_offset(t, 0), off);
	cr_assert_eq(fstat(td_tensor_plane_fd(t, 0), &st2), 0);
	cr_assert(st2.st_ino == st.st_ino && st2.st_dev == st.st_dev);
	cr_assert_eq(pread(td_tensor_plane_fd(t, 0), byte, 2, (off_t)off + 1),
		     2);
	cr_assert(byte[0] == ((const uint8_t *)v.planes[0])[1] &&
		  byte[1] == ((const uint8_t *)v.planes[0])[2]);
	cr_assert_eq(td_tensor_plane_offset(t, 1), 0, "out of range");
	td_tensor_release(t);
	/* the producer's next version still arrives intact */
	cr_assert_eq(td_sub_release(s), 0);
	cr_assert_eq(td_sub_release(s2), 0);
	publish_pattern(r, 3);
	cr_assert_eq(td_sub_next(s, 0, &v), 0);
	cr_assert(v.version == 3 && pattern_ok(v.planes[0], size, 3));
	td_sub_close(s2);
	td_sub_close(s);
	td_ring_close(r);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}
