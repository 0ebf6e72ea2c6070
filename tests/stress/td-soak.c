/* SPDX-License-Identifier: MIT */
/*
 * td-soak: the daemon must not grow across many handoffs (issue 5, "no
 * growth of RSS or fds across a million handoffs"). One private tensord;
 * N handoffs through the socket path (GET + RELEASE of one published
 * tensor: a lease taken and dropped each time, the client's mapping
 * cached) and N through a ring (acquire, write, publish, next, check,
 * release, and td_ring_wait_read: lock step), then N fanned out to four consumers on each of two paths:
 * "stream" (the plain API as a stream: TD_ALLOC_STREAM loans lent in the
 * PUBLISH reply, four clients GET NEWER and release without waiting) and
 * "fan-ring" (one ring, four subscriptions), and "follow" (the same
 * stream taken by four followers of the name: td_follow_next, release),
 * "named" (the stream with loans named for it, td_client_alloc_named),
 * "staged" (the named stream taken by four get_newer loops, which ride
 * follows: every publish fires the stage of the loan lent before it,
 * docs/fastpath.md "A followed publish without the daemon's hop"),
 * "staged-names" (the same with eight names published in turn on one
 * connection, each with its own lent loan and stage, "Several streams
 * on one connection"), "many" (eight names published from recyclable
 * loans in one PUBLISH_MANY and leased in one GET_MANY, docs/protocol.md
 * §6.10).
 * With --bound, and nothing else: a daemon of another uid whose --policy
 * lets this uid write a name it may not read (docs/fastpath.md, "Across names": every buffer a reader
 * is sent is bound to its name), the named stream and an unnamed one
 * ("bound-named", "bound-unnamed": recycled within the name, and a new
 * buffer for every unnamed loan with the oldest closed).
 * The daemon's fd count and
 * RSS are read after a warm-up and at the end; any fd growth, RSS growth
 * beyond --rss-slack KiB, a wrong byte or a failed call exits 1. The default suite runs a short count; the
 * million is `td-soak --handoffs 1000000` (docs/reliability.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client.h" /* the producer's stage (staged path) */
#include "daemonctl.h"
#include "tensord/tensord.h"

#define LEN 4096
/*
 * Each wait here is for what this process has just done (a publish, a
 * release): it ends at once unless a wake-up is lost, and then the run
 * fails saying which wait timed out instead of hanging.
 */
#define WAIT_MS 60000

static uint64_t handoffs = 20000, warmup = 2000;
static long rss_slack_kb = 512;

static int fail(const char *what, int rc, const struct td_error *e)
{
	fprintf(stderr, "td-soak: %s: %s (%s)\n", what, strerror(-rc),
		e && e->reason[0] ? e->reason : "-");
	return 1;
}

struct sample {
	int fds;
	long rss;
};

static void sample(const struct tdc_daemon *d, struct sample *s)
{
	s->fds = tdc_fd_count(d->pid);
	s->rss = tdc_rss_kb(d->pid);
}

static int socket_path(struct td_client *c, const struct tdc_daemon *d,
		       struct sample *a, struct sample *b)
{
	uint64_t shape[1] = {LEN};
	struct td_publish p = {.name = "soak/t", .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = shape};
	struct td_error e = {0};
	uint8_t buf[LEN];
	int rc;

	for (int i = 0; i < LEN; i++)
		buf[i] = (uint8_t)(i * 7);
	rc = td_client_put(c, &p, buf, LEN, NULL, &e);
	if (rc < 0)
		return fail("put", rc, &e);
	for (uint64_t i = 0; i < warmup + handoffs; i++) {
		struct td_tensor *t;
		const uint8_t *x;

		if (i == warmup)
			sample(d, a);
		rc = td_client_get(c, "soak/t", &t, &e);
		if (rc < 0)
			return fail("get", rc, &e);
		x = td_tensor_plane_data(t, 0);
		if (x[i % LEN] != (uint8_t)((i % LEN) * 7))
			return fail("bytes differ", -EILSEQ, NULL);
		td_tensor_release(t);
	}
	sample(d, b);
	return 0;
}

static int ring_path(struct td_client *c, const struct tdc_daemon *d,
		     struct sample *a, struct sample *b)
{
	uint64_t shape[1] = {LEN};
	struct td_ring_desc rd = {.dtype = TD_TENSOR_U8, .ndim = 1,
				  .shape = shape, .slot_count = 4,
				  .reader_count = 1};
	struct td_error e = {0};
	struct td_ring *r;
	struct td_sub *s;
	uint64_t ver;
	int rc;

