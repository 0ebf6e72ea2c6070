/* SPDX-License-Identifier: MIT */
/*
 * A publish with a condition (TD_PUBLISH_IF, TD_WIRE_PUB_IF,
 * docs/protocol.md §6.3): the daemon publishes only while the name's
 * current version is the one expected (0: the name has none), checked in
 * the step that commits, so a version another producer published after
 * the caller looked is never replaced. PUBLISH_MANY elements carry it
 * too, all or none. A client that sends no condition, or a raw one that
 * announces no features, publishes as ever; a daemon that does not serve
 * it gets nothing from libtensord (-EOPNOTSUPP). tu_daemon_stop() checks
 * that this process's fds and memfd mappings are back.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blob.h"
#include "client.h"
#include "rawclient.h"
#include "tensord/tensord.h"
#include "testclient.h"
#include "testutil.h"
#include "wire.h"

TestSuite(pub_if, .timeout = TU_TEST_TIMEOUT_S);

#define SIZE 64u

static struct td_client *connect_to(const struct tu_daemon *d)
{
	struct td_client *c = NULL;
	struct td_error e = {0};

	cr_assert_eq(td_client_connect(d->sock, &c, &e), 0, "%s", e.reason);
	return c;
}

/* A loan of SIZE bytes, each byte `fill`. */
static struct td_alloc *loan(struct td_client *c, uint8_t fill)
{
	uint64_t size = SIZE;
	struct td_alloc *a = NULL;
	struct td_error e = {0};

	cr_assert_eq(td_client_alloc(c, 1, &size, &a, &e), 0, "%s", e.reason);
	memset(td_alloc_data(a, 0), fill, SIZE);
	return a;
}

static struct td_publish desc(const char *name)
{
	static const uint64_t shape[1] = {SIZE};

	return (struct td_publish){.name = name, .dtype = TD_DTYPE_U8,
				   .ndim = 1, .shape = shape};
}

/* desc(name) published only if the name is at version `expect` */
static struct td_publish desc_if(const char *name, uint64_t expect)
{
	struct td_publish p = desc(name);

	p.flags = TD_PUBLISH_IF;
	p.if_version = expect;
	return p;
}

/* Publish a loan of `fill` as p: the call's return, its version. */
static int put(struct td_client *c, const struct td_publish *p, uint8_t fill,
	       uint64_t *version, struct td_error *e)
{
	return td_client_publish_alloc(c, loan(c, fill), p, version, e);
}

/* name is current at `version` and holds bytes `fill` */
static void assert_current(struct td_client *c, const char *name,
			   uint64_t version, uint8_t fill)
{
	struct td_tensor *t = NULL;
	struct td_error e = {0};
	const uint8_t *b;

	cr_assert_eq(td_client_get(c, name, &t, &e), 0, "%s", e.reason);
	cr_assert_eq(td_tensor_version(t), version, "\"%s\" is at %" PRIu64,
		     name, td_tensor_version(t));
	b = td_tensor_plane_data(t, 0);
	cr_assert_not_null(b);
	for (uint32_t i = 0; i < SIZE; i++)
		cr_assert_eq(b[i], fill, "byte %u of \"%s\"", i, name);
	td_tensor_release(t);
}

/*
 * The race an operator restoring a backup into a live store runs: the
 * loader looks (the name is free), a producer publishes the name, then
 * the loader publishes. Without the condition the producer's version was
 * replaced; with it the loader is refused and the producer's stays.
 */
Test(pub_if, a_name_published_after_the_check_is_not_replaced)
{
	struct tu_daemon d;
	struct td_client *loader, *producer;
	struct td_publish mine = desc_if("live/x", 0), theirs = desc("live/x");
	struct td_entry ent = {0};
	struct td_error e = {0};
	uint64_t vp = 0, vl = 0;
	char want[64];
	int fds0;

	tu_daemon_start(&d, "warn");
	loader = connect_to(&d);
	producer = connect_to(&d);
	/* 1. the loader's check: no such name */
	cr_assert_eq(td_client_stat(loader, "live/x", &ent, &e), -ENOENT);
	td_entry_fini(&ent);
	/* 2. the producer publishes it in between */
	cr_assert_eq(put(producer, &theirs, 7, &vp, &e), 0, "%s", e.reason);
	fds0 = tu_fd_count();
	/* 3. the loader's publish is refused, naming the version */
	cr_assert_eq(put(loader, &mine, 1, &vl, &e), -EEXIST, "%s",
		     e.reason);
	snprintf(want, sizeof(want), "\"live/x\" exists (version %" PRIu64
		 ")", vp);
	cr_assert(strstr(e.reason, want), "%s", e.reason);
	cr_assert_eq(vl, 0);
	/* the refused loan went back: nothing of it is left open */
	cr_assert_eq(tu_fd_count(), fds0);
	assert_current(loader, "live/x", vp, 7);
	td_client_close(producer);
	td_client_close(loader);
	tu_daemon_stop(&d, true);
}

