/* SPDX-License-Identifier: MIT */
/*
 * Hostile peers of a followed name (docs/fastpath.md, "Following a
 * name", "A followed publish without the daemon's hop"): a follower
 * that writes garbage into its row, and a producer that writes garbage
 * into its trigger page. Only the peer that misbehaves may suffer: the
 * honest follower of the same name still takes every version with its
 * bytes, the daemon stays up, and every hold and byte is let go when
 * the hostile peer is gone.
 *
 * The clients use SCM_RIGHTS, so that the suite also runs against a
 * daemon under valgrind (which has no pidfd_getfd).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tensord/tensord.h"
#include "client.h"
#include "follow.h"
#include "rawclient.h"
#include "testutil.h"
#include "wire-status.h"
#include "wire.h"

TestSuite(hostile_follow, .timeout = TU_TEST_TIMEOUT_S);

#define NAME "hf/cam"
#define SIZE 4096u
#define ROUNDS 300

static struct td_client *conn(const struct tu_daemon *d)
{
	struct td_client *c = NULL;
	struct td_error e = {0};

	cr_assert_eq(setenv("TENSORD_IMPORT", "scm", 1), 0);
	cr_assert_eq(td_client_connect(d->sock, &c, &e), 0, "%s", e.reason);
	return c;
}

static const uint64_t shape[1] = {SIZE};

/* A named stream loan of NAME filled with b, published: its version. */
static uint64_t put(struct td_client *c, uint8_t b)
{
	uint64_t size = SIZE, v = 0;
	struct td_alloc *a = NULL;
	struct td_error e = {0};
	struct td_publish p = {.name = NAME, .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = shape};

	cr_assert_eq(td_client_alloc_named(c, NAME, 1, &size, TD_ALLOC_STREAM,
					   &a, &e),
		     0, "%s", e.reason);
	memset(td_alloc_data(a, 0), b, SIZE);
	cr_assert_eq(td_client_publish_alloc(c, a, &p, &v, &e), 0, "%s",
		     e.reason);
	return v;
}

/* The next version from f, every byte of it b: its number. */
static uint64_t take(struct td_follow *f, uint8_t b)
{
	struct td_tensor *t = NULL;
	struct td_error e = {0};
	const uint8_t *p;
	uint64_t v;

	cr_assert_eq(td_follow_next(f, 10000, &t, &e), 0, "%s", e.reason);
	v = td_tensor_version(t);
	p = td_tensor_plane_data(t, 0);
	cr_assert_eq(td_tensor_plane_size(t, 0), SIZE);
	for (uint32_t i = 0; i < SIZE; i++)
		cr_assert_eq(p[i], b, "version %llu byte %u: %#x, not %#x",
			     (unsigned long long)v, i, p[i], b);
	td_tensor_release(t);
	return v;
}

/* A raw follower of NAME on its own connection: its row, read-write,
 * and the bell, read-only (the FOLLOW reply's fds, closed here). */
struct raw_follower {
	int sock;
	struct td_follow_row *row;
	const struct td_follow_hdr *bell;
};

static void raw_follow(const struct tu_daemon *d, struct raw_follower *x)
{
	struct td_wire_ring_sub_req q = {.name = {NAME, sizeof(NAME) - 1},
					 .flags = TD_WIRE_REQ_SCM};
	struct rawrep r;
	void *row, *bell;

	x->sock = raw_scm_conn_feat(d, TD_WIRE_FEAT_WAKE_ROWS |
					       TD_WIRE_FEAT_STAGE);
	cr_assert_eq(raw_call(x->sock, TD_OP_FOLLOW, 2,
			      td_wire_ring_sub_req_encode(&q, RAW_BODY,
							  RAW_CAP),
			      &r),
		     0);
	cr_assert_eq(r.nfds, 2u);
	bell = mmap(NULL, TD_FOLLOW_BELL_LEN, PROT_READ, MAP_SHARED, r.fds[0],
		    0);
	row = mmap(NULL, TD_FOLLOW_ROW_LEN, PROT_READ | PROT_WRITE,
		   MAP_SHARED, r.fds[1], 0);
	cr_assert_neq(bell, MAP_FAILED);
	cr_assert_neq(row, MAP_FAILED);
	td__scm_close(r.fds, r.nfds);
	x->bell = bell;
	x->row = row;
}

