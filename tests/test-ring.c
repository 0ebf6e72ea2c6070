/* SPDX-License-Identifier: MIT */
/*
 * Rings, the fast path (docs/fastpath.md): a real tensord on a temporary
 * socket, producers and consumers as separate processes (fork) calling
 * libtensord. Children report failure through their exit status (CK), the
 * test process through criterion. Every test checks that the test process
 * ends with the fds and mappings it started with. No timing is asserted:
 * where a test needs "the other side got this far" it waits on a pipe.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/kcmp.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client.h"
#include "pace.h"
#include "rawclient.h"
#include "ring-int.h"
#include "ring.h"
#include "wire.h"
#include "tensord/tensord.h"
#include "testchild.h"
#include "testclient.h"
#include "testutil.h"

TestSuite(ring, .timeout = TU_TEST_TIMEOUT_S);

/* ---- the daemon under test: tu_daemon, children: testchild.h ---- */

/*
 * fd and mapping counts that allocate nothing: opendir()/fopen() would
 * malloc, and under ASan (quarantine) a fresh allocation can add a mapping
 * of its own between two counts.
 */
static int raw_fd_count(void)
{
	static char buf[16384];
	int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int n = 0;
	long got;

	CK(dir >= 0);
	while ((got = syscall(SYS_getdents64, dir, buf, sizeof(buf))) > 0) {
		for (long off = 0; off < got;) {
			unsigned short reclen;
			const char *name;

			/* linux_dirent64: u64 ino, s64 off, u16 reclen, u8 type */
			memcpy(&reclen, buf + off + 16, sizeof(reclen));
			name = buf + off + 19;
			if (name[0] != '.')
				n++;
			off += reclen;
		}
	}
	close(dir);
	return n - 1; /* the directory's own fd */
}

static int raw_map_count(void)
{
	static char buf[65536];
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC), n = 0;
	ssize_t got;

	CK(fd >= 0);
	while ((got = read(fd, buf, sizeof(buf))) > 0)
		for (ssize_t i = 0; i < got; i++)
			n += buf[i] == '\n';
	close(fd);
	return n;
}


static struct td_ring *make_ring(struct td_client *c, const char *name,
				 uint32_t slots, uint64_t size, uint32_t flags)
{
	struct td_ring_desc desc = {
		.dtype = TD_TENSOR_U8,
		.ndim = 1,
		.shape = &size,
		.slot_count = slots,
		.flags = flags,
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

static struct td_sub *subscribe(struct td_client *c, const char *name)
{
	struct td_sub *s = NULL;
	struct td_error e = {0};
	int rc = td_ring_subscribe(c, name, 20000, &s, &e);

	if (rc < 0) {
		fprintf(stderr, "td_ring_subscribe %s: %d %s\n", name, rc,
			e.reason);
		_exit(14);
	}
	return s;
}

/* Fill a slot with bytes derived from (version, offset). */
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

/*
 * The set-up many tests below share: a daemon, a client, a ring of
 * `slots` slots of `size` bytes named `name`, and one subscription; the
 * ring's rows with owner tokens (TD_RING_ROW_OWNER) or, as if the
 * daemon's HELLO predated them, without.
 */
static void sub_open(struct tu_daemon *d, struct td_client **c,
		     struct td_ring **r, struct td_sub **a, const char *name,
		     uint32_t slots, uint64_t size, bool tokens)
{
	const struct td_ring_hdr *h;

	tu_daemon_start(d, "warn");
	*c = open_client(d);
	if (!tokens)
		(*c)->hello.features &= ~TD_WIRE_FEAT_ROW_OWNER;
	*r = make_ring(*c, name, slots, size, 0);
	h = tu_find_mapping("memfd:tensord-ring-hdr");
	cr_assert_eq(atomic_load(&h->flags) & TD_RING_ROW_OWNER,
		     tokens ? TD_RING_ROW_OWNER : 0);
	*a = subscribe(*c, name);
}

static void one_sub_open(struct tu_daemon *d, struct td_client **c,
			 struct td_ring **r, struct td_sub **a,
			 const char *name, uint32_t slots, uint64_t size)
{
	sub_open(d, c, r, a, name, slots, size, true);
}

/* ... and its tear-down (r NULL: closed already), fds and mappings
 * checked. */
static void one_sub_close(struct tu_daemon *d, struct td_client *c,
			  struct td_ring *r, struct td_sub *a)
{
	td_sub_close(a);
	td_ring_close(r);
	td_client_close(c);
	tu_daemon_stop(d, true);
}

/* Publish the next version, not waiting for a slot; returns it. */
static uint64_t put(struct td_ring *r)
{
	struct td_slot s;
	uint64_t v = 0;

	cr_assert_eq(td_ring_acquire(r, 0, &s), 0);
	cr_assert_eq(td_ring_publish(r, &v), 0);
	return v;
}

/* ---- pure helpers (proto/ring) ---- */

Test(ring, geometry_is_checked_and_bounded)
{
	struct td_ring_geom g;
	const char *why = NULL;
	uint64_t sizes[4] = {100, 1, 4096, 64};
	uint64_t huge[1] = {TD_RING_MAX_SLOT_BYTES + 1};
	uint32_t slot;
	uint64_t v;

	cr_assert_eq(td_ring_geom_compute(3, 4, sizes, TD_RING_PAGE, &g, &why),
		     0);
	cr_assert_eq(g.plane_off[0], 0);
	cr_assert_eq(g.plane_off[1], 128); /* 64-byte aligned */
	cr_assert_eq(g.plane_off[2], 192);
	cr_assert_eq(g.plane_off[3], 192 + 4096);
	cr_assert_eq(g.slot_stride, 8192);
	cr_assert_eq(g.data_len, 3 * 8192);
	cr_assert_eq(td_ring_geom_check(&g), 0);
	cr_assert_eq(td_ring_geom_compute(2, 1, sizes, TD_RING_HUGE_PAGE, &g,
					  &why),
		     0);
	cr_assert_eq(g.slot_stride, TD_RING_HUGE_PAGE);

	cr_assert_eq(td_ring_geom_compute(1, 1, sizes, TD_RING_PAGE, &g, &why),
		     -EINVAL);
	cr_assert_eq(td_ring_geom_compute(65, 1, sizes, TD_RING_PAGE, &g,
					  &why),
		     -EINVAL);
	cr_assert_eq(td_ring_geom_compute(2, 0, sizes, TD_RING_PAGE, &g, &why),
		     -EINVAL);
	cr_assert_eq(td_ring_geom_compute(2, 5, sizes, TD_RING_PAGE, &g, &why),
		     -EINVAL);
	cr_assert_eq(td_ring_geom_compute(2, 1, huge, TD_RING_PAGE, &g, &why),
		     -EFBIG);
	cr_assert_eq(td_ring_geom_compute(2, 1, sizes, 1000, &g, &why),
		     -EINVAL);
	cr_assert(why && *why);

	/* what a client receives is checked as hard */
	cr_assert_eq(td_ring_geom_compute(3, 2, sizes, TD_RING_PAGE, &g, &why),
		     0);
	g.data_len++;
	cr_assert_eq(td_ring_geom_check(&g), -EBADMSG);
	g.data_len--;
	g.plane_off[1] = g.slot_stride; /* ends past its slot */
	cr_assert_eq(td_ring_geom_check(&g), -EBADMSG);
	g.plane_off[1] = 0; /* overlaps plane 0 */
	cr_assert_eq(td_ring_geom_check(&g), -EBADMSG);
	g.plane_off[1] = 128;
	g.slot_stride = UINT64_MAX & ~4095ull;
	cr_assert_eq(td_ring_geom_check(&g), -EBADMSG);

	/* latest words straight from shared memory */
	cr_assert_eq(td_ring_latest_unpack(0, 4, &slot, &v), 0);
	cr_assert_eq(td_ring_latest_unpack(td_ring_latest_pack(9, 3), 4, &slot,
					   &v),
		     1);
	cr_assert_eq(slot, 3);
	cr_assert_eq(v, 9);
	cr_assert_eq(td_ring_latest_unpack(td_ring_latest_pack(9, 4), 4, &slot,
					   &v),
		     -EBADMSG);
	cr_assert_eq(td_ring_latest_unpack(td_ring_latest_pack(0, 1), 4, &slot,
					   &v),
		     -EBADMSG);
	cr_assert_eq(td_ring_latest_unpack(UINT64_MAX, 64, &slot, &v),
		     -EBADMSG);
}

/* ---- wire messages (proto/wire, docs/protocol.md §10) ---- */

/* Every strict prefix of a body is refused, and so is one extra byte. */
#define ROUND_TRIP(type, m, out)                                              \
	do {                                                                   \
		static uint8_t b_[1024], c_[1024];                             \
		int64_t n_ = td_wire_##type##_encode(&(m), b_, sizeof(b_));    \
		cr_assert(n_ > 0);                                             \
		for (int64_t k_ = 0; k_ < n_; k_++)                            \
			cr_assert_lt(td_wire_##type##_decode(b_, (size_t)k_,   \
							     &(out), NULL),    \
				     0, #type " prefix %lld",                  \
				     (long long)k_);                           \
		b_[n_] = 0;                                                    \
		cr_assert_eq(td_wire_##type##_decode(b_, (size_t)n_ + 1,       \
						     &(out), NULL),            \
			     -EBADMSG);                                        \
		cr_assert_eq(td_wire_##type##_decode(b_, (size_t)n_, &(out),   \
						     NULL),                    \
			     0);                                               \
		cr_assert_eq(td_wire_##type##_encode(&(out), c_, sizeof(c_)),  \
			     n_);                                              \
		cr_assert(memcmp(b_, c_, (size_t)n_) == 0);                    \
	} while (0)

/*
 * Wait planning (libclient/pace.c) with made-up clocks: no timing is
 * measured, the plans are exact arithmetic.
 */
static int clock_reads;

static int64_t fake_clock(void)
{
	clock_reads++;
	return 1000000 + 43 * 1000;
}

Test(ring, waits_are_planned_from_recent_waits_and_bounded)
{
	const int64_t us = 1000;
	struct td_pace p;
	struct td_pace_plan w;

	/* no history: the short base poll, then sleep */
	td_pace_init(&p, 20 * us, 200 * us);
	td_pace_plan(&p, 1000000, &w);
	cr_assert_eq(w.spin_until, 1000000 + 20 * us);
	cr_assert_eq(td_pace_step(&w, 1000000), TD_PACE_SPIN);
	/* spinning gives the CPU away after 5 us, then every 5 us */
	cr_assert_eq(td_pace_step(&w, 1000000 + 4 * us), TD_PACE_SPIN);
	cr_assert_eq(td_pace_step(&w, 1000000 + 5 * us), TD_PACE_YIELD);
	cr_assert_eq(td_pace_step(&w, 1000000 + 6 * us), TD_PACE_SPIN);
	cr_assert_eq(td_pace_step(&w, 1000000 + 10 * us), TD_PACE_YIELD);
	cr_assert_eq(td_pace_step(&w, 1000000 + 20 * us), TD_PACE_SLEEP);

	/* the first wait seeds the average, later ones move it by 1/4 */
	td_pace_done(&p, &w, 1000000 + 80 * us);
	cr_assert_eq(p.avg, 80 * us);
	for (int i = 0; i < 40; i++) {
		td_pace_plan(&p, 0, &w);
		td_pace_done(&p, &w, 40 * us);
	}
	cr_assert(p.avg >= 40 * us && p.avg < 41 * us, "avg %lld",
		  (long long)p.avg);
	/* short regular waits: spin 1.5x the usual wait */
	td_pace_plan(&p, 0, &w);
	cr_assert_eq(w.spin_until, p.avg + p.avg / 2);

	/* long regular waits (a 1 kHz or 30 Hz stream): no polling at all,
	 * sleep at once (CPU per message counts as much as latency) */
	for (int64_t e = 1000 * us; e <= 33000 * us; e += 32000 * us) {
		p.avg = e;
		td_pace_plan(&p, 7, &w);
		cr_assert_eq(w.spin_until, 7);
		cr_assert_eq(td_pace_step(&w, 7), TD_PACE_SLEEP);
	}
	/* just over the cap (1.5 x 140 us > 200 us): sleep too */
	p.avg = 140 * us;
	td_pace_plan(&p, 0, &w);
	cr_assert_eq(td_pace_step(&w, 0), TD_PACE_SLEEP);
	/* an idle partner (over 100 ms): back to the base poll */
	p.avg = 150000 * us;
	td_pace_plan(&p, 0, &w);
	cr_assert_eq(w.spin_until, 20 * us);

	/* a wait that ends polling is dated by its last clock read, so
	 * no clock read lies between the partner's store and the caller;
	 * one that slept reads the clock; one never begun learns nothing */
	td_pace_init(&p, 20 * us, 200 * us);
	td_pace_plan(&p, 1000000, &w);
	cr_assert_eq(td_pace_step(&w, 1000000 + 3 * us), TD_PACE_SPIN);
	clock_reads = 0;
	td_pace_end(&p, &w, fake_clock);
	cr_assert_eq(clock_reads, 0, "a polling wait read the clock");
	cr_assert_eq(p.avg, 3 * us);
	td_pace_plan(&p, 1000000, &w);
	cr_assert_eq(td_pace_step(&w, 1000000 + 30 * us), TD_PACE_SLEEP);
	td_pace_end(&p, &w, fake_clock); /* woke at fake_clock()'s 1.043 ms */
	cr_assert_eq(clock_reads, 1);
	cr_assert_eq(p.avg, 3 * us + (43 * us - 3 * us) / 4);
	w.start = 0;
	td_pace_end(&p, &w, fake_clock);
	cr_assert_eq(clock_reads, 1);
	cr_assert_eq(p.avg, 13 * us);
	/* one that gave its CPU away since its last read may have waited
	 * far longer too (four waiters on two CPUs): a fresh read */
	td_pace_plan(&p, 1000000, &w);
	cr_assert_eq(td_pace_step(&w, 1000000 + 6 * us), TD_PACE_YIELD);
	td_pace_end(&p, &w, fake_clock);
	cr_assert_eq(clock_reads, 2, "a wait that yielded was not re-read");
	cr_assert_eq(p.avg, 13 * us + (43 * us - 13 * us) / 4);

	/* spinning off: sleep at once, nothing learnt */
	td_pace_init(&p, 0, 200 * us);
	td_pace_plan(&p, 5, &w);
	cr_assert_eq(td_pace_step(&w, 5), TD_PACE_SLEEP);
	td_pace_done(&p, &w, 500);
	cr_assert_eq(p.avg, 0);

	/* as many waiters as CPUs (a fan-out's followers): sleep at once
	 * even where the waits are short, and still learn them; fewer, or
	 * a count not known (0), plan as before */
	td_pace_init(&p, 20 * us, 200 * us);
	p.avg = 40 * us;
	p.cpus = 2;
	for (uint32_t n = 0; n <= 4; n++) {
		p.waiters = n;
		td_pace_plan(&p, 1000, &w);
		cr_assert_eq(td_pace_step(&w, 1000),
			     n >= 2 ? TD_PACE_SLEEP : TD_PACE_SPIN, "%u", n);
		cr_assert_eq(w.spin_until, n >= 2 ? 1000 : 1000 + 60 * us);
	}
	td_pace_done(&p, &w, 1000 + 80 * us);
	cr_assert_eq(p.avg, 40 * us + (80 * us - 40 * us) / 4);
	p.cpus = 0;
	td_pace_plan(&p, 1000, &w);
	cr_assert_eq(td_pace_step(&w, 1000), TD_PACE_SPIN, "CPUs unknown");
}

