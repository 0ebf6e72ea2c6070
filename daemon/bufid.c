/* SPDX-License-Identifier: MIT */
/*
 * Buffer ids (store.c's td__vfd_set and td__vfd_close): equal files get
 * equal ids, so a client maps each file once (its map cache). The files
 * the store holds, counted, in a table found by a seeded hash of the
 * file (dev, ino): a PUBLISH or a version's close looks at one chain,
 * where a walk over the table cost it in proportion to every buffer
 * held.
 */
#include "store.h"

#include <stdlib.h>

#include <xxhash.h>

static size_t buf_slot(const struct td__store *s, dev_t dev, ino_t ino)
{
	const uint64_t k[2] = {(uint64_t)dev, (uint64_t)ino};

	/* seeded: inode numbers are the kernel's, but a client makes many
	 * memfds in a row and need not get a chain of them */
	return XXH3_64bits_withSeed(k, sizeof(k), s->name_seed ^ 0xb0f) &
	       (s->buf_nheads - 1);
}

/* The link that holds 1 + the index of dev/ino's entry (a head of
 * s->buf_heads, or the next of the entry before it), *link 0: none */
static size_t *buf_link(struct td__store *s, dev_t dev, ino_t ino)
{
	size_t *l = &s->buf_heads[buf_slot(s, dev, ino)];

	while (*l) {
		struct td__buf *b = &s->bufs[*l - 1];

		td__d->stats.visits++;
		if (b->dev == dev && b->ino == ino)
			break;
		l = &b->next;
	}
	return l;
}

/* buf_heads made anew with n heads (a power of two); false, and the old
 * ones kept, when there is no memory for them */
static bool buf_rehash(struct td__store *s, size_t n)
{
	size_t *h = calloc(n, sizeof(*h));

	if (!h)
		return false;
	free(s->buf_heads);
	s->buf_heads = h;
	s->buf_nheads = n;
	for (size_t i = 0; i < s->nbufs; i++) {
		size_t *l = &h[buf_slot(s, s->bufs[i].dev, s->bufs[i].ino)];

		s->bufs[i].next = *l;
		*l = i + 1;
	}
	return true;
}

uint64_t td__buf_ref(struct td__store *s, dev_t dev, ino_t ino)
{
	struct td__buf *b;
	size_t *l;

	if (s->buf_nheads) {
		l = buf_link(s, dev, ino);
		if (*l) {
			s->bufs[*l - 1].refs++;
			return s->bufs[*l - 1].id;
		}
	}
	/* grows with the buffers held, not per handoff: as many heads as
	 * the table has room for entries */
	if (s->nbufs == s->bufs_cap) {
		size_t cap = s->bufs_cap ? s->bufs_cap * 2 : 64;

		b = realloc(s->bufs, cap * sizeof(*b));
		if (!b)
			return s->next_buf++; /* unshared id: still correct */
		s->bufs = b;
		s->bufs_cap = cap;
	}
	if (s->buf_nheads < s->bufs_cap && !buf_rehash(s, s->bufs_cap) &&
	    !s->buf_nheads)
		return s->next_buf++;
	l = &s->buf_heads[buf_slot(s, dev, ino)];
	b = &s->bufs[s->nbufs];
	*b = (struct td__buf){dev, ino, s->next_buf++, 1, *l};
	*l = ++s->nbufs;
	return b->id;
}

void td__buf_unref(struct td__store *s, dev_t dev, ino_t ino)
{
	size_t *l, i, last;

	if (!s->buf_nheads)
		return;
	l = buf_link(s, dev, ino);
	if (!*l)
		return;
	i = *l - 1;
	if (--s->bufs[i].refs)
		return;
	*l = s->bufs[i].next;
	last = --s->nbufs;
	if (i != last) {
		/* the last entry moves to i: the link to it follows */
		l = buf_link(s, s->bufs[last].dev, s->bufs[last].ino);
		s->bufs[i] = s->bufs[last];
		*l = i + 1;
	}
}

/* After the table shrank (td__store_trim): heads to match */
void td__buf_trim(struct td__store *s)
{
	if (s->buf_nheads > s->bufs_cap)
		buf_rehash(s, s->bufs_cap); /* or the old heads: as correct */
}