	rc = td_ring_create(c, "soak/ring", &rd, &r, &e);
	if (rc < 0)
		return fail("ring create", rc, &e);
	rc = td_ring_subscribe(c, "soak/ring", 0, &s, &e);
	if (rc < 0)
		return fail("ring subscribe", rc, &e);
	for (uint64_t i = 0; i < warmup + handoffs; i++) {
		struct td_slot slot;
		struct td_view v;

		if (i == warmup)
			sample(d, a);
		rc = td_ring_acquire(r, WAIT_MS, &slot);
		if (rc < 0)
			return fail("ring acquire", rc, NULL);
		memcpy(slot.planes[0], &i, sizeof(i));
		rc = td_ring_publish(r, &ver);
		if (rc < 0)
			return fail("ring publish", rc, NULL);
		rc = td_sub_next(s, WAIT_MS, &v);
		if (rc < 0)
			return fail("sub next", rc, NULL);
		if (memcmp(v.planes[0], &i, sizeof(i)) != 0)
			return fail("ring bytes differ", -EILSEQ, NULL);
		/* in lock step: read once released, not before */
		if (td_ring_wait_read(r, ver, 0) != -ETIMEDOUT)
			return fail("read while held", -EPROTO, NULL);
		td_sub_release(s);
		rc = td_ring_wait_read(r, ver, 0);
		if (rc < 0)
			return fail("ring wait_read", rc, NULL);
	}
	sample(d, b);
	td_sub_close(s);
	td_ring_close(r);
	return 0;
}

#define FAN 4
/* the names of the staged-names path: a producer of as many streams on
 * one connection as it keeps lent loans and stages (sixteen) */
#define NAMES TD__STAGES

/*
 * Buffers a stream's loans came from, by inode: more than a recycled
 * stream ever has (a connection's free list keeps at most 64).
 */
#define SEEN 256
struct seen {
	ino_t ino[SEEN];
	unsigned next;
};

/* 1 when t's buffer is one of s's, else 0 and it joins them; -1 no inode */
static int buffer_seen(const struct td_tensor *t, struct seen *s)
{
	struct stat st;

	if (fstat(td_tensor_plane_fd(t, 0), &st) < 0)
		return -1;
	for (unsigned j = 0; j < SEEN; j++)
		if (s->ino[j] == st.st_ino)
			return 1;
	s->ino[s->next++ % SEEN] = st.st_ino;
	return 0;
}

/*
 * Counts, after the warm-up, the handoffs whose buffer (its inode, as the
 * first consumer sees it) was none the stream had lent before: how many
 * loans were new buffers, not recycled ones (*fresh).
 */
static int stream_path(struct td_client *c, struct td_client *const *cons,
		       const char *const *names, unsigned nnames, bool named,
		       const struct tdc_daemon *d, struct sample *a,
		       struct sample *b, uint64_t *fresh)
{
	uint64_t shape[1] = {LEN}, size = LEN, last[NAMES][FAN] = {{0}};
	struct seen seen = {{0}, 0};
	struct td_error e = {0};
	int rc;

	for (uint64_t i = 0; i < warmup + handoffs; i++) {
		const char *name = names[i % nnames];
		uint64_t *l = last[i % nnames];
		struct td_publish p = {.name = name, .dtype = TD_TENSOR_U8,
				       .ndim = 1, .shape = shape};
		struct td_alloc *al;

		if (i == warmup)
			sample(d, a);
		rc = named ? td_client_alloc_named(c, name, 1, &size,
						   TD_ALLOC_STREAM, &al, &e)
			   : td_client_alloc_ex(c, 1, &size, TD_ALLOC_STREAM,
						&al, &e);
		if (rc < 0)
			return fail("stream alloc", rc, &e);
		memcpy(td_alloc_data(al, 0), &i, sizeof(i));
		rc = td_client_publish_alloc(c, al, &p, NULL, &e);
		if (rc < 0)
			return fail("stream publish", rc, &e);
		for (int k = 0; k < FAN; k++) {
			struct td_tensor *t;

			rc = td_client_get_newer(cons[k], name, l[k], WAIT_MS,
						 &t, &e);
			if (rc < 0)
				return fail("stream get", rc, &e);
			l[k] = td_tensor_version(t);
			if (k == 0 && buffer_seen(t, &seen) == 0 &&
			    i >= warmup)
				++*fresh;
			if (memcmp(td_tensor_plane_data(t, 0), &i,
				   sizeof(i)) != 0)
				return fail("stream bytes differ", -EILSEQ,
					    NULL);
			td_tensor_release_nowait(t);
		}
	}
	sample(d, b);
	return 0;
}