Test(ring, wire_messages_round_trip_and_refuse_truncation)
{
	struct td_wire_ring_create_req q = {
		.name = {"cam/left", 8},
		.flags = TD_WIRE_REQ_SCM | TD_WIRE_RING_HUGE |
			 TD_WIRE_RING_ROW_WAKE,
		.slot_count = 4,
		.reader_count = 2,
		.dtype = 9,
		.ndim = 3,
		.shape = {480, 640, 3},
		.plane_count = 2,
		.plane_sizes = {921600, 64},
	}, q2;
	struct td_wire_ring_rep r = {
		.id = 7, .flags = TD_WIRE_RING_THP, .row = 1,
		.reader_count = 2, .slot_count = 4, .plane_count = 1,
		.plane_off = {0}, .plane_size = {4096}, .slot_stride = 4096,
		.data_len = 16384, .dtype = 0, .ndim = 1, .shape = {4096},
		.fd_count = 3, .fds = {{5, 0}, {6, 0}, {7, 0}},
	}, r2;
	struct td_wire_ring_sub_req s = {{"cam/left", 8}, TD_WIRE_REQ_SCM, 0}, s2;
	struct td_wire_ring_close_req c = {99}, c2;
	struct td_wire_ring_stat_rep st = {1, 4, 2, 1, 1, 77, 12345}, st2;
	uint8_t b[256];
	int64_t n;

	ROUND_TRIP(ring_create_req, q, q2);
	cr_assert_eq(q2.flags, q.flags);
	cr_assert_eq(q2.plane_sizes[1], 64);
	cr_assert_eq(q2.shape[2], 3);
	ROUND_TRIP(ring_rep, r, r2);
	cr_assert_eq(r2.fds[2].fd, 7);
	ROUND_TRIP(ring_sub_req, s, s2);
	ROUND_TRIP(ring_close_req, c, c2);
	ROUND_TRIP(ring_stat_rep, st, st2);
	cr_assert_eq(st2.requests, 12345);

	/* caps hold on both sides */
	q.plane_count = TD_WIRE_RING_MAX_PLANES + 1;
	cr_assert_eq(td_wire_ring_create_req_encode(&q, b, sizeof(b)),
		     -EINVAL);
	q.plane_count = 1;
	q.flags = 0x80; /* unknown flag */
	n = td_wire_ring_create_req_encode(&q, b, sizeof(b));
	cr_assert(n > 0);
	cr_assert_eq(td_wire_ring_create_req_decode(b, (size_t)n, &q2, NULL),
		     -EBADMSG);
	/* the producer reserving its slots, and the reply that says so */
	q.flags = TD_WIRE_RING_RESERVE | TD_WIRE_RING_HUGE;
	ROUND_TRIP(ring_create_req, q, q2);
	cr_assert_eq(q2.flags, TD_WIRE_RING_RESERVE | TD_WIRE_RING_HUGE);
	r.flags = TD_WIRE_RING_THP | TD_WIRE_RING_UNRESERVED;
	ROUND_TRIP(ring_rep, r, r2);
	cr_assert_eq(r2.flags, TD_WIRE_RING_THP | TD_WIRE_RING_UNRESERVED);
	r.flags = 0x8; /* unknown reply flag */
	n = td_wire_ring_rep_encode(&r, b, sizeof(b));
	cr_assert(n > 0);
	cr_assert_eq(td_wire_ring_rep_decode(b, (size_t)n, &r2, NULL),
		     -EBADMSG);
	r.flags = TD_WIRE_RING_THP;
	q.flags = 0;
	q.name = (struct td_wire_str){"../x", 4};
	n = td_wire_ring_create_req_encode(&q, b, sizeof(b));
	cr_assert_eq(td_wire_ring_create_req_decode(b, (size_t)n, &q2, NULL),
		     -EINVAL);
	r.fd_count = 4;
	cr_assert_eq(td_wire_ring_rep_encode(&r, b, sizeof(b)), -EINVAL);
	/* FOLLOW's spare flag decodes; a bit nobody defined does not */
	s.flags = TD_WIRE_REQ_SCM | TD_WIRE_FOLLOW_SPARE;
	ROUND_TRIP(ring_sub_req, s, s2);
	cr_assert_eq(s2.flags, TD_WIRE_REQ_SCM | TD_WIRE_FOLLOW_SPARE);
	/* WAIT carries its timeout after the flags, and only WAIT does */
	s.flags = TD_WIRE_RSUB_WAIT;
	s.timeout_ms = 1234;
	ROUND_TRIP(ring_sub_req, s, s2);
	cr_assert_eq(s2.timeout_ms, 1234);
	n = td_wire_ring_sub_req_encode(&s, b, sizeof(b));
	cr_assert_eq(td_wire_ring_sub_req_decode(b, (size_t)n - 4, &s2, NULL),
		     -ENODATA);
	s.flags = TD_WIRE_REQ_SCM;
	n = td_wire_ring_sub_req_encode(&s, b, sizeof(b));
	cr_assert_eq(n, 2 + 8 + 4);
	s.flags = 0x8;
	n = td_wire_ring_sub_req_encode(&s, b, sizeof(b));
	cr_assert(n > 0);
	cr_assert_eq(td_wire_ring_sub_req_decode(b, (size_t)n, &s2, NULL),
		     -EBADMSG);
}

/* ---- bytes, many handoffs ---- */

#define MANY 3000
#define MANY_SIZE (64 * 1024 + 40) /* not a page multiple */

struct many {
	int ready[2]; /* consumer -> producer: subscribed */
};

static void many_producer(const struct tu_daemon *d, void *arg)
{
	struct many *m = arg;
	struct td_client *c = open_client(d);
	struct td_ring *r = make_ring(c, "t/many", 3, MANY_SIZE, 0);
	struct td_slot s;

	hear(m->ready[0]);
	for (uint64_t v = 1; v <= MANY; v++) {
		uint64_t got;

		CK_EQ(td_ring_acquire(r, -1, &s), 0);
		CK_EQ(s.plane_count, 1);
		CK_EQ(s.sizes[0], MANY_SIZE);
		pattern_fill(s.planes[0], MANY_SIZE, v);
		CK_EQ(td_ring_publish(r, &got), 0);
		CK_EQ(got, v);
	}
	/* leave without td_ring_close: the daemon notices the hang-up */
	_exit(0);
}

static void many_consumer(const struct tu_daemon *d, void *arg)
{
	struct many *m = arg;
	struct td_client *c = open_client(d);
	struct td_sub *sub = subscribe(c, "t/many");
	struct td_view v;
	uint64_t last = 0, seen = 0;
	int rc;

	say(m->ready[1]);
	while ((rc = td_sub_next(sub, 20000, &v)) == 0) {
		CK(v.version > last);
		CK_EQ(v.plane_count, 1);
		CK_EQ(v.sizes[0], MANY_SIZE);
		CK_EQ(v.dtype, TD_TENSOR_U8);
		CK_EQ(v.ndim, 1);
		CK_EQ(v.shape[0], MANY_SIZE);
		CK(pattern_ok(v.planes[0], MANY_SIZE, v.version));
		last = v.version;
		seen++;
	}
	/* the last version is delivered before the ring reads as closed */
	CK_EQ(rc, -EPIPE);
	CK_EQ(last, MANY);
	CK(seen >= 1);
	td_sub_close(sub);
	td_client_close(c);
}

/*
 * A daemon, then a producer and a consumer child of it (arg to both),
 * which must both exit 0; `ready` (the consumer says it subscribed) is
 * made first and closed after.
 */
static void pair_run(child_fn producer, child_fn consumer, void *arg,
		     int ready[2])
{
	struct tu_daemon d;
	pid_t p, c;

	tu_daemon_start(&d, "warn");
	cr_assert(pipe2(ready, O_CLOEXEC) == 0);
	p = spawn(&d, producer, arg);
	c = spawn(&d, consumer, arg);
	cr_assert_eq(reap(c), 0, "consumer failed");
	cr_assert_eq(reap(p), 0, "producer failed");
	close(ready[0]);
	close(ready[1]);
	tu_daemon_stop(&d, true);
}

Test(ring, bytes_arrive_intact_across_many_handoffs)
{
	struct many m;

	pair_run(many_producer, many_consumer, &m, m.ready);
}

/* ---- every wait a sleep: no wake-up lost ---- */

#define SLEEPY 1000 /* rounds of two versions */
#define SLEEPY_SIZE 4096

/*
 * Both sides sleep at once (TENSORD_RING_SPIN_US=0) in a ping-pong: the
 * producer publishes two versions on a two-slot ring, then sleeps until
 * the subscriber acks the second on a ring the other way; the subscriber
 * acks every version it takes. So each round goes through every
 * store-then-load pair of docs/fastpath.md: a subscriber asleep for a
 * publish (futex on seq, or its eventfd: `waiting` against the publish),
 * and the producer asleep for a slot (the latest is one, the subscriber
 * still holds the other: `prod_waiting` against the release). Nothing
 * else wakes either side, so a lost wake-up is a wait that runs into its
 * 20 s bound and fails the child.
 */
struct sleepy {
	int ready[2]; /* subscriber -> producer: subscribed */
	bool by_fd;   /* the subscriber waits through td_sub_fd */
};

static void sleepy_producer(const struct tu_daemon *d, void *arg)
{
	struct sleepy *y = arg;
	struct td_client *c;
	struct td_ring *r;
	struct td_sub *ack;
	struct td_slot s;
	struct td_view a;
	uint64_t v = 0, got;

	CK_EQ(setenv("TENSORD_RING_SPIN_US", "0", 1), 0);
	c = open_client(d);
	r = make_ring(c, "t/sleepy", 2, SLEEPY_SIZE, 0);
	hear(y->ready[0]);
	ack = subscribe(c, "t/sleepy-ack");
	for (int round = 0; round < SLEEPY; round++) {
		for (int k = 0; k < 2; k++) {
			CK_EQ(td_ring_acquire(r, 20000, &s), 0);
			pattern_fill(s.planes[0], SLEEPY_SIZE, ++v);
			CK_EQ(td_ring_publish(r, &got), 0);
			CK_EQ(got, v);
		}
		do {
			CK_EQ(td_sub_next(ack, 20000, &a), 0);
			memcpy(&got, a.planes[0], sizeof(got));
			CK(got <= v);
		} while (got < v);
	}
	td_sub_close(ack);
	_exit(0); /* the daemon closes the ring */
}

/* The next version or the end, waiting through the subscription's fd. */
static int sleepy_next_by_fd(struct td_sub *sub, int fd, struct td_view *v)
{
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int rc = td_sub_poll(sub, v);

		if (rc != -EAGAIN)
			return rc;
		CK_EQ(poll(&p, 1, 20000), 1);
	}
}

static void sleepy_consumer(const struct tu_daemon *d, void *arg)
{
	struct sleepy *y = arg;
	struct td_client *c;
	struct td_sub *sub;
	struct td_ring *ack;
	struct td_slot s;
	struct td_view v;
	uint64_t last = 0, seen = 0;
	int fd = -1, rc;

	CK_EQ(setenv("TENSORD_RING_SPIN_US", "0", 1), 0);
	c = open_client(d);
	ack = make_ring(c, "t/sleepy-ack", 2, sizeof(uint64_t), 0);
	sub = subscribe(c, "t/sleepy");
	if (y->by_fd)
		CK((fd = td_sub_fd(sub)) >= 0);
	say(y->ready[1]);
	/* the view stays held while acking: the producer's next slot
	 * waits for our next call */
	while ((rc = y->by_fd ? sleepy_next_by_fd(sub, fd, &v)
			      : td_sub_next(sub, 20000, &v)) == 0) {
		CK(v.version > last);
		CK(pattern_ok(v.planes[0], SLEEPY_SIZE, v.version));
		last = v.version;
		seen++;
		CK_EQ(td_ring_acquire(ack, 20000, &s), 0);
		memcpy(s.planes[0], &v.version, sizeof(v.version));
		CK_EQ(td_ring_publish(ack, NULL), 0);
	}
	CK_EQ(rc, -EPIPE);
	CK_EQ(last, 2 * SLEEPY);
	CK(seen >= SLEEPY);
	td_sub_close(sub);
	td_ring_close(ack);
	td_client_close(c);
}

Test(ring, no_wake_up_is_lost_when_both_sides_sleep_at_once)
{
	struct sleepy y = {.by_fd = false};

	pair_run(sleepy_producer, sleepy_consumer, &y, y.ready);
}

Test(ring, no_wake_up_is_lost_when_the_subscriber_waits_by_fd)
{
	struct sleepy y = {.by_fd = true};

	pair_run(sleepy_producer, sleepy_consumer, &y, y.ready);
}

/* ---- steady state: no fd, no mmap, no socket message ---- */

#define PP_WARM 16
#define PP_COUNT 1000

/* pipes: each side tells the other it has taken its last count */
struct pp {
	int to_c[2], to_p[2];
};

static void pp_side(const struct tu_daemon *d, const struct pp *pp,
		    bool producer)
{
	struct td_client *c = open_client(d);
	/* the producer of t/data consumes t/ack and the other way round */
	struct td_ring *out = make_ring(c, producer ? "t/data" : "t/ack", 2,
					producer ? 4096 : 16, 0);
	struct td_sub *in = subscribe(c, producer ? "t/ack" : "t/data");
	struct td_ring_stat st0, st1;
	int fds0 = 0, maps0 = 0;

	for (uint64_t i = 1; i <= PP_WARM + PP_COUNT; i++) {
		struct td_slot s;
		struct td_view v;

		if (i == PP_WARM + 1) {
			/* after warm-up: what the process holds now */
			CK_EQ(td_client_ring_stat(c, "t/data", &st0, NULL), 0);
			fds0 = raw_fd_count();
			maps0 = raw_map_count();
		}
		if (producer) {
			CK_EQ(td_ring_acquire(out, -1, &s), 0);
			memcpy(s.planes[0], &i, sizeof(i));
			CK_EQ(td_ring_publish(out, NULL), 0);
			CK_EQ(td_sub_next(in, 20000, &v), 0);
			CK(memcmp(v.planes[0], &i, sizeof(i)) == 0);
			CK_EQ(td_sub_release(in), 0);
		} else {
			CK_EQ(td_sub_next(in, 20000, &v), 0);
			CK_EQ(v.version, i);
			CK(memcmp(v.planes[0], &i, sizeof(i)) == 0);
			CK_EQ(td_sub_release(in), 0);
			CK_EQ(td_ring_acquire(out, -1, &s), 0);
			memcpy(s.planes[0], &i, sizeof(i));
			CK_EQ(td_ring_publish(out, NULL), 0);
		}
	}
	CK_EQ(raw_fd_count(), fds0);
	CK_EQ(raw_map_count(), maps0);
	CK_EQ(td_client_ring_stat(c, "t/data", &st1, NULL), 0);
	/* neither side sends anything else until both have counted */
	say(producer ? pp->to_c[1] : pp->to_p[1]);
	hear(producer ? pp->to_p[0] : pp->to_c[0]);
	/*
	 * Each side asked twice; between its two asks the daemon received
	 * nothing but the other side's two asks and our own second one:
	 * 2000 handoffs crossed no socket.
	 */
	CK(st1.daemon_requests - st0.daemon_requests <= 3);
	CK_EQ(st1.latest_version, PP_WARM + PP_COUNT);
	td_sub_close(in);
	td_ring_close(out);
	td_client_close(c);
}

static void pp_producer(const struct tu_daemon *d, void *arg)
{
	pp_side(d, arg, true);
}

static void pp_consumer(const struct tu_daemon *d, void *arg)
{
	pp_side(d, arg, false);
}

static int proc_fd_count(pid_t pid)
{
	char path[64], *out;
	char *argv[] = {"/bin/sh", "-c", path, NULL};
	int n, rc;

	snprintf(path, sizeof(path), "ls /proc/%d/fd | wc -l", (int)pid);
	rc = tu_run_capture(argv, &out);
	cr_assert_eq(rc, 0);
	n = atoi(out);
	free(out);
	return n;
}

/*
 * The daemon's fd count once it is steady: tu_daemon_start()'s probe
 * connection may still be open in the daemon until it reads the hang-up.
 * Three equal reads 100 ms apart (a daemon stalled for a moment would
 * pass two quick ones with the probe still counted), at most 20 s.
 */
static int settled_fd_count(pid_t pid)
{
	int n = proc_fd_count(pid), same = 1;

	for (int i = 0; i < 200 && same < 3; i++) {
		usleep(100000);
		int m = proc_fd_count(pid);

		same = m == n ? same + 1 : 1;
		n = m;
	}
	return n;
}