Test(pub_if, the_condition_publishes_only_at_the_expected_version)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_publish p;
	struct td_error e = {0};
	uint64_t v1 = 0, v2 = 0, v = 0;
	char want[96];

	tu_daemon_start(&d, "warn");
	c = connect_to(&d);
	/* absent, as asked */
	p = desc_if("cond/a", 0);
	cr_assert_eq(put(c, &p, 1, &v1, &e), 0, "%s", e.reason);
	/* at v1, as asked */
	p = desc_if("cond/a", v1);
	cr_assert_eq(put(c, &p, 2, &v2, &e), 0, "%s", e.reason);
	cr_assert_gt(v2, v1);
	/* at v1 no longer */
	cr_assert_eq(put(c, &p, 3, &v, &e), -ESTALE, "%s", e.reason);
	snprintf(want, sizeof(want), "\"cond/a\" is at version %" PRIu64
		 ", not %" PRIu64, v2, v1);
	cr_assert(strstr(e.reason, want), "%s", e.reason);
	assert_current(c, "cond/a", v2, 2);
	/* a version of a name that has none */
	p = desc_if("cond/b", v2);
	cr_assert_eq(put(c, &p, 4, &v, &e), -ESTALE, "%s", e.reason);
	cr_assert(strstr(e.reason, "\"cond/b\" has no version"), "%s",
		  e.reason);
	tc_assert_absent(c, "cond/b");
	/* after a DELETE the name is free again */
	cr_assert_eq(td_client_delete(c, "cond/a", NULL, &e), 0, "%s",
		     e.reason);
	p = desc_if("cond/a", 0);
	cr_assert_eq(put(c, &p, 5, &v, &e), 0, "%s", e.reason);
	assert_current(c, "cond/a", v, 5);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* A PUBLISH_MANY with one element's condition failing publishes none. */
Test(pub_if, publish_many_is_all_or_none_with_one_failing_condition)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_alloc *a[2];
	struct td_publish p[2] = {desc_if("many/a", 0), desc_if("many/b", 0)};
	struct td_publish b = desc("many/b");
	struct td_error e = {0};
	uint64_t vb = 0, v[2] = {0, 0};
	int fds0;

	tu_daemon_start(&d, "warn");
	c = connect_to(&d);
	cr_assert_eq(put(c, &b, 9, &vb, &e), 0, "%s", e.reason);
	fds0 = tu_fd_count();
	a[0] = loan(c, 1);
	a[1] = loan(c, 2);
	cr_assert_eq(td_client_publish_many(c, 2, a, p, v, &e), -EEXIST,
		     "%s", e.reason);
	cr_assert(strstr(e.reason, "element 1 (\"many/b\")"), "%s",
		  e.reason);
	cr_assert(strstr(e.reason, "nothing published"), "%s", e.reason);
	cr_assert_eq(tu_fd_count(), fds0, "the refused loans were kept");
	tc_assert_absent(c, "many/a");
	assert_current(c, "many/b", vb, 9);
	/* the second's condition met: both */
	p[1].if_version = vb;
	a[0] = loan(c, 3);
	a[1] = loan(c, 4);
	cr_assert_eq(td_client_publish_many(c, 2, a, p, v, &e), 0, "%s",
		     e.reason);
	assert_current(c, "many/a", v[0], 3);
	assert_current(c, "many/b", v[1], 4);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* A daemon whose HELLO does not serve the condition is sent nothing:
 * it would publish regardless. */
