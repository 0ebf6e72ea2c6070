/* SPDX-License-Identifier: MIT */
/*
 * A version restored from a state image (fdstore.c) passes the checks of
 * a PUBLISH (publish.c's, through publish-int.h).
 */
#include "publish-int.h"
#include "os.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blob.h"
#include "bytes.h"

/* ---- restoring from a state image (fdstore.c) ---- */

/*
 * The PUBLISH checks (steps 3-7) of an image entry whose fds are in
 * x->tab: 0, or -errno with the reason in x.
 */
static int restore_check(struct pub *x, const struct td_state_entry *ent)
{
	struct td__store *s = td__d->store;
	const char *why = NULL;
	int rc = td__pub_check_blob(x);

	if (rc == 0)
		rc = td__pub_check_fds(x);
	if (rc < 0)
		return rc;
	if (td__name_lookup(s, ent->name))
		return td__pub_fail(x, -EEXIST, "name restored twice");
	x->acct = td__pub_heap_bytes(x);
	for (uint32_t i = 0; i < x->ntab; i++)
		if (x->is_plane[i])
			x->acct += x->info[i].size;
	if (td__acct_over_max(s, x->acct, 0))
		return td__pub_fail(x, -ENOSPC,
				"%llu more bytes exceed --max-bytes",
				(unsigned long long)x->acct);
	/* published memfds are sealed already; this only confirms it */
	for (uint32_t i = 0; i < x->ntab; i++) {
		if (!x->is_plane[i] || x->info[i].type != TD__PLANE_MEMFD)
			continue;
		rc = td__memfd_seal_publish(x->tab[i], &why);
		if (rc < 0)
			return td__pub_fail(x, rc, "fd table entry %u: %s", i,
					why);
	}
	return 0;
}

/* Put ver in place under the entry's version number (cannot fail). */
static void restore_commit(struct pub *x, const struct td_state_entry *ent,
			   struct td__version *ver)
{
	struct td__store *s = td__d->store;

	ver->nfds = x->ntab;
	for (uint32_t i = 0; i < x->ntab; i++) {
		struct td__vfd *f = &ver->fds[i];

		td__vfd_set(s, f, x->tab[i], x->is_plane[i], 0);
		x->own[i] = false;
		/* id 0: not from the fd store (a snapshot): store it now */
		if (!ent->fd_ids[i])
			f->sid = td__store_fd_kept(f);
		else if (td__store_fd_adopt(ent->fd_ids[i], f) == 0)
			f->sid = ent->fd_ids[i];
	}
	ver->acct = x->acct;
	s->total += x->acct;
	/* charged to the total only: no uid published it (the image does
	 * not say who), so freeing it must not take its bytes off the
	 * account of uid 0, whose self it was restored as */
	ver->unowned = true;
	ver->number = ent->version;
	if (ent->version >= s->next_version)
		s->next_version = ent->version + 1;
	/* used as if published now: td__name_set puts it last in
	 * eviction's order (lru.c) */
	ver->used = ++s->tick;
	td__name_set(s, ver);
	td__list_add_tail(&s->versions, &ver->all);
}

/*
 * An image entry comes from outside the process (through PID 1), so it
 * runs the PUBLISH checks (steps 3-9) as if the daemon itself were the
 * producer: the blob was stored with the old daemon's pid, which is
 * rewritten to ours first.
 */
int td__store_restore(const struct td_state_entry *ent, int *fds, char *why,
		      size_t cap)
{
	struct td__daemon *d = td__d;
	struct td__peer self = {.pid = d->pid, .pidfd = -1};
	struct td_wire_hdr h = {.opcode = TD_OP_PUBLISH};
	struct pub x = {.p = &self, .h = &h};
	struct td__version *ver;
	uint8_t *blob = NULL;
	int rc = 0;

	for (uint32_t i = 0; i < TD__TABLE_MAX; i++)
		x.tab[i] = x.ro[i] = -1;
	x.ntab = ent->fd_count;
	for (uint32_t i = 0; i < x.ntab; i++) {
		x.tab[i] = fds[i];
		x.own[i] = true;
		fds[i] = -1;
	}
	if (ent->blob.len < TD_BLOB_PID_OFFSET + 4) {
		rc = td__pub_fail(&x, -ENODATA, "blob of %u bytes is too short",
			      ent->blob.len);
		goto out;
	}
	if (ent->version > TD__VERSION_MAX) {
		rc = td__pub_fail(&x, -ERANGE, "version %" PRIu64 " is out of "
			      "range (at most 2^55)", ent->version);
		goto out;
	}
	blob = malloc(ent->blob.len);
	if (!blob) {
		rc = td__pub_fail(&x, -ENOMEM, "out of memory");
		goto out;
	}
	memcpy(blob, ent->blob.ptr, ent->blob.len);
	td__put_le32(blob + TD_BLOB_PID_OFFSET, (uint32_t)d->pid);
	x.m.name = ent->name;
	x.m.flags = ent->flags;
	x.m.meta = ent->meta;
	x.m.blob = (struct td_wire_bytes){blob, ent->blob.len};
	x.m.fd_count = ent->fd_count;
	rc = restore_check(&x, ent);
	if (rc < 0)
		goto out;
	ver = td__pub_build(&x);
	if (!ver || td__name_reserve(d->store) < 0) {
		if (ver)
			td__version_put(d->store, ver);
		rc = td__pub_fail(&x, -ENOMEM, "out of memory");
		goto out;
	}
	restore_commit(&x, ent, ver);
out:
	free(blob);
	td__pub_close(&x, NULL, 0);
	if (rc < 0)
		snprintf(why, cap, "%s", x.why);
	return rc;
}