Test(ring, steady_state_handoff_passes_no_fd_and_no_mmap)
{
	struct tu_daemon d;
	struct pp pp;
	pid_t p, c;
	int dfds, n = 0;

	tu_daemon_start(&d, "warn");
	cr_assert(pipe2(pp.to_c, O_CLOEXEC) == 0);
	cr_assert(pipe2(pp.to_p, O_CLOEXEC) == 0);
	dfds = settled_fd_count(d.pid);
	p = spawn(&d, pp_producer, &pp);
	c = spawn(&d, pp_consumer, &pp);
	cr_assert_eq(reap(p), 0, "producer failed");
	cr_assert_eq(reap(c), 0, "consumer failed");
	/*
	 * And the daemon holds nothing of either ring any more, once it has
	 * read both hang-ups (asynchronous: poll, at most 10 s).
	 */
	for (int i = 0; i < 1000; i++) {
		n = proc_fd_count(d.pid);
		if (n == dfds)
			break;
		usleep(10000);
	}
	cr_assert_eq(n, dfds, "daemon fds %d -> %d", dfds, n);
	for (int i = 0; i < 2; i++) {
		close(pp.to_c[i]);
		close(pp.to_p[i]);
	}
	tu_daemon_stop(&d, true);
}

/* ---- holds ---- */

struct hold {
	int held[2]; /* consumer -> test: holding version 1 */
	int done[2]; /* test -> consumer: producer finished, check, release */
	int rel[2];  /* consumer -> producer: released */
	int fin[2];  /* producer -> consumer: acquired again, leave now */
	uint32_t slots;
};

static void hold_consumer(const struct tu_daemon *d, void *arg)
{
	struct hold *h = arg;
	struct td_client *c = open_client(d);
	struct td_sub *sub = subscribe(c, "t/hold");
	struct td_view v;
	const uint8_t *p;

	CK_EQ(td_sub_next(sub, 20000, &v), 0);
	CK_EQ(v.version, 1);
	p = v.planes[0];
	CK(pattern_ok(p, 8192, 1));
	say(h->held[1]);
	hear(h->done[0]);
	/* every publish of the producer went elsewhere */
	CK(pattern_ok(p, 8192, 1));
	/* and the mapping is read-only: a consumer cannot scribble */
	CK(mprotect((void *)((uintptr_t)p & ~(uintptr_t)4095), 4096,
		    PROT_READ | PROT_WRITE) < 0);
	CK_EQ(td_sub_release(sub), 0);
	say(h->rel[1]);
	/* stay subscribed (not having taken version 2, which keeps the
	 * producer off the latest slot) until it has acquired again */
	hear(h->fin[0]);
	td_sub_close(sub);
	td_client_close(c);
}

static void hold_producer(const struct tu_daemon *d, void *arg)
{
	struct hold *h = arg;
	struct td_client *c = open_client(d);
	struct td_ring *r = make_ring(c, "t/hold", h->slots, 8192, 0);
	struct td_slot s;
	uint32_t held_slot;

	CK_EQ(td_ring_acquire(r, 0, &s), 0);
	held_slot = s.index;
	pattern_fill(s.planes[0], 8192, 1);
	CK_EQ(td_ring_publish(r, NULL), 0);
	hear(h->held[0]);
	if (h->slots > 2) {
		/* a third slot is always free: cycle, never the held one */
		for (uint64_t v = 2; v < 300; v++) {
			CK_EQ(td_ring_acquire(r, 0, &s), 0);
			CK(s.index != held_slot);
			pattern_fill(s.planes[0], 8192, v);
			CK_EQ(td_ring_publish(r, NULL), 0);
		}
	} else {
		CK_EQ(td_ring_acquire(r, 0, &s), 0);
		CK(s.index != held_slot);
		pattern_fill(s.planes[0], 8192, 2);
		CK_EQ(td_ring_publish(r, NULL), 0);
		/* held + latest: nothing to write into, so it must wait */
		CK_EQ(td_ring_acquire(r, 0, &s), -ETIMEDOUT);
	}
	say(h->done[1]);
	if (h->slots == 2) {
		/* sleeps until the consumer's release wakes it */
		CK_EQ(td_ring_acquire(r, -1, &s), 0);
		CK_EQ(s.index, held_slot);
		hear(h->rel[0]);
	} else {
		hear(h->rel[0]);
	}
	say(h->fin[1]);
	td_ring_close(r);
	td_client_close(c);
}

static void hold_run(uint32_t slots)
{
	struct tu_daemon d;
	struct hold h = {.slots = slots};
	pid_t p, c;

	tu_daemon_start(&d, "warn");
	cr_assert(pipe2(h.held, O_CLOEXEC) == 0);
	cr_assert(pipe2(h.done, O_CLOEXEC) == 0);
	cr_assert(pipe2(h.rel, O_CLOEXEC) == 0);
	cr_assert(pipe2(h.fin, O_CLOEXEC) == 0);
	p = spawn(&d, hold_producer, &h);
	c = spawn(&d, hold_consumer, &h);
	cr_assert_eq(reap(c), 0, "consumer failed");
	cr_assert_eq(reap(p), 0, "producer failed");
	for (int i = 0; i < 2; i++) {
		close(h.held[i]);
		close(h.done[i]);
		close(h.rel[i]);
		close(h.fin[i]);
	}
	tu_daemon_stop(&d, true);
}

Test(ring, producer_never_overwrites_a_held_slot)
{
	hold_run(3);
}

Test(ring, producer_waits_while_every_slot_is_held_or_latest)
{
	hold_run(2);
}

/*
 * A hold prefetches the reader rows of the rings its client produces
 * (docs/fastpath.md, "Why the two-ring round trip is not at 2×"): the
 * client lists the first TD__PROD_ROWS of them, and a closed ring leaves
 * its entry to the next one made (else the list would fill for good and
 * name unmapped rows).
 */
Test(ring, a_client_lists_its_own_rings_rows_until_they_close)
{
	struct td_ring *r[TD__PROD_ROWS + 1];
	struct tu_daemon d;
	struct td_client *c;
	char name[32];

	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	for (int i = 0; i <= TD__PROD_ROWS; i++) {
		snprintf(name, sizeof(name), "t/rows%d", i);
		r[i] = make_ring(c, name, 2, 64, 0);
	}
	for (int i = 0; i < TD__PROD_ROWS; i++) {
		cr_assert_eq(atomic_load(&c->prod_rows[i]),
			     (const void *)r[i]->m.rd->rows);
		cr_assert_eq(atomic_load(&c->prod_row_n[i]),
			     TD__PROD_ROW_LINES, "4 readers (the default)");
		cr_assert_eq(r[i]->prod_row, i);
	}
	cr_assert_eq(r[TD__PROD_ROWS]->prod_row, -1, "the list is full");

	td_ring_close(r[1]);
	cr_assert_null(atomic_load(&c->prod_rows[1]));
	r[1] = make_ring(c, "t/rows-again", 2, 64, 0);
	cr_assert_eq(r[1]->prod_row, 1, "a closed ring's entry is free again");
	cr_assert_eq(atomic_load(&c->prod_rows[1]),
		     (const void *)r[1]->m.rd->rows);

	for (int i = 0; i <= TD__PROD_ROWS; i++)
		td_ring_close(r[i]);
	for (int i = 0; i < TD__PROD_ROWS; i++)
		cr_assert_null(atomic_load(&c->prod_rows[i]));
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* ---- reuse of the latest slot ---- */

/*
 * In-process: producer and subscribers on one connection, every call
 * non-blocking, so each step's outcome is exact. The producer rewrites
 * the latest slot only once every subscriber took it and none holds it;
 * until then the latest version stays readable, intact.
 */
Test(ring, the_latest_slot_is_reused_only_once_every_reader_took_it)
{
	const uint64_t n = 8192;
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r;
	struct td_sub *a, *b;
	struct td_slot s;
	struct td_view v, w;
	uint64_t ver;
	uint32_t s1, sx;

	one_sub_open(&d, &c, &r, &a, "t/reuse", 3, n);
	/* the leak check at the end counts exactly these (testutil.h) */
	cr_assert_eq(tu_buf_map_count(), d.bufmaps0 + 6,
		     "producer + subscriber map 3 memfds each");

	cr_assert_eq(td_ring_acquire(r, 0, &s), 0);
	pattern_fill(s.planes[0], n, 1);
	cr_assert_eq(td_ring_publish(r, &ver), 0);
	cr_assert_eq(ver, 1);
	/* a has not taken version 1: the producer must write elsewhere */
	cr_assert_eq(td_ring_acquire(r, 0, &s), 0);
	s1 = s.index;
	pattern_fill(s.planes[0], n, 2);
	cr_assert_eq(td_ring_publish(r, NULL), 0);
	cr_assert_eq(td_sub_next(a, 0, &v), 0);
	cr_assert_eq(v.version, 2);
	cr_assert_eq(v.slot, s1);
	cr_assert(pattern_ok(v.planes[0], n, 2));
	cr_assert_eq(td_sub_release(a), 0);

	/* a took 2 and holds nothing: the latest slot is rewritten */
	cr_assert_eq(td_ring_acquire(r, 0, &s), 0);
	cr_assert_eq(s.index, s1, "slot %u, latest was %u", s.index, s1);
	pattern_fill(s.planes[0], n, 3);
	/* mid-rewrite there is nothing to take (a already had 2) */
	cr_assert_eq(td_sub_next(a, 0, &v), -ETIMEDOUT);
	/* a subscriber arriving now finds `latest` still naming version
	 * 2, whose slot is being rewritten: its first hold checks the
	 * slot's version and refuses it (docs/fastpath.md) */
	b = subscribe(c, "t/reuse");
	cr_assert_eq(td_sub_next(b, 0, &w), -ETIMEDOUT,
		     "a new subscriber took a slot being rewritten");
	cr_assert_eq(td_ring_publish(r, NULL), 0);
	cr_assert_eq(td_sub_next(b, 0, &w), 0);
	cr_assert_eq(w.version, 3);
	cr_assert(pattern_ok(w.planes[0], n, 3));
	td_sub_close(b);
	cr_assert_eq(td_sub_next(a, 0, &v), 0);
	cr_assert_eq(v.version, 3);
	cr_assert_eq(v.slot, s1);
	cr_assert(pattern_ok(v.planes[0], n, 3));

	/* a holds the latest slot: never rewritten while held */
	cr_assert_eq(td_ring_acquire(r, 0, &s), 0);
	sx = s.index;
	cr_assert_neq(sx, s1);
	pattern_fill(s.planes[0], n, 4);
	cr_assert_eq(td_ring_publish(r, NULL), 0);
	cr_assert(pattern_ok(v.planes[0], n, 3));
	cr_assert_eq(td_sub_release(a), 0);

	/* a new subscriber took nothing yet: version 4 stays for it even
	 * after a took it, while the producer writes version 5 */
	b = subscribe(c, "t/reuse");
	cr_assert_eq(td_sub_next(a, 0, &v), 0);
	cr_assert_eq(v.version, 4);
	cr_assert_eq(td_sub_release(a), 0);
	cr_assert_eq(td_ring_acquire(r, 0, &s), 0);
	cr_assert_neq(s.index, sx);
	pattern_fill(s.planes[0], n, 5);
	cr_assert_eq(td_sub_next(b, 0, &w), 0);
	cr_assert_eq(w.version, 4);
	cr_assert_eq(w.slot, sx);
	cr_assert(pattern_ok(w.planes[0], n, 4));
	cr_assert_eq(td_sub_release(b), 0);
	cr_assert_eq(td_ring_publish(r, NULL), 0);
	sx = s.index;

	/* both took 5 and hold nothing: reuse again; a subscriber that
	 * leaves stops counting (its row is cleared by the daemon) */
	cr_assert_eq(td_sub_next(a, 0, &v), 0);
	cr_assert_eq(td_sub_next(b, 0, &w), 0);
	cr_assert_eq(w.version, 5);
	td_sub_release(a);
	td_sub_release(b);
	cr_assert_eq(td_ring_acquire(r, 0, &s), 0);
	cr_assert_eq(s.index, sx);
	pattern_fill(s.planes[0], n, 6);
	cr_assert_eq(td_ring_publish(r, NULL), 0);
	cr_assert_eq(td_sub_next(a, 0, &v), 0);
	cr_assert_eq(v.version, 6);
	td_sub_release(a);
	td_sub_close(b);
	cr_assert_eq(td_ring_acquire(r, 0, &s), 0);
	cr_assert_eq(s.index, sx, "a departed reader still counted");
	cr_assert_eq(td_ring_publish(r, NULL), 0);

	one_sub_close(&d, c, r, a);
}

/* The timerfd was fired (armed to expire, or expired and unread). */
static bool timerfd_fired(int fd)
{
	struct itimerspec t;
	struct pollfd p = {.fd = fd, .events = POLLIN};

	CK(timerfd_gettime(fd, &t) == 0);
	return t.it_value.tv_sec || t.it_value.tv_nsec || poll(&p, 1, 0) == 1;
}

/*
 * An event-loop reader that arrives while the producer rewrites the
 * latest slot finds `latest` naming a version its slot no longer holds:
 * nothing to take yet, so its timerfd must stay quiet until the publish.
 * It used to be fired at every arm (td_sub_poll said -EAGAIN and made the
 * fd readable at once): the loop spun a CPU for as long as the producer
 * took to write the slot, or for ever for a producer that left the
 * version word so.
 */
Test(ring, an_event_loop_reader_is_not_woken_by_a_slot_being_rewritten)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r;
	struct td_sub *a, *b;
	struct td_slot s;
	struct td_view v;
	struct td_ring_hdr *h;
	uint32_t s1;
	int fd;

	one_sub_open(&d, &c, &r, &a, "t/loop-rewrite", 3, 4096);
	h = tu_find_mapping("memfd:tensord-ring-hdr");
	put(r);
	cr_assert_eq(td_sub_next(a, 0, &v), 0);
	cr_assert_eq(td_sub_release(a), 0);
	/* a took 1 and holds nothing: the latest slot is rewritten */
	cr_assert_eq(td_ring_acquire(r, 0, &s), 0);
	s1 = s.index;
	cr_assert_eq(atomic_load(&h->slots[s1].version), 0);
	b = subscribe(c, "t/loop-rewrite");
	fd = td_sub_fd(b);
	cr_assert_geq(fd, 0);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(td_sub_poll(b, &v), -EAGAIN);
		cr_assert_not(timerfd_fired(fd),
			      "armed reader woken with nothing to take");
	}
	pattern_fill(s.planes[0], 4096, 2);
	cr_assert_eq(td_ring_publish(r, NULL), 0);
	tu_await_readable(fd, 60, "the publish's wake");
	cr_assert_eq(td_sub_poll(b, &v), 0);
	cr_assert_eq(v.version, 2);
	cr_assert(pattern_ok(v.planes[0], 4096, 2));
	cr_assert_eq(td_sub_release(b), 0);
	cr_assert_eq(td_sub_poll(b, &v), -EAGAIN);
	cr_assert_not(timerfd_fired(fd));
	/* a slot index past the ring (a corrupt producer) is an error */
	atomic_store(&h->latest, td_ring_latest_pack(3, 200));
	cr_assert_eq(td_sub_poll(b, &v), -EBADMSG);
	atomic_store(&h->latest, td_ring_latest_pack(2, s1));
	td_sub_close(b);
	one_sub_close(&d, c, r, a);
}

static void count_calls(struct td_sub *s, int status,
			const struct td_view *v, void *ud)
{
	(void)s;
	(void)status;
	(void)v;
	++*(int *)ud;
}

/*
 * The producer is given every event-loop reader's timerfd (RING_WAKE), to
 * fire it. A hostile one can arm it periodic instead, with one call: the
 * fd then stays readable for ever and the reader's loop spins a CPU
 * finding nothing. A wake-up that finds nothing disarms the timer, in
 * td_sub_poll and in td_client_process's delivery alike.
 */
