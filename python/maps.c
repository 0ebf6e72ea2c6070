/* SPDX-License-Identifier: MIT */
/*
 * The binding's own read-only mappings of leased planes, and its
 * writable mappings of recyclable loans, cached per client like
 * libtensord's mapping caches.
 *
 * Why its own: release() must be callable while views are alive, and
 * after it libtensord may unmap its mapping at any time (its cache is
 * bounded, td_client_close() empties it), so views point into a mapping
 * the binding holds until the last of them dies.
 *
 * Why cached: a fresh mapping per get() has no page tables, so reading
 * it takes a page fault per page (16384 for 64 MiB), which cost more
 * than a socket's copy of the bytes. A mapping of the same file range
 * (same file: device and inode; same offset) is the same pages, so a
 * get() of a buffer mapped before reuses it, page tables warm. Up to
 * TDPY_IDLE_MAPS mappings no view uses stay cached, least recently used
 * out first; Client.trim() and close() unmap them. As with libtensord's
 * cache, a cached mapping keeps its buffer's memory alive after the
 * daemon dropped it.
 *
 * A recyclable loan that alloc(private=False) asked for is mapped from
 * the cache too, writable (never handed to a reader): its buffer comes
 * back to this producer version after version, and the same mapping,
 * page tables filled, serves each loan of it whose earlier arrays are
 * gone, where a fresh one cost a mapping, a page fault per page written
 * and an unmap a version (docs/python.md, "Lifetime").
 */
#include "tdpy.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define TDPY_IDLE_MAPS 16

struct tdpy_map {
	struct tdpy_map *next, *prev; /* the client's list, most recent first */
	ClientObject *cl;             /* NULL once the client closed */
	dev_t dev;
	ino_t ino;
	uint64_t off; /* file range mapped, in the file's pages */
	size_t len;
	void *addr;
	unsigned refs; /* owners pointing into it */
	bool writable; /* a loan's: shared, read-write */
};

static void unlink_map(struct tdpy_map *m)
{
	if (m->prev)
		m->prev->next = m->next;
	else if (m->cl)
		m->cl->maps = m->next;
	if (m->next)
		m->next->prev = m->prev;
	m->next = m->prev = NULL;
}

static void push_front(ClientObject *cl, struct tdpy_map *m)
{
	m->cl = cl;
	m->prev = NULL;
	m->next = cl->maps;
	if (cl->maps)
		cl->maps->prev = m;
	cl->maps = m;
}

static void destroy(struct tdpy_map *m)
{
	munmap(m->addr, m->len);
	free(m);
}

/* Unmap idle mappings beyond keep, least recently used first. */
static int evict(ClientObject *cl, unsigned keep)
{
	struct tdpy_map *m = cl->maps, *tail = NULL;
	int n = 0;

	for (; m; m = m->next)
		tail = m;
	for (m = tail; m && cl->idle_maps > keep;) {
		struct tdpy_map *prev = m->prev;

		if (!m->refs) {
			unlink_map(m);
			destroy(m);
			cl->idle_maps--;
			n++;
		}
		m = prev;
	}
	return n;
}

/* Read-only, shared; private where old kernels refuse a shared map of
 * a write-sealed memfd (the same page-cache pages either way). */
static void *map_ro(int fd, uint64_t off, size_t len)
{
	void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)off);

	if (p == MAP_FAILED && (errno == EPERM || errno == EACCES))
		p = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, (off_t)off);
	return p;
}

/* A cached mapping used again: one more owner, most recent first. */
static void map_take(ClientObject *cl, struct tdpy_map *m)
{
	if (m->refs++ == 0)
		cl->idle_maps--;
	unlink_map(m);
	push_front(cl, m);
}

/* A new mapping of [off, off + len) of fd (st: its fstat), read-only
 * or a loan's (writable, shared), with one owner: 0, or -errno. */
static int map_new(ClientObject *cl, int fd, const struct stat *st,
		   uint64_t off, size_t len, bool writable,
		   struct tdpy_map **out)
{
	struct tdpy_map *m = calloc(1, sizeof(*m));