static int follow_path(struct td_client *c, struct td_client *const *cons,
		       const struct tdc_daemon *d, struct sample *a,
		       struct sample *b)
{
	uint64_t shape[1] = {LEN}, size = LEN;
	struct td_publish p = {.name = "soak/f", .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = shape};
	struct td_follow *f[FAN] = {NULL};
	struct td_error e = {0};
	int rc = 0;

	for (int k = 0; k < FAN && rc == 0; k++)
		rc = td_client_follow(cons[k], "soak/f", &f[k], &e);
	for (uint64_t i = 0; rc == 0 && i < warmup + handoffs; i++) {
		struct td_alloc *al;

		if (i == warmup)
			sample(d, a);
		rc = td_client_alloc_ex(c, 1, &size, TD_ALLOC_STREAM, &al, &e);
		if (rc == 0) {
			memcpy(td_alloc_data(al, 0), &i, sizeof(i));
			rc = td_client_publish_alloc(c, al, &p, NULL, &e);
		}
		for (int k = 0; k < FAN && rc == 0; k++) {
			struct td_tensor *t = NULL;

			rc = td_follow_next(f[k], WAIT_MS, &t, &e);
			if (rc == 0 && memcmp(td_tensor_plane_data(t, 0), &i,
					      sizeof(i)) != 0)
				rc = -EILSEQ;
			td_tensor_release(t); /* NULL after a failure */
		}
	}
	if (rc == 0)
		sample(d, b); /* the follows still open, as at the warm-up */
	for (int k = 0; k < FAN; k++)
		td_follow_close(f[k]);
	if (rc < 0)
		return fail("follow", rc, rc == -EILSEQ ? NULL : &e);
	return 0;
}

static int fan_ring_path(struct td_client *c, const struct tdc_daemon *d,
			 struct sample *a, struct sample *b)
{
	uint64_t shape[1] = {LEN};
	struct td_ring_desc rd = {.dtype = TD_TENSOR_U8, .ndim = 1,
				  .shape = shape, .slot_count = FAN + 2,
				  .reader_count = FAN};
	struct td_error e = {0};
	struct td_ring *r;
	struct td_sub *s[FAN];
	int rc;

	rc = td_ring_create(c, "soak/fan", &rd, &r, &e);
	if (rc < 0)
		return fail("fan ring create", rc, &e);
	for (int k = 0; k < FAN; k++) {
		rc = td_ring_subscribe(c, "soak/fan", 0, &s[k], &e);
		if (rc < 0)
			return fail("fan ring subscribe", rc, &e);
	}
	for (uint64_t i = 0; i < warmup + handoffs; i++) {
		struct td_slot slot;

		if (i == warmup)
			sample(d, a);
		rc = td_ring_acquire(r, WAIT_MS, &slot);
		if (rc < 0)
			return fail("fan ring acquire", rc, NULL);
		memcpy(slot.planes[0], &i, sizeof(i));
		rc = td_ring_publish(r, NULL);
		if (rc < 0)
			return fail("fan ring publish", rc, NULL);
		for (int k = 0; k < FAN; k++) {
			struct td_view v;

			rc = td_sub_next(s[k], WAIT_MS, &v);
			if (rc < 0)
				return fail("fan sub next", rc, NULL);
			if (memcmp(v.planes[0], &i, sizeof(i)) != 0)
				return fail("fan ring bytes differ", -EILSEQ,
					    NULL);
			td_sub_release(s[k]);
		}
	}
	sample(d, b);
	for (int k = 0; k < FAN; k++)
		td_sub_close(s[k]);
	td_ring_close(r);
	return 0;
}

/* PUBLISH_MANY and GET_MANY (docs/protocol.md §6.10): each handoff
 * publishes MANY names from recyclable loans in one step and a consumer
 * leases all of them in one, every byte of the step checked. */