Test(ring, a_producer_cannot_keep_an_event_loop_reader_spinning)
{
	const struct itimerspec tick = {{0, 1000000}, {0, 1000000}};
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r;
	struct td_sub *a;
	struct td_view v;
	struct itimerspec t;
	int fd, pfd = -1, calls = 0;

	one_sub_open(&d, &c, &r, &a, "t/loop-tick", 3, 4096);
	fd = td_sub_fd(a);
	cr_assert_geq(fd, 0);
	cr_assert_eq(td_sub_poll(a, &v), -EAGAIN); /* armed */
	put(r); /* fetches the timerfd (RING_WAKE) and fires it */
	for (uint32_t i = 0; i < TD_RING_MAX_READERS; i++)
		if (r->wake_fd[i] >= 0)
			pfd = r->wake_fd[i];
	cr_assert_geq(pfd, 0, "the producer holds no timerfd");
	tu_await_readable(fd, 60, "the publish's wake");
	cr_assert_eq(td_sub_poll(a, &v), 0);
	cr_assert_eq(v.version, 1);
	cr_assert_eq(td_sub_release(a), 0);

	/* td_sub_poll: woken by the periodic timer, nothing to take */
	cr_assert_eq(timerfd_settime(pfd, 0, &tick, NULL), 0);
	tu_await_readable(fd, 60, "the periodic timer");
	cr_assert_eq(td_sub_poll(a, &v), -EAGAIN);
	cr_assert_eq(timerfd_gettime(fd, &t), 0);
	cr_assert(!t.it_interval.tv_sec && !t.it_interval.tv_nsec,
		  "the producer's periodic timer still runs");

	/* td_client_process: the same, with a handler */
	cr_assert_eq(td_sub_set_handler(a, count_calls, &calls), 0);
	cr_assert_eq(timerfd_settime(pfd, 0, &tick, NULL), 0);
	tu_await_readable(fd, 60, "the periodic timer");
	cr_assert_geq(td_client_process(c, NULL), 0);
	cr_assert_eq(calls, 0);
	cr_assert_eq(timerfd_gettime(fd, &t), 0);
	cr_assert(!t.it_interval.tv_sec && !t.it_interval.tv_nsec,
		  "the producer's periodic timer still runs");
	/* and a publish still reaches the handler */
	put(r);
	tu_await_readable(fd, 60, "the publish's wake");
	cr_assert_geq(td_client_process(c, NULL), 0);
	cr_assert_eq(calls, 1);
	cr_assert_eq(td_sub_set_handler(a, NULL, NULL), 0);
	one_sub_close(&d, c, r, a);
}

/*
 * RING_WAKE generations count in 32 bits and wrap. The producer keeps
 * each row's timerfd under the generation the daemon sent it for that
 * row (wake_fetch) and asks again only when the row shows another: a
 * new reader's registration whose generation came round to the number
 * the producer holds for its row looked like the last reader's, and
 * every publish fired the last reader's timerfd, never the new one's
 * (a year of readers coming and going on a ring reaches 2^32). Here
 * the counter wraps after 2 ($TENSORD_TEST_RING_WAKE_GEN_MAX) and a
 * reader that registers and leaves on another row between two of row
 * 1's readers brings it round each time: 200 readers of row 1, each
 * woken by a publish through its own timerfd.
 */
Test(ring, a_wake_generation_come_round_again_wakes_the_new_reader,
     .timeout = 120)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r;
	struct td_sub *a;
	struct td_view v;
	pid_t self = getpid();

	cr_assert_eq(setenv("TENSORD_TEST_RING_WAKE_GEN_MAX", "2", 1), 0);
	one_sub_open(&d, &c, &r, &a, "t/wake-round", 3, 4096);
	unsetenv("TENSORD_TEST_RING_WAKE_GEN_MAX");
	put(r);
	for (int i = 0; i < 200; i++) {
		struct td_sub *x = subscribe(c, "t/wake-round");
		struct td_sub *y;
		uint64_t want;
		int fd = td_sub_fd(x);

		cr_assert_eq(x->row - x->m.rd->rows, 1);
		cr_assert_geq(fd, 0);
		/* the latest version first, then nothing: armed */
		cr_assert_eq(td_sub_poll(x, &v), 0);
		cr_assert_eq(td_sub_release(x), 0);
		cr_assert_eq(td_sub_poll(x, &v), -EAGAIN);
		want = put(r);
		cr_assert(r->wake_fd[1] >= 0 &&
				  syscall(SYS_kcmp, self, self, KCMP_FILE,
					  r->wake_fd[1], fd) == 0,
			  "reader %d: the producer fired another timerfd "
			  "than its own (generation %u)",
			  i, r->wake_gen[1]);
		tu_await_readable(fd, 60, "the publish's wake");
		cr_assert_eq(td_sub_poll(x, &v), 0);
		cr_assert_eq(v.version, want);
		cr_assert_eq(td_sub_release(x), 0);
		td_sub_close(x);
		/* one registration elsewhere: the counter comes round */
		y = subscribe(c, "t/wake-round");
		cr_assert_eq(y->row - y->m.rd->rows, 1);
		cr_assert_geq(td_sub_fd(y), 0);
		td_sub_close(y);
	}
	one_sub_close(&d, c, r, a);
}

static void last_status(struct td_sub *s, int status,
			const struct td_view *v, void *ud)
{
	(void)s;
	(void)v;
	*(int *)ud = status;
}

/*
 * A subscription whose handler was told its end (here -EBADMSG: the
 * producer wrote a slot index past the ring) and that the program keeps
 * open: its timerfd left the client's fd set. It stayed there, never
 * read again, so a producer that fired it (or armed it periodic) kept
 * td_client_fd() readable and the program's loop spinning for ever.
 */
Test(ring, an_ended_subscription_leaves_the_clients_fd_quiet)
{
	const struct itimerspec tick = {{0, 1000000}, {0, 1000000}};
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r;
	struct td_sub *a;
	struct td_view v;
	struct pollfd p;
	int fd, cfd, pfd = -1, status = 1;

	one_sub_open(&d, &c, &r, &a, "t/loop-end", 3, 4096);
	cfd = td_client_fd(c);
	cr_assert_geq(cfd, 0);
	fd = td_sub_fd(a);
	cr_assert_geq(fd, 0);
	cr_assert_eq(td_sub_poll(a, &v), -EAGAIN); /* armed */
	put(r); /* fetches the timerfd (RING_WAKE) */
	for (uint32_t i = 0; i < TD_RING_MAX_READERS; i++)
		if (r->wake_fd[i] >= 0)
			pfd = r->wake_fd[i];
	cr_assert_geq(pfd, 0, "the producer holds no timerfd");
	cr_assert_eq(td_sub_set_handler(a, last_status, &status), 0);
	tu_await_readable(cfd, 60, "the publish's wake");
	cr_assert_geq(td_client_process(c, NULL), 0);
	cr_assert_eq(status, 0);
	atomic_store(&r->m.hdr->latest, td_ring_latest_pack(9, 200));
	cr_assert_eq(timerfd_settime(pfd, 0, &tick, NULL), 0);
	tu_await_readable(cfd, 60, "the producer's timer");
	cr_assert_geq(td_client_process(c, NULL), 0);
	cr_assert_eq(status, -EBADMSG);
	/* the timer keeps running; nothing of it reaches the client's fd */
	tu_await_readable(fd, 60, "the producer's timer");
	p = (struct pollfd){.fd = cfd, .events = POLLIN};
	cr_assert_eq(poll(&p, 1, 0), 0,
		     "an ended subscription keeps the client's fd readable");
	atomic_store(&r->m.hdr->latest, td_ring_latest_pack(1, 0));
	cr_assert_eq(td_sub_set_handler(a, NULL, NULL), 0);
	one_sub_close(&d, c, r, a);
}

/* ---- lock step: the producer waits for its readers ---- */

/*
 * In-process, every call non-blocking: td_ring_wait_read() answers 0
 * exactly when every subscriber of the moment has taken the version (or
 * a newer one) and holds it no more.
 */
Test(ring, wait_read_waits_for_every_reader_to_read_and_release)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r;
	struct td_sub *a, *b, *n;
	struct td_view v;
	uint64_t ver;

	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	r = make_ring(c, "t/lock", 4, 64, 0);
	cr_assert_eq(td_ring_wait_read(r, 1, 0), -EINVAL, "not published");
	cr_assert_eq(td_ring_wait_read(r, 0, 0), -EINVAL);
	cr_assert_eq(td_ring_wait_read(NULL, 1, 0), -EINVAL);
	ver = put(r);
	cr_assert_eq(td_ring_wait_read(r, ver, 0), 0, "no subscriber");

	a = subscribe(c, "t/lock");
	b = subscribe(c, "t/lock");
	cr_assert_eq(td_ring_wait_read(r, 1, 0), -ETIMEDOUT,
		     "new subscribers have not read the latest version");
	cr_assert_eq(put(r), 2);
	cr_assert_eq(td_sub_next(a, 0, &v), 0);
	cr_assert_eq(v.version, 2);
	cr_assert_eq(td_ring_wait_read(r, 2, 0), -ETIMEDOUT, "a holds it");
	cr_assert_eq(td_sub_release(a), 0);
	cr_assert_eq(td_ring_wait_read(r, 2, 0), -ETIMEDOUT, "b never took");
	cr_assert_eq(td_ring_wait_read(r, 2, 30), -ETIMEDOUT);
	cr_assert_eq(td_sub_next(b, 0, &v), 0);
	cr_assert_eq(td_ring_wait_read(r, 2, 0), -ETIMEDOUT, "b holds it");
	cr_assert_eq(td_sub_release(b), 0);
	cr_assert_eq(td_ring_wait_read(r, 2, 0), 0);
	cr_assert_eq(td_ring_wait_read(r, 1, 0), 0, "older: read too");
	cr_assert_eq(td_ring_wait_read(r, 3, 0), -EINVAL);

	/* versions 3 and 4; both take 4: 3 counts as read while they
	 * still hold 4 (they moved past it), 4 only once released */
	cr_assert_eq(put(r), 3);
	cr_assert_eq(put(r), 4);
	cr_assert_eq(td_sub_next(a, 0, &v), 0);
	cr_assert_eq(v.version, 4);
	cr_assert_eq(td_ring_wait_read(r, 3, 0), -ETIMEDOUT, "b is behind");
	cr_assert_eq(td_sub_next(b, 0, &v), 0);
	cr_assert_eq(td_ring_wait_read(r, 3, 0), 0, "both past 3");
	cr_assert_eq(td_ring_wait_read(r, 4, 0), -ETIMEDOUT);
	/* a subscriber that leaves stops counting */
	td_sub_close(b);
	cr_assert_eq(td_ring_wait_read(r, 4, 0), -ETIMEDOUT, "a holds 4");
	cr_assert_eq(td_sub_release(a), 0);
	cr_assert_eq(td_ring_wait_read(r, 4, 0), 0, "b still counted");
	/* one that arrives counts until it read */
	n = subscribe(c, "t/lock");
	cr_assert_eq(td_ring_wait_read(r, 4, 0), -ETIMEDOUT);
	cr_assert_eq(td_sub_next(n, 0, &v), 0);
	cr_assert_eq(v.version, 4);
	td_sub_close(n);
	cr_assert_eq(td_ring_wait_read(r, 4, 0), 0);

	one_sub_close(&d, c, r, a);
}

/*
 * pick() zeroes the shared version word of every non-latest slot it looks
 * at, held or not: an older version a reader still holds must not look
 * read because of it (wait_read goes by what was published where).
 */
Test(ring, wait_read_of_an_older_version_still_held_after_an_acquire)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r;
	struct td_sub *a;
	struct td_slot s;
	struct td_view v;

	one_sub_open(&d, &c, &r, &a, "t/zero", 3, 64);
	cr_assert_eq(put(r), 1);
	cr_assert_eq(td_sub_next(a, 0, &v), 0);
	cr_assert_eq(v.version, 1); /* a holds v1 */
	cr_assert_eq(put(r), 2);
	cr_assert_eq(td_ring_wait_read(r, 1, 0), -ETIMEDOUT, "a holds v1");
	/* the next acquire looks at v1's slot (held: skipped) */
	cr_assert_eq(td_ring_acquire(r, 0, &s), 0);
	cr_assert_eq(td_ring_wait_read(r, 1, 0), -ETIMEDOUT,
		     "a still holds v1, but wait_read says it was read");
	cr_assert_eq(td_sub_release(a), 0);
	cr_assert_eq(td_ring_wait_read(r, 1, 0), 0);
	one_sub_close(&d, c, r, a);
}

/*
 * Between an acquire that rewrites the latest slot and its publish, the
 * versions up to the latest were read by every reader of that moment
 * (the rewrite waits for it), and nobody can take them any more: a
 * subscriber arriving then does not hold the answer up.
 */
Test(ring, wait_read_between_a_reusing_acquire_and_publish)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r;
	struct td_sub *a, *n;
	struct td_slot s;
	struct td_view v;

	one_sub_open(&d, &c, &r, &a, "t/reuse-read", 4, 64);
	cr_assert_eq(put(r), 1);
	cr_assert_eq(td_sub_next(a, 0, &v), 0);
	cr_assert_eq(td_sub_release(a), 0);
	cr_assert_eq(td_ring_acquire(r, 0, &s), 0); /* reuses v1's slot */
	n = subscribe(c, "t/reuse-read");
	cr_assert_eq(td_sub_next(n, 0, &v), -ETIMEDOUT, "v1 is being rewritten");
	cr_assert_eq(td_ring_wait_read(r, 1, 0), 0,
		     "waits for a reader that cannot read v1");
	cr_assert_eq(td_ring_publish(r, NULL), 0); /* v2 */
	cr_assert_eq(td_ring_wait_read(r, 2, 0), -ETIMEDOUT, "nobody took v2");
	cr_assert_eq(td_sub_next(n, 0, &v), 0);
	cr_assert_eq(v.version, 2);
	cr_assert_eq(td_sub_next(a, 0, &v), 0);
	td_sub_release(a);
	td_sub_release(n);
	cr_assert_eq(td_ring_wait_read(r, 2, 0), 0);
	td_sub_close(n);
	one_sub_close(&d, c, r, a);
}

#define LOCKSTEP 2000

/*
 * Across processes with every wait a sleep (TENSORD_RING_SPIN_US=0): a
 * producer that publishes a version only once the last one was read
 * makes the subscriber see every version, none skipped, and wakes from
 * its sleep on the subscriber's release alone (nothing else wakes it: a
 * lost wake-up is a 20 s wait that fails the child). The subscriber also
 * checks that a version's bytes are never rewritten while it holds them.
 */
struct lock {
	int ready[2]; /* subscriber -> producer: subscribed */
};

static void lock_producer(const struct tu_daemon *d, void *arg)
{
	struct lock *k = arg;
	struct td_client *c;
	struct td_ring *r;
	struct td_slot s;
	uint64_t v;

	CK_EQ(setenv("TENSORD_RING_SPIN_US", "0", 1), 0);
	c = open_client(d);
	r = make_ring(c, "t/lockstep", 2, 4096, 0);
	hear(k->ready[0]);
	for (uint64_t i = 1; i <= LOCKSTEP; i++) {
		CK_EQ(td_ring_acquire(r, 20000, &s), 0);
		pattern_fill(s.planes[0], 4096, i);
		CK_EQ(td_ring_publish(r, &v), 0);
		CK_EQ(v, i);
		CK_EQ(td_ring_wait_read(r, v, 20000), 0);
	}
	td_ring_close(r);
	td_client_close(c);
	_exit(0);
}

static void lock_consumer(const struct tu_daemon *d, void *arg)
{
	struct lock *k = arg;
	struct td_client *c;
	struct td_sub *sub;
	struct td_view v;
	uint64_t last = 0;
	int rc;

	CK_EQ(setenv("TENSORD_RING_SPIN_US", "0", 1), 0);
	c = open_client(d);
	sub = subscribe(c, "t/lockstep");
	say(k->ready[1]);
	while ((rc = td_sub_next(sub, 20000, &v)) == 0) {
		CK_EQ(v.version, last + 1);
		CK(pattern_ok(v.planes[0], 4096, v.version));
		last = v.version;
		CK_EQ(td_sub_release(sub), 0);
	}
	CK_EQ(rc, -EPIPE);
	CK_EQ(last, LOCKSTEP);
	td_sub_close(sub);
	td_client_close(c);
	_exit(0);
}

Test(ring, a_lock_step_producer_is_woken_by_the_release_and_skips_nothing)
{
	struct lock k;

	pair_run(lock_producer, lock_consumer, &k, k.ready);
}

/*
 * A producer asleep in td_ring_wait_read() for a version its subscriber
 * skips is woken by the take of the newer one: the subscriber holds that
 * until the producer has returned, so no release can be what woke it.
 */
struct skip {
	int ready[2]; /* subscriber -> producer: subscribed */
	int go[2];    /* producer -> subscriber: 1 and 2 published */
	int done[2];  /* producer -> subscriber: wait_read returned */
};

