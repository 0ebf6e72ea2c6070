/* SPDX-License-Identifier: MIT */
/*
 * publish.c's steps that publish-restore.c runs too: a version restored
 * from a state image passes the checks of a PUBLISH.
 */
#ifndef TD_DAEMON_PUBLISH_INT_H
#define TD_DAEMON_PUBLISH_INT_H

#include "store.h"

#include "blob.h"

/* Everything one PUBLISH gathers; on failure every owned fd is closed. */
struct pub {
	struct td__peer *p;
	const struct td_wire_hdr *h;
	struct td_wire_publish_req m;
	struct td_blob_view view;
	struct td__alloc *alloc;
	uint32_t ntab;
	int tab[TD__TABLE_MAX];   /* the daemon's fds, in fd-table order */
	bool own[TD__TABLE_MAX];  /* tab[i] is ours to close on failure */
	struct td__plane_info info[TD__TABLE_MAX];
	bool is_plane[TD__TABLE_MAX];
	int ro[TD__TABLE_MAX]; /* read-only reopens of the memfd planes */
	uint64_t acct;         /* bytes charged beyond the alloc's */
	bool many;             /* an element of a PUBLISH_MANY */
	unsigned nkeep;        /* descriptors the version will keep */
	unsigned prior;        /* ... and those of the elements before */
	/* the refusal, sent only after every fd is closed (td__publish) */
	int rc;
	char why[TD_WIRE_MAX_REASON];
};

/* the refusal: x->rc and x->why set, rc returned */
int td__pub_fail(struct pub *x, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* steps 1-3 (the blob) and 5 (every descriptor), checked */
int td__pub_check_blob(struct pub *x);
int td__pub_check_fds(struct pub *x);
/* the metadata's bytes, charged like plane bytes */
uint64_t td__pub_heap_bytes(const struct pub *x);
/* the version record of x, or NULL (no memory) */
struct td__version *td__pub_build(struct pub *x);
/* everything x did not keep is closed, and fds */
void td__pub_close(struct pub *x, int *fds, unsigned nfds);

#endif
