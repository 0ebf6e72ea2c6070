/* SPDX-License-Identifier: MIT */
/*
 * Staged publishes (docs/fastpath.md, "A followed publish without the
 * daemon's hop"): when a followed name's stream PUBLISH lends the next
 * loan, the daemon stages it as the name's next version; the producer's
 * next publish of that loan with the same descriptor fires it, and its
 * followers take it before the daemon has read the PUBLISH. The daemon
 * stays the authority: it commits what was fired, cancels what was not
 * when anything else comes first, and a producer that writes its
 * trigger page by hand makes it do neither wrong.
 *
 * Several tests stop the daemon (SIGSTOP) to show what needs it and
 * what does not. tu_daemon_stop() checks fds and memfd mappings.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <grp.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tensord/tensord.h"
#include "blob.h"
#include "alloc.h"
#include "client.h"
#include "follow.h"
#include "rawclient.h"
#include "scm.h"
#include "policyfile.h"
#include "testutil.h"
#include "wire-status.h"
#include "wire.h"

TestSuite(stage, .timeout = TU_TEST_TIMEOUT_S);

#define NAME "cam/stage"
#define SIZE 4096u

static struct td_client *conn_env(const struct tu_daemon *d,
				  const char *import, const char *stage)
{
	struct td_client *c = NULL;
	struct td_error e = {0};

	cr_assert_eq(setenv("TENSORD_IMPORT", import, 1), 0);
	cr_assert_eq(setenv("TENSORD_STAGE", stage, 1), 0);
	cr_assert_eq(td_client_connect(d->sock, &c, &e), 0, "%s", e.reason);
	cr_assert_eq(unsetenv("TENSORD_STAGE"), 0);
	return c;
}

/* the producers' loans: TD_ALLOC_STREAM, or TD_ALLOC_REWRITE */
static uint32_t loan_flags = TD_ALLOC_STREAM;

/* A named stream loan of name, filled with b. */
static struct td_alloc *loan(struct td_client *c, const char *name, uint8_t b)
{
	uint64_t size = SIZE;
	struct td_alloc *a = NULL;
	struct td_error e = {0};

	cr_assert_eq(td_client_alloc_named(c, name, 1, &size, loan_flags,
					   &a, &e),
		     0, "%s", e.reason);
	memset(td_alloc_data(a, 0), b, SIZE);
	return a;
}

static const uint64_t shape[1] = {SIZE};

static struct td_publish pub_of(const char *name)
{
	return (struct td_publish){.name = name, .dtype = TD_TENSOR_U8,
				   .ndim = 1, .shape = shape};
}

/* Publish a loan of name filled with b, waiting for the reply. */
static uint64_t put(struct td_client *c, const char *name, uint8_t b)
{
	struct td_alloc *a = loan(c, name, b);
	struct td_publish p = pub_of(name);
	struct td_error e = {0};
	uint64_t v = 0;

	cr_assert_eq(td_client_publish_alloc(c, a, &p, &v, &e), 0, "%s",
		     e.reason);
	return v;
}

static bool all_bytes(const struct td_tensor *t, uint8_t b)
{
	const uint8_t *p = td_tensor_plane_data(t, 0);

	for (uint64_t i = 0; i < td_tensor_plane_size(t, 0); i++)
		if (p[i] != b)
			return false;
	return true;
}

/* The next version from f: its number, its bytes checked against b. */
static uint64_t take(struct td_follow *f, uint8_t b)
{
	struct td_tensor *t = NULL;
	struct td_error e = {0};
	uint64_t v;

	cr_assert_eq(td_follow_next(f, 5000, &t, &e), 0, "%s", e.reason);
	v = td_tensor_version(t);
	cr_assert(all_bytes(t, b), "version %llu: not all 0x%02x",
		  (unsigned long long)v, b);
	td_tensor_release(t);
	return v;
}

/* One handoff: publish b, then take it. */
static void step(struct td_client *prod, struct td_follow *f, uint8_t b)
{
	uint64_t v = put(prod, NAME, b);

	cr_assert_eq(take(f, b), v);
}

/*
 * Rounds of publish and follow, until the producer has a stage; then a
 * look with nothing newer, which maps the trigger page (STAGE_PAGE,
 * once) as a follower that waits does.
 */
static void warm(struct td_client *prod, struct td_follow *f)
{
	struct td_tensor *t = NULL;

	for (int i = 0; i < 12; i++)
		step(prod, f, (uint8_t)(0x10 + i));
	cr_assert_eq(td_follow_next(f, 0, &t, NULL), -EAGAIN);
}

/*
 * The cast of most tests: a daemon (tensord arguments args, NULL none),
 * a producer on import path `import` with TENSORD_STAGE `stage`, maybe
 * a second producer (other_import, NULL: none), a follower of NAME on
 * `import`, and a warm stream: the producer has a stage.
 */
struct world {
	struct tu_daemon d;
	struct td_client *prod, *other, *cons;
	struct td_follow *f;
};

static void world_start(struct world *w, const char *const *args,
			const char *import, const char *stage,
			const char *other_import)
{
	struct td_error e = {0};

	*w = (struct world){0};
	tu_daemon_start_args(&w->d, "warn", args);
	w->prod = conn_env(&w->d, import, stage);
	if (other_import)
		w->other = conn_env(&w->d, other_import, "1");
	w->cons = conn_env(&w->d, import, "1");
	cr_assert_eq(td_client_follow(w->cons, NAME, &w->f, &e), 0, "%s",
		     e.reason);
	put(w->prod, NAME, 0x01);
	take(w->f, 0x01);
	warm(w->prod, w->f);
}

/* Everything closed (a client closed already is NULL), the daemon
 * stopped: fds and buffer mappings checked, all mappings with maps. */
static void world_stop(struct world *w, bool maps)
{
	td_follow_close(w->f);
	td_client_close(w->cons);
	if (w->other)
		td_client_close(w->other);
	if (w->prod)
		td_client_close(w->prod);
	tu_daemon_stop(&w->d, maps);
}

/* The trigger word prod fires NAME's stages at (TD_WIRE_FEAT_STAGE_SLOT) */
static _Atomic uint32_t *stage_word(struct td_client *prod)
{
	return &prod->st_page[td_follow_trig_slot(NAME, strlen(NAME))].word;
}

static uint64_t stat_version(struct td_client *c, const char *name)
{
	struct td_entry en = {0};
	struct td_error e = {0};
	uint64_t v;

	cr_assert_eq(td_client_stat(c, name, &en, &e), 0, "%s", e.reason);
	/* a stream's version is a tensor: PUBLISH flags are not its flags */
	cr_assert_eq(en.flags & TD_ENTRY_RING, 0u, "flags %#x", en.flags);
	v = en.version;
	td_entry_fini(&en);
	return v;
}


struct waiter {
	struct td_follow *f;
	atomic_int tid; /* the thread's, once it runs */
	int timeout_ms, rc;
	uint64_t version;
	bool bytes_ok;
	uint8_t b;
};

static void *wait_next(void *arg)
{
	struct waiter *w = arg;
	struct td_tensor *t = NULL;

	atomic_store(&w->tid, gettid());
	w->rc = td_follow_next(w->f, w->timeout_ms, &t, NULL);
	if (w->rc == 0) {
		w->version = td_tensor_version(t);
		w->bytes_ok = all_bytes(t, w->b);
		td_tensor_release(t);
	}
	return NULL;
}

/*
 * With the daemon stopped, a follower asleep in td_follow_next takes the
 * producer's next publish: the producer fires the stage and wakes it,
 * and nothing of it waits for the daemon. Once the daemon runs again it
 * commits that version: the producer's answer and STAT name it.
 * stage: TENSORD_STAGE of the producer; "0" turns staging off, and then
 * the follower times out while the daemon is stopped.
 */
static void stopped_daemon(const char *import, const char *stage)
{
	struct world wo;
	struct td_client *prod, *cons;
	struct td_follow *f;
	struct td_error e = {0};
	struct waiter w = {.timeout_ms = 3000, .b = 0xa5};
	struct td_alloc *a;
	struct td_publish p = pub_of(NAME);
	pthread_t th;
	uint64_t v = 0, staged;
	bool on = strcmp(stage, "0") != 0;

	world_start(&wo, NULL, import, stage, NULL);
	prod = wo.prod;
	cons = wo.cons;
	f = wo.f;
	staged = prod->st_alloc ? prod->st_version : 0;
	cr_assert_eq(!!staged, on, "stage offered: %llu",
		     (unsigned long long)staged);
	if (!on)
		w.timeout_ms = 400;
	w.f = f;
	cr_assert_eq(kill(wo.d.pid, SIGSTOP), 0);
	cr_assert_eq(pthread_create(&th, NULL, wait_next, &w), 0);
	usleep(100 * 1000); /* the follower is asleep by now */
	/* the loan is the one lent already: no request waits here */
	a = loan(prod, NAME, 0xa5);
	cr_assert_eq(td_client_publish_alloc_nowait(prod, a, &p, &e), 0,
		     "%s", e.reason);
	pthread_join(th, NULL);
	cr_assert_eq(kill(wo.d.pid, SIGCONT), 0);
	if (on) {
		cr_assert_eq(w.rc, 0, "follower: %d", w.rc);
		cr_assert_eq(w.version, staged);
		cr_assert(w.bytes_ok);
	} else {
		cr_assert_eq(w.rc, -ETIMEDOUT, "follower: %d", w.rc);
	}
	cr_assert_eq(td_client_publish_wait(prod, &v, &e), 0, "%s", e.reason);
	cr_assert_eq(stat_version(cons, NAME), v);
	if (on)
		cr_assert_eq(v, staged);
	else
		cr_assert_eq(take(f, 0xa5), v);
	/* and the stream goes on, from the stage or not */
	for (int i = 0; i < 20; i++)
		step(prod, f, (uint8_t)i);
	/* slow fills of rewritable loans: take-backs, through the daemon */
	for (int i = 0; i < 6 && (loan_flags & TD_ALLOC_REWRITE); i++) {
		a = loan(prod, NAME, (uint8_t)(0x60 + i));
		usleep(2000);
		cr_assert_eq(td_client_publish_alloc(prod, a, &p, &v, &e), 0,
			     "%s", e.reason);
		cr_assert_eq(take(f, (uint8_t)(0x60 + i)), v);
	}
	/* fds and buffer mappings: a joined thread's stack stays cached */
	world_stop(&wo, false);
}

Test(stage, a_fired_stage_is_taken_while_the_daemon_is_stopped_pidfd,
     .timeout = 60)
{
	stopped_daemon("pidfd", "1");
}

Test(stage, a_fired_stage_is_taken_while_the_daemon_is_stopped_scm,
     .timeout = 60)
{
	stopped_daemon("scm", "1");
}

Test(stage, without_a_stage_the_follower_waits_for_the_daemon,
     .timeout = 60)
{
	stopped_daemon("pidfd", "0");
}