static void skip_producer(const struct tu_daemon *d, void *arg)
{
	struct skip *k = arg;
	struct td_client *c;
	struct td_ring *r;
	struct td_slot s;

	CK_EQ(setenv("TENSORD_RING_SPIN_US", "0", 1), 0);
	c = open_client(d);
	r = make_ring(c, "t/skip", 4, 64, 0);
	hear(k->ready[0]);
	for (int i = 0; i < 2; i++) {
		CK_EQ(td_ring_acquire(r, 0, &s), 0);
		CK_EQ(td_ring_publish(r, NULL), 0);
	}
	say(k->go[1]);
	/* no deadline: a missed wake is caught by the subscriber's bound */
	CK_EQ(td_ring_wait_read(r, 1, -1), 0);
	say(k->done[1]);
	td_ring_close(r);
	td_client_close(c);
	_exit(0);
}

static void skip_consumer(const struct tu_daemon *d, void *arg)
{
	struct skip *k = arg;
	struct td_client *c;
	struct td_sub *sub;
	struct td_view v;

	c = open_client(d);
	sub = subscribe(c, "t/skip");
	say(k->ready[1]);
	hear(k->go[0]);
	/* let the producer fall asleep first (a poll would see the take
	 * anyway; this makes the sleep the likely case, not a condition) */
	usleep(50000);
	CK_EQ(td_sub_next(sub, 20000, &v), 0);
	CK_EQ(v.version, 2);
	{
		/* still holding version 2; only its take can wake the
		 * producer (its close would, too late for this bound) */
		struct pollfd p = {.fd = k->done[0], .events = POLLIN};

		CK_EQ(poll(&p, 1, 10000), 1);
	}
	td_sub_close(sub);
	td_client_close(c);
	_exit(0);
}

Test(ring, a_producer_waiting_for_a_skipped_version_wakes_on_the_take)
{
	struct skip k;
	struct tu_daemon d;
	pid_t p, c;

	tu_daemon_start(&d, "warn");
	cr_assert(pipe2(k.ready, O_CLOEXEC) == 0);
	cr_assert(pipe2(k.go, O_CLOEXEC) == 0);
	cr_assert(pipe2(k.done, O_CLOEXEC) == 0);
	p = spawn(&d, skip_producer, &k);
	c = spawn(&d, skip_consumer, &k);
	cr_assert_eq(reap(p), 0, "producer failed");
	cr_assert_eq(reap(c), 0, "consumer failed");
	for (int i = 0; i < 2; i++) {
		close(k.ready[i]);
		close(k.go[i]);
		close(k.done[i]);
	}
	tu_daemon_stop(&d, true);
}

/* ---- crashes ---- */

struct kill9 {
	int held[2];
};

static void k9_consumer(const struct tu_daemon *d, void *arg)
{
	struct kill9 *k = arg;
	struct td_client *c = open_client(d);
	struct td_sub *sub = subscribe(c, "t/k9");
	struct td_view v;

	CK_EQ(td_sub_next(sub, 20000, &v), 0);
	say(k->held[1]);
	pause(); /* holding, until SIGKILL */
}

Test(ring, sigkill_of_a_holding_consumer_frees_its_row)
{
	struct tu_daemon d;
	struct kill9 k;
	struct td_client *c;
	struct td_ring *r;
	struct td_ring_stat st;
	struct td_slot s;
	struct td_sub *idle;
	bool seen[2] = {false, false};
	uint32_t held;
	pid_t pid;

	tu_daemon_start(&d, "warn");
	cr_assert(pipe2(k.held, O_CLOEXEC) == 0);
	c = open_client(&d);
	r = make_ring(c, "t/k9", 2, 4096, 0);
	cr_assert_eq(td_ring_acquire(r, 0, &s), 0);
	held = s.index;
	cr_assert_eq(td_ring_publish(r, NULL), 0);
	pid = spawn(&d, k9_consumer, &k);
	hear(k.held[0]);
	/* a subscriber that never takes anything keeps the latest slot
	 * from being rewritten, so the producer needs the held one */
	idle = subscribe(c, "t/k9");
	cr_assert_eq(td_ring_acquire(r, 0, &s), 0);
	cr_assert_eq(td_ring_publish(r, NULL), 0);
	cr_assert_eq(td_ring_acquire(r, 0, &s), -ETIMEDOUT,
		     "slot %u is held by the consumer", held);
	cr_assert_eq(td_client_ring_stat(c, "t/k9", &st, NULL), 0);
	cr_assert_eq(st.subscribers, 2);
	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(reap(pid), 128 + SIGKILL);
	/* the daemon clears the dead row and wakes us */
	cr_assert_eq(td_ring_acquire(r, -1, &s), 0);
	cr_assert_eq(s.index, held);
	for (int i = 0; i < 6; i++) {
		cr_assert_eq(td_ring_acquire(r, 0, &s), 0);
		seen[s.index] = true;
		cr_assert_eq(td_ring_publish(r, NULL), 0);
	}
	cr_assert(seen[0] && seen[1], "both slots are reused");
	cr_assert_eq(td_client_ring_stat(c, "t/k9", &st, NULL), 0);
	cr_assert_eq(st.subscribers, 1);
	td_sub_close(idle);
	td_ring_close(r);
	td_client_close(c);
	close(k.held[0]);
	close(k.held[1]);
	tu_daemon_stop(&d, true);
}

struct closing {
	int waiting[2];
	int go[2];
};

static void cl_consumer(const struct tu_daemon *d, void *arg)
{
	struct closing *x = arg;
	struct td_client *c = open_client(d);
	struct td_sub *sub = subscribe(c, "t/close");
	struct td_view v;

	CK_EQ(td_sub_next(sub, 20000, &v), 0);
	CK_EQ(v.version, 1);
	say(x->waiting[1]);
	/* asleep on the futex when the producer dies, with no deadline: a
	 * close that wakes nobody hangs it, and the test's timeout fails */
	CK_EQ(td_sub_next(sub, -1, &v), -EPIPE);
	CK_EQ(td_sub_next(sub, 0, &v), -EPIPE);
	td_sub_close(sub);
	td_client_close(c);
}

static void cl_producer(const struct tu_daemon *d, void *arg)
{
	struct closing *x = arg;
	struct td_client *c = open_client(d);
	struct td_ring *r = make_ring(c, "t/close", 2, 64, 0);
	struct td_slot s;

	CK_EQ(td_ring_acquire(r, 0, &s), 0);
	CK_EQ(td_ring_publish(r, NULL), 0);
	hear(x->go[0]);
	_exit(0); /* no close: an exit is all the daemon sees */
}

Test(ring, subscribers_see_closed_when_the_producer_exits, .timeout = 60)
{
	struct tu_daemon d;
	struct closing x;
	struct td_client *c;
	struct td_ring *r;
	pid_t p, q;

	tu_daemon_start(&d, "warn");
	cr_assert(pipe2(x.waiting, O_CLOEXEC) == 0);
	cr_assert(pipe2(x.go, O_CLOEXEC) == 0);
	p = spawn(&d, cl_producer, &x);
	q = spawn(&d, cl_consumer, &x);
	hear(x.waiting[0]);
	say(x.go[1]);
	cr_assert_eq(reap(p), 0, "producer failed");
	cr_assert_eq(reap(q), 0, "consumer failed");
	/* the name is free for a new producer */
	c = open_client(&d);
	r = make_ring(c, "t/close", 2, 64, 0);
	td_ring_close(r);
	td_client_close(c);
	for (int i = 0; i < 2; i++) {
		close(x.waiting[i]);
		close(x.go[i]);
	}
	tu_daemon_stop(&d, true);
}

/*
 * A producer whose client was closed, or whose connection the daemon saw
 * end, makes no version: the daemon marked the ring closed, and a
 * version published after that reached subscribers already told so (and
 * before the daemon saw a close, ones about to be). Acquire and publish
 * said 0 and went on filling the slots. A slot acquired before the close
 * is not published either.
 */
static void ended_ring_check(struct td_ring *r, struct td_sub *a, int code)
{
	struct td_slot s;
	struct td_view v;

	cr_assert_eq(td_ring_acquire(r, 0, &s), code);
	cr_assert_eq(td_ring_acquire(r, -1, &s), code, "no wait either");
	cr_assert_eq(td_ring_publish(r, NULL), code);
	cr_assert_eq(td_ring_publish_fenced(r, NULL), code);
	cr_assert_eq(td_sub_next(a, 20000, &v), 0);
	cr_assert_eq(v.version, 1, "the last version made before the end");
	cr_assert_eq(td_sub_next(a, 20000, &v), -EPIPE, "and nothing after");
}

Test(ring, a_ring_whose_client_closed_makes_no_version)
{
	struct td_client *c, *c2;
	struct tu_daemon d;
	struct td_ring *r;
	struct td_sub *a;
	struct td_slot s;

	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	c2 = open_client(&d);
	r = make_ring(c, "t/client-closed", 2, 64, 0);
	a = subscribe(c2, "t/client-closed");
	cr_assert_eq(put(r), 1);
	cr_assert_eq(td_ring_acquire(r, 0, &s), 0);
	td_client_close(c);
	ended_ring_check(r, a, -ENOTCONN);
	td_ring_close(r); /* frees the client's memory: nothing is sent */
	td_sub_close(a);
	td_client_close(c2);
	tu_daemon_stop(&d, true);
}

Test(ring, a_ring_the_daemon_ended_makes_no_version)
{
	struct td_client *c, *c2;
	struct tu_daemon d;
	struct td_ring *r;
	struct td_sub *a, *b;
	struct td_slot s;
	struct td_view v;

	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	c2 = open_client(&d);
	r = make_ring(c, "t/conn-ended", 2, 64, 0);
	a = subscribe(c2, "t/conn-ended");
	b = subscribe(c2, "t/conn-ended");
	cr_assert_eq(put(r), 1);
	cr_assert_eq(td_ring_acquire(r, 0, &s), 0);
	/* the daemon sees the producer's connection end, the handle does
	 * not yet; once b finds the ring closed, so does the producer */
	cr_assert_eq(shutdown(c->sock, SHUT_RDWR), 0);
	cr_assert_eq(td_sub_next(b, 20000, &v), 0);
	cr_assert_eq(td_sub_next(b, 20000, &v), -EPIPE);
	ended_ring_check(r, a, -EPIPE);
	td_ring_close(r);
	td_sub_close(a);
	td_sub_close(b);
	td_client_close(c);
	td_client_close(c2);
	tu_daemon_stop(&d, true);
}

struct acquirer {
	struct td_ring *r;
	int rc;
};

static void *acquire_for_ever(void *arg)
{
	struct acquirer *a = arg;
	struct td_slot s;

	a->rc = td_ring_acquire(a->r, -1, &s);
	return NULL;
}

/* ... nor does a producer that was waiting for a slot while another
 * thread closed its client: it wakes to -ENOTCONN, not to a slot. */
Test(ring, a_producer_waiting_while_its_client_closes_gets_no_slot)
{
	struct acquirer a = {.rc = 1};
	struct td_client *c, *c2;
	struct tu_daemon d;
	struct td_sub *sub;
	struct td_view v;
	pthread_t t;

	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	c2 = open_client(&d);
	a.r = make_ring(c, "t/close-while-waiting", 2, 64, 0);
	sub = subscribe(c2, "t/close-while-waiting");
	put(a.r);
	cr_assert_eq(td_sub_next(sub, 0, &v), 0);
	put(a.r); /* one slot held, the other the latest: acquire waits */
	cr_assert_eq(pthread_create(&t, NULL, acquire_for_ever, &a), 0);
	while (!atomic_load(&a.r->m.rd->prod_waiting))
		sched_yield();
	td_client_close(c);
	cr_assert_eq(td_sub_release(sub), 0); /* wakes it with a slot free */
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(a.rc, -ENOTCONN);
	td_ring_close(a.r);
	td_sub_close(sub);
	td_client_close(c2);
	/* fds and buffer mappings are counted; not every mapping: glibc
	 * keeps the thread's stack and arena */
	tu_daemon_stop(&d, false);
}

/*
 * A subscriber's wake-up fd is shared with the subscriber, which can make
 * it blocking and try to fill it (an eventfd's write would then wait for
 * a read that never comes). Neither the producer's publish nor the
 * daemon's close of the ring blocks on it, and the subscriber is still
 * woken by both.
 */
Test(ring, a_subscriber_cannot_block_the_producer_or_daemon_on_its_wake_fd,
     .timeout = 60)
{
	const uint64_t full = 0xfffffffffffffffeull;
	struct tu_daemon d;
	struct td_client *pc, *sc;
	struct td_ring *r;
	struct td_sub *sub;
	struct td_slot slot;
	struct td_view v;
	struct pollfd p;
	int fd;

	tu_daemon_start(&d, "warn");
	pc = open_client(&d);
	sc = open_client(&d);
	r = make_ring(pc, "t/wake", 3, 64, 0);
	sub = subscribe(sc, "t/wake");
	fd = td_sub_fd(sub);
	cr_assert_geq(fd, 0, "%s", strerror(-fd));
	cr_assert_eq(td_sub_poll(sub, &v), -EAGAIN); /* waits by fd */
	/* hostile: blocking, and as full as it will go (an eventfd takes
	 * the write; a fd nobody but the owner can fill refuses it) */
	cr_assert_eq(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK), 0);
	(void)!write(fd, &full, sizeof(full));
	cr_assert_eq(td_ring_acquire(r, 5000, &slot), 0);
	pattern_fill(slot.planes[0], 64, 1);
	cr_assert_eq(td_ring_publish(r, NULL), 0);
	p = (struct pollfd){.fd = fd, .events = POLLIN};
	cr_assert_eq(poll(&p, 1, 5000), 1, "the publish did not wake it");
	cr_assert_eq(td_sub_poll(sub, &v), 0);
	cr_assert(pattern_ok(v.planes[0], 64, v.version));
	cr_assert_eq(td_sub_release(sub), 0);
	/* its own reads would block now: non-blocking for the next look */
	cr_assert_eq(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
	cr_assert_eq(td_sub_poll(sub, &v), -EAGAIN);
	cr_assert_eq(fcntl(fd, F_SETFL, 0), 0);
	(void)!write(fd, &full, sizeof(full));
	td_ring_close(r); /* the daemon wakes event-loop readers */
	cr_assert_eq(poll(&p, 1, 5000), 1, "the close did not wake it");
	cr_assert_eq(td_sub_poll(sub, &v), -EPIPE);
	td_sub_close(sub);
	td_client_close(sc);
	td_client_close(pc);
	tu_daemon_stop(&d, true);
}

/* ---- a hostile producer ---- */

static struct td_ring_hdr *find_header(void)
{
	return tu_find_mapping("memfd:tensord-ring-hdr");
}

/*
 * What the daemon's reset or free of a row writes (daemon/ring.c), to the
 * row that took version `taken`, as when its connection is gone. Returns
 * the row.
 */
static uint32_t row_free(uint64_t taken)
{
	struct td_ring_readers *rd =
		tu_find_mapping("memfd:tensord-ring-readers");
	uint32_t row = TD_RING_MAX_READERS;

	for (uint32_t i = 0; i < TD_RING_MAX_READERS; i++)
		if (atomic_load(&rd->rows[i].taken) == taken)
			row = i;
	cr_assert_lt(row, TD_RING_MAX_READERS, "the row not found");
	atomic_store(&rd->rows[row].held, TD_RING_NONE);
	atomic_store(&rd->rows[row].taken, TD_RING_TAKEN_ANY);
	return row;
}

/*
 * A row the daemon reset or freed under a live subscription (its
 * connection gone) no longer says what that subscriber took, so the
 * producer may rewrite the latest slot it was about to hold. On a ring
 * without owner tokens (an older daemon or producer) the subscriber
 * cannot tell at once: it sees its row's `held` is not what it stored
 * and checks the slot's version instead of trusting `latest`
 * (docs/fastpath.md, "Why a held slot is never rewritten"), and stops
 * at the free row's `taken`.
 */