static void raw_unfollow(struct raw_follower *x)
{
	munmap((void *)x->bell, TD_FOLLOW_BELL_LEN);
	munmap(x->row, TD_FOLLOW_ROW_LEN);
	close(x->sock);
}

/* Total bytes and tensors the daemon counts, from STATUS. */
static void counts(struct td_client *c, uint64_t *bytes, uint64_t *tensors)
{
	struct td_status *st = NULL;
	struct td_error e = {0};

	cr_assert_eq(td_client_status(c, &st, &e), 0, "%s", e.reason);
	*bytes = st->bytes;
	*tensors = st->tensors;
	td_status_free(st);
}

/* NAME deleted and both clients gone: nothing is left charged; then the
 * daemon stops. */
static void all_gone(struct tu_daemon *d, struct td_client *prod,
		     struct td_client *cons)
{
	struct td_error e = {0};
	uint64_t bytes = 0, tensors = 0;

	cr_assert_eq(td_client_delete(prod, NAME, NULL, &e), 0, "%s",
		     e.reason);
	td_client_close(cons);
	td_client_close(prod);
	cons = conn(d);
	for (int i = 0; i < 200; i++) {
		counts(cons, &bytes, &tensors);
		if (!bytes && !tensors)
			break;
		usleep(10 * 1000);
	}
	cr_assert_eq(tensors, 0u);
	cr_assert_eq(bytes, 0u, "bytes left charged after everything went");
	td_client_close(cons);
	tu_daemon_stop(d, true);
	unsetenv("TENSORD_STAGE");
}

/* A daemon that stages, NAME put once by *prod and followed by *cons
 * (*f) and by the raw follower x. */
static void staged_start(struct tu_daemon *d, struct td_client **prod,
			 struct td_client **cons, struct td_follow **f,
			 struct raw_follower *x)
{
	struct td_error e = {0};

	cr_assert_eq(setenv("TENSORD_STAGE", "1", 1), 0);
	tu_daemon_start(d, "warn");
	*prod = conn(d);
	*cons = conn(d);
	put(*prod, 0x01);
	cr_assert_eq(td_client_follow(*cons, NAME, f, &e), 0, "%s", e.reason);
	raw_follow(d, x);
}

static uint32_t leases_of(struct td_client *c)
{
	struct td_entry en = {0};
	struct td_error e = {0};
	uint32_t n;

	cr_assert_eq(td_client_stat(c, NAME, &en, &e), 0, "%s", e.reason);
	n = en.lease_count;
	td_entry_fini(&en);
	return n;
}

/*
 * The hostile follower's row, rewritten each round: held names the
 * current version, the staged one, one that does not exist yet, or
 * garbage; waiting, taken and trig_sleep are garbage, or name the
 * staged word (trig_sleep) so as to be left asleep by its commit.
 */
static void scribble(struct raw_follower *x, uint64_t *rng)
{
	uint64_t cur = atomic_load(&((struct td_follow_hdr *)x->bell)->latest)
		       >> 8;
	uint64_t st = atomic_load(&((struct td_follow_hdr *)x->bell)->stage)
		      >> 8;
	uint32_t gen = atomic_load(
		&((struct td_follow_hdr *)x->bell)->stage_gen);
	uint32_t slot = atomic_load(
		&((struct td_follow_hdr *)x->bell)->stage_slot);
	const uint64_t held[] = {cur, st, cur + 1, cur - 1, UINT64_MAX, 0,
				 tu_rand(rng)};
	const uint32_t waiting[] = {0, 1, 2, 4, 7, UINT32_MAX};
	const uint64_t trig[] = {0, td_follow_trig_at(gen, slot),
				 tu_rand(rng)};

	atomic_store(&x->row->held, held[tu_rand(rng) % 7]);
	atomic_store(&x->row->taken, tu_rand(rng) % 2 ? tu_rand(rng) : cur);
	atomic_store(&x->row->trig_sleep, trig[tu_rand(rng) % 3]);
	atomic_store(&x->row->waiting, waiting[tu_rand(rng) % 6]);
}

