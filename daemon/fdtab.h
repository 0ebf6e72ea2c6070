/* SPDX-License-Identifier: MIT */
/*
 * The fd store's table (fdtab.c, for fdstore.c): every file the daemon
 * pushed to systemd's fd store, under its id ("td.fd.<id>"), found by id
 * and by file in one chain of a hash table each, not by a walk over
 * every stored file.
 */
#ifndef TD_DAEMON_FDTAB_H
#define TD_DAEMON_FDTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct td__sfd {
	uint64_t id;
	bool plane;
	dev_t dev;
	ino_t ino;
	int dup; /* fences: our copy, to compare open files; else -1 */
	unsigned refs;
	size_t next_id, next_file; /* chains: 1 + index, 0 ends */
};

struct td__fdtab {
	struct td__sfd *e;
	size_t n, cap;
	/* cap heads each (a power of two): by id, by (dev, ino) */
	size_t *id_heads, *file_heads, nheads;
	/*
	 * Fences, on a chain of their own: an eventfd or sync_file has the
	 * anonymous inode every other one has, so only kcmp(2) tells two
	 * open files apart. A fence lives as long as its version, so few
	 * are stored at once.
	 */
	size_t fences;
	uint64_t seed;
};

/* The entry of id, or NULL. */
struct td__sfd *td__fdtab_find_id(struct td__fdtab *t, uint64_t id);
/* The entry of fd's file (a plane: dev, ino), or NULL. */
struct td__sfd *td__fdtab_find_file(struct td__fdtab *t, int fd, bool plane,
				    dev_t dev, ino_t ino);
/* A new entry (refs 1; a fence's fd is duplicated), or NULL: no memory. */
struct td__sfd *td__fdtab_add(struct td__fdtab *t, uint64_t id, int fd,
			      bool plane, dev_t dev, ino_t ino);
/* e leaves the table (its copy closed); the last entry takes its place. */
void td__fdtab_del(struct td__fdtab *t, struct td__sfd *e);
/* Every entry of refs 0 leaves the table. */
void td__fdtab_purge(struct td__fdtab *t);
void td__fdtab_free(struct td__fdtab *t);

#endif