Test(ring, a_subscriber_whose_row_was_reset_checks_the_slot_version)
{
	const uint64_t n = 8192;
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r;
	struct td_sub *a;
	struct td_slot s;
	struct td_view v;
	struct td_ring_readers *rd;
	uint32_t s2;

	sub_open(&d, &c, &r, &a, "t/reset", 3, n, false);
	cr_assert_eq(td_ring_acquire(r, 0, &s), 0);
	pattern_fill(s.planes[0], n, 1);
	cr_assert_eq(td_ring_publish(r, NULL), 0);
	cr_assert_eq(td_sub_next(a, 0, &v), 0);
	cr_assert_eq(v.version, 1);
	cr_assert_eq(td_sub_release(a), 0);
	/* a took 1, not 2: version 2 goes to another slot */
	cr_assert_eq(td_ring_acquire(r, 0, &s), 0);
	s2 = s.index;
	pattern_fill(s.planes[0], n, 2);
	cr_assert_eq(td_ring_publish(r, NULL), 0);

	/* the daemon's reset of a's row, as when a's connection is gone */
	row_free(1);
	/* every row "took" 2 now: its slot is rewritten in place */
	cr_assert_eq(td_ring_acquire(r, 0, &s), 0);
	cr_assert_eq(s.index, s2, "the latest slot was not rewritten");
	pattern_fill(s.planes[0], n, 3);
	/* `latest` still names version 2 in that slot: a must not take it */
	cr_assert_eq(td_sub_next(a, 0, &v), -ETIMEDOUT,
		     "took version %" PRIu64 " from a slot being rewritten",
		     v.version);
	cr_assert_eq(td_ring_publish(r, NULL), 0);
	/* the hold is validated, then the free row's `taken` (TAKEN_ANY)
	 * says the row is not a's: no version, and the hold taken back */
	cr_assert_eq(td_sub_next(a, 0, &v), -EPIPE);
	cr_assert_eq(td_sub_next(a, 0, &v), -EPIPE, "the end stays");
	rd = tu_find_mapping("memfd:tensord-ring-readers");
	cr_assert_eq(atomic_load(&rd->rows[0].held), TD_RING_NONE);
	one_sub_close(&d, c, r, a);
}

/*
 * A subscription whose row the daemon freed under it (its connection
 * gone) ends with -EPIPE and writes nothing into the free row: what it
 * took would count there as a reader that nobody moves on or frees
 * again (every later td_ring_wait_read would wait for it), and a hold
 * would pin a slot. With owner tokens the hold's compare-exchange fails;
 * without (an older daemon or producer) the free row's `taken` stops it
 * after its hold, which it takes back.
 */
static void freed_row(bool tokens)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r;
	struct td_sub *a;
	struct td_ring_readers *rd;
	struct td_view v;
	uint32_t row;

	sub_open(&d, &c, &r, &a, "t/freed", 3, 64, tokens);
	cr_assert_eq(put(r), 1);
	cr_assert_eq(td_sub_next(a, 0, &v), 0);
	cr_assert_eq(td_sub_release(a), 0);
	rd = tu_find_mapping("memfd:tensord-ring-readers");
	row = row_free(1); /* as when a's connection is gone */
	put(r);
	cr_assert_eq(td_sub_next(a, 0, &v), -EPIPE);
	cr_assert_eq(td_sub_release(a), -EINVAL, "a holds nothing");
	cr_assert_eq(atomic_load(&rd->rows[row].taken), TD_RING_TAKEN_ANY,
		     "a wrote what it took into a freed row");
	cr_assert_eq(atomic_load(&rd->rows[row].held), TD_RING_NONE,
		     "a left a hold in a freed row");
	/* a version a never takes: nobody is left to read it */
	cr_assert_eq(td_ring_wait_read(r, put(r), 0), 0);
	one_sub_close(&d, c, r, a);
}

Test(ring, a_subscriber_whose_row_was_freed_ends_and_writes_nothing)
{
	freed_row(true);
}

Test(ring, a_subscriber_of_an_older_daemon_whose_row_was_freed_ends_too)
{
	freed_row(false);
}

struct evil {
	int ready[2];
	int step[2];
	int ack[2];
};

static void evil_consumer(const struct tu_daemon *d, void *arg)
{
	struct evil *x = arg;
	struct td_client *c = open_client(d);
	struct td_sub *sub = subscribe(c, "t/evil");
	struct td_view v;
	int rc;

	say(x->ready[1]);
	/* step 1: a slot index past the ring */
	hear(x->step[0]);
	CK_EQ(td_sub_next(sub, 0, &v), -EBADMSG);
	say(x->ack[1]);
	/* step 2: a slot but version 0 */
	hear(x->step[0]);
	CK_EQ(td_sub_next(sub, 0, &v), -EBADMSG);
	say(x->ack[1]);
	/* step 3: random bytes all over the header, many times */
	for (int i = 0; i < 2000; i++) {
		rc = td_sub_next(sub, 0, &v);
		CK(rc == 0 || rc == -ETIMEDOUT || rc == -EBADMSG ||
		   rc == -EPIPE);
		if (rc == 0) {
			CK(v.slot < 4);
			/* in bounds: reading it must not fault */
			CK(((const volatile uint8_t *)v.planes[0])[0] ||
			   true);
			CK(((const volatile uint8_t *)
				    v.planes[0])[v.sizes[0] - 1] ||
			   true);
		}
	}
	hear(x->step[0]);
	td_sub_close(sub);
	td_client_close(c);
}

Test(ring, garbage_in_the_control_block_never_crashes_a_consumer)
{
	struct tu_daemon d;
	struct evil x;
	struct td_client *c;
	struct td_ring *r;
	struct td_ring_hdr *h;
	uint64_t seed = 5;
	pid_t pid;

	tu_daemon_start(&d, "warn");
	cr_assert(pipe2(x.ready, O_CLOEXEC) == 0);
	cr_assert(pipe2(x.step, O_CLOEXEC) == 0);
	cr_assert(pipe2(x.ack, O_CLOEXEC) == 0);
	c = open_client(&d);
	r = make_ring(c, "t/evil", 4, 4096, 0);
	h = find_header();
	pid = spawn(&d, evil_consumer, &x);
	hear(x.ready[0]);
	atomic_store(&h->latest, td_ring_latest_pack(7, 200));
	atomic_fetch_add(&h->seq, 1);
	say(x.step[1]);
	hear(x.ack[0]);
	atomic_store(&h->latest, td_ring_latest_pack(0, 1));
	say(x.step[1]);
	hear(x.ack[0]);
	/* the consumer polls while we scribble (races are the point) */
	for (int i = 0; i < 20000; i++) {
		uint64_t *w = (uint64_t *)h;
		size_t n = sizeof(*h) / 8;

		w[tu_rand(&seed) % n] = tu_rand(&seed);
	}
	say(x.step[1]);
	cr_assert_eq(reap(pid), 0, "consumer failed");
	td_ring_close(r);
	td_client_close(c);
	for (int i = 0; i < 2; i++) {
		close(x.ready[i]);
		close(x.step[i]);
		close(x.ack[i]);
	}
	tu_daemon_stop(&d, true);
}

/*
 * A subscriber is handed the readers memfd read-write (its row is there).
 * It used to be able to add F_SEAL_FUTURE_WRITE to it, after which every
 * later subscriber's writable mapping failed: one subscriber shut the
 * ring to all others for its lifetime. The daemon seals the seals.
 */
Test(ring, a_subscriber_cannot_seal_the_ring_against_later_subscribers)
{
	struct td_wire_ring_sub_req q = {{"t/seal", 6}, TD_WIRE_REQ_SCM, 0};
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r;
	struct td_sub *a;
	struct td_view v;
	struct rawrep rr;
	int sock;

	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	r = make_ring(c, "t/seal", 2, 4096, 0);
	sock = raw_scm_conn(&d);
	cr_assert_eq(raw_call(sock, TD_OP_RING_SUBSCRIBE, 2,
			      td_wire_ring_sub_req_encode(&q, RAW_BODY,
							  RAW_CAP),
			      &rr),
		     0);
	cr_assert_eq(rr.nfds, TD_WIRE_RING_FDS);
	/* header, readers (read-write), data */
	cr_assert_eq(fcntl(rr.fds[1], F_GETFL) & O_ACCMODE, O_RDWR);
	for (unsigned i = 0; i < rr.nfds; i++)
		cr_assert_lt(fcntl(rr.fds[i], F_ADD_SEALS, F_SEAL_FUTURE_WRITE),
			     0, "ring fd %u took F_SEAL_FUTURE_WRITE", i);
	cr_assert(fcntl(rr.fds[1], F_GET_SEALS) & F_SEAL_SEAL);
	/* the ring still takes subscribers, and hands off to them */
	a = subscribe(c, "t/seal");
	put(r);
	cr_assert_eq(td_sub_next(a, 0, &v), 0);
	cr_assert_eq(v.version, 1);
	td__scm_close(rr.fds, rr.nfds);
	close(sock);
	one_sub_close(&d, c, r, a);
}

static void get_done(struct td_client *c, int status, struct td_tensor *t,
		     const struct td_error *err, void *ud)
{
	(void)c;
	(void)status;
	(void)err;
	(void)ud;
	if (t)
		td_tensor_release(t);
}

/* A ring whose latest slot never settles: its version word unpublished
 * for good, and the producer asleep for a slot (as a hostile one leaves
 * them). Every GET that finds it so leases the slot, drops the lease
 * and, seeing the producer asleep, bumps release_seq and wakes it. */
static struct td_ring *busy_ring(struct td_client *c, const char *name)
{
	struct td_ring *r = make_ring(c, name, 2, 4096, 0);
	struct td_ring_hdr *h = r->m.hdr;

	put(r);
	atomic_store(&h->slots[atomic_load(&h->latest) & TD_RING_LOW].version,
		     0);
	atomic_store(&r->m.rd->prod_waiting, TD_RING_PROD_SLOT);
	return r;
}

/*
 * GETs parked on a ring whose latest version is being rewritten are
 * retried by the daemon's 1 ms poll. Each try leases the slot and drops
 * the lease again, waking a waiting producer; a producer that never
 * finishes the rewrite made every parked GET (4096 per uid) do that on
 * every pass: the daemon's loop busy most of the time, for ever. Now one
 * GET per ring and pass tries; the others wait for the next pass. Ring b
 * with one parked GET counts the passes (one wake each): a's wakes may
 * not outnumber them by more than the two passes cut by the samples.
 */