Test(hostile_follow, a_follower_scribbling_its_row_harms_only_itself)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_follow *f = NULL;
	struct raw_follower x;
	uint64_t rng = 0x5eed, last = 0;

	staged_start(&d, &prod, &cons, &f, &x);
	for (int i = 0; i < ROUNDS; i++) {
		uint8_t b = (uint8_t)(0x10 + i % 200);
		uint64_t v;

		scribble(&x, &rng);
		v = put(prod, b);
		cr_assert_gt(v, last);
		cr_assert_eq(take(f, b), v, "round %d", i);
		last = v;
	}
	/* staging was in play (the producer fired) */
	cr_assert_neq(prod->st_page, NULL);
	raw_unfollow(&x);
	td_follow_close(f);
	/* the hostile follower's hold, if any, went with its connection */
	put(prod, 0x7f);
	for (int i = 0; i < 200 && leases_of(prod) != 0; i++)
		usleep(10 * 1000);
	cr_assert_eq(leases_of(prod), 0u, "a hold outlived its follower");
	all_gone(&d, prod, cons);
}

/* The next versions from f up to v: each every byte b. */
static void take_up_to(struct td_follow *f, uint64_t v, uint8_t b,
		       uint64_t *last)
{
	uint64_t got;

	do {
		got = take(f, b);
		cr_assert_gt(got, *last, "versions go back: %llu after %llu",
			     (unsigned long long)got,
			     (unsigned long long)*last);
		*last = got;
	} while (got < v);
	cr_assert_eq(got, v);
}

/*
 * What a producer can do to its own trigger word (the bell names it)
 * between its loan's fill and its publish: garbage, a fire of a version
 * it was not staged, a fire taken back, a cancel of its own. Its
 * library then publishes as usual.
 */
static bool garble(const struct td_follow_hdr *bell,
		   struct td_follow_trigger *page, uint64_t *rng)
{
	uint64_t st = atomic_load(&((struct td_follow_hdr *)bell)->stage) >> 8;
	uint32_t slot = atomic_load(
		&((struct td_follow_hdr *)bell)->stage_slot);
	_Atomic uint32_t *w;

	if (!page || !st || slot >= TD_FOLLOW_TRIG_SLOTS)
		return false;
	w = &page[slot].word;
	switch (tu_rand(rng) % 5) {
	case 0:
		atomic_store(w, (uint32_t)tu_rand(rng));
		break;
	case 1:
		atomic_store(w, td_follow_trig(st + 1, TD_FOLLOW_TRIG_FIRED));
		break;
	case 2:
		atomic_store(w, td_follow_trig(st, TD_FOLLOW_TRIG_FIRED));
		atomic_store(w, td_follow_trig(st, TD_FOLLOW_TRIG_STAGED));
		break;
	case 3:
		atomic_store(w, td_follow_trig(st, TD_FOLLOW_TRIG_CANCELLED));
		break;
	default:
		break; /* an honest round */
	}
	return true;
}

