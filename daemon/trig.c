/* SPDX-License-Identifier: MIT */
/*
 * Producers' trigger pages (docs/protocol.md §13, "Staged publishes";
 * docs/fastpath.md, "Fired by the producer"): made at a connection's
 * first stage, freed with it or renewed; which word a stage takes; and
 * which name each word last named, so that a follower is handed a page
 * only when its words name nothing that follower may not read
 * (docs/policy.md, "Trigger pages"). follow.c stages on them.
 */
#include "daemon.h"
#include "os.h"
#include "shown.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "follow.h"

#define TRIG_FDS 2 /* a trigger page's descriptors: rw, ro */

/* the name each word of a page was last staged for (len 0: never) */
struct td__trig_names {
	uint16_t len[TD_FOLLOW_TRIG_SLOTS];
	char name[TD_FOLLOW_TRIG_SLOTS][TD_WIRE_MAX_NAME];
};

/* p's trigger page goes with p, or is renewed (its stages settled
 * already); its fds linger while a client may still pull them. */
void td__peer_trig_free(struct td__peer *p)
{
	struct td__trig *t = p->trig;

	if (!t)
		return;
	munmap(t->map, TD_FOLLOW_TRIG_LEN);
	td__shown_fini(&t->shown);
	free(t->names);
	/* a STAGE_PAGE reply may have named them by number to a client
	 * that has not pulled them yet: by the pull the numbers could name
	 * other files (a new page's, a plane), mapped as this page */
	if (!td__trig_linger(t, TRIG_FDS)) {
		close(t->rw);
		close(t->ro);
		td__tenant_sub(t->uid, TD__LIM_FDS, TRIG_FDS);
	}
	free(t);
	p->trig = NULL;
}

struct td__trig *td__peer_trig(struct td__peer *p)
{
	static uint32_t gens; /* the last trigger page's generation */
	static uint64_t serials; /* and its number, which never wraps */
	const char *why = NULL;
	struct td__trig *t = p->trig;
	char lim[256];
	void *m = MAP_FAILED;

	if (t)
		return t;
	if (td__tenant_check(p->uid, TD__LIM_FDS, TRIG_FDS, lim,
			     sizeof(lim)) < 0 ||
	    !(t = calloc(1, sizeof(*t))))
		return NULL;
	if (!(t->names = calloc(1, sizeof(*t->names)))) {
		free(t);
		return NULL;
	}
	t->ro = -1;
	t->rw = td__memfd_new("tensord-trigger", TD_FOLLOW_TRIG_LEN,
			      TD__MEMFD_SEALABLE | TD__MEMFD_RESERVE |
				      TD__MEMFD_SEAL_SIZE,
			      &why);
	if (t->rw >= 0)
		t->ro = td__reopen_ro(t->rw);
	if (t->ro >= 0)
		m = mmap(NULL, TD_FOLLOW_TRIG_LEN, PROT_READ | PROT_WRITE,
			 MAP_SHARED, t->rw, 0);
	if (m == MAP_FAILED ||
	    td__tenant_add(p->uid, TD__LIM_FDS, TRIG_FDS) < 0) {
		if (m != MAP_FAILED)
			munmap(m, TD_FOLLOW_TRIG_LEN);
		if (t->rw >= 0)
			close(t->rw);
		if (t->ro >= 0)
			close(t->ro);
		free(t->names);
		free(t);
		return NULL;
	}
	t->map = m;
	t->uid = p->uid;
	/* never 0; may come round (follow.c, stage_arm: the serial) */
	gens = gens >= td__d->opts.trig_gen_max ? 1 : gens + 1;
	t->gen = gens;
	t->serial = ++serials;
	p->trig = t;
	return t;
}

uint32_t td__peer_trig_slot(const struct td__peer *p, uint32_t want,
			    bool any)
{
	uint64_t used = 0;

	for (unsigned i = 0; i < p->n_stages; i++)
		used |= 1ull << p->stage_slot[i];
	if (!(used >> want & 1))
		return want;
	for (uint32_t s = 1; any && s < TD_FOLLOW_TRIG_SLOTS; s++)
		if (!(used >> s & 1))
			return s;
	return TD_FOLLOW_TRIG_SLOTS;
}

void td__trig_named(struct td__trig *t, uint32_t slot, const char *name,
		    size_t len)
{
	struct td__trig_names *n = t->names;

	if (n->len[slot] == len && !memcmp(n->name[slot], name, len))
		return;
	memcpy(n->name[slot], name, len);
	n->len[slot] = (uint16_t)len;
}

bool td__trig_readable(const struct td__trig *t, const struct td__peer *p)
{
	const struct td__trig_names *n = t->names;

	for (uint32_t i = 0; i < TD_FOLLOW_TRIG_SLOTS; i++)
		if (n->len[i] &&
		    !td__access_may(p, TD__PERM_READ, n->name[i], n->len[i]))
			return false;
	return true;
}