Test(ring, gets_parked_on_a_busy_ring_try_it_once_a_pass)
{
	struct tu_daemon d;
	struct td_client *c, *g;
	struct td_ring *a, *b;
	struct td_error e = {0};
	uint32_t a0, b0, a1, b1 = 0;

	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	g = open_client(&d);
	a = busy_ring(c, "t/busy-a");
	b = busy_ring(c, "t/busy-b");
	for (int i = 0; i < 32; i++)
		cr_assert_eq(td_client_get_newer_async(g, "t/busy-a", 0, -1,
						       get_done, NULL, &e),
			     0);
	cr_assert_eq(td_client_get_newer_async(g, "t/busy-b", 0, -1, get_done,
					       NULL, &e),
		     0);
	cr_assert_eq(tc_status_until(c, tc_waiters, 33), 33);
	a0 = atomic_load(&a->m.rd->release_seq);
	b0 = atomic_load(&b->m.rd->release_seq);
	/* 20 passes (a hang guard of 60 s: nothing about speed) */
	for (int i = 0; i < 60000; i++) {
		b1 = atomic_load(&b->m.rd->release_seq);
		if (b1 - b0 >= 20)
			break;
		usleep(1000);
	}
	a1 = atomic_load(&a->m.rd->release_seq);
	cr_assert_geq(b1 - b0, 20, "the poll stopped");
	cr_assert_leq(a1 - a0, b1 - b0 + 2,
		      "%u wakes from 32 GETs parked on a, %u passes",
		      a1 - a0, b1 - b0);
	td_client_close(g);
	td_ring_close(a);
	td_ring_close(b);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* ---- subscribing before the ring exists ---- */

struct late_sub {
	struct td_client *c;
	const char *name;
	int timeout_ms;
	struct td_sub *sub;
	struct td_error e;
	int rc;
};

static void *late_subscribe(void *arg)
{
	struct late_sub *l = arg;

	l->rc = td_ring_subscribe(l->c, l->name, l->timeout_ms, &l->sub,
				  &l->e);
	return NULL;
}

/*
 * A subscriber started before its producer: one RING_SUBSCRIBE, parked
 * in the daemon until RING_CREATE answers it, not a request every
 * millisecond (docs/fastpath.md, "Subscribing before the ring exists").
 * The subscription it gets is a working one.
 */
Test(ring, a_subscriber_before_its_ring_waits_in_one_request)
{
	struct tu_daemon d;
	struct td_client *c, *s;
	struct late_sub l = {.name = "t/late", .timeout_ms = -1};
	struct td_ring *r;
	struct td_ring_stat st;
	struct td_view v;
	uint64_t id0, ver;
	pthread_t t;

	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	s = l.c = open_client(&d);
	cr_assert(td__has(s, TD_WIRE_FEAT_SUB_WAIT));
	id0 = s->next_id;
	cr_assert_eq(pthread_create(&t, NULL, late_subscribe, &l), 0);
	/* parked: the daemon counts it with the connection's waiters */
	cr_assert_eq(tc_status_until(c, tc_waiters, 1), 1);
	r = make_ring(c, "t/late", 4, 4096, 0);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(l.rc, 0, "%d %s", l.rc, l.e.reason);
	cr_assert_eq(s->next_id - id0, 1, "%llu requests",
		     (unsigned long long)(s->next_id - id0));
	cr_assert_eq(tc_status_until(c, tc_waiters, 0), 0);
	cr_assert_eq(td_client_ring_stat(c, "t/late", &st, NULL), 0);
	cr_assert_eq(st.subscribers, 1);
	ver = put(r);
	cr_assert_eq(td_sub_next(l.sub, 20000, &v), 0);
	cr_assert_eq(v.version, ver);
	td_sub_close(l.sub);
	td_ring_close(r);
	td_client_close(s);
	td_client_close(c);
	/* fds and buffer mappings are counted; not every mapping: glibc
	 * keeps the thread's stack and arena */
	tu_daemon_stop(&d, false);
}

/*
 * The wait runs out in the daemon (one request, its reason); against a
 * daemon without TD_WIRE_FEAT_SUB_WAIT the library polls as before and
 * still finds the ring.
 */
Test(ring, a_waiting_subscribe_times_out_in_the_daemon_or_polls_an_old_one)
{
	struct tu_daemon d;
	struct td_client *c, *s;
	struct late_sub l = {.name = "t/old", .timeout_ms = 20000};
	struct td_sub *sub = NULL;
	struct td_error e = {0};
	struct td_ring *r;
	uint64_t id0;
	pthread_t t;

	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	s = l.c = open_client(&d);
	id0 = s->next_id;
	cr_assert_eq(td_ring_subscribe(s, "t/none", 50, &sub, &e), -ETIMEDOUT);
	cr_assert_null(sub);
	cr_assert_eq(s->next_id - id0, 1);
	cr_assert(strstr(e.reason, "was created within 50 ms"), "%s",
		  e.reason);
	cr_assert_eq(tc_status_until(c, tc_waiters, 0), 0);
	/* an older daemon: asked again until the ring is there */
	s->hello.features &= ~TD_WIRE_FEAT_SUB_WAIT;
	id0 = s->next_id;
	cr_assert_eq(td_ring_subscribe(s, "t/none", 50, &sub, &e), -ETIMEDOUT);
	cr_assert_gt(s->next_id - id0, 1);
	cr_assert_eq(pthread_create(&t, NULL, late_subscribe, &l), 0);
	usleep(20000);
	r = make_ring(c, "t/old", 4, 4096, 0);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(l.rc, 0, "%d %s", l.rc, l.e.reason);
	td_sub_close(l.sub);
	td_ring_close(r);
	td_client_close(s);
	td_client_close(c);
	/* fds and buffer mappings are counted; not every mapping: glibc
	 * keeps the thread's stack and arena */
	tu_daemon_stop(&d, false);
}

/*
 * A parked RING_SUBSCRIBE dies with its connection: it is no waiter
 * any more, and the ring made after it has no subscriber; a RING_CREATE
 * answers only the subscribes of its own name. FOLLOW, which shares the
 * body, refuses the flag.
 */
Test(ring, a_parked_subscribe_ends_with_its_connection)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r, *r2;
	struct td_ring_stat st;
	struct rawrep rep;
	struct td_wire_ring_sub_req q = {{"t/gone", 6},
					 TD_WIRE_REQ_SCM | TD_WIRE_RSUB_WAIT,
					 TD_WIRE_WAIT_FOREVER};
	int sock;
	int64_t n;

	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	sock = raw_scm_conn(&d);
	n = td_wire_ring_sub_req_encode(&q, RAW_BODY, RAW_CAP);
	cr_assert_gt(n, 0);
	raw_send(sock, TD_OP_RING_SUBSCRIBE, 7, (size_t)n);
	q.name = (struct td_wire_str){"t/other", 7};
	n = td_wire_ring_sub_req_encode(&q, RAW_BODY, RAW_CAP);
	raw_send(sock, TD_OP_RING_SUBSCRIBE, 8, (size_t)n);
	cr_assert_eq(raw_call(sock, TD_OP_FOLLOW, 9, n, &rep), -EBADMSG);
	cr_assert_eq(tc_status_until(c, tc_waiters, 2), 2);
	/* t/other's ring answers request 8 alone */
	r2 = make_ring(c, "t/other", 2, 64, 0);
	raw_recv(sock, &rep);
	cr_assert_eq(rep.h.request_id, 8);
	cr_assert_eq(rep.h.status, 0);
	cr_assert_eq(rep.nfds, 3);
	for (unsigned i = 0; i < rep.nfds; i++)
		close(rep.fds[i]);
	cr_assert_eq(tc_status_until(c, tc_waiters, 1), 1);
	cr_assert_eq(td_client_ring_stat(c, "t/other", &st, NULL), 0);
	cr_assert_eq(st.subscribers, 1);
	close(sock);
	cr_assert_eq(tc_status_until(c, tc_waiters, 0), 0);
	r = make_ring(c, "t/gone", 2, 64, 0);
	cr_assert_eq(td_client_ring_stat(c, "t/gone", &st, NULL), 0);
	cr_assert_eq(st.subscribers, 0);
	td_ring_close(r);
	td_ring_close(r2);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* ---- huge pages ---- */

static void huge_consumer(const struct tu_daemon *d, void *arg)
{
	struct td_client *c = open_client(d);
	struct td_sub *sub = subscribe(c, "t/huge");
	struct td_view v;

	CK_EQ(td_sub_next(sub, 20000, &v), 0);
	CK(pattern_ok(v.planes[0], v.sizes[0], v.version));
	td_sub_close(sub);
	td_client_close(c);
}

Test(ring, huge_page_request_works_or_falls_back_cleanly)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r;
	struct td_slot s;
	uint32_t b;
	pid_t pid;

	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	r = make_ring(c, "t/huge", 2, 3 << 20, TD_RING_HUGE_PAGES);
	b = td_ring_backing(r);
	cr_assert(b == TD_RING_BACKING_HUGETLB || b == TD_RING_BACKING_THP,
		  "backing %u", b);
	cr_assert_eq(td_ring_acquire(r, 0, &s), 0);
	pattern_fill(s.planes[0], s.sizes[0], 1);
	cr_assert_eq(td_ring_publish(r, NULL), 0);
	pid = spawn(&d, huge_consumer, NULL);
	cr_assert_eq(reap(pid), 0, "consumer failed");
	td_ring_close(r);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* ---- requests the daemon refuses ---- */

Test(ring, bad_requests_are_refused_with_reasons)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r, *r2 = NULL;
	struct td_sub *subs[2] = {NULL, NULL}, *extra = NULL;
	struct td_error e = {0};
	uint64_t size = 64, zero = 0;
	struct td_ring_desc desc = {
		.dtype = TD_TENSOR_U8, .ndim = 1, .shape = &size,
		.slot_count = 2, .reader_count = 2,
	};
	struct td_ring_stat st;

	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	cr_assert_eq(td_ring_create(c, "t/bad", &desc, &r, &e), 0);
	cr_assert_eq(td_ring_create(c, "t/bad", &desc, &r2, &e), -EEXIST);
	cr_assert(strstr(e.reason, "exists"), "%s", e.reason);
	desc.slot_count = 1;
	cr_assert_eq(td_ring_create(c, "t/bad2", &desc, &r2, &e), -EINVAL);
	desc.slot_count = 65;
	cr_assert_eq(td_ring_create(c, "t/bad2", &desc, &r2, &e), -EINVAL);
	desc.slot_count = 2;
	desc.reader_count = 33;
	cr_assert_eq(td_ring_create(c, "t/bad2", &desc, &r2, &e), -EINVAL);
	desc.reader_count = 1;
	desc.plane_count = 1;
	desc.plane_sizes = &zero;
	cr_assert_eq(td_ring_create(c, "t/bad2", &desc, &r2, &e), -EINVAL);
	cr_assert_eq(td_ring_create(c, "../x", &desc, &r2, &e), -EINVAL);
	cr_assert_eq(td_ring_subscribe(c, "t/none", 0, &extra, &e), -ENOENT);
	cr_assert_eq(td_ring_subscribe(c, "t/none", 30, &extra, &e),
		     -ETIMEDOUT);
	cr_assert_eq(td_client_ring_stat(c, "t/none", &st, &e), -ENOENT);
	/* rows are a fixed number */
	cr_assert_eq(td_ring_subscribe(c, "t/bad", 0, &subs[0], &e), 0);
	cr_assert_eq(td_ring_subscribe(c, "t/bad", 0, &subs[1], &e), 0);
	cr_assert_eq(td_ring_subscribe(c, "t/bad", 0, &extra, &e), -EBUSY);
	td_sub_close(subs[1]);
	cr_assert_eq(td_ring_subscribe(c, "t/bad", 0, &extra, &e), 0);
	cr_assert_eq(td_client_ring_stat(c, "t/bad", &st, &e), 0);
	cr_assert_eq(st.subscribers, 2);
	cr_assert_eq(st.slot_count, 2);
	td_sub_close(extra);
	td_sub_close(subs[0]);
	td_ring_close(r);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/*
 * A ring's explicit plane sizes must hold its dtype times shape, as a
 * publish's planes must hold their layout: a GET of the ring name hands
 * out a tensor of that shape over those planes, and a consumer that reads
 * it by its shape must not run past the slot's bytes.
 */
Test(ring, planes_smaller_than_the_shape_are_refused)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r = NULL;
	struct td_error e = {0};
	uint64_t shape[2] = {64, 64}, small = 10, split[2] = {8192, 8192};
	uint64_t big[2] = {UINT64_MAX / 2, 4};
	struct td_ring_desc desc = {
		.dtype = TD_TENSOR_F32, .ndim = 2, .shape = shape,
		.plane_count = 1, .plane_sizes = &small,
	};
	struct td_entry en;

	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	cr_assert_eq(td_ring_create(c, "t/small", &desc, &r, &e), -EINVAL,
		     "%s", e.reason);
	cr_assert_null(r);
	cr_assert(strstr(e.reason, "16384"), "%s", e.reason);
	cr_assert_eq(td_client_stat(c, "t/small", &en, &e), -ENOENT);
	/* a shape whose byte count overflows is refused, not wrapped */
	desc.shape = big;
	cr_assert_eq(td_ring_create(c, "t/small", &desc, &r, &e), -EINVAL,
		     "%s", e.reason);
	cr_assert_null(r);
	/* planes that hold it together are a ring, as before */
	desc.shape = shape;
	desc.plane_count = 2;
	desc.plane_sizes = split;
	cr_assert_eq(td_ring_create(c, "t/split", &desc, &r, &e), 0, "%s",
		     e.reason);
	td_ring_close(r);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* ---- one futex word per sleeper (docs/fastpath.md) ---- */

#define SLEEPERS 4

struct sleeper {
	const struct tu_daemon *d;
	pthread_t t;
	int rc;
	uint64_t version;
};

static void *sleeper_run(void *arg)
{
	struct sleeper *z = arg;
	struct td_client *c = open_client(z->d);
	struct td_sub *sub = subscribe(c, "t/rows");
	struct td_view v;

	/* no deadline: a wake-up that never comes hangs it, and the test's
	 * timeout fails (a bounded wait would find the version after it) */
	z->rc = td_sub_next(sub, -1, &v);
	z->version = z->rc == 0 ? v.version : 0;
	td_sub_close(sub);
	td_client_close(c);
	return NULL;
}

/* Rows whose `waiting` is w, once n of them are (at most 20 s). */
static unsigned rows_at(struct td_ring_readers *rd, uint32_t w, unsigned n)
{
	unsigned got = 0;

	for (int k = 0; k < 20000; k++, usleep(1000)) {
		got = 0;
		for (uint32_t i = 0; i < TD_RING_MAX_READERS; i++)
			got += (atomic_load(&rd->rows[i].waiting) &
				TD_RING_LOW) == w;
		if (got >= n)
			break;
	}
	return got;
}

/*
 * Four readers asleep (no polling) in four threads, each on its own
 * connection; one publish must wake every one of them. With TENSORD_WAKE_ROWS=0 the producer does not
 * ask for row wake-ups, so the ring has no TD_RING_ROW_WAKE and every
 * reader sleeps on the header's seq, as before layout 4.
 */
static void sleepers_all_woken(const char *wake_rows, bool old_daemon,
			       uint32_t flag, uint32_t asleep)
{
	struct sleeper z[SLEEPERS];
	struct td_ring_readers *rd;
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r;
	uint64_t v;

	cr_assert_eq(setenv("TENSORD_RING_SPIN_US", "0", 1), 0);
	cr_assert_eq(setenv("TENSORD_WAKE_ROWS", wake_rows, 1), 0);
	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	/* as if the daemon's HELLO predated the feature */
	if (old_daemon)
		c->hello.features &= ~TD_WIRE_FEAT_WAKE_ROWS;
	r = make_ring(c, "t/rows", 2, 64, 0);
	cr_assert_eq(atomic_load(&find_header()->flags) & TD_RING_ROW_WAKE,
		     flag);
	rd = tu_find_mapping("memfd:tensord-ring-readers");
	for (int i = 0; i < SLEEPERS; i++) {
		z[i] = (struct sleeper){.d = &d, .rc = 1};
		cr_assert_eq(pthread_create(&z[i].t, NULL, sleeper_run, &z[i]),
			     0);
	}
	cr_assert_eq(rows_at(rd, asleep, SLEEPERS), SLEEPERS,
		     "every reader says it sleeps (waiting %u)", asleep);
	v = put(r);
	for (int i = 0; i < SLEEPERS; i++) {
		cr_assert_eq(pthread_join(z[i].t, NULL), 0);
		cr_assert_eq(z[i].rc, 0, "reader %d: %d", i, z[i].rc);
		cr_assert_eq(z[i].version, v, "reader %d", i);
	}
	/* fds and buffer mappings are counted; not every mapping: glibc
	 * keeps the threads' stacks and arenas */
	td_ring_close(r);
	td_client_close(c);
	tu_daemon_stop(&d, false);
}

Test(ring, every_reader_asleep_on_its_own_row_is_woken_by_one_publish,
     .timeout = 60)
{
	sleepers_all_woken("1", false, TD_RING_ROW_WAKE, TD_RING_WAIT_ROW);
}

/* a producer asks for row wake-ups only of a daemon that names the
 * feature (an older one would neither set the flag nor wake rows) */
Test(ring, readers_share_the_seq_word_of_a_ring_made_with_an_older_daemon,
     .timeout = 60)
{
	sleepers_all_woken("1", true, 0, TD_RING_WAIT_FUTEX);
}

Test(ring, readers_share_the_seq_word_when_row_wake_ups_are_off,
     .timeout = 60)
{
	sleepers_all_woken("0", false, 0, TD_RING_WAIT_FUTEX);
}

struct old_reader {
	_Atomic uint32_t *seq, *waiting;
	uint32_t seen;
	long rc;
	int err;
};

/* What a reader of libtensord before layout 4 does to sleep. */
static void *old_reader_run(void *arg)
{
	struct old_reader *o = arg;
	struct timespec ts = {10, 0};

	atomic_store(o->waiting, TD_RING_WAIT_FUTEX);
	o->rc = syscall(SYS_futex, o->seq, FUTEX_WAIT, o->seen, &ts, NULL, 0);
	o->err = o->rc < 0 ? errno : 0;
	atomic_store(o->waiting, 0);
	return NULL;
}

/*
 * A ring made with row wake-ups may still have a reader of an older
 * libtensord, asleep on seq with `waiting` at 1: the publish still wakes
 * seq for it. Its sleep is raced against the publish (it may see seq move
 * before it sleeps, EAGAIN), so it is tried until one really slept; a
 * wake-up that never came is its 10 s timeout.
 */
/*
 * A reader of an older libtensord on a ring with owner tokens writes its
 * row's words whole (token 0) over the daemon's tokened ones: its first
 * hold replaces the fresh `held`, its first take the fresh `taken`. The
 * producer reads the low bits and the fresh mark alike, so it sees the
 * hold, counts the take (td_ring_wait_read) and, once the version is
 * released, rewrites the latest slot in place.
 */
Test(ring, a_reader_without_tokens_works_on_a_ring_with_them)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r;
	struct td_sub *a;
	struct td_ring_readers *rd;
	struct td_view v;
	struct td_slot s;
	uint32_t slot;

	one_sub_open(&d, &c, &r, &a, "t/mixed", 3, 64);
	rd = tu_find_mapping("memfd:tensord-ring-readers");
	cr_assert_eq(atomic_load(&rd->rows[0].taken),
		     TD_RING_TAKEN_FRESH | td_ring_owner_of(a->id));
	a->tok = 0; /* as a reader that predates tokens */
	cr_assert_eq(td_ring_wait_read(r, put(r), 0), -ETIMEDOUT,
		     "the fresh mark counted as a take");
	cr_assert_eq(td_sub_next(a, 0, &v), 0);
	slot = v.slot;
	cr_assert_eq(atomic_load(&rd->rows[0].held), slot, "a whole word");
	cr_assert_eq(atomic_load(&rd->rows[0].taken), 1);
	cr_assert_eq(td_ring_wait_read(r, 1, 0), -ETIMEDOUT, "held");
	cr_assert_eq(td_sub_release(a), 0);
	cr_assert_eq(td_ring_wait_read(r, 1, 0), 0);
	cr_assert_eq(td_ring_acquire(r, 0, &s), 0);
	cr_assert_eq(s.index, slot, "the latest slot not rewritten");
	cr_assert_eq(td_ring_publish(r, NULL), 0);
	cr_assert_eq(td_sub_next(a, 0, &v), 0);
	cr_assert_eq(v.version, 2);
	one_sub_close(&d, c, r, a);
}

Test(ring, a_reader_asleep_on_seq_is_woken_on_a_ring_with_row_wake_ups)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r;
	struct td_ring_hdr *h;
	struct td_ring_readers *rd;
	bool slept = false;

	tu_daemon_start(&d, "warn");
	c = open_client(&d);
	r = make_ring(c, "t/old", 2, 64, 0);
	h = find_header();
	rd = tu_find_mapping("memfd:tensord-ring-readers");
	cr_assert(atomic_load(&h->flags) & TD_RING_ROW_WAKE);
	for (int k = 0; k < 20 && !slept; k++) {
		/* the last row of the ring: nobody's, as an older reader's */
		struct old_reader o = {
			.seq = &h->seq,
			.waiting = &rd->rows[h->reader_count - 1].waiting,
			.seen = atomic_load(&h->seq),
		};
		pthread_t t;

		cr_assert_eq(pthread_create(&t, NULL, old_reader_run, &o), 0);
		cr_assert_eq(rows_at(rd, TD_RING_WAIT_FUTEX, 1), 1);
		usleep(20000); /* let it reach the futex; else it is retried */
		put(r);
		cr_assert_eq(pthread_join(t, NULL), 0);
		cr_assert(o.rc == 0 || o.err == EAGAIN,
			  "the older reader was not woken (%s)",
			  strerror(o.err));
		slept = o.rc == 0;
	}
	cr_assert(slept, "the older reader never got to sleep");
	/* fds and buffer mappings are counted; not every mapping: glibc
	 * keeps the threads' stacks and arenas */
	td_ring_close(r);
	td_client_close(c);
	tu_daemon_stop(&d, false);
}

/*
 * The wake of a row at 4 is a swap to 0 and a wake: a publish does it,
 * and so does the daemon when the ring closes (a row set by hand, as a
 * reader about to sleep leaves it; the readers' memfd stays mapped by
 * a subscription while the producer closes).
 */