Test(hostile_follow, a_producer_garbling_its_trigger_page_harms_no_follower)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_follow *f = NULL;
	struct raw_follower x;
	struct td_error e = {0};
	uint64_t rng = 0xfeed, last = 0;
	struct td_entry en = {0};
	unsigned staged = 0;

	/* x only to read the bell: an honest row (it holds nothing) */
	staged_start(&d, &prod, &cons, &f, &x);
	for (int i = 0; i < ROUNDS; i++) {
		uint8_t b = (uint8_t)(0x10 + i % 200);
		uint64_t size = SIZE, v = 0;
		struct td_alloc *a = NULL;
		struct td_publish p = {.name = NAME, .dtype = TD_TENSOR_U8,
				       .ndim = 1, .shape = shape};

		cr_assert_eq(td_client_alloc_named(prod, NAME, 1, &size,
						   TD_ALLOC_STREAM, &a, &e),
			     0, "%s", e.reason);
		memset(td_alloc_data(a, 0), b, SIZE);
		staged += garble(x.bell, prod->st_page, &rng);
		cr_assert_eq(td_client_publish_alloc(prod, a, &p, &v, &e), 0,
			     "round %d: %s", i, e.reason);
		take_up_to(f, v, b, &last);
	}
	/* most rounds had a stage to garble (a garbled one goes plain,
	 * and the next publish stages again) */
	cr_assert_gt(staged, ROUNDS / 2, "%u rounds staged", staged);
	cr_assert_eq(td_client_stat(cons, NAME, &en, &e), 0, "%s", e.reason);
	cr_assert_eq(en.version, last);
	td_entry_fini(&en);
	raw_unfollow(&x);
	td_follow_close(f);
	all_gone(&d, prod, cons);
}

/* ---- a staged version's metadata is charged as a PUBLISH's is ---- */

/* What a staged version's metadata may be: its GET reply fits a bell's
 * entry (a larger one is not staged) */
#define META 3000u

/* A stream of NAME with META bytes of metadata, followed: the bytes the
 * daemon counts once the follow is gone (its stage settled). */
static uint64_t meta_stream_bytes(const char *stage, unsigned *fired)
{
	static uint8_t meta[META];
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_follow *f = NULL;
	struct td_error e = {0};
	uint64_t bytes, tensors;

	memset(meta, 'm', sizeof(meta));
	cr_assert_eq(setenv("TENSORD_STAGE", stage, 1), 0);
	tu_daemon_start(&d, "warn");
	prod = conn(&d);
	cons = conn(&d);
	*fired = 0;
	for (int i = 0; i < 12; i++) {
		uint64_t size = SIZE, v = 0;
		struct td_alloc *a = NULL;
		struct td_publish p = {.name = NAME, .dtype = TD_TENSOR_U8,
				       .ndim = 1, .shape = shape,
				       .meta = meta, .meta_len = sizeof(meta)};
		uint64_t staged = prod->st_version;

		cr_assert_eq(td_client_alloc_named(prod, NAME, 1, &size,
						   TD_ALLOC_STREAM, &a, &e),
			     0, "%s", e.reason);
		memset(td_alloc_data(a, 0), i, SIZE);
		cr_assert_eq(td_client_publish_alloc(prod, a, &p, &v, &e), 0,
			     "%s", e.reason);
		*fired += staged && v == staged;
		if (!f)
			cr_assert_eq(td_client_follow(cons, NAME, &f, &e), 0,
				     "%s", e.reason);
		cr_assert_eq(take(f, (uint8_t)i), v);
	}
	/* the last follower gone, its name's stage goes too */
	td_follow_close(f);
	counts(prod, &bytes, &tensors);
	cr_assert_eq(tensors, 1u);
	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
	unsetenv("TENSORD_STAGE");
	return bytes;
}

/*
 * A version's metadata lives on the daemon's heap and is charged to its
 * publisher (hostile::metadata_counts_against_the_uid_quota). A staged
 * version repeats the descriptor of the version before it, metadata
 * and all, and its commit charged only its loan's planes: a stream of
 * tiny tensors with ~4 KiB of metadata each (what a bell's entry holds)
 * kept that much uncharged per version alive. The same stream costs the
 * same bytes staged or not.
 */
Test(hostile_follow, a_staged_versions_metadata_is_charged)
{
	unsigned fired, none;
	uint64_t plain = meta_stream_bytes("0", &none);
	uint64_t staged = meta_stream_bytes("1", &fired);

	cr_assert_eq(none, 0u);
	cr_assert_gt(fired, 0u, "no version was staged and fired");
	cr_assert_geq(plain, META);
	cr_assert_eq(staged, plain, "staged: %llu bytes, plain: %llu",
		     (unsigned long long)staged, (unsigned long long)plain);
}