/*
 * A trigger page's generation has 32 bits and comes round after 2^32
 * pages; here after one ($TENSORD_TEST_TRIG_GEN_MAX=1: every page is
 * generation 1). The follower mapped its producer's page; that producer
 * goes, and another stages the name at a page of the same generation.
 * The follower must map the new producer's page (the bell's stage_page
 * names it), not keep the old one, whose word nobody fires any more:
 * with the daemon stopped it takes the new producer's fired stage.
 * Before, it kept the old page, slept on its word and timed out (and
 * with the daemon running, the commit of each fire left it asleep for
 * up to its 1 s slice: its trig_sleep read as the fired page's).
 */
Test(stage, a_generation_come_round_maps_the_new_producers_page,
     .timeout = 60)
{
	struct world wo;
	struct waiter w = {.timeout_ms = 5000, .b = 0xc3};
	struct td_publish p = pub_of(NAME);
	struct td_error e = {0};
	struct td_alloc *a;
	pthread_t th;
	uint64_t v = 0, staged;

	cr_assert_eq(setenv("TENSORD_TEST_TRIG_GEN_MAX", "1", 1), 0);
	world_start(&wo, NULL, "pidfd", "1", NULL);
	cr_assert_eq(unsetenv("TENSORD_TEST_TRIG_GEN_MAX"), 0);
	cr_assert_eq(wo.prod->st_pgen, 1u);
	/* the first producer goes; a second one streams the name */
	td_client_close(wo.prod);
	wo.prod = conn_env(&wo.d, "pidfd", "1");
	warm(wo.prod, wo.f);
	cr_assert_eq(wo.prod->st_pgen, 1u, "the same generation");
	staged = wo.prod->st_alloc ? wo.prod->st_version : 0;
	cr_assert_neq(staged, 0u, "a stage offered");
	w.f = wo.f;
	cr_assert_eq(kill(wo.d.pid, SIGSTOP), 0);
	cr_assert_eq(pthread_create(&th, NULL, wait_next, &w), 0);
	usleep(100 * 1000); /* the follower is asleep by now */
	a = loan(wo.prod, NAME, 0xc3);
	cr_assert_eq(td_client_publish_alloc_nowait(wo.prod, a, &p, &e), 0,
		     "%s", e.reason);
	pthread_join(th, NULL);
	cr_assert_eq(kill(wo.d.pid, SIGCONT), 0);
	cr_assert_eq(w.rc, 0, "follower: %d (the old producer's page?)",
		     w.rc);
	cr_assert_eq(w.version, staged);
	cr_assert(w.bytes_ok);
	cr_assert_eq(td_client_publish_wait(wo.prod, &v, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(v, staged);
	for (int i = 0; i < 10; i++)
		step(wo.prod, wo.f, (uint8_t)i);
	world_stop(&wo, false);
}

/*
 * And a row asleep on the old page's word when the new producer's first
 * stage comes (a take-back's comes while followers sleep): its
 * trig_sleep reads as the new page's word, so the commit of that page's
 * fire would leave it asleep. The daemon wakes the rows asleep when a
 * page of the bell's generation that is not the bell's page takes the
 * name over. The row is played by hand, asleep on the old page's word
 * as one that took every version (so that the commits that come before
 * the stage do not wake it); the daemon's wake is seen in it.
 */
Test(stage, a_new_page_of_the_old_generation_wakes_the_rows_asleep,
     .timeout = 60)
{
	uint32_t slot = td_follow_trig_slot(NAME, strlen(NAME));
	struct td_follow_row *row;
	struct world wo;
	uint64_t taken, v = 0;
	int i;

	cr_assert_eq(setenv("TENSORD_TEST_TRIG_GEN_MAX", "1", 1), 0);
	world_start(&wo, NULL, "pidfd", "1", NULL);
	cr_assert_eq(unsetenv("TENSORD_TEST_TRIG_GEN_MAX"), 0);
	row = tu_find_mapping("memfd:tensord-follow-row");
	cr_assert_not_null(row);
	td_client_close(wo.prod);
	wo.prod = conn_env(&wo.d, "pidfd", "1");
	for (i = 0; i < 12 && !wo.prod->st_alloc; i++) {
		taken = atomic_load(&row->taken);
		atomic_store(&row->taken, UINT64_MAX >> 8);
		atomic_store(&row->trig_sleep, td_follow_trig_at(1, slot));
		atomic_store(&row->waiting, TD_FOLLOW_WAIT_ROW);
		v = put(wo.prod, NAME, (uint8_t)(0x70 + i));
		cr_assert_eq(atomic_load(&row->waiting),
			     wo.prod->st_alloc ? 0u : TD_FOLLOW_WAIT_ROW,
			     "put %d (%s): the row was %s", i,
			     wo.prod->st_alloc ? "staged" : "not staged",
			     wo.prod->st_alloc ? "left asleep" : "woken");
		atomic_store(&row->waiting, 0);
		atomic_store(&row->trig_sleep, 0);
		atomic_store(&row->taken, taken);
		cr_assert_eq(take(wo.f, (uint8_t)(0x70 + i)), v);
	}
	cr_assert_neq(wo.prod->st_alloc, 0u, "the new producer was staged");
	cr_assert_eq(wo.prod->st_gen, 1u, "the old page's generation");
	world_stop(&wo, true);
}

/*
 * TD_ALLOC_REWRITE loans (large tensors, here every size): a producer
 * that fills fast publishes the loan the last PUBLISH lent, which comes
 * from the free list like a stream's, and is staged the same way; one
 * that fills slowly asks for the take-back (an ALLOC), and goes on
 * through the daemon.
 */
Test(stage, a_rewritable_loan_lent_by_a_publish_is_staged, .timeout = 60)
{
	cr_assert_eq(setenv("TENSORD_REWRITE_MIN", "1", 1), 0);
	loan_flags = TD_ALLOC_REWRITE;
	stopped_daemon("pidfd", "1");
}

/*
 * A REWRITE ALLOC that takes the name's version back (a producer that
 * fills its tensors: here every alloc, TENSORD_REWRITE_FILL_US=0) gets
 * that version's buffers staged as the next version: with the daemon
 * stopped after the ALLOC, a follower asleep in td_follow_next, or in
 * td_client_get_newer across the gap where the name has no version,
 * takes the producer's publish of them. Without the stage the follower
 * would wait for the daemon's commit of the PUBLISH, and get_newer
 * would park a GET (latest 0), both timing out.
 */
struct newer {
	struct td_client *c;
	uint64_t after, version;
	int rc;
	bool bytes_ok;
};

static void *wait_newer(void *arg)
{
	struct newer *w = arg;
	struct td_tensor *t = NULL;

	w->rc = td_client_get_newer(w->c, NAME, w->after, 3000, &t, NULL);
	if (w->rc == 0) {
		w->version = td_tensor_version(t);
		w->bytes_ok = all_bytes(t, 0xc3);
		td_tensor_release(t);
	}
	return NULL;
}

static void stopped_take_back(bool newer)
{
	struct world wo;
	struct td_error e = {0};
	struct waiter w = {.timeout_ms = 3000, .b = 0xc3};
	struct newer nw = {0};
	struct td_tensor *t = NULL;
	struct td_alloc *a;
	struct td_publish p = pub_of(NAME);
	struct stat st0, st1;
	pthread_t th;
	uint64_t v = 0, staged, last;

	cr_assert_eq(setenv("TENSORD_REWRITE_MIN", "1", 1), 0);
	cr_assert_eq(setenv("TENSORD_REWRITE_FILL_US", "0", 1), 0);
	loan_flags = TD_ALLOC_REWRITE;
	world_start(&wo, NULL, "pidfd", "1", NULL);
	last = stat_version(wo.cons, NAME);
	w.f = wo.f;
	if (newer) {
		/* get_newer's own follow, made while the daemon runs */
		nw = (struct newer){.c = wo.cons, .after = last};
		cr_assert_eq(td_client_get_newer(wo.cons, NAME, last - 1, 1000,
						 &t, &e),
			     0, "%s", e.reason);
		td_tensor_release(t);
	} else {
		/* asleep before the take-back is staged, as a ping-pong's
		 * consumer is: the producer's fire must still wake it */
		cr_assert_eq(pthread_create(&th, NULL, wait_next, &w), 0);
		usleep(100 * 1000);
	}
	a = loan(wo.prod, NAME, 0xc3);
	cr_assert_eq(fstat(td_alloc_fd(a, 0), &st1), 0);
	staged = wo.prod->st_alloc ? wo.prod->st_version : 0;
	cr_assert_gt(staged, last, "the take-back was not staged");
	if (newer) {
		/* a take-back: the name has no version until the publish */
		cr_assert_eq(td_client_get(wo.cons, NAME, &t, &e), -ETIMEDOUT,
			     "the name has a version during the take-back");
		/* the gap, looked at once: get_newer does not park a GET */
		cr_assert_eq(td_client_get_newer(wo.cons, NAME, last, 0, &t,
						 NULL),
			     -ETIMEDOUT);
	}
	cr_assert_eq(kill(wo.d.pid, SIGSTOP), 0);
	if (newer) {
		cr_assert_eq(pthread_create(&th, NULL, wait_newer, &nw), 0);
		usleep(100 * 1000); /* asleep by now */
	}
	cr_assert_eq(td_client_publish_alloc_nowait(wo.prod, a, &p, &e), 0,
		     "%s", e.reason);
	pthread_join(th, NULL);
	cr_assert_eq(kill(wo.d.pid, SIGCONT), 0);
	cr_assert_eq(newer ? nw.rc : w.rc, 0, "follower: %d",
		     newer ? nw.rc : w.rc);
	cr_assert_eq(newer ? nw.version : w.version, staged);
	cr_assert(newer ? nw.bytes_ok : w.bytes_ok);
	cr_assert_eq(td_client_publish_wait(wo.prod, &v, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(v, staged);
	cr_assert_eq(stat_version(wo.cons, NAME), v);
	/* and the take-backs go on, each staged, one buffer over and over */
	for (int i = 0; i < 8; i++) {
		a = loan(wo.prod, NAME, (uint8_t)(0x70 + i));
		cr_assert_eq(fstat(td_alloc_fd(a, 0), &st0), 0);
		cr_assert_eq(st0.st_ino, st1.st_ino, "not taken back");
		cr_assert_neq(wo.prod->st_alloc, 0u, "take-back %d not staged",
			      i);
		cr_assert_eq(td_client_publish_alloc(wo.prod, a, &p, &v, &e),
			     0, "%s", e.reason);
		cr_assert_eq(take(wo.f, (uint8_t)(0x70 + i)), v);
	}
	world_stop(&wo, false);
}

Test(stage, a_staged_take_back_is_taken_while_the_daemon_is_stopped,
     .timeout = 60)
{
	stopped_take_back(false);
}

Test(stage, get_newer_takes_a_staged_take_back_across_the_gap,
     .timeout = 60)
{
	stopped_take_back(true);
}

/* The length of the descriptor c keeps for name (stage.c), 0 none. */
static uint32_t kept(const struct td_client *c, const char *name)
{
	uint32_t nl = (uint32_t)strlen(name);

	for (unsigned i = 0; i < TD__STAGES; i++)
		if (c->desc[i].len >= 12 + nl &&
		    !memcmp(c->desc[i].buf + 4, &nl, 4) &&
		    !memcmp(c->desc[i].buf + 12, name, nl))
			return c->desc[i].len;
	return 0;
}

/*
 * A PUBLISH the daemon refuses leaves the name's last version as it was,
 * so the descriptor the library sent is not the one a take-back's stage
 * repeats: it is forgotten. Kept, a later publish with that descriptor
 * fired a stage of the older one (the daemon committed the older
 * metadata, shape or dtype under the new version; a probe found it with
 * a policy reload between two publishes). Here the refusal is a ring
 * made under a loan's name before its publish.
 */
/* A plain loan (named for name, NULL: unnamed), its data 0x5a. */
static struct td_alloc *plain_alloc(struct td_client *c, const char *name)
{
	uint64_t size = SIZE;
	struct td_alloc *a = NULL;
	struct td_error e = {0};

	cr_assert_eq(td_client_alloc_named(c, name, 1, &size, 0, &a, &e), 0,
		     "%s", e.reason);
	memset(td_alloc_data(a, 0), 0x5a, SIZE);
	return a;
}

Test(stage, a_refused_publish_forgets_its_descriptor, .timeout = 60)
{
	struct world wo;
	struct td_ring *ring = NULL;
	struct td_alloc *a;
	struct td_publish p = pub_of("cam/ringed");
	struct td_error e = {0};
	uint64_t rshape[1] = {4};
	struct td_ring_desc rd = {.dtype = TD_TENSOR_U8, .ndim = 1,
				  .shape = rshape};

	world_start(&wo, NULL, "pidfd", "1", NULL);
	cr_assert_gt(kept(wo.prod, NAME), 0u, "the last publish was kept");
	a = loan(wo.prod, "cam/ringed", 0x33);
	cr_assert_eq(td_ring_create(wo.other ? wo.other : wo.cons,
				    "cam/ringed", &rd, &ring, &e),
		     0, "%s", e.reason);
	/* a refused PUBLISH that kept nothing forgets nothing: the
	 * descriptor kept last was the stream's, which then did not fire */
	cr_assert_eq(td_client_publish_alloc(wo.prod, plain_alloc(wo.prod, NULL),
					     &p, NULL, &e),
		     -EEXIST, "%s", e.reason);
	cr_assert_gt(kept(wo.prod, NAME), 0u, "the stream's was forgotten");
	cr_assert_eq(td_client_publish_alloc(wo.prod, a, &p, NULL, &e),
		     -EEXIST, "%s", e.reason);
	cr_assert_eq(kept(wo.prod, "cam/ringed"), 0u,
		     "a refused publish kept");
	td_ring_close(ring);
	/* and the stream goes on, staged again */
	for (int i = 0; i < 4; i++)
		step(wo.prod, wo.f, (uint8_t)(0x40 + i));
	cr_assert_neq(wo.prod->st_alloc, 0u, "not staged again");
	world_stop(&wo, false);
}

/*
 * A follower that has not mapped the producer's trigger page yet asks
 * the daemon for it (STAGE_PAGE) when it first sees the stage; with the
 * daemon stopped that request never returned, and td_follow_next
 * ignored its timeout until the daemon ran again. Now the follow waits
 * for that answer until its own deadline (50 ms at least), then times
 * out as any follow does.
 */
Test(stage, a_follow_keeps_its_timeout_while_the_daemon_does_not_answer,
     .timeout = 30)
{
	struct world wo;
	struct td_client *late = NULL;
	struct td_follow *f2 = NULL;
	struct td_tensor *t = NULL;
	struct td_error e = {0};
	struct td_alloc *a;
	int rc;

	cr_assert_eq(setenv("TENSORD_REWRITE_MIN", "1", 1), 0);
	cr_assert_eq(setenv("TENSORD_REWRITE_FILL_US", "0", 1), 0);
	loan_flags = TD_ALLOC_REWRITE;
	world_start(&wo, NULL, "pidfd", "1", NULL);
	/* a new follower: no trigger page mapped */
	late = conn_env(&wo.d, "pidfd", "1");
	cr_assert_eq(td_client_follow(late, NAME, &f2, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_follow_next(f2, 1000, &t, &e), 0, "%s", e.reason);
	td_tensor_release(t);
	a = loan(wo.prod, NAME, 0x5a); /* a take-back, staged */
	cr_assert_neq(wo.prod->st_alloc, 0u);
	cr_assert_eq(kill(wo.d.pid, SIGSTOP), 0);
	rc = td_follow_next(f2, 500, &t, &e);
	cr_assert_eq(kill(wo.d.pid, SIGCONT), 0);
	cr_assert_eq(rc, -ETIMEDOUT, "%d: %s", rc, e.reason);
	td_alloc_free(a);
	td_follow_close(f2);
	td_client_close(late);
	world_stop(&wo, false);
}

/*
 * Another connection publishes the name between the stage and its fire:
 * the daemon cancels the stage first (its compare-exchange wins), so the
 * producer's publish of the staged loan goes the plain way, after the
 * other one, and every follower sees the versions in order.
 */
Test(stage, another_publish_cancels_the_stage, .timeout = 60)
{
	struct world wo;
	struct td_client *prod, *other, *cons;
	struct td_follow *f;
	struct td_error e = {0};
	uint64_t staged, vo, vp;

	world_start(&wo, NULL, "pidfd", "1", "pidfd");
	prod = wo.prod;
	other = wo.other;
	cons = wo.cons;
	f = wo.f;
	cr_assert_neq(prod->st_alloc, 0u);
	cr_assert_not_null(prod->st_page);
	staged = prod->st_version;
	vo = put(other, NAME, 0x77);
	cr_assert_gt(vo, staged, "the other publish comes after the stage");
	cr_assert_eq(atomic_load(stage_word(prod)),
		     td_follow_trig(staged, TD_FOLLOW_TRIG_CANCELLED));
	cr_assert_eq(take(f, 0x77), vo);
	vp = put(prod, NAME, 0x88);
	cr_assert_gt(vp, vo);
	cr_assert_eq(take(f, 0x88), vp);
	cr_assert_eq(stat_version(cons, NAME), vp);
	/* DELETE cancels a stage too; the next publish makes the name anew */
	for (int i = 0; i < 4; i++)
		step(prod, f, (uint8_t)i);
	cr_assert_neq(prod->st_alloc, 0u);
	staged = prod->st_version;
	cr_assert_eq(td_client_delete(other, NAME, NULL, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(atomic_load(stage_word(prod)),
		     td_follow_trig(staged, TD_FOLLOW_TRIG_CANCELLED));
	vp = put(prod, NAME, 0x99);
	cr_assert_gt(vp, staged);
	cr_assert_eq(take(f, 0x99), vp);
	world_stop(&wo, true);
}

/*
 * A producer that fires and never sends its PUBLISH (here: it writes
 * FIRED into its trigger page by hand): the daemon commits the version
 * within a second or two, or at once when the producer disconnects.
 */
static void fired_without_notice(bool disconnect)
{
	struct world wo;
	struct td_client *prod, *cons;
	struct td_follow *f;
	struct td_error e = {0};
	uint64_t staged;
	int i;

	world_start(&wo, NULL, "pidfd", "1", NULL);
	prod = wo.prod;
	cons = wo.cons;
	f = wo.f;
	cr_assert_neq(prod->st_alloc, 0u);
	cr_assert_not_null(prod->st_page);
	staged = prod->st_version;
	cr_assert_neq(stat_version(cons, NAME), staged);
	cr_assert_eq(prod->n_lent, 1u);
	memset(td_alloc_data(prod->lent[0], 0), 0x5c, SIZE);
	atomic_store(stage_word(prod),
		     td_follow_trig(staged, TD_FOLLOW_TRIG_FIRED));
	if (disconnect) {
		td_client_close(prod);
		prod = wo.prod = NULL;
	}
	/* committed by the daemon's timer (1 s) or at the disconnect */
	for (i = 0; i < 100 && stat_version(cons, NAME) != staged; i++)
		usleep(50 * 1000);
	cr_assert_eq(stat_version(cons, NAME), staged, "not committed");
	cr_assert_eq(take(f, 0x5c), staged);
	if (prod) {
		/* its library still holds the committed loan: publishing it
		 * is refused, and the connection goes on */
		struct td_alloc *a = loan(prod, NAME, 0x6d);
		struct td_publish p = pub_of(NAME);

		cr_assert_eq(td_client_publish_alloc(prod, a, &p, NULL, &e),
			     -ENOENT, "%s", e.reason);
		cr_assert_gt(put(prod, NAME, 0x6e), staged);
		cr_assert_eq(take(f, 0x6e), stat_version(cons, NAME));
	}
	world_stop(&wo, true);
}

Test(stage, a_fired_stage_without_its_publish_is_committed_on_time,
     .timeout = 60)
{
	fired_without_notice(false);
}

Test(stage, a_fired_stage_is_committed_when_its_producer_goes,
     .timeout = 60)
{
	fired_without_notice(true);
}

/*
 * A producer that scribbles on its trigger word: followers take nothing
 * from it, the daemon cancels the stage at the producer's next publish,
 * which goes the plain way, and staging starts again after it.
 */
Test(stage, a_garbled_trigger_word_is_cancelled, .timeout = 60)
{
	struct world wo;
	struct td_client *prod;
	struct td_follow *f;
	struct td_tensor *t = NULL;
	struct td_error e = {0};
	uint64_t staged, v;

	world_start(&wo, NULL, "scm", "1", NULL);
	prod = wo.prod;
	f = wo.f;
	cr_assert_not_null(prod->st_page);
	staged = prod->st_version;
	atomic_store(stage_word(prod), 0xdeadbeefu);
	cr_assert_eq(td_follow_next(f, 300, &t, &e), -ETIMEDOUT,
		     "a garbled word fired nothing");
	v = put(prod, NAME, 0x42);
	cr_assert_gt(v, staged);
	cr_assert_eq(take(f, 0x42), v);
	for (int i = 0; i < 6; i++)
		step(prod, f, (uint8_t)i);
	cr_assert_neq(prod->st_alloc, 0u, "staged again");
	world_stop(&wo, true);
}

/*
 * The staged loan given up (td_alloc_free): the daemon cancels its stage
 * before it drops the loan, and the stream goes on.
 */
Test(stage, a_staged_loan_given_up_cancels_its_stage, .timeout = 60)
{
	struct world wo;
	struct td_client *prod;
	struct td_follow *f;
	uint64_t staged;

	world_start(&wo, NULL, "pidfd", "1", NULL);
	prod = wo.prod;
	f = wo.f;
	staged = prod->st_version;
	cr_assert_not_null(prod->st_page);
	td_alloc_free(loan(prod, NAME, 0x33));
	/* the give-back is sent without waiting: a STAT is answered after */
	cr_assert_neq(stat_version(prod, NAME), staged);
	cr_assert_eq(atomic_load(stage_word(prod)),
		     td_follow_trig(staged, TD_FOLLOW_TRIG_CANCELLED));
	for (int i = 0; i < 6; i++)
		step(prod, f, (uint8_t)i);
	world_stop(&wo, true);
}

/*
 * Two producers take turns on one followed name, two publishes each (so
 * each gets loans, and stages that the other's publish cancels):
 * versions stay in order, the bytes are each one's, and the daemon
 * makes no trigger page per turn (one per producer connection).
 */
Test(stage, producers_taking_turns_stay_in_order_and_make_no_pages,
     .timeout = 60)
{
	struct world wo;
	struct td_client *pa, *pb;
	struct td_follow *f;
	uint64_t last = 0;
	uint32_t gen;
	int fds0 = -1;

	world_start(&wo, NULL, "pidfd", "1", "scm");
	pa = wo.prod;
	pb = wo.other;
	f = wo.f;
	gen = pa->st_gen;
	cr_assert_neq(gen, 0u);
	for (int i = 0; i < 60; i++) {
		struct td_client *p = (i / 2) % 2 ? pb : pa;
		uint8_t b = (uint8_t)(0x40 + i);
		uint64_t v = put(p, NAME, b);

		cr_assert_gt(v, last);
		cr_assert_eq(take(f, b), v);
		last = v;
		if (i == 15)
			fds0 = tu_pid_fd_count(wo.d.pid);
	}
	cr_assert_eq(tu_pid_fd_count(wo.d.pid), fds0, "the turns made descriptors");
	cr_assert_neq(pb->st_gen, 0u, "the other one was staged too");
	cr_assert_neq(pb->st_gen, gen);
	/* one of them alone again: staged again */
	for (int i = 0; i < 4; i++)
		step(pa, f, (uint8_t)i);
	cr_assert_neq(pa->st_alloc, 0u);
	cr_assert_eq(pa->st_gen, gen, "a new page for the same producer");
	world_stop(&wo, true);
}

/* ---- hostile followers and the store's limits ---- */

static uint64_t plain_put(struct td_client *c, const char *name,
			  uint64_t size)
{
	struct td_alloc *a = NULL;
	struct td_error e = {0};
	uint64_t shp[1] = {size}, v = 0;
	struct td_publish p = {.name = name, .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = shp};

	cr_assert_eq(td_client_alloc(c, 1, &size, &a, &e), 0, "%s", e.reason);
	memset(td_alloc_data(a, 0), 0x5a, (size_t)size);
	if (td_client_publish_alloc(c, a, &p, &v, &e) < 0)
		return 0;
	return v;
}

static size_t names(struct td_client *c)
{
	struct td_entry *l = NULL;
	struct td_error e = {0};
	size_t n = 0;

	cr_assert_eq(td_client_list(c, "", &l, &n, &e), 0, "%s", e.reason);
	td_entry_list_free(l, n);
	return n;
}

static bool has(struct td_client *c, const char *name)
{
	struct td_entry en = {0};
	int rc = td_client_stat(c, name, &en, NULL);

	td_entry_fini(&en);
	return rc == 0;
}

/*
 * A staged name evicted before its producer fires: the fired version
 * comes after the eviction, as a PUBLISH read after it would, into a
 * name table that other names filled meanwhile (64 names, its first
 * capacity): the commit makes room for the name first (under ASan a
 * commit that did not overflowed the table).
 */
Test(stage, a_fired_stage_of_an_evicted_name_commits_into_a_full_table,
     .timeout = 60)
{
	static const char *const cap[] = {"--max-bytes", "400K", NULL};
	struct world wo;
	struct td_client *prod, *other;
	struct td_follow *f;
	struct td_error e = {0};
	struct td_alloc *a;
	struct td_publish p = pub_of(NAME);
	uint64_t staged, v = 0, big = 4096;
	char nm[32];
	int k = 0;

	world_start(&wo, cap, "pidfd", "1", "pidfd");
	prod = wo.prod;
	other = wo.other;
	f = wo.f;
	staged = prod->st_version;
	cr_assert_neq(prod->st_alloc, 0u);
	a = loan(prod, NAME, 0x3c); /* the staged loan, filled */
	while (names(other) < 63) {
		snprintf(nm, sizeof(nm), "q/%03d", k++);
		cr_assert_neq(plain_put(other, nm, 4096), 0u);
	}
	/* q/000 grows until the least recently used name, ours, goes */
	while (has(other, NAME) && big < 400 * 1024) {
		big += 4096;
		cr_assert_neq(plain_put(other, "q/000", big), 0u);
	}
	cr_assert(!has(other, NAME), "the staged name was not evicted");
	cr_assert_eq(td_client_delete(other, "q/000", NULL, &e), 0, "%s",
		     e.reason);
	while (names(other) < 64) {
		snprintf(nm, sizeof(nm), "q/%03d", k++);
		cr_assert_neq(plain_put(other, nm, 4096), 0u);
	}
	cr_assert_eq(td_client_publish_alloc(prod, a, &p, &v, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(v, staged);
	cr_assert_eq(stat_version(other, NAME), staged);
	cr_assert_eq(names(other), 65u);
	cr_assert_eq(take(f, 0x3c), staged);
	world_stop(&wo, true);
}

/* Which of the follower's descriptors can be opened writable again. */
static int reopen_rw(int fd)
{
	char path[64];
	int w;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	w = open(path, O_RDWR | O_CLOEXEC);
	if (w >= 0) {
		close(w);
		return 0;
	}
	return -errno;
}

/* One raw request of the follower (no criterion in the child): the
 * reply's n fds into fds, or -1. */
static int raw_req_body(int sock, uint16_t op, uint64_t id, int64_t len,
			const uint8_t *body, int *fds, unsigned n)
{
	static uint8_t buf[TD_WIRE_MAX_MSG];
	struct td_wire_hdr h = {TD_WIRE_MAGIC, TD_WIRE_VERSION, op, 0, 0, id,
				(uint32_t)len, 0};
	int got[TD_WIRE_MAX_FDS];
	struct td__scm_rx rx = {.fds = got, .cap = TD_WIRE_MAX_FDS};
	ssize_t r;

	if (len < 0)
		return -1;
	td_wire_hdr_encode(&h, buf);
	memcpy(buf + TD_WIRE_HDR_LEN, body, (size_t)len);
	if (td__scm_send(sock, buf, TD_WIRE_HDR_LEN + (size_t)len, NULL, 0,
			 0) < 0)
		return -1;
	r = td__scm_recv(sock, buf, sizeof(buf), 0, &rx);
	if (r < (ssize_t)TD_WIRE_HDR_LEN ||
	    td_wire_hdr_decode(buf, (size_t)r, &h, NULL) < 0 || h.status ||
	    rx.nfds < n)
		return -1;
	for (unsigned i = 0; i < n; i++)
		fds[i] = got[i];
	return 0;
}

/* The follower (uid nobody under root): 0 when it could write neither
 * file. */
static int nobody_follower(const char *sock_path)
{
	static uint8_t req[TD_WIRE_MAX_MSG];
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct td_wire_hello_req hr = {TD_IMPORT_SCM, -1, {"nobody", 6}, 0};
	struct td_wire_ring_sub_req q = {.name = {NAME, sizeof(NAME) - 1},
					 .flags = TD_WIRE_REQ_SCM};
	uint8_t *body = req + TD_WIRE_HDR_LEN;
	size_t cap = sizeof(req) - TD_WIRE_HDR_LEN;
	int sock, fds[2], trig, none[1];

	/* root opens any file whatever its mode (CAP_DAC_OVERRIDE): as root,
	 * the follower becomes nobody; otherwise it is the daemon's own uid,
	 * which mode 0444 refuses writing too */
	if (geteuid() == 0 && tu_become(65534, 65534) < 0)
		return 10;
	sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
	if (sock < 0 || connect(sock, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return 11;
	if (raw_req_body(sock, TD_OP_HELLO, 1,
			 td_wire_hello_req_encode(&hr, body, cap), body, none,
			 0) < 0 ||
	    raw_req_body(sock, TD_OP_FOLLOW, 2,
			 td_wire_ring_sub_req_encode(&q, body, cap), body,
			 fds, 2) < 0 ||
	    raw_req_body(sock, TD_OP_STAGE_PAGE, 3,
			 td_wire_ring_sub_req_encode(&q, body, cap), body,
			 &trig, 1) < 0)
		return 12;
	/* its own row is writable; the bell and the trigger page not */
	if (reopen_rw(fds[1]) != 0)
		return 13;
	if (reopen_rw(fds[0]) != -EACCES)
		return 14;
	if (reopen_rw(trig) != -EACCES)
		return 15;
	if (mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, trig, 0) !=
	    MAP_FAILED)
		return 16;
	return 0;
}

/*
 * A follower is handed the bell and the trigger page read-only. The
 * files are memfds, made mode 0777: reopened through /proc/self/fd a
 * follower of another uid would get them read-write, and could fire the
 * producer's stage (a version it had not finished) or point the bell's
 * entries at another name's buffers. They are 0444 before they are
 * handed out.
 */
Test(stage, a_follower_cannot_reopen_the_bell_or_the_trigger_page,
     .timeout = 60)
{
	static const char *const mode[] = {"--socket-mode", "0666", NULL};
	struct world wo;
	struct td_client *prod;
	int st = -1;
	pid_t pid;

	world_start(&wo, mode, "pidfd", "1", NULL);
	cr_assert_eq(chmod(wo.d.dir, 0755), 0);
	prod = wo.prod;
	cr_assert_neq(prod->st_alloc, 0u);
	pid = tu_fork();
	if (pid == 0)
		_exit(nobody_follower(wo.d.sock));
	/* half the test's timeout: a follower stuck on the daemon fails
	 * with this message, not the timeout's */
	st = tu_wait_child(pid, 30, "the nobody follower");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "the nobody follower: status %#x (14: the bell, 15/16: "
		  "the trigger page writable)", st);
	world_stop(&wo, true);
}


/* ---- a policy reload between a fire and its notice ---- */

/* The FIRED notice of loan alloc_id, sent raw on c's socket: 0 and its
 * reply in *r, or the refusal's status (the reply's fds closed). */
static int raw_fired_notice(struct td_client *c, uint64_t alloc_id,
			    uint64_t rid, struct td_wire_publish_rep *r)
{
	static uint8_t buf[TD_WIRE_MAX_MSG];
	static const uint8_t blob[64];
	struct td_wire_publish_req q = {
		.name = {NAME, sizeof(NAME) - 1},
		.flags = TD_WIRE_PUB_FIRED | TD_WIRE_PUB_LOAN |
			 TD_WIRE_PUB_LOAN_SCM | TD_WIRE_PUB_STAGE,
		.alloc_id = alloc_id,
		.blob = {blob, sizeof(blob)},
	};
	int64_t len = td_wire_publish_req_encode(&q, buf + TD_WIRE_HDR_LEN,
						 sizeof(buf) - TD_WIRE_HDR_LEN);
	struct td_wire_hdr h = {TD_WIRE_MAGIC, TD_WIRE_VERSION, TD_OP_PUBLISH,
				0, 0, rid, (uint32_t)len, 0};
	int got[TD_WIRE_MAX_FDS];
	struct td__scm_rx rx = {.fds = got, .cap = TD_WIRE_MAX_FDS};
	ssize_t n;

	if (len < 0)
		return -EINVAL;
	td_wire_hdr_encode(&h, buf);
	if (td__scm_send(c->sock, buf, TD_WIRE_HDR_LEN + (size_t)len, NULL, 0,
			 0) < 0)
		return -EIO;
	do {
		n = td__scm_recv(c->sock, buf, sizeof(buf), 0, &rx);
		if (n < (ssize_t)TD_WIRE_HDR_LEN ||
		    td_wire_hdr_decode(buf, (size_t)n, &h, NULL) < 0)
			return -EIO;
		td__scm_close(got, rx.nfds);
		rx.nfds = 0;
	} while (h.request_id != rid);
	if (h.status)
		return (int)h.status;
	return td_wire_publish_rep_decode(buf + TD_WIRE_HDR_LEN, h.body_len,
					  r, NULL) < 0
		       ? -EBADMSG
		       : 0;
}

/*
 * The producer (uid nobody; no criterion in the child): a warm stream,
 * a fire of its stage, and once the parent has reloaded the policy, the
 * notice of that fire. 0: the notice's reply staged nothing more; 20:
 * it staged the next version, and that one's notice was answered too.
 */
static int reloaded_producer(const char *sock, int in, int out)
{
	struct td_client *c = NULL;
	struct td_wire_publish_rep r = {0};
	uint64_t fired;
	char x;

	if (tu_become(65534, 65534) < 0 ||
	    setenv("TENSORD_IMPORT", "scm", 1) < 0 ||
	    td_client_connect(sock, &c, NULL) < 0)
		return 10;
	for (int i = 0; i < 12; i++) {
		uint64_t size = SIZE;
		struct td_alloc *a = NULL;
		struct td_publish p = pub_of(NAME);

		if (td_client_alloc_named(c, NAME, 1, &size, TD_ALLOC_STREAM,
					  &a, NULL) < 0 ||
		    td_client_publish_alloc(c, a, &p, NULL, NULL) < 0)
			return 11;
	}
	if (!c->st_alloc || !c->st_page)
		return 12;
	/* fired; its PUBLISH is still to come (as if in the socket) */
	fired = c->st_alloc;
	atomic_store(stage_word(c),
		     td_follow_trig(c->st_version, TD_FOLLOW_TRIG_FIRED));
	if (write(out, "f", 1) != 1 || read(in, &x, 1) != 1)
		return 13;
	if (raw_fired_notice(c, fired, 1u << 30, &r) < 0)
		return 14;
	if (!r.stage_version)
		return 0;
	atomic_store(stage_word(c),
		     td_follow_trig(r.stage_version, TD_FOLLOW_TRIG_FIRED));
	return raw_fired_notice(c, r.loan.alloc_id, (1u << 30) + 1, &r) == 0
		       ? 20
		       : 21;
}

static void policy_write(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f);
	cr_assert_gt(fputs(text, f), -1);
	cr_assert_eq(fclose(f), 0);
}

/*
 * A reload that takes write away from a producer settles its stage: one
 * it fired is committed (done before the reload), and the notice of that
 * fire is answered with that version, but with no next loan and no next
 * stage. Before, the notice skipped the write check (the commit was
 * done) and its reply staged the next version, whose notice staged the
 * one after: a uid the policy refused went on publishing the name.
 */
Test(stage, a_reload_that_refuses_a_producer_stages_nothing_more,
     .timeout = 60)
{
	char pol[128], arg[128];
	const char *args[] = {"--socket-mode", "0666", "--policy", arg, NULL};
	struct tu_daemon d;
	struct td_client *cons;
	struct td_follow *f = NULL;
	struct td_error e = {0};
	int up[2], down[2], st;
	uint64_t v;
	pid_t pid;
	char x;

	snprintf(pol, sizeof(pol), "/tmp/td-stage-policy-%d", (int)getpid());
	snprintf(arg, sizeof(arg), "%s", pol);
	policy_write(pol, "allow uid=0 rw cam/\nallow uid=65534 rw cam/\n");
	tu_daemon_start_args(&d, "warn", args);
	cr_assert_eq(chmod(d.dir, 0755), 0);
	cons = conn_env(&d, "pidfd", "1");
	cr_assert_eq(td_client_follow(cons, NAME, &f, &e), 0, "%s", e.reason);
	cr_assert_eq(pipe2(up, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(down, O_CLOEXEC), 0);
	pid = tu_fork();
	if (pid == 0)
		_exit(reloaded_producer(d.sock, down[0], up[1]));
	cr_assert_eq(read(up[0], &x, 1), 1, "the producer did not fire");
	tu_policy_reload(cons, d.pid, pol,
			 "allow uid=0 rw cam/\nallow uid=65534 r cam/\n");
	/* the fired version was committed by the reload */
	v = stat_version(cons, NAME);
	cr_assert_eq(write(down[1], "n", 1), 1);
	st = tu_wait_child(pid, 30, "the refused producer");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "the refused producer: status %#x (20: its notice staged "
		  "the next version, which it published)", st);
	cr_assert_eq(stat_version(cons, NAME), v);
	close(up[0]);
	close(up[1]);
	close(down[0]);
	close(down[1]);
	unlink(pol);
	td_follow_close(f);
	td_client_close(cons);
	tu_daemon_stop(&d, true);
}

/* A field of /proc/self/task/TID/status: the state letter (key
 * "State:") or a number; -1 when the thread is gone. */
/*
 * A producer of two followed names on one connection, alternating: each
 * name's PUBLISH reply lends that name's next loan and stages it, and
 * the next publish of the name fires it, whatever was published between
 * (a stage per lent loan). With one stage per connection, each publish
 * of the other name kept this one's stage from being made or spent it:
 * neither name was fired. Here every version of both is the one its
 * last reply staged (a publish not fired cancels it and gets a new
 * number), and a follower takes b's next version while the daemon is
 * stopped with a's stage still offered.
 */
Test(stage, a_producer_of_two_names_stages_both, .timeout = 60)
{
	const char *na = "cam/a", *nb = "cam/b";
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_follow *fa = NULL, *fb = NULL;
	struct waiter w = {.timeout_ms = 3000, .b = 0x5b};
	struct td_publish p = pub_of(nb);
	struct td_error e = {0};
	struct td_alloc *a;
	pthread_t th;
	uint64_t v = 0, staged = 0, expect[2] = {0, 0};
	unsigned offered = 0;

	tu_daemon_start(&d, "warn");
	prod = conn_env(&d, "pidfd", "1");
	cons = conn_env(&d, "pidfd", "1");
	cr_assert_eq(td_client_follow(cons, na, &fa, NULL), 0);
	cr_assert_eq(td_client_follow(cons, nb, &fb, NULL), 0);
	for (int i = 0; i < 16; i++) {
		const char *n = i % 2 ? nb : na;
		struct td_follow *f = i % 2 ? fb : fa;

		v = put(prod, n, (uint8_t)(0x10 + i));
		cr_assert_eq(take(f, (uint8_t)(0x10 + i)), v);
		if (i >= 4)
			cr_assert_eq(v, expect[i % 2],
				     "%s version %llu, staged %llu: not fired",
				     n, (unsigned long long)v,
				     (unsigned long long)expect[i % 2]);
		expect[i % 2] = prod->st_alloc ? prod->st_version : 0;
	}
	/* both names' next loans are staged */
	for (unsigned i = 0; i < TD__STAGES; i++) {
		offered += prod->st[i].alloc != 0;
		if (prod->st[i].alloc == prod->st_alloc)
			staged = prod->st[i].version;
	}
	cr_assert_eq(offered, 2u);
	cr_assert_neq(staged, 0u, "b's next loan is staged");
	/* b fired while the daemon is stopped, with a's stage offered */
	cr_assert_eq(td_follow_next(fb, 0, &(struct td_tensor *){NULL}, NULL),
		     -EAGAIN);
	w.f = fb;
	cr_assert_eq(kill(d.pid, SIGSTOP), 0);
	cr_assert_eq(pthread_create(&th, NULL, wait_next, &w), 0);
	a = loan(prod, nb, 0x5b);
	cr_assert_eq(td_client_publish_alloc_nowait(prod, a, &p, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(kill(d.pid, SIGCONT), 0);
	cr_assert_eq(w.rc, 0, "follower of b: %d", w.rc);
	cr_assert_eq(w.version, staged);
	cr_assert(w.bytes_ok);
	cr_assert_eq(td_client_publish_wait(prod, &v, &e), 0, "%s", e.reason);
	cr_assert_eq(v, staged);
	cr_assert_eq(stat_version(cons, nb), staged);
	/* and a's, offered before, fires next */
	v = put(prod, na, 0x60);
	cr_assert_eq(take(fa, 0x60), v);
	cr_assert_eq(v, expect[0], "a's offered stage not fired");
	td_follow_close(fa);
	td_follow_close(fb);
	td_client_close(cons);
	td_client_close(prod);
	/* fds and buffer mappings counted; glibc keeps the thread's stack */
	tu_daemon_stop(&d, false);
}

/* n names "prefix/k" into buf and list */
#define NAMES_MAX (TD__STAGES + 1)
static void make_names(char buf[][16], const char **list, unsigned n,
		       const char *prefix)
{
	cr_assert_leq(n, NAMES_MAX);
	for (unsigned k = 0; k < n; k++) {
		snprintf(buf[k], 16, "%s/%u", prefix, k);
		list[k] = buf[k];
	}
}

/* A daemon, a producer and a consumer following TD__STAGES names. */
struct rig {
	char buf[NAMES_MAX][16];
	const char *n[NAMES_MAX];
	struct td_follow *f[TD__STAGES];
	struct tu_daemon d;
	struct td_client *prod, *cons;
};

static void rig_start(struct rig *r, const char *prefix)
{
	*r = (struct rig){0};
	make_names(r->buf, r->n, TD__STAGES, prefix);
	tu_daemon_start(&r->d, "warn");
	r->prod = conn_env(&r->d, "pidfd", "1");
	r->cons = conn_env(&r->d, "pidfd", "1");
	for (int k = 0; k < TD__STAGES; k++)
		cr_assert_eq(td_client_follow(r->cons, r->n[k], &r->f[k],
					      NULL),
			     0);
}

static void rig_stop(struct rig *r)
{
	for (int k = 0; k < TD__STAGES; k++)
		td_follow_close(r->f[k]);
	td_client_close(r->cons);
	td_client_close(r->prod);
	tu_daemon_stop(&r->d, false);
}

/*
 * prod publishes names[0..n) in turn, rounds times, each version taken
 * by cons's follower of its name: from the third round on, every version
 * of the first `firing` names is the one the name's last reply staged,
 * i.e. it was fired.
 */
static void names_fire(const struct tu_daemon *d, const char *import,
		       const char *const *names, unsigned n, unsigned rounds,
		       unsigned firing)
{
	struct td_client *prod = conn_env(d, import, "1");
	struct td_client *cons = conn_env(d, import, "1");
	struct td_follow *f[NAMES_MAX] = {NULL};
	uint64_t v, expect[NAMES_MAX] = {0};

	cr_assert_leq(n, NAMES_MAX);
	for (unsigned k = 0; k < n; k++)
		cr_assert_eq(td_client_follow(cons, names[k], &f[k], NULL), 0);
	for (unsigned i = 0; i < rounds * n; i++) {
		unsigned k = i % n;

		v = put(prod, names[k], (uint8_t)(0x10 + i));
		cr_assert_eq(take(f[k], (uint8_t)(0x10 + i)), v);
		if (i >= 2 * n && k < firing)
			cr_assert_eq(v, expect[k],
				     "%s version %llu, staged %llu: not fired",
				     names[k], (unsigned long long)v,
				     (unsigned long long)expect[k]);
		expect[k] = prod->st_alloc ? prod->st_version : 0;
	}
	for (unsigned k = 0; k < n; k++)
		td_follow_close(f[k]);
	td_client_close(cons);
	td_client_close(prod);
}

/*
 * Two names whose words of the trigger page would be the same
 * (td_follow_trig_slot: 63 words, so one producer's four names share one
 * about one time in eleven). The word of a stage is the daemon's choice,
 * one no other stage of the connection has, sent in the stage section:
 * both names fire every version their replies staged. With the name's
 * own word, each stage overwrote the other's STAGED word, its fire
 * failed, and neither name was ever fired.
 */
Test(stage, two_names_of_one_word_stage_both, .timeout = 60)
{
	static const char *const names[] = {"cam/6", "cam/20"};
	struct tu_daemon d;

	cr_assert_eq(td_follow_trig_slot(names[0], strlen(names[0])),
		     td_follow_trig_slot(names[1], strlen(names[1])),
		     "one word");
	tu_daemon_start(&d, "warn");
	names_fire(&d, "pidfd", names, 2, 8, 2);
	tu_daemon_stop(&d, false);
}

/*
 * A rig of sixteen cameras through one connection: every name keeps its
 * lent loan and its stage, so every version of each is fired. With four
 * of each per connection (TD__LENT_MAX before), the names beyond the
 * fourth pushed the oldest's out at every turn: none was staged; with
 * eight, the same past the eighth.
 */
Test(stage, a_producer_of_sixteen_names_stages_all, .timeout = 60)
{
	char buf[NAMES_MAX][16];
	const char *names[NAMES_MAX];
	struct tu_daemon d;

	cr_assert_eq(TD__STAGES, 16);
	make_names(buf, names, TD__STAGES, "rig");
	tu_daemon_start(&d, "warn");
	names_fire(&d, "scm", names, TD__STAGES, 5, TD__STAGES);
	tu_daemon_stop(&d, true);
}

/*
 * One name more than a connection keeps lent loans for, in turn: the
 * first sixteen keep theirs and fire every version, the last goes by
 * ALLOC. Before, the last name's publish gave back the oldest name's
 * loan, the one the next alloc wanted, every time: none was staged.
 */
Test(stage, a_producer_of_seventeen_names_in_turn_stages_sixteen,
     .timeout = 60)
{
	char buf[NAMES_MAX][16];
	const char *names[NAMES_MAX];
	struct tu_daemon d;

	make_names(buf, names, TD__STAGES + 1, "rig");
	tu_daemon_start(&d, "warn");
	names_fire(&d, "pidfd", names, TD__STAGES + 1, 5, TD__STAGES);
	tu_daemon_stop(&d, true);
}

/*
 * A PUBLISH of loan *alloc_id (0: an ALLOC of name first) on a raw
 * producer's socket, asking for the next loan and a stage: the next
 * loan's id into *alloc_id; true when the reply staged it.
 */
static bool raw_stream_publish(int sock, const char *name,
			       uint64_t *alloc_id, uint64_t *rid)
{
	static uint8_t blob[512];
	uint64_t dims[1] = {SIZE};
	int64_t strides[1] = {1};
	struct td_blob_plane pl = {.stride = SIZE, .size = SIZE, .used = SIZE};
	struct td_blob_desc bd = {
		.storage_kind = TD_STORAGE_SHM, .pid = (uint32_t)getpid(),
		.fence_fd = -1, .dtype = TD_DTYPE_U8,
		.quant_axis = TD_QUANT_NONE, .ndim = 1, .shape = dims,
		.strides_len = 1, .strides = strides, .plane_count = 1,
		.planes = &pl};
	int64_t blen = td_blob_encode(&bd, blob, sizeof(blob), NULL);
	struct td_wire_str n = {name, (uint16_t)strlen(name)};
	struct td_wire_publish_rep pr;
	struct rawrep r;

	cr_assert_gt(blen, 0);
	if (!*alloc_id) {
		struct td_wire_alloc_req q = {
			.flags = TD_WIRE_REQ_SCM | TD_WIRE_ALLOC_RECYCLE |
				 TD_WIRE_ALLOC_NAMED,
			.plane_count = 1,
			.sizes = {SIZE},
			.name = n};

		*alloc_id = raw_alloc_req(sock, ++*rid, &q);
	}
	struct td_wire_publish_req q = {
		.name = n,
		.flags = TD_WIRE_PUB_LOAN | TD_WIRE_PUB_LOAN_SCM |
			 TD_WIRE_PUB_STAGE,
		.alloc_id = *alloc_id,
		.blob = {blob, (uint32_t)blen}};
	int32_t st = raw_call(sock, TD_OP_PUBLISH, ++*rid,
			      td_wire_publish_req_encode(&q, RAW_BODY,
							 RAW_CAP),
			      &r);

	td__scm_close(r.fds, r.nfds);
	cr_assert_eq(st, 0, "PUBLISH %s: %d", name, st);
	cr_assert_eq(td_wire_publish_rep_decode(RAW_BODY, r.h.body_len, &pr,
						NULL),
		     0);
	cr_assert_eq(pr.stage_slot, 0u, "a word to a producer that reads none");
	*alloc_id = pr.loan.alloc_id;
	return pr.stage_version != 0;
}

/*
 * A producer from before TD_WIRE_FEAT_STAGE_WORD fires a name's stage at
 * the name's own word. Two of its names on one word: while the first's
 * stage is offered the second is not staged. Before, the second's stage
 * overwrote the first's STAGED word, the first's fire then failed and
 * its restage overwrote the second's: neither name was ever fired.
 */
Test(stage, an_older_producer_gets_no_stage_at_a_word_another_has,
     .timeout = 60)
{
	const char *name[2] = {"cam/6", "cam/20"};
	uint32_t feat = TD_WIRE_FEAT_ALLOC_RECYCLE | TD_WIRE_FEAT_PUB_LOAN |
			TD_WIRE_FEAT_ALLOC_NAME | TD_WIRE_FEAT_STAGE |
			TD_WIRE_FEAT_STAGE_SLOT;
	struct tu_daemon d;
	struct td_client *cons;
	struct td_follow *f[2] = {NULL, NULL};
	uint64_t loan[2] = {0, 0}, rid = 1;
	unsigned staged[2] = {0, 0};
	int sock;

	tu_daemon_start(&d, "warn");
	cons = conn_env(&d, "pidfd", "1");
	for (int k = 0; k < 2; k++)
		cr_assert_eq(td_client_follow(cons, name[k], &f[k], NULL), 0);
	sock = raw_scm_conn_feat(&d, feat);
	for (int i = 0; i < 24; i++)
		staged[i % 2] += raw_stream_publish(sock, name[i % 2],
						    &loan[i % 2], &rid);
	cr_assert_geq(staged[0], 8u, "%s staged %u times of 12", name[0],
		      staged[0]);
	cr_assert_eq(staged[1], 0u,
		     "%s staged %u times at %s's word, offered then",
		     name[1], staged[1], name[0]);
	close(sock);
	for (int k = 0; k < 2; k++)
		td_follow_close(f[k]);
	td_client_close(cons);
	tu_daemon_stop(&d, false);
}

/*
 * A producer that streams two followed names on one connection has one
 * trigger page, but a word per name in it (TD_WIRE_FEAT_STAGE_SLOT): a
 * follower of one name asleep is not woken by the fires of the other.
 * With one word for both, each of the 20 versions of the other name
 * woke it (to look, find nothing, and sleep again): its voluntary
 * context switches count them. The bound leaves room for its own
 * once-a-second look at the connection.
 */
Test(stage, a_follower_sleeps_through_its_producers_other_names,
     .timeout = 60)
{
	const char *na = "cam/a", *nb = "cam/b";
	struct tu_daemon d;
	struct td_client *prod, *ca, *cb;
	struct td_follow *fa = NULL, *fb = NULL;
	struct td_tensor *t = NULL;
	struct waiter s = {.timeout_ms = 20000, .b = 0x77};
	pthread_t th;
	long sw0, sw1;
	uint64_t v;
	int i;

	cr_assert_neq(td_follow_trig_slot(na, strlen(na)),
		      td_follow_trig_slot(nb, strlen(nb)), "two words");
	tu_daemon_start(&d, "warn");
	prod = conn_env(&d, "scm", "1");
	ca = conn_env(&d, "scm", "1");
	cb = conn_env(&d, "scm", "1");
	cr_assert_eq(td_client_follow(ca, na, &fa, NULL), 0);
	cr_assert_eq(td_client_follow(cb, nb, &fb, NULL), 0);
	for (i = 0; i < 12; i++) {
		v = put(prod, na, (uint8_t)i);
		cr_assert_eq(take(fa, (uint8_t)i), v);
		v = put(prod, nb, (uint8_t)i);
		cr_assert_eq(take(fb, (uint8_t)i), v);
	}
	for (i = 0; i < 4; i++) { /* a stage of b, fired */
		v = put(prod, nb, 0x20);
		cr_assert_eq(take(fb, 0x20), v);
	}
	cr_assert_not_null(prod->st_page, "the producer fires stages");
	/* both followers have looked with nothing newer: pages mapped */
	cr_assert_eq(td_follow_next(fa, 0, &t, NULL), -EAGAIN);
	cr_assert_eq(td_follow_next(fb, 0, &t, NULL), -EAGAIN);
	s.f = fa;
	cr_assert_eq(pthread_create(&th, NULL, wait_next, &s), 0);
	for (i = 0; i < 20000 && (!atomic_load(&s.tid) ||
				  tu_task_field(atomic_load(&s.tid), "State:") !=
					  'S');
	     i++)
		usleep(1000);
	sw0 = tu_task_field(atomic_load(&s.tid), "voluntary_ctxt_switches:");
	cr_assert_geq(sw0, 0, "the follower of a sleeps");
	for (i = 0; i < 20; i++) {
		v = put(prod, nb, (uint8_t)(0x30 + i));
		cr_assert_eq(take(fb, (uint8_t)(0x30 + i)), v);
	}
	sw1 = tu_task_field(atomic_load(&s.tid), "voluntary_ctxt_switches:");
	cr_assert_leq(sw1 - sw0, 3,
		      "the follower of a was woken %ld times by 20 versions "
		      "of b",
		      sw1 - sw0);
	v = put(prod, na, 0x77);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(s.rc, 0);
	cr_assert_eq(s.version, v);
	cr_assert(s.bytes_ok);
	td_follow_close(fa);
	td_follow_close(fb);
	td_client_close(cb);
	td_client_close(ca);
	td_client_close(prod);
	/* fds and buffer mappings counted; glibc keeps the thread's stack */
	tu_daemon_stop(&d, false);
}

/*
 * A producer of as many followed streams as it keeps stages (sixteen)
 * that also publishes one more name from a plain loan now and then: the
 * library keeps the descriptor of as many names, and the extra one's
 * took the place of the name fired longest ago (a fire did not count as
 * a use), whose next publish then did not fire and took the next one's
 * place, and so on: with eight stages and one plain publish a round of
 * eight, 8 of 96 versions fired. A plain loan is never staged, so its
 * descriptor is not kept, and a fire counts as a use.
 * (A refused PUBLISH that kept no descriptor forgot the one kept last
 * all the same: a_refused_publish_forgets_its_descriptor.)
 */
Test(stage, a_name_published_plainly_leaves_sixteen_streams_firing,
     .timeout = 60)
{
	struct rig r;
	struct td_client *prod;
	struct td_follow **f = r.f;
	const char **n = r.n;
	struct td_publish p = pub_of("other/9");
	struct td_error e = {0};
	uint64_t v, expect[TD__STAGES] = {0};
	unsigned fired = 0;

	rig_start(&r, "cam");
	prod = r.prod;
	for (int i = 0; i < 16 * TD__STAGES; i++) {
		v = put(prod, n[i % TD__STAGES], (uint8_t)i);
		cr_assert_eq(take(f[i % TD__STAGES], (uint8_t)i), v);
		/* the first rounds warm up (buffers published before) */
		fired += i >= 4 * TD__STAGES && v == expect[i % TD__STAGES];
		expect[i % TD__STAGES] = prod->st_alloc ? prod->st_version : 0;
		if (i % TD__STAGES == TD__STAGES - 1 && i >= 4 * TD__STAGES)
			cr_assert_eq(td_client_publish_alloc(
					     prod, plain_alloc(prod, p.name),
					     &p, NULL, &e),
				     0, "%s", e.reason);
	}
	cr_assert_geq(fired, 11u * TD__STAGES, "%u of %u versions fired", fired,
		      12u * TD__STAGES);
	rig_stop(&r);
}

/*
 * The library keeps a record per stage offered (sixteen, as the daemon's
 * stages), and a new one takes a free record, else that of the oldest
 * loan, meant to be one dropped unpublished. But a loan given back
 * unpublished (td_alloc_free) left its record, so with sixteen names
 * staged the next stage took the record of the oldest loan still
 * staged: a name published less often than the others, which then did
 * not fire its next version. A loan's end frees its record.
 */
Test(stage, a_loan_given_back_frees_its_stage_record, .timeout = 60)
{
	struct rig r;
	struct td_client *prod;
	struct td_follow **f = r.f;
	const char **n = r.n;
	const int fast = TD__STAGES - 1;
	uint64_t v, slow = 0;
	int i;

	/* cam/0 the slow name, cam/15 the fast one */
	rig_start(&r, "cam");
	prod = r.prod;
	for (i = 0; i < 4 * TD__STAGES; i++) {
		v = put(prod, n[i % TD__STAGES], (uint8_t)i);
		cr_assert_eq(take(f[i % TD__STAGES], (uint8_t)i), v);
		if (i % TD__STAGES == 0)
			slow = prod->st_alloc ? prod->st_version : 0;
	}
	cr_assert_neq(slow, 0u, "the slow name is staged");
	/* the fast name goes on; one of its loans is given up */
	for (int k = 0; k < 8; k++, i++) {
		v = put(prod, n[fast], (uint8_t)i);
		cr_assert_eq(take(f[fast], (uint8_t)i), v);
	}
	td_alloc_free(loan(prod, n[fast], 0));
	for (int k = 0; k < 4; k++, i++) {
		v = put(prod, n[fast], (uint8_t)i);
		cr_assert_eq(take(f[fast], (uint8_t)i), v);
	}
	v = put(prod, n[0], 0x77);
	cr_assert_eq(take(f[0], 0x77), v);
	cr_assert_eq(v, slow, "the slow name's stage was not fired");
	rig_stop(&r);
}

/*
 * A follower asleep on its row and on the trigger word beside it
 * (futex_waitv) says so in its row (trig_sleep: that word, expecting
 * there no FIRED word of a version it waits for), so the producer's fire
 * of the next version, a change of that word followed by its wake,
 * wakes it; the daemon's commit of that fire then leaves the row as it
 * is. Before, the commit woke the row as well: a FUTEX_WAKE per follower
 * the producer had woken but that had not run yet (0.86 a handoff in a
 * fan-out 1->4, docs/fastpath.md), each for nothing. The row is played
 * by hand here (what the daemon reads of it), and the daemon's wake is
 * seen in it: the daemon swaps `waiting` from 4 to 0 before it wakes.
 * A row that names no word (an older library), or another word, is
 * woken as before.
 */
static void fired_commit_wakes(struct world *wo, struct td_follow_row *row,
			       uint64_t trig_sleep, uint8_t b, bool woken)
{
	uint64_t staged = wo->prod->st_alloc ? wo->prod->st_version : 0;
	uint64_t v;

	cr_assert_neq(staged, 0u, "a stage offered");
	atomic_store(&row->trig_sleep, trig_sleep);
	atomic_store(&row->waiting, TD_FOLLOW_WAIT_ROW);
	/* fired; the FIRED PUBLISH is answered after its commit */
	v = put(wo->prod, NAME, b);
	cr_assert_eq(v, staged, "the staged version was published");
	cr_assert_eq(stat_version(wo->prod, NAME), v);
	cr_assert_eq(atomic_load(&row->waiting),
		     woken ? 0u : TD_FOLLOW_WAIT_ROW,
		     "trig_sleep %#llx: the commit of version %llu %s",
		     (unsigned long long)trig_sleep, (unsigned long long)v,
		     woken ? "did not wake the row" : "woke the row");
	atomic_store(&row->waiting, 0);
	atomic_store(&row->trig_sleep, 0);
	cr_assert_eq(take(wo->f, b), v);
}

Test(stage, a_fired_commit_leaves_rows_the_fire_woke, .timeout = 60)
{
	uint32_t slot = td_follow_trig_slot(NAME, strlen(NAME));
	struct td_follow_row *row;
	struct world wo;
	uint64_t at;

	world_start(&wo, NULL, "pidfd", "1", NULL);
	row = tu_find_mapping("memfd:tensord-follow-row");
	cr_assert_not_null(row);
	cr_assert_not_null(wo.prod->st_page, "the producer fires stages");
	at = td_follow_trig_at(wo.prod->st_pgen, slot);
	fired_commit_wakes(&wo, row, at, 0x41, false);
	fired_commit_wakes(&wo, row, 0, 0x42, true);
	fired_commit_wakes(&wo, row, td_follow_trig_at(wo.prod->st_pgen,
						       slot + 1),
			   0x43, true);
	fired_commit_wakes(&wo, row, td_follow_trig_at(wo.prod->st_pgen + 1,
						       slot),
			   0x44, true);
	fired_commit_wakes(&wo, row, at, 0x45, false);
	world_stop(&wo, true);
}

/*
 * A trigger word holds 30 bits of its version. A row expects there at
 * most the FIRED word of the version it took last (`taken`): when the
 * fired version reads the same in 30 bits (2^30 later), the row may
 * have read that very word after the producer's fire and its wake, and
 * sleep on it with nobody else to wake it, so the commit wakes it. The
 * daemon numbers from 2^30 + 1 here ($TENSORD_TEST_FIRST_VERSION), so
 * that such a version exists; before, the commit left the row asleep
 * (the row then slept out its slice, up to 1 s). A row whose last
 * version reads otherwise is left to its producer's wake, as before.
 */
Test(stage, a_fired_commit_wakes_a_row_whose_last_version_reads_as_it,
     .timeout = 60)
{
	uint32_t slot = td_follow_trig_slot(NAME, strlen(NAME));
	struct td_follow_row *row;
	struct world wo;
	uint64_t at, staged;

	cr_assert_eq(setenv("TENSORD_TEST_FIRST_VERSION", "0x40000001", 1),
		     0);
	world_start(&wo, NULL, "pidfd", "1", NULL);
	cr_assert_eq(unsetenv("TENSORD_TEST_FIRST_VERSION"), 0);
	row = tu_find_mapping("memfd:tensord-follow-row");
	cr_assert_not_null(row);
	cr_assert_not_null(wo.prod->st_page, "the producer fires stages");
	at = td_follow_trig_at(wo.prod->st_pgen, slot);
	staged = wo.prod->st_version;
	cr_assert_gt(staged, 1u << 30);
	/* the row took last the version 2^30 before the staged one */
	atomic_store(&row->taken, staged - (1u << 30));
	fired_commit_wakes(&wo, row, at, 0x61, true);
	/* its true last version (the one before): left to the fire */
	cr_assert_eq(atomic_load(&row->taken), staged);
	fired_commit_wakes(&wo, row, at, 0x62, false);
	world_stop(&wo, true);
}

/*
 * A stage record the library missed the end of, of a loan it still
 * holds, at the word where the daemon stages next a version that reads
 * the same in the word's 30 bits (2^30 later; the daemon numbers from
 * 2^30 + 1 here). The reply that announces the new stage drops the old
 * record, and the held loan's publish is a plain one: the follower takes
 * its bytes. Before, that publish fired the new stage, and its version
 * was committed with the bytes of a loan the producer had not written.
 */
Test(stage, a_new_stage_at_a_word_ends_an_older_record_of_it,
     .timeout = 60)
{
	struct td_publish p = pub_of(NAME);
	struct td_error e = {0};
	struct td_alloc *a1, *a2;
	struct td_client *prod;
	struct world wo;
	uint64_t v, staged, next;
	uint32_t gen, slot;

	cr_assert_eq(setenv("TENSORD_TEST_FIRST_VERSION", "0x40000001", 1),
		     0);
	world_start(&wo, NULL, "pidfd", "1", NULL);
	cr_assert_eq(unsetenv("TENSORD_TEST_FIRST_VERSION"), 0);
	prod = wo.prod;
	/* the lent loan, staged; and another, held */
	a1 = loan(prod, NAME, 0x11);
	cr_assert_eq(prod->st_alloc, a1->alloc_id, "the lent loan is staged");
	staged = prod->st_version;
	gen = prod->st_gen;
	slot = 0;
	for (unsigned i = 0; i < TD__STAGES; i++)
		if (prod->st[i].alloc == a1->alloc_id)
			slot = prod->st[i].slot;
	cr_assert_neq(slot, 0u, "the reply named the word");
	a2 = loan(prod, NAME, 0xab);
	cr_assert_neq(a2->alloc_id, a1->alloc_id);
	/* a2's record, as if staged 2^30 versions before the next stage */
	next = staged + 1;
	for (unsigned i = 0; i < TD__STAGES; i++)
		if (!prod->st[i].alloc) {
			prod->st[i] = (struct td__stage){a2->alloc_id,
							 next - (1u << 30),
							 gen, slot};
			break;
		}
	cr_assert_eq(td_client_publish_alloc(prod, a1, &p, &v, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(v, staged, "a1 fired its stage");
	cr_assert_eq(take(wo.f, 0x11), v);
	cr_assert(prod->st_alloc && prod->st_version == next &&
			  prod->st_gen == gen,
		  "the reply staged %llu at generation %u, not %llu at %u",
		  (unsigned long long)prod->st_version, prod->st_gen,
		  (unsigned long long)next, gen);
	for (unsigned i = 0; i < TD__STAGES; i++)
		if (prod->st[i].alloc == prod->st_alloc)
			cr_assert_eq(prod->st[i].slot, slot,
				     "the next stage is at the same word");
	/* a2 published: its own bytes, never the next loan's */
	cr_assert_eq(td_client_publish_alloc(prod, a2, &p, &v, &e), 0, "%s",
		     e.reason);
	/* the daemon cancelled the next loan's stage (a publish of the
	 * name came first); a2's must not have fired it */
	cr_assert_eq(atomic_load(&prod->st_page[slot].word),
		     td_follow_trig(next, TD_FOLLOW_TRIG_CANCELLED),
		     "the next loan's stage after a2's publish: %#x (fired: "
		     "%#x)", atomic_load(&prod->st_page[slot].word),
		     td_follow_trig(next, TD_FOLLOW_TRIG_FIRED));
	cr_assert_eq(take(wo.f, 0xab), v);
	step(prod, wo.f, 0x12);
	world_stop(&wo, true);
}

/*
 * And a follower that sleeps in td_follow_next names in its row the
 * word it sleeps on beside it (the producer's word of the name), so the
 * commit leaves it to its producer's wake; it takes the version fired.
 */
Test(stage, a_sleeping_follower_names_its_trigger_word, .timeout = 60)
{
	uint32_t slot = td_follow_trig_slot(NAME, strlen(NAME));
	struct waiter s = {.timeout_ms = 20000, .b = 0x51};
	struct td_follow_row *row;
	struct world wo;
	pthread_t th;
	uint64_t v;
	int i;

	cr_assert_eq(setenv("TENSORD_RING_SPIN_US", "0", 1), 0);
	world_start(&wo, NULL, "scm", "1", NULL);
	row = tu_find_mapping("memfd:tensord-follow-row");
	cr_assert_not_null(row);
	s.f = wo.f;
	cr_assert_eq(pthread_create(&th, NULL, wait_next, &s), 0);
	for (i = 0; i < 20000 && atomic_load(&row->waiting) !=
					 TD_FOLLOW_WAIT_ROW;
	     i++)
		usleep(1000);
	cr_assert_eq(atomic_load(&row->waiting), TD_FOLLOW_WAIT_ROW);
	cr_assert_eq(atomic_load(&row->trig_sleep),
		     td_follow_trig_at(wo.prod->st_pgen, slot));
	v = put(wo.prod, NAME, 0x51);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(s.rc, 0);
	cr_assert_eq(s.version, v);
	cr_assert(s.bytes_ok);
	cr_assert_eq(unsetenv("TENSORD_RING_SPIN_US"), 0);
	/* glibc keeps the thread's stack */
	world_stop(&wo, false);
}

/*
 * A staged loan published by td_client_publish_many (docs/protocol.md
 * §6.10) with a loan of another name: the library does not fire the
 * stage (the loan's stage record is dropped), the daemon settles the
 * name's stage before it commits, and the follower takes the version
 * of the PUBLISH_MANY, its bytes; the stream goes on after it.
 */
Test(stage, a_staged_loan_in_a_publish_many_is_settled_not_fired,
     .timeout = 60)
{
	struct world w;
	struct td_alloc *a[2];
	struct td_publish p[2] = {pub_of(NAME), pub_of("cam/other")};
	struct td_error e = {0};
	uint64_t v[2], staged;

	world_start(&w, NULL, "pidfd", "1", NULL);
	staged = w.prod->st_alloc;
	cr_assert_neq(staged, 0, "the warm stream has a stage");
	a[0] = loan(w.prod, NAME, 0x77); /* the staged, lent loan */
	cr_assert_eq(a[0]->alloc_id, staged);
	a[1] = loan(w.prod, "cam/other", 0x78);
	cr_assert_eq(td_client_publish_many(w.prod, 2, a, p, v, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(w.prod->st_alloc, 0, "the stage record was dropped");
	cr_assert_eq(take(w.f, 0x77), v[0]);
	step(w.prod, w.f, 0x79);
	step(w.prod, w.f, 0x7a);
	world_stop(&w, true);
}

/*
 * A stage fired (its followers may take it) but not committed yet, and
 * another producer's td_client_publish_many of that name: the daemon
 * settles the stage first (docs/fastpath.md, "A followed publish without
 * the daemon's hop"), so the PUBLISH_MANY's version is the newer one, as
 * after a PUBLISH, and the name never goes back to the staged version.
 */
Test(stage, a_publish_many_settles_a_fired_stage_of_its_name_first,
     .timeout = 60)
{
	struct world w;
	struct td_alloc *a[2];
	struct td_publish p[2] = {pub_of("cam/other"), pub_of(NAME)};
	struct td_error e = {0};
	uint64_t size = SIZE, v[2], staged;

	world_start(&w, NULL, "pidfd", "1", "pidfd");
	staged = w.prod->st_version;
	cr_assert_neq(w.prod->st_alloc, 0, "the warm stream has a stage");
	memset(td_alloc_data(w.prod->lent[0], 0), 0x5c, SIZE);
	atomic_store(stage_word(w.prod),
		     td_follow_trig(staged, TD_FOLLOW_TRIG_FIRED));
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(td_client_alloc(w.other, 1, &size, &a[i], &e), 0);
		memset(td_alloc_data(a[i], 0), 0x66, SIZE);
	}
	cr_assert_eq(td_client_publish_many(w.other, 2, a, p, v, &e), 0, "%s",
		     e.reason);
	cr_assert_gt(v[1], staged);
	cr_assert_eq(stat_version(w.cons, NAME), v[1]);
	/* the newest: the PUBLISH_MANY's, after the stage */
	cr_assert_eq(take(w.f, 0x66), v[1]);
	/* the producer's library still holds the committed loan (fired
	 * behind its back): refused, and the stream goes on from there */
	a[0] = loan(w.prod, NAME, 0x6d);
	cr_assert_eq(td_client_publish_alloc(w.prod, a[0], &p[1], NULL, &e),
		     -ENOENT, "%s", e.reason);
	v[0] = put(w.prod, NAME, 0x67);
	cr_assert_gt(v[0], v[1]);
	cr_assert_eq(take(w.f, 0x67), v[0]);
	cr_assert_eq(stat_version(w.cons, NAME), v[0]);
	world_stop(&w, true);
}

/*
 * A publish with a condition (TD_PUBLISH_IF) is the daemon's to check,
 * so libtensord never fires its loan's stage: fired, followers take the
 * version before the daemon looked (and FIRED with IF is no request: the
 * stage went off and nothing was sent). It sends the PUBLISH, which
 * settles the stage and is checked as any other.
 */
Test(stage, a_conditional_publish_is_sent_not_fired, .timeout = 60)
{
	struct world wo;
	struct td_publish p = pub_of(NAME);
	struct td_tensor *t = NULL;
	struct td_error e = {0};
	uint64_t cur, staged, v = 0;

	world_start(&wo, NULL, "pidfd", "1", NULL);
	cr_assert_neq(wo.prod->st_alloc, 0u, "no stage on offer");
	staged = wo.prod->st_version;
	cur = stat_version(wo.cons, NAME);
	cr_assert_gt(cur, 1u);
	/* a condition that fails: refused, and nothing to follow */
	p.flags = TD_PUBLISH_IF;
	p.if_version = cur - 1;
	cr_assert_eq(td_client_publish_alloc(wo.prod, loan(wo.prod, NAME, 0x77),
					     &p, &v, &e),
		     -ESTALE, "%s", e.reason);
	cr_assert_neq(atomic_load(stage_word(wo.prod)),
		      td_follow_trig(staged, TD_FOLLOW_TRIG_FIRED),
		      "the stage was fired");
	cr_assert_eq(td_follow_next(wo.f, 0, &t, NULL), -EAGAIN,
		     "a refused publish was followed");
	cr_assert_eq(stat_version(wo.cons, NAME), cur);
	/* one that holds: published, and followed */
	p.if_version = cur;
	cr_assert_eq(td_client_publish_alloc(wo.prod, loan(wo.prod, NAME, 0x78),
					     &p, &v, &e),
		     0, "%s", e.reason);
	cr_assert_eq(take(wo.f, 0x78), v);
	world_stop(&wo, true);
}

/*
 * Another connection's PUBLISH_MANY of the name settles the stage first
 * (docs/fastpath.md, "Settled where the name changes"): a fired one is
 * committed before the PUBLISH_MANY's version, never after it; one not
 * fired is cancelled. Watchers see the versions in that order.
 */
static uint64_t publish_many_two(struct td_client *c, uint8_t b)
{
	static const char *names[2] = {NAME, "cam/side"};
	struct td_alloc *a[2];
	struct td_publish p[2] = {pub_of(names[0]), pub_of(names[1])};
	struct td_error e = {0};
	uint64_t size = SIZE, v[2];

	for (int i = 0; i < 2; i++) {
		cr_assert_eq(td_client_alloc_ex(c, 1, &size, 0, &a[i], &e), 0,
			     "%s", e.reason);
		memset(td_alloc_data(a[i], 0), b, SIZE);
	}
	cr_assert_eq(td_client_publish_many(c, 2, a, p, v, &e), 0, "%s",
		     e.reason);
	return v[0];
}

Test(stage, another_connections_publish_many_settles_the_stage_first,
     .timeout = 60)
{
	struct world wo;
	struct td_client *prod, *w;
	struct td_event ev;
	struct td_error e = {0};
	uint64_t staged, vo;

	world_start(&wo, NULL, "pidfd", "1", "pidfd");
	prod = wo.prod;
	w = conn_env(&wo.d, "pidfd", "1");
	cr_assert_eq(td_client_watch(w, NAME, 0, NULL, &e), 0, "%s",
		     e.reason);
	/* not fired: cancelled */
	cr_assert_neq(prod->st_alloc, 0u);
	staged = prod->st_version;
	vo = publish_many_two(wo.other, 0x78);
	cr_assert_eq(atomic_load(stage_word(prod)),
		     td_follow_trig(staged, TD_FOLLOW_TRIG_CANCELLED));
	cr_assert_eq(take(wo.f, 0x78), vo);
	cr_assert_gt(put(prod, NAME, 0x79), vo);
	take(wo.f, 0x79);
	for (int i = 0; i < 4; i++)
		step(prod, wo.f, (uint8_t)(0x20 + i));
	/* the events so far go (a round trip on w brings them all) */
	stat_version(w, NAME);
	while (td_client_next_event(w, 0, &ev, &e) == 0)
		cr_assert_eq(ev.type, TD_EVENT_TYPE_PUBLISHED);
	/* fired (by hand, no notice): committed before the other's */
	cr_assert_neq(prod->st_alloc, 0u);
	staged = prod->st_version;
	memset(td_alloc_data(prod->lent[0], 0), 0x5c, SIZE);
	atomic_store(stage_word(prod),
		     td_follow_trig(staged, TD_FOLLOW_TRIG_FIRED));
	vo = publish_many_two(wo.other, 0x77);
	cr_assert_gt(vo, staged);
	/* the producer's next request would commit a fired stage left */
	cr_assert_eq(stat_version(prod, NAME), vo);
	cr_assert_eq(stat_version(wo.cons, NAME), vo);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(td_client_next_event(w, 5000, &ev, &e), 0, "%s",
			     e.reason);
		cr_assert_eq(ev.type, TD_EVENT_TYPE_PUBLISHED);
		cr_assert_eq(ev.version, i ? vo : staged);
	}
	cr_assert_eq(take(wo.f, 0x77), vo);
	td_client_close(w);
	world_stop(&wo, true);
}