	if (!m)
		return -ENOMEM;
	m->addr = writable ? mmap(NULL, len, PROT_READ | PROT_WRITE,
				  MAP_SHARED, fd, (off_t)off)
			   : map_ro(fd, off, len);
	if (m->addr == MAP_FAILED) {
		int rc = -errno;

		free(m);
		return rc;
	}
	/* a loan's: not into a child of fork() (owner.c) */
	if (writable)
		(void)madvise(m->addr, len, MADV_DONTFORK);
	m->dev = st->st_dev;
	m->ino = st->st_ino;
	m->off = off;
	m->len = len;
	m->refs = 1;
	m->writable = writable;
	/* a call that waited returns after close() took effect: the
	 * closed client's cache would keep the mapping for ever, so it
	 * goes with its last owner (tdpy_map_put, m->cl NULL) */
	if (cl->handle)
		push_front(cl, m);
	*out = m;
	return 0;
}

int tdpy_map_get(ClientObject *cl, int fd, uint64_t off, uint64_t size,
		 struct tdpy_map **out, char **data)
{
	uint64_t align = (uint64_t)sysconf(_SC_PAGESIZE), lo, hi;
	struct tdpy_map *m;
	struct stat st;
	int rc;

	if (fstat(fd, &st) < 0)
		return -errno;
	/* mmap offsets: pages, or huge pages on hugetlbfs (its blksize) */
	if (st.st_blksize > 0 && (uint64_t)st.st_blksize > align &&
	    !(st.st_blksize & (st.st_blksize - 1)))
		align = (uint64_t)st.st_blksize;
	if (__builtin_add_overflow(off, size, &hi) ||
	    __builtin_add_overflow(hi, align - 1, &hi) || hi > SIZE_MAX)
		return -EOVERFLOW;
	lo = off & ~(align - 1);
	hi &= ~(align - 1);
	for (m = cl->maps; m; m = m->next)
		if (!m->writable && m->dev == st.st_dev &&
		    m->ino == st.st_ino && lo >= m->off &&
		    hi <= m->off + m->len)
			break;
	if (m)
		map_take(cl, m);
	else if ((rc = map_new(cl, fd, &st, lo, (size_t)(hi - lo), false,
			       &m)) < 0)
		return rc;
	*out = m;
	*data = (char *)m->addr + (off - m->off);
	return 0;
}

int tdpy_map_loan(ClientObject *cl, int fd, uint64_t size,
		  struct tdpy_map **out, void **addr)
{
	struct tdpy_map *m;
	struct stat st;
	int rc;

	if (size > SIZE_MAX)
		return -EOVERFLOW;
	if (fstat(fd, &st) < 0)
		return -errno;
	/* one owner at a time: a loan's earlier arrays still alive keep
	 * theirs, and this loan gets another */
	for (m = cl->maps; m; m = m->next)
		if (m->writable && !m->refs && m->dev == st.st_dev &&
		    m->ino == st.st_ino && m->len == size)
			break;
	if (m)
		map_take(cl, m);
	else if ((rc = map_new(cl, fd, &st, 0, (size_t)size, true, &m)) < 0)
		return rc;
	*out = m;
	*addr = m->addr;
	return 0;
}

void tdpy_map_put(struct tdpy_map *m)
{
	if (!m || --m->refs)
		return;
	if (!m->cl) {
		destroy(m); /* its client closed: nobody will reuse it */
		return;
	}
	m->cl->idle_maps++;
	evict(m->cl, TDPY_IDLE_MAPS);
}

int tdpy_maps_trim(ClientObject *cl)
{
	return evict(cl, 0);
}

void tdpy_maps_detach(ClientObject *cl)
{
	struct tdpy_map *m, *next;

	evict(cl, 0);
	for (m = cl->maps; m; m = next) {
		next = m->next;
		m->next = m->prev = NULL;
		m->cl = NULL; /* freed by its last tdpy_map_put() */
	}
	cl->maps = NULL;
}
