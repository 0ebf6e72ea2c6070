/* SPDX-License-Identifier: MIT */
/*
 * Eviction's order (store.c, td__store_make_room_many): the current
 * versions in a list, least recently used first. A version goes to its
 * tail when it becomes its name's current version (a PUBLISH, a
 * restore) and when a GET leases it, the two places its `used` tick is
 * taken, so the list is in `used` order without ever being sorted.
 * make_room walks it from the head and stops at the room it needs: k
 * victims cost k plus the versions it may not take on the way (leased,
 * pinned, another uid's), not a pass over every name to heap the
 * candidates, as each evicting ALLOC or PUBLISH paid before (7 ns a
 * name: 0.7 ms at 100 000 names). No I/O, no allocation.
 */
#include "store.h"

void td__lru_add(struct td__list *order, struct td__version *v)
{
	td__list_add_tail(order, &v->lru);
}

void td__lru_del(struct td__version *v)
{
	/* a record never current has lru zeroed (td__version_new) */
	if (v->lru.next)
		td__list_del(&v->lru);
	v->lru.next = v->lru.prev = NULL;
}

void td__lru_touch(struct td__list *order, struct td__version *v)
{
	if (!v->lru.next)
		return; /* not current: a GET of a retired version */
	td__list_del(&v->lru);
	td__list_add_tail(order, &v->lru);
}
