/* SPDX-License-Identifier: MIT */
/*
 * libtensord internal: a loan (td_client_alloc_ex), shared by produce.c
 * (ALLOC, PUBLISH) and loans.c (the loan cache, and the next loans
 * PUBLISH replies lend).
 */
#ifndef TD_LIBCLIENT_ALLOC_H
#define TD_LIBCLIENT_ALLOC_H

#include "client.h"

struct td_alloc {
	struct td_client *c;
	uint64_t alloc_id;
	uint32_t epoch; /* c->epoch of the connection that lent it */
	uint32_t count;
	/*
	 * A recyclable loan: fds and addr borrow its buffers from the client's
	 * loan cache (lb), which keeps them after publish.
	 */
	bool recycle;
	bool stream; /* TD_ALLOC_STREAM: its PUBLISH asks for the next loan */
	bool rewrite; /* TD_ALLOC_REWRITE sent: the next loan is an ALLOC */
	bool rw_asked; /* TD_ALLOC_REWRITE given: its fill time is kept */
	bool marked; /* rewritable (td__rewrite_marked): its publish names
		      * what the daemon may take back next */
	uint64_t lent_at; /* a lent loan: c->lent_clock when it was kept */
	int64_t handed_ns; /* when td_client_alloc_ex returned it */
	/* planes the daemon left for this client to reserve (bit i) */
	uint32_t unreserved;
	int fds[TD_WIRE_MAX_PLANES];
	void *addr[TD_WIRE_MAX_PLANES];
	uint64_t size[TD_WIRE_MAX_PLANES];
	struct td__loanbuf *lb[TD_WIRE_MAX_PLANES];
	/* td_client_alloc_named: the only name it may be published as */
	uint16_t name_len;
	char name[TD_WIRE_MAX_NAME + 1];
};

/* loans.c, lock held: the loan cache's buffer id, NULL if none */
struct td__loanbuf *td__loanbuf_find(struct td_client *c, uint64_t id);
/* ... a published buffer goes idle in the cache */
void td__loanbuf_idle(struct td_client *c, struct td__loanbuf *b);
/* ... a buffer leaves the cache, unmapped and closed */
void td__loanbuf_destroy(struct td_client *c, struct td__loanbuf *b);
/* ... a loan's own mappings go (not the cache's) */
void td__alloc_unmap(struct td_alloc *a);
/*
 * ... a plain loan's memfds are write-sealed as PUBLISH seals them, before
 * it is sent: the kernel's walk of the pages, and its wait while anything
 * holds one, are the producer's time, not the daemon's loop (which then
 * finds the seals present). Nothing for a recyclable loan. 0, or -errno
 * with the reason in err, "element elem" named where elem >= 0.
 */
int td__alloc_seal(const struct td_alloc *a, int elem, struct td_error *err);
/* ... a loan's memory goes, its buffers with it */
void td__alloc_free_locked(struct td_alloc *a);
/* ... the daemon is told that unpublished alloc a is given up */
void td__alloc_give_back(struct td_client *c, const struct td_alloc *a);

/*
 * loans.c, lock held. The lent loan of want's name that fits plane_count
 * and sizes, out of the list, when `take` (NULL: none); a loan of that
 * name that is not taken goes back, and with one lent loan per client
 * (an older daemon) any.
 */
struct td_alloc *td__lent_claim(struct td_client *c,
				const struct td_alloc *want,
				uint32_t plane_count, const uint64_t *sizes,
				bool take);
/* May the PUBLISH of loan a ask for the next loan of its name? */
bool td__lent_ask(struct td_client *c, const struct td_alloc *a);
/* Keep the loan a PUBLISH reply lent; false: given back at once. */
bool td__lent_keep(struct td_client *c, struct td_alloc *next);

#endif