#define MANY 8
static int many_path(struct td_client *c, struct td_client *cons,
		     const struct tdc_daemon *d, struct sample *a,
		     struct sample *b)
{
	static const char *names[MANY] = {"soak/x0", "soak/x1", "soak/x2",
					  "soak/x3", "soak/x4", "soak/x5",
					  "soak/x6", "soak/x7"};
	uint64_t shape[1] = {LEN}, size = LEN;
	struct td_publish p[MANY];
	struct td_error e = {0};
	int rc;

	for (int k = 0; k < MANY; k++)
		p[k] = (struct td_publish){.name = names[k],
					   .dtype = TD_TENSOR_U8, .ndim = 1,
					   .shape = shape};
	for (uint64_t i = 0; i < warmup + handoffs; i++) {
		struct td_alloc *al[MANY];
		struct td_tensor *t[MANY];

		if (i == warmup)
			sample(d, a);
		for (int k = 0; k < MANY; k++) {
			rc = td_client_alloc_ex(c, 1, &size, TD_ALLOC_RECYCLE,
						&al[k], &e);
			if (rc < 0)
				return fail("many: alloc", rc, &e);
			memset(td_alloc_data(al[k], 0), (int)(i + k), LEN);
		}
		rc = td_client_publish_many(c, MANY, al, p, NULL, &e);
		if (rc < 0)
			return fail("publish_many", rc, &e);
		rc = td_client_get_many(cons, MANY, names, t, &e);
		if (rc < 0)
			return fail("get_many", rc, &e);
		for (int k = 0; k < MANY; k++) {
			const uint8_t *x = td_tensor_plane_data(t[k], 0);

			if (x[i % LEN] != (uint8_t)(i + k))
				rc = -EILSEQ;
			td_tensor_release(t[k]);
		}
		if (rc < 0)
			return fail("many: bytes differ", rc, NULL);
	}
	sample(d, b);
	return 0;
}

static int report(const char *path, const struct sample *a,
		  const struct sample *b)
{
	printf("  %-13s %" PRIu64 " handoffs: daemon fds %d -> %d, "
	       "RSS %ld -> %ld KiB\n",
	       path, handoffs, a->fds, b->fds, a->rss, b->rss);
	if (a->fds < 0 || a->rss < 0 || b->fds != a->fds ||
	    b->rss > a->rss + rss_slack_kb) {
		fprintf(stderr, "td-soak: the daemon grew on the %s path "
				"(slack %ld KiB)\n",
			path, rss_slack_kb);
		return 1;
	}
	return 0;
}

/*
 * A daemon of another uid (nobody) whose policy lets this uid write
 * under "priv/" but not read it: its readers do not read every name it
 * may write, so every buffer a GET shows them is bound to its name
 * (docs/fastpath.md, "Across names"). The named stream is recycled
 * within its name; each unnamed loan is a new buffer, the oldest bound
 * one closed. Neither may grow the daemon. (The daemon's own uid reads
 * every name, so the daemon cannot be this process's uid.)
 */
static int bound_paths(struct sample *na, struct sample *nb,
		       struct sample *ua, struct sample *ub, uint64_t *fresh)
{
	char rules[128], pol[] = "/tmp/td-soak-policy-XXXXXX";
	const char *extra[] = {"--max-bytes", "64M", "--policy", pol, NULL};
	struct tdc_opts opts = {.log_level = "warn", .extra = extra,
				.uid = 65534};
	struct tdc_daemon d;
	struct td_client *c = NULL, *cons[FAN] = {NULL};
	struct td_error e = {0};
	int fd = mkstemp(pol), rc, bad = 0, len;

	if (fd < 0)
		return fail("policy file", -errno, NULL);
	len = snprintf(rules, sizeof(rules),
		       "allow uid=%u rw soak/\nallow uid=%u w priv/\n",
		       (unsigned)getuid(), (unsigned)getuid());
	rc = fchmod(fd, 0644) == 0 && write(fd, rules, (size_t)len) == len
		     ? 0
		     : -EIO;
	close(fd);
	if (rc == 0)
		rc = tdc_start(&d, NULL, &opts);
	unlink(pol); /* read once, at start */
	if (rc < 0)
		return fail("start tensord --policy as nobody", rc, NULL);
	rc = td_client_connect(d.sock, &c, &e);
	for (int k = 0; k < FAN && rc == 0; k++)
		rc = td_client_connect(d.sock, &cons[k], &e);
	if (rc < 0)
		bad = fail("connect", rc, &e);
	if (!bad)
		bad |= stream_path(c, cons, (const char *[]){"soak/b"}, 1,
				   true, &d, na, nb, &fresh[0]);
	if (!bad)
		bad |= stream_path(c, cons, (const char *[]){"soak/u"}, 1,
				   false, &d, ua, ub, &fresh[1]);
	for (int k = 0; k < FAN; k++)
		td_client_close(cons[k]);
	td_client_close(c);
	rc = tdc_stop(&d, 0);
	if (rc != 0) {
		fprintf(stderr, "td-soak: tensord --policy exit %d\n", rc);
		bad = 1;
	}
	return bad;
}

