/* SPDX-License-Identifier: MIT */
/* Checks shared by the suites that restart a daemon (libtensord users). */
#ifndef TD_TESTS_TESTCLIENT_H
#define TD_TESTS_TESTCLIENT_H

#include <criterion/criterion.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "tensord/tensord.h"
#include "testutil.h"

/* A client of daemon d, connected (asserted). */
static inline struct td_client *tc_open(const struct tu_daemon *d)
{
	struct td_client *c = NULL;
	struct td_error e = {0};
	int rc = td_client_connect(d->sock, &c, &e);

	cr_assert_eq(rc, 0, "connect: %s", e.reason);
	return c;
}

/*
 * Until a STATUS field (read by `field`) is `want`: a bounded wait (a
 * hang guard), for what the daemon does on its own time (a hang-up read
 * on another socket, a SIGHUP). The last value seen.
 */
static inline uint64_t tc_status_until(struct td_client *c,
				       uint64_t (*field)(
					       const struct td_status *),
				       uint64_t want)
{
	uint64_t seen = ~want;

	for (int i = 0; i < 2000 && seen != want; i++) {
		struct td_status *st = NULL;

		if (i)
			usleep(5000);
		cr_assert_eq(td_client_status(c, &st, NULL), 0);
		seen = field(st);
		td_status_free(st);
	}
	return seen;
}

/* name has no version: nothing was published under it */
static inline void tc_assert_absent(struct td_client *c, const char *name)
{
	struct td_tensor *t = NULL;

	cr_assert_eq(td_client_get(c, name, &t, NULL), -ENOENT,
		     "\"%s\" was published", name);
	cr_assert_null(t);
}

/* GETs parked in the daemon, every client's (a tc_status_until field) */
static inline uint64_t tc_waiters(const struct td_status *st)
{
	uint64_t n = 0;

	for (size_t k = 0; k < st->client_count; k++)
		n += st->clients[k].waiters;
	return n;
}

/*
 * What a GET of `name` (t, released here) must carry besides its bytes:
 * the metadata, a fence (waited for) or none, and the PUBLISH flags STAT
 * reports.
 */
static inline void tc_check_rest(struct td_client *c, struct td_tensor *t,
				 const char *name, const char *meta,
				 bool fence, uint32_t flags, int wait_ms)
{
	struct td_entry ent = {0};
	struct td_error e = {0};
	const void *m;
	size_t ml;

	m = td_tensor_meta(t, &ml);
	cr_assert_eq(ml, meta ? strlen(meta) : 0, "%s", name);
	if (ml)
		cr_assert_eq(memcmp(m, meta, ml), 0, "%s", name);
	cr_assert_eq(td_tensor_has_fence(t), fence, "%s", name);
	if (fence)
		cr_assert_eq(td_tensor_fence_wait(t, wait_ms), 0, "%s", name);
	td_tensor_release(t);
	cr_assert_eq(td_client_stat(c, name, &ent, &e), 0, "%s", e.reason);
	cr_assert_eq(ent.flags, flags, "%s", name);
	td_entry_fini(&ent);
}

/* Datagrams the daemon has received so far: RING_STAT of ring `name`,
 * which counts every request (that RING_STAT included). */
static inline uint64_t tc_daemon_requests(struct td_client *c,
					  const char *name)
{
	struct td_ring_stat st;
	struct td_error e = {0};

	cr_assert_eq(td_client_ring_stat(c, name, &st, &e), 0, "%s",
		     e.reason);
	return st.daemon_requests;
}

#endif