Test(ring, a_row_at_4_is_swapped_to_0_by_the_publish_and_by_the_close)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r;
	struct td_sub *sub;
	struct td_ring_readers *rd;
	_Atomic uint32_t *w;
	uint32_t last;
	int k;

	one_sub_open(&d, &c, &r, &sub, "t/swap", 2, 64);
	last = find_header()->reader_count - 1;
	rd = tu_find_mapping("memfd:tensord-ring-readers");
	w = &rd->rows[last].waiting;
	atomic_store(w, TD_RING_WAIT_ROW);
	put(r);
	cr_assert_eq(atomic_load(w), 0, "the publish left the row at 4");
	atomic_store(w, TD_RING_WAIT_ROW);
	td_ring_close(r);
	/* the producer's mappings are gone: the subscription's is left */
	rd = tu_find_mapping("memfd:tensord-ring-readers");
	w = &rd->rows[last].waiting;
	for (k = 0; k < 20000 && atomic_load(w); k++)
		usleep(1000);
	cr_assert_eq(atomic_load(w), 0, "the close left the row at 4");
	one_sub_close(&d, c, NULL, sub);
}

struct orphan {
	struct td_sub *sub;
	pthread_t t;
	int rc;
};

static void *orphan_run(void *arg)
{
	struct orphan *o = arg;
	struct td_view v;

	o->rc = td_sub_next(o->sub, -1, &v);
	return NULL;
}

/* Until the low bits of row 0's `waiting` read w (at most 20 s; the
 * high ones are its owner's token). */
static void row0_at(struct td_ring_readers *rd, uint32_t w)
{
	uint32_t got = atomic_load(&rd->rows[0].waiting) & TD_RING_LOW;

	/* the value seen, not a second read: a sleeper woken for nothing
	 * (slow under TSan) clears and sets it again meanwhile */
	for (int k = 0; k < 20000 && got != w; k++) {
		usleep(1000);
		got = atomic_load(&rd->rows[0].waiting) & TD_RING_LOW;
	}
	cr_assert_eq(got, w);
}

/*
 * Tear down what the orphan tests open: B's subscription and client (b
 * NULL: none), A's, the ring and the producer's client. fds and buffer
 * mappings are counted; not every mapping: glibc keeps the threads'
 * stacks and arenas.
 */
/*
 * A daemon, a producer's client cp with a two-slot ring `name`, and a
 * reader's client ca subscribed to it (a, row 0): what orphan_close()
 * ends. Returns the readers page.
 */
static struct td_ring_readers *orphan_open(struct tu_daemon *d,
					   struct td_client **cp,
					   struct td_ring **r,
					   struct td_client **ca,
					   struct td_sub **a, const char *name)
{
	struct td_ring_readers *rd;

	tu_daemon_start(d, "warn");
	*cp = open_client(d);
	*r = make_ring(*cp, name, 2, 64, 0);
	rd = tu_find_mapping("memfd:tensord-ring-readers");
	*ca = open_client(d);
	*a = subscribe(*ca, name);
	return rd;
}

static void orphan_close(struct tu_daemon *d, struct td_client *cp,
			 struct td_ring *r, struct td_client *ca,
			 struct td_sub *a, struct td_client *cb,
			 struct td_sub *b)
{
	if (b) {
		td_sub_close(b);
		td_client_close(cb);
	}
	td_sub_close(a);
	td_client_close(ca);
	td_ring_close(r);
	td_client_close(cp);
	tu_daemon_stop(d, false);
}

/*
 * A reader's thread asleep in td_sub_next when the daemon drops its
 * connection (as it drops a peer it disconnects): the daemon frees the
 * row and wakes the sleeper (no waker looks at a row whose low bits read
 * 0), which finds the row no longer its own and ends with -EPIPE, writing
 * nothing there: with owner tokens its compare-exchange finds another
 * token; without (an older daemon) it looks at its connection after
 * every sleep. The row's next owner sleeps on it and is woken as ever.
 * No deadline: a lost wake-up hangs, and the timeout fails it.
 */
static void orphaned(bool tokens)
{
	struct tu_daemon d;
	struct td_client *cp, *ca, *cb;
	struct td_ring_readers *rd;
	struct td_ring *r;
	struct orphan a = {.rc = 1}, b = {.rc = 1};
	uint64_t size = 64;
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U8, .ndim = 1,
				    .shape = &size, .slot_count = 2,
				    .reader_count = 1};

	cr_assert_eq(setenv("TENSORD_RING_SPIN_US", "0", 1), 0);
	tu_daemon_start(&d, "warn");
	cp = open_client(&d);
	if (!tokens)
		cp->hello.features &= ~TD_WIRE_FEAT_ROW_OWNER;
	cr_assert_eq(td_ring_create(cp, "t/orphan", &desc, &r, NULL), 0);
	cr_assert_eq(atomic_load(&find_header()->flags) & TD_RING_ROW_OWNER,
		     tokens ? TD_RING_ROW_OWNER : 0);
	rd = tu_find_mapping("memfd:tensord-ring-readers");
	ca = open_client(&d);
	a.sub = subscribe(ca, "t/orphan");
	cr_assert_eq(pthread_create(&a.t, NULL, orphan_run, &a), 0);
	row0_at(rd, TD_RING_WAIT_ROW);
	/* the daemon sees the connection end, frees row 0 and wakes A */
	cr_assert_eq(shutdown(ca->sock, SHUT_RDWR), 0);
	cr_assert_eq(pthread_join(a.t, NULL), 0);
	cr_assert_eq(a.rc, -EPIPE, "the orphan: %d", a.rc);
	cr_assert_eq(atomic_load(&rd->rows[0].taken), TD_RING_TAKEN_ANY);
	cr_assert_eq(atomic_load(&rd->rows[0].held), TD_RING_NONE);
	cr_assert_eq(atomic_load(&rd->rows[0].waiting), 0);
	/* B gets row 0 and sleeps there */
	cb = open_client(&d);
	b.sub = subscribe(cb, "t/orphan");
	cr_assert_eq(pthread_create(&b.t, NULL, orphan_run, &b), 0);
	row0_at(rd, TD_RING_WAIT_ROW);
	usleep(50000); /* asleep in the futex (a later sleep is woken too) */
	put(r);
	cr_assert_eq(pthread_join(b.t, NULL), 0);
	cr_assert_eq(b.rc, 0, "the row's new owner: %d", b.rc);
	orphan_close(&d, cp, r, ca, a.sub, cb, b.sub);
}

Test(ring, a_row_freed_under_a_sleeper_wakes_it_to_epipe, .timeout = 60)
{
	orphaned(true);
}

Test(ring, a_row_freed_under_a_sleeper_of_an_older_daemon_wakes_it_to_epipe,
     .timeout = 60)
{
	orphaned(false);
}

/*
 * The orphan A looks at its row only after the daemon gave it to B, and
 * the producer published since: A must end with -EPIPE and leave B's row
 * exactly as B has it (`held` guards B's bytes, `taken` is B's place in
 * the producer's reuse of the latest slot and its td_ring_wait_read,
 * `waiting` says whether B sleeps; docs/fastpath.md, "A row that changed
 * hands"). `asleep`: A slept on seq when its connection was dropped (a
 * ring without row wake-ups), and the daemon's free of its row wakes it
 * (no deadline: a missed wake hangs, and the timeout fails it); else A
 * took a version before.
 */
static void changed_hands(bool asleep)
{
	struct tu_daemon d;
	struct td_client *cp, *ca, *cb;
	struct td_ring_readers *rd;
	struct td_ring *r;
	struct orphan a = {.rc = 1};
	struct td_sub *b;
	struct td_view v;
	uint32_t held, waiting;
	uint64_t taken, ver;
	uint64_t size = 64;
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U8, .ndim = 1,
				    .shape = &size, .slot_count = 2,
				    .reader_count = 1};

	cr_assert_eq(setenv("TENSORD_RING_SPIN_US", "0", 1), 0);
	/* every reader sleeps on seq, which the daemon's free leaves */
	cr_assert_eq(setenv("TENSORD_WAKE_ROWS", "0", 1), 0);
	tu_daemon_start(&d, "warn");
	cp = open_client(&d);
	cr_assert_eq(td_ring_create(cp, "t/hands", &desc, &r, NULL), 0);
	cr_assert_eq(atomic_load(&find_header()->flags),
		     TD_RING_ROW_OWNER);
	rd = tu_find_mapping("memfd:tensord-ring-readers");
	ca = open_client(&d);
	a.sub = subscribe(ca, "t/hands");
	if (asleep) {
		cr_assert_eq(pthread_create(&a.t, NULL, orphan_run, &a), 0);
		row0_at(rd, TD_RING_WAIT_FUTEX);
		usleep(50000); /* A asleep in the futex */
	} else {
		put(r);
		cr_assert_eq(td_sub_next(a.sub, 0, &v), 0);
		cr_assert_eq(td_sub_release(a.sub), 0);
	}
	/* the daemon sees A's connection end and frees row 0 */
	cr_assert_eq(shutdown(ca->sock, SHUT_RDWR), 0);
	for (int k = 0; k < 20000 &&
			atomic_load(&rd->rows[0].taken) != TD_RING_TAKEN_ANY;
	     k++)
		usleep(1000);
	cr_assert_eq(atomic_load(&rd->rows[0].taken), TD_RING_TAKEN_ANY);
	if (asleep) {
		cr_assert_eq(pthread_join(a.t, NULL), 0);
		cr_assert_eq(a.rc, -EPIPE, "the orphan: %d", a.rc);
	}
	/* ... and gives it to B */
	cb = open_client(&d);
	b = subscribe(cb, "t/hands");
	if (!asleep)
		cr_assert_eq(td_sub_next(b, 0, &v), 0, "B takes version 1");
	cr_assert_eq(td_sub_next(b, 0, &v), -ETIMEDOUT);
	held = atomic_load(&rd->rows[0].held);
	taken = atomic_load(&rd->rows[0].taken);
	waiting = atomic_load(&rd->rows[0].waiting);
	cr_assert_eq(td_ring_took(taken), asleep ? 0 : 1);
	ver = put(r);
	a.rc = td_sub_next(a.sub, 0, &v);
	cr_assert_eq(a.rc, -EPIPE, "the orphan: %d", a.rc);
	cr_assert_eq(atomic_load(&rd->rows[0].held), held,
		     "the orphan wrote `held` of B's row: %#x, B left %#x",
		     atomic_load(&rd->rows[0].held), held);
	cr_assert_eq(atomic_load(&rd->rows[0].taken), taken,
		     "the orphan wrote `taken` of B's row: %#" PRIx64
		     ", B left %#" PRIx64,
		     atomic_load(&rd->rows[0].taken), taken);
	cr_assert_eq(atomic_load(&rd->rows[0].waiting), waiting);
	/* B takes the version as its own, into its row */
	cr_assert_eq(td_sub_next(b, 0, &v), 0);
	cr_assert_eq(v.version, ver);
	cr_assert_eq(td_ring_held_slot(atomic_load(&rd->rows[0].held)),
		     v.slot);
	cr_assert_eq(atomic_load(&rd->rows[0].taken), ver);
	orphan_close(&d, cp, r, ca, a.sub, cb, b);
}

/*
 * A reader asleep on seq (an older libtensord, TENSORD_WAKE_ROWS=0)
 * whose row the daemon frees may have checked seq and not yet entered
 * FUTEX_WAIT: a wake of seq alone then finds nobody, and with seq
 * unchanged the sleep that follows never ends (no waker looks at a row
 * that reads 0). The daemon's free changes seq before its wake. The
 * sleeper's announcement is made by hand, the moment between its check
 * and its sleep frozen: seq must have moved once the row reads free.
 */
Test(ring, freeing_a_row_asleep_on_seq_moves_seq, .timeout = 60)
{
	struct tu_daemon d;
	struct td_client *cp, *ca;
	struct td_ring_readers *rd;
	struct td_ring_hdr *h;
	struct td_ring *r;
	struct td_sub *a;
	uint32_t seq;

	rd = orphan_open(&d, &cp, &r, &ca, &a, "t/seq-freed");
	h = tu_find_mapping("memfd:tensord-ring-hdr");
	atomic_store(&rd->rows[0].waiting,
		     (atomic_load(&rd->rows[0].waiting) & ~TD_RING_LOW) |
			     TD_RING_WAIT_FUTEX);
	seq = atomic_load(&h->seq);
	cr_assert_eq(shutdown(ca->sock, SHUT_RDWR), 0);
	/* no deadline: a free that never comes hangs, the timeout fails it */
	while (atomic_load(&rd->rows[0].waiting) != 0 ||
	       atomic_load(&rd->rows[0].taken) != TD_RING_TAKEN_ANY)
		usleep(1000);
	/*
	 * The daemon swaps `waiting` and then moves seq (row_unwait): a
	 * slow daemon (valgrind) is seen between the two. A few seconds
	 * for the move; a free that does not move seq at all still fails.
	 */
	for (int i = 0; i < 5000 && atomic_load(&h->seq) == seq; i++)
		usleep(1000);
	cr_assert_neq(atomic_load(&h->seq), seq,
		      "a sleep on seq that had not begun would never end");
	orphan_close(&d, cp, r, ca, a, NULL, NULL);
}

/*
 * An event-loop reader armed on its timerfd when the daemon drops its
 * connection: the daemon's free fires the timerfd (no publish comes),
 * and td_sub_poll ends the subscription with -EPIPE, writing nothing
 * into the freed row. No deadline on the wait: a timerfd never fired
 * hangs, and the timeout fails it.
 */
Test(ring, an_event_loop_reader_learns_its_row_was_freed, .timeout = 60)
{
	struct tu_daemon d;
	struct td_client *cp, *ca;
	struct td_ring_readers *rd;
	struct td_ring *r;
	struct td_sub *a;
	struct td_view v;
	struct pollfd p;
	int fd;

	rd = orphan_open(&d, &cp, &r, &ca, &a, "t/loop-freed");
	fd = td_sub_fd(a);
	cr_assert_geq(fd, 0);
	cr_assert_eq(td_sub_poll(a, &v), -EAGAIN); /* armed */
	cr_assert_eq(atomic_load(&rd->rows[0].waiting) & TD_RING_LOW,
		     TD_RING_WAIT_FD);
	cr_assert_eq(shutdown(ca->sock, SHUT_RDWR), 0);
	p = (struct pollfd){.fd = fd, .events = POLLIN};
	cr_assert_eq(poll(&p, 1, -1), 1);
	cr_assert_eq(td_sub_poll(a, &v), -EPIPE);
	cr_assert_eq(atomic_load(&rd->rows[0].held), TD_RING_NONE);
	cr_assert_eq(atomic_load(&rd->rows[0].waiting), 0);
	cr_assert_eq(atomic_load(&rd->rows[0].taken), TD_RING_TAKEN_ANY);
	orphan_close(&d, cp, r, ca, a, NULL, NULL);
}

Test(ring, an_orphan_asleep_on_seq_is_woken_and_never_writes_its_old_row,
     .timeout = 60)
{
	changed_hands(true);
}

Test(ring, a_subscription_whose_row_changed_hands_never_writes_it)
{
	changed_hands(false);
}

/*
 * The daemon's SIGKILL while the producer lives: nothing will close the
 * ring any more (the daemon marks it CLOSED when its producer ends), so
 * a subscriber's wait must not last for ever: it looks at its connection
 * at least once a TD__HUP_CHECK_NS and ends in -EPIPE, as a follow does.
 * What the producer published before that wait is still given.
 */
static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

Test(ring, a_wait_ends_in_epipe_once_the_daemon_is_gone)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r;
	struct td_sub *a;
	struct td_view v;

	one_sub_open(&d, &c, &r, &a, "rk/gone", 2, 64);
	uint64_t v1 = put(r);
	cr_assert_eq(td_sub_next(a, 0, &v), 0);
	cr_assert_eq(v.version, v1);
	tu_daemon_kill(&d);
	uint64_t v2 = put(r); /* the ring itself goes on */
	int rc = td_sub_next(a, 0, &v);
	cr_assert_eq(rc, 0, "%d", rc);
	cr_assert_eq(v.version, v2);
	int64_t t0 = mono_ms();
	rc = td_sub_next(a, 10000, &v);
	int64_t took_ms = mono_ms() - t0;
	cr_assert_eq(rc, -EPIPE, "%d after %lld ms", rc, (long long)took_ms);
	cr_assert_lt(took_ms, 5000, "%lld ms", (long long)took_ms);
	put(r);
	rc = td_sub_next(a, 0, &v);
	cr_assert_eq(rc, -EPIPE, "gone for good: %d", rc);
	td_sub_close(a);
	td_ring_close(r);
	td_client_close(c);
}