/* The stages c's replies offered and it has not spent. */
static unsigned stages_offered(const struct td_client *c)
{
	unsigned n = 0;

	for (unsigned i = 0; i < TD__STAGES; i++)
		n += c->st[i].alloc != 0;
	return n;
}

/*
 * staged-names: a producer of NAMES streams on a connection of its own,
 * each taken by FAN get_newer loops of their own (which ride follows):
 * at the end every name's next loan is lent and staged.
 */
static int names_path(const struct tdc_daemon *d, const char *const *names,
		      struct sample *a, struct sample *b, uint64_t *fresh)
{
	struct td_client *p = NULL, *cons[FAN] = {NULL};
	struct td_error e = {0};
	int rc = td_client_connect(d->sock, &p, &e), bad = 0;
	unsigned n;

	/* these get_newer loops follow by themselves */
	setenv("TENSORD_GET_FOLLOW", "1", 1);
	for (int k = 0; k < FAN && rc == 0; k++)
		rc = td_client_connect(d->sock, &cons[k], &e);
	setenv("TENSORD_GET_FOLLOW", "0", 1);
	if (rc < 0)
		bad = fail("staged-names: connect", rc, &e);
	if (!bad)
		bad = stream_path(p, cons, names, NAMES, true, d, a, b, fresh);
	n = bad ? 0 : stages_offered(p);
	if (!bad && n != NAMES) {
		fprintf(stderr, "td-soak: staged-names: %u of %u names "
				"staged\n", n, NAMES);
		bad = 1;
	}
	for (int k = 0; k < FAN; k++)
		td_client_close(cons[k]);
	td_client_close(p);
	return bad;
}

/*
 * Loans of a stream: recycled (all: false), so that after the warm-up
 * at most FRESH_MAX new buffers join the ones it cycles through (a
 * RELEASE another connection sent may be read after the PUBLISH that
 * wanted its buffer; a quarter of the 64 a connection's free list may
 * keep, TD__MAX_FREEBUFS), or a new buffer for each (all).
 */