Test(pub_if, a_daemon_without_the_feature_bit_gets_eopnotsupp)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_alloc *a[1];
	struct td_publish p = desc_if("old/a", 0);
	struct td_error e = {0};
	uint64_t v = 0;
	int fds0;

	tu_daemon_start(&d, "warn");
	c = connect_to(&d);
	/* as if the daemon's HELLO predated TD_WIRE_FEAT_PUB_IF */
	c->hello.features &= ~TD_WIRE_FEAT_PUB_IF;
	fds0 = tu_fd_count();
	a[0] = loan(c, 1);
	cr_assert_eq(td_client_publish_alloc(c, a[0], &p, &v, &e),
		     -EOPNOTSUPP, "%s", e.reason);
	cr_assert(strstr(e.reason, "TD_WIRE_FEAT_PUB_IF"), "%s", e.reason);
	a[0] = loan(c, 2);
	cr_assert_eq(td_client_publish_many(c, 1, a, &p, &v, &e),
		     -EOPNOTSUPP, "%s", e.reason);
	tc_assert_absent(c, "old/a");
	cr_assert_eq(tu_fd_count(), fds0, "the loans were not given back");
	/* without the condition it publishes as ever */
	p.flags = 0;
	cr_assert_eq(put(c, &p, 3, &v, &e), 0, "%s", e.reason);
	assert_current(c, "old/a", v, 3);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* ---- raw clients: an old one, and the bodies libtensord never sends ---- */

/* PUBLISH alloc `alloc` (one plane) as name with flags and expect: the
 * reply's status, its reason in why. */
static int32_t raw_pub(int sock, uint64_t id, const char *name,
		       uint64_t alloc, uint32_t flags, uint64_t expect,
		       char *why, size_t cap)
{
	struct rawrep r;
	int32_t st;

	st = raw_call(sock, TD_OP_PUBLISH, id,
		      raw_pub_body(name, alloc, SIZE, flags, expect, RAW_BODY,
				   RAW_CAP),
		      &r);
	td__scm_close(r.fds, r.nfds);
	raw_reason(&r, why, cap);
	return st;
}

/*
 * A client of before the feature (no features in its HELLO) publishes
 * with the body of version 1: it replaces the name as ever. The daemon
 * reads the condition from whoever sends it, and answers a condition on
 * a fired stage's notice (which is committed already) as malformed.
 */
Test(pub_if, an_old_client_replaces_as_ever_and_bad_bodies_are_refused)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_publish p = desc("raw/x");
	struct td_entry ent = {0};
	struct td_error e = {0};
	char why[TD_WIRE_MAX_REASON + 1];
	uint64_t v = 0, id;
	int sock;

	tu_daemon_start(&d, "warn");
	c = connect_to(&d);
	cr_assert_eq(put(c, &p, 6, &v, &e), 0, "%s", e.reason);
	sock = raw_scm_conn(&d);
	id = raw_alloc_one(sock, 2, SIZE);
	cr_assert_eq(raw_pub(sock, 3, "raw/x", id, TD_WIRE_PUB_IF, 0, why,
			     sizeof(why)),
		     -EEXIST, "%s", why);
	cr_assert(strstr(why, "not replaced"), "%s", why);
	cr_assert_eq(raw_pub(sock, 4, "raw/x", id, TD_WIRE_PUB_IF, v + 1,
			     why, sizeof(why)),
		     -ESTALE, "%s", why);
	assert_current(c, "raw/x", v, 6);
	/* the alloc is still the connection's: published without one */
	cr_assert_eq(raw_pub(sock, 5, "raw/x", id, 0, 0, why, sizeof(why)),
		     0, "%s", why);
	cr_assert_eq(td_client_stat(c, "raw/x", &ent, &e), 0, "%s",
		     e.reason);
	cr_assert_gt(ent.version, v);
	td_entry_fini(&ent);
	/* the encoder refuses what the decoder would: FIRED with IF */
	{
		struct td_wire_publish_req q = {
			.name = {"raw/x", 5},
			.flags = TD_WIRE_PUB_FIRED | TD_WIRE_PUB_IF,
			.alloc_id = id,
		};

		cr_assert_eq(td_wire_publish_req_encode(&q, RAW_BODY,
							RAW_CAP),
			     -EINVAL);
	}
	close(sock);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}
