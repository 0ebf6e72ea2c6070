/* SPDX-License-Identifier: MIT */
/*
 * The fd store's table (fdtab.h). Entries sit in one array, each on two
 * chains of links (1 + index): one by id, one by file. A PUBLISH looks
 * for its plane's file on one chain, a version's end for its id on
 * another; a walk over the table cost both in proportion to every file
 * stored (docs/reliability.md, "Many tensors").
 */
#include "fdtab.h"
#include "daemon.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/kcmp.h>
#include <xxhash.h>

static size_t id_slot(const struct td__fdtab *t, uint64_t id)
{
	return XXH3_64bits_withSeed(&id, sizeof(id), t->seed) &
	       (t->nheads - 1);
}

static size_t file_slot(const struct td__fdtab *t, dev_t dev, ino_t ino)
{
	const uint64_t k[2] = {(uint64_t)dev, (uint64_t)ino};

	/* seeded: a client makes memfds, and so inode numbers, in a row,
	 * and need not get them all on one chain */
	return XXH3_64bits_withSeed(k, sizeof(k), t->seed ^ 0xf5) &
	       (t->nheads - 1);
}

static bool same_file(int a, int b)
{
	pid_t pid = getpid();

	return syscall(SYS_kcmp, pid, pid, KCMP_FILE, a, b) == 0;
}

/* The link holding 1 + the index of id's entry (*link 0: none). */
static size_t *id_link(struct td__fdtab *t, uint64_t id)
{
	size_t *l = &t->id_heads[id_slot(t, id)];

	while (*l && t->e[*l - 1].id != id) {
		td__d->stats.visits++;
		l = &t->e[*l - 1].next_id;
	}
	if (*l)
		td__d->stats.visits++;
	return l;
}

static size_t *file_head(struct td__fdtab *t, bool plane, dev_t dev,
			 ino_t ino)
{
	return plane ? &t->file_heads[file_slot(t, dev, ino)] : &t->fences;
}

/* The link to the file's entry (fd: a fence's, compared by kcmp). */
static size_t *file_link(struct td__fdtab *t, int fd, bool plane, dev_t dev,
			 ino_t ino)
{
	size_t *l = file_head(t, plane, dev, ino);

	for (; *l; l = &t->e[*l - 1].next_file) {
		const struct td__sfd *e = &t->e[*l - 1];

		td__d->stats.visits++;
		if (plane ? e->dev == dev && e->ino == ino
			  : e->dup >= 0 && same_file(e->dup, fd))
			break;
	}
	return l;
}

/* The link that holds 1 + i on the chain starting at l (next: which). */
static size_t *link_to(struct td__fdtab *t, size_t *l, size_t i, bool by_id)
{
	while (*l != i + 1)
		l = by_id ? &t->e[*l - 1].next_id : &t->e[*l - 1].next_file;
	return l;
}

/* heads made anew, n of each (a power of two); false: no memory, the
 * old ones kept */
static bool rehash(struct td__fdtab *t, size_t n)
{
	size_t *ih = calloc(n, sizeof(*ih)), *fh = calloc(n, sizeof(*fh));

	if (!ih || !fh) {
		free(ih);
		free(fh);
		return false;
	}
	free(t->id_heads);
	free(t->file_heads);
	t->id_heads = ih;
	t->file_heads = fh;
	t->nheads = n;
	t->fences = 0;
	for (size_t i = 0; i < t->n; i++) {
		struct td__sfd *e = &t->e[i];
		size_t *l = &ih[id_slot(t, e->id)];

		e->next_id = *l;
		*l = i + 1;
		l = file_head(t, e->plane, e->dev, e->ino);
		e->next_file = *l;
		*l = i + 1;
	}
	return true;
}

struct td__sfd *td__fdtab_find_id(struct td__fdtab *t, uint64_t id)
{
	size_t *l;

	if (!t->nheads)
		return NULL;
	l = id_link(t, id);
	return *l ? &t->e[*l - 1] : NULL;
}

struct td__sfd *td__fdtab_find_file(struct td__fdtab *t, int fd, bool plane,
				    dev_t dev, ino_t ino)
{
	size_t *l;

	if (!t->nheads)
		return NULL;
	l = file_link(t, fd, plane, dev, ino);
	return *l ? &t->e[*l - 1] : NULL;
}

struct td__sfd *td__fdtab_add(struct td__fdtab *t, uint64_t id, int fd,
			      bool plane, dev_t dev, ino_t ino)
{
	struct td__sfd *e;
	size_t *l;

	if (!t->seed && getrandom(&t->seed, sizeof(t->seed), GRND_NONBLOCK) !=
				(ssize_t)sizeof(t->seed))
		t->seed = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull;
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 64;

		e = realloc(t->e, cap * sizeof(*e));
		if (!e)
			return NULL;
		t->e = e;
		t->cap = cap;
	}
	/* as many heads as entries there is room for */
	if (t->nheads < t->cap && !rehash(t, t->cap) && !t->nheads)
		return NULL;
	e = &t->e[t->n];
	*e = (struct td__sfd){id, plane, dev, ino, -1, 1, 0, 0};
	if (!plane)
		e->dup = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	l = &t->id_heads[id_slot(t, id)];
	e->next_id = *l;
	*l = ++t->n;
	l = file_head(t, plane, dev, ino);
	e->next_file = *l;
	*l = t->n;
	return e;
}

void td__fdtab_del(struct td__fdtab *t, struct td__sfd *e)
{
	size_t i = (size_t)(e - t->e), last = t->n - 1;
	size_t *l;

	if (e->dup >= 0)
		close(e->dup);
	l = link_to(t, &t->id_heads[id_slot(t, e->id)], i, true);
	*l = e->next_id;
	l = link_to(t, file_head(t, e->plane, e->dev, e->ino), i, false);
	*l = e->next_file;
	t->n = last;
	if (i == last)
		return;
	/* the last entry moves to i: the links to it follow */
	e = &t->e[last];
	*link_to(t, &t->id_heads[id_slot(t, e->id)], last, true) = i + 1;
	*link_to(t, file_head(t, e->plane, e->dev, e->ino), last, false) =
		i + 1;
	t->e[i] = *e;
}

void td__fdtab_purge(struct td__fdtab *t)
{
	for (size_t i = 0; i < t->n;)
		if (t->e[i].refs)
			i++;
		else
			td__fdtab_del(t, &t->e[i]); /* the last comes to i */
}

void td__fdtab_free(struct td__fdtab *t)
{
	for (size_t i = 0; i < t->n; i++)
		if (t->e[i].dup >= 0)
			close(t->e[i].dup);
	free(t->e);
	free(t->id_heads);
	free(t->file_heads);
	*t = (struct td__fdtab){0};
}