#define FRESH_MAX 16
static int report_loans(const char *path, uint64_t fresh, bool all)
{
	printf("  %-13s new buffers lent: %" PRIu64 " of %" PRIu64 "\n",
	       path, fresh, handoffs);
	if (all ? fresh != handoffs : fresh > FRESH_MAX) {
		fprintf(stderr, "td-soak: %s: expected %s\n", path,
			all ? "a new buffer for every loan"
			    : "recycled loans");
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option o[] = {
		{"handoffs", 1, NULL, 'n'},
		{"rss-slack", 1, NULL, 'r'},
		{"bound", 0, NULL, 'b'},
		{NULL, 0, NULL, 0},
	};
	static const char *const extra[] = {"--max-bytes", "64M", NULL};
	struct tdc_opts opts = {.log_level = "warn", .extra = extra};
	struct tdc_daemon d;
	struct td_client *c, *cons[FAN] = {NULL}, *riders[FAN] = {NULL};
	struct td_error e = {0};
	struct sample sa, sb, ra, rb, ta, tb, ga, gb, fa, fb, wa, wb, na, nb, xa,
		xb;
	struct sample ba, bb, ua, ub, ma, mb, ya, yb;
	char name_buf[NAMES][16];
	const char *names_n[NAMES];
	/* new buffers lent: stream, stream-ride, named, bound-named,
	 * bound-unnamed, staged, staged-names */
	uint64_t fresh[7] = {0};
	int ch, rc, bad = 0;
	bool bound = false;

	while ((ch = getopt_long(argc, argv, "", o, NULL)) != -1) {
		if (ch == 'n')
			handoffs = strtoull(optarg, NULL, 0);
		else if (ch == 'r')
			rss_slack_kb = strtol(optarg, NULL, 0);
		else if (ch == 'b')
			bound = true;
		else {
			fprintf(stderr, "usage: td-soak [--handoffs N] "
					"[--rss-slack KIB] [--bound]\n");
			return 2;
		}
	}
	/* these GET every version (the follow paths follow themselves) */
	if (bound) {
		if (geteuid() != 0) {
			printf("td-soak --bound: not run: it starts a daemon "
			       "as another uid, which needs root\n");
			return 77; /* meson: skipped */
		}
		setenv("TENSORD_GET_FOLLOW", "0", 1);
		if (bound_paths(&ba, &bb, &ua, &ub, &fresh[3]))
			return 1;
		printf("td-soak --bound:\n");
		bad |= report("bound-named", &ba, &bb);
		bad |= report("bound-unnamed", &ua, &ub);
		bad |= report_loans("bound-named", fresh[3], false);
		bad |= report_loans("bound-unnamed", fresh[4], true);
		return bad;
	}
	rc = tdc_start(&d, NULL, &opts);
	if (rc < 0)
		return fail("start tensord", rc, NULL);
	rc = td_client_connect(d.sock, &c, &e);
	if (rc < 0)
		return fail("connect", rc, &e);
	for (int k = 0; k < FAN; k++) {
		rc = td_client_connect(d.sock, &riders[k], &e);
		if (rc < 0)
			return fail("connect", rc, &e);
	}
	/* these GET every version (the follow path follows explicitly) */
	setenv("TENSORD_GET_FOLLOW", "0", 1);
	for (int k = 0; k < FAN; k++) {
		rc = td_client_connect(d.sock, &cons[k], &e);
		if (rc < 0)
			return fail("connect", rc, &e);
	}
	bad |= socket_path(c, &d, &sa, &sb);
	bad |= ring_path(c, &d, &ra, &rb);
	bad |= stream_path(c, cons, (const char *[]){"soak/s"}, 1, false, &d,
			   &ta, &tb, &fresh[0]);
	bad |= stream_path(c, riders, (const char *[]){"soak/g"}, 1, false,
			   &d, &ga, &gb, &fresh[1]);
	bad |= stream_path(c, cons, (const char *[]){"soak/n"}, 1, true, &d,
			   &na, &nb, &fresh[2]);
	bad |= stream_path(c, riders, (const char *[]){"soak/t"}, 1, true, &d,
			   &xa, &xb, &fresh[5]);
	/* the staged path was staged: the producer holds a stage */
	if (!bad && !c->st_alloc)
		bad |= fail("staged: no stage offered", -ENOENT, NULL);
	for (int k = 0; k < NAMES; k++) {
		snprintf(name_buf[k], sizeof(name_buf[k]), "soak/m%d", k);
		names_n[k] = name_buf[k];
	}
	bad |= names_path(&d, names_n, &ma, &mb, &fresh[6]);
	bad |= fan_ring_path(c, &d, &fa, &fb);
	bad |= follow_path(c, cons, &d, &wa, &wb);
	bad |= many_path(c, cons[0], &d, &ya, &yb);
	for (int k = 0; k < FAN; k++) {
		td_client_close(cons[k]);
		td_client_close(riders[k]);
	}
	td_client_close(c);
	rc = tdc_stop(&d, 0);
	if (bad)
		return 1;
	printf("td-soak:\n");
	bad |= report("socket", &sa, &sb);
	bad |= report("ring", &ra, &rb);
	bad |= report("stream", &ta, &tb);
	bad |= report("stream-ride", &ga, &gb);
	bad |= report("fan-ring", &fa, &fb);
	bad |= report("follow", &wa, &wb);
	bad |= report("named", &na, &nb);
	bad |= report("staged", &xa, &xb);
	bad |= report("staged-names", &ma, &mb);
	bad |= report("many", &ya, &yb);
	bad |= report_loans("stream", fresh[0], false);
	bad |= report_loans("stream-ride", fresh[1], false);
	bad |= report_loans("named", fresh[2], false);
	bad |= report_loans("staged", fresh[5], false);
	bad |= report_loans("staged-names", fresh[6], false);
	if (rc != 0) {
		fprintf(stderr, "td-soak: tensord exit %d\n", rc);
		bad = 1;
	}
	return bad;
}
