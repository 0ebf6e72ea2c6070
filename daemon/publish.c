/* SPDX-License-Identifier: MIT */
/*
 * PUBLISH: a producer's tensor becomes its name's current version, in
 * steps that check everything before the one irreversible step (sealing)
 * and commit only what cannot fail after it. A version restored from a
 * state image (fdstore.c) passes the same checks.
 */
#include "publish-int.h"
#include "os.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blob.h"
#include "bytes.h"

int td__pub_fail(struct pub *x, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(x->why, sizeof(x->why), fmt, ap);
	va_end(ap);
	x->rc = rc;
	return rc;
}

/* Steps 1-3: the blob itself, before any descriptor is pulled. */
int td__pub_check_blob(struct pub *x)
{
	const struct td_blob_view *v = &x->view;
	struct td_err e = {0};
	bool used[TD__TABLE_MAX] = {false};
	struct td_blob_plane pl;
	int rc;

	rc = td_blob_decode(x->m.blob.ptr, x->m.blob.len, &x->view, &e);
	if (rc == 0)
		rc = td_blob_check(&x->view, x->ntab, &e);
	if (rc < 0)
		return td__pub_fail(x, rc, "blob: %s%s%s%s: %s",
				td_err_kind_name(e.kind), e.field ? " (" : "",
				e.field ? e.field : "", e.field ? ")" : "",
				e.reason ? e.reason : "invalid");
	if (v->plane_count == 0 ||
	    (td_blob_plane_get(v, 0, &pl) == 0 && pl.handle < 0))
		return td__pub_fail(x, -EINVAL,
				"inline tensors are not stored; use reference "
				"mode");
	if (v->pid != (uint32_t)x->p->pid)
		return td__pub_fail(x, -EPERM,
				"blob pid %u is not the connected process "
				"(pid %d)",
				v->pid, (int)x->p->pid);
	if (v->ndim > TD_WIRE_MAX_DIMS)
		return td__pub_fail(x, -EINVAL, "more than %d dimensions",
				TD_WIRE_MAX_DIMS);
	for (uint32_t i = 0; td_blob_plane_get(v, i, &pl) == 0; i++) {
		used[pl.handle] = true;
		x->is_plane[pl.handle] = true;
	}
	if (v->fence_fd >= 0) {
		if (x->is_plane[v->fence_fd])
			return td__pub_fail(x, -EINVAL,
					"fence index %d is also a plane handle",
					v->fence_fd);
		if (x->alloc && (uint32_t)v->fence_fd < x->alloc->count)
			return td__pub_fail(x, -EINVAL,
					"fence index %d names an alloc plane",
					v->fence_fd);
		used[v->fence_fd] = true;
	}
	for (uint32_t i = 0; i < x->ntab; i++)
		if (!used[i])
			return td__pub_fail(x, -EINVAL,
					"fd table entry %u is used by no plane "
					"and is not the fence",
					i);
	return 0;
}

/* Step 4: the descriptors, from the alloc, SCM_RIGHTS or pidfd_getfd. */
static int pub_take_fds(struct pub *x, int *fds, unsigned nfds)
{
	struct td__peer *p = x->p;
	bool pulled = false;

	for (uint32_t i = 0; i < x->ntab; i++) {
		if (x->alloc && i < x->alloc->count) {
			x->tab[i] = x->alloc->fds[i].fd;
			x->own[i] = false;
			if (nfds) {
				/* a copy of the alloc plane came along */
				struct stat a, b;

				/* its fstat could wait on a peer's server */
				if (td__fd_foreign(fds[i]) ||
				    fstat(fds[i], &b) < 0 ||
				    fstat(x->tab[i], &a) < 0 ||
				    a.st_ino != b.st_ino ||
				    a.st_dev != b.st_dev)
					return td__pub_fail(x, -EINVAL,
							"fd table entry %u is "
							"not plane %u of alloc "
							"%llu",
							i, i,
							(unsigned long long)
								x->alloc->id);
			}
			continue;
		}
		if (nfds) {
			x->tab[i] = fds[i];
			fds[i] = -1;
			x->own[i] = true;
			continue;
		}
		if (p->import_in != TD_IMPORT_PIDFD)
			return td__pub_fail(x, -EINVAL,
					"this connection imports with "
					"SCM_RIGHTS: attach the %u fds",
					x->ntab);
		x->tab[i] = td__pidfd_getfd(p->pidfd, x->m.fds[i]);
		if (x->tab[i] < 0) {
			int rc = x->tab[i];

			x->tab[i] = -1;
			return td__pub_fail(x, rc,
					"fd table entry %u: pidfd_getfd of "
					"producer fd %d failed: %s",
					i, x->m.fds[i], strerror(-rc));
		}
		x->own[i] = true;
		pulled = true;
	}
	/*
	 * After the pulls, before anything uses what was pulled: a process
	 * that changed credentials (a setuid exec) in between is seen here
	 * (cred.c). Such a connection imports by SCM_RIGHTS from then on.
	 */
	if (pulled && td__peer_pull_check(p, x->why, sizeof(x->why)) < 0) {
		static struct td__ratelimit rl;
		char why[sizeof(x->why)];

		memcpy(why, x->why, sizeof(why));
		p->import_in = TD_IMPORT_SCM;
		if (td__ratelimit_ok(&rl, TD__LOG_INTERVAL_MS)) {
			td__log(TD_LOG_WARN,
				"peer pid %d uid %u: pidfd import refused: "
				"%s (%lu more since the last such line)",
				(int)p->pid, (unsigned)p->uid, why,
				rl.suppressed);
			rl.suppressed = 0;
		}
		return td__pub_fail(x, -EPERM,
				"pidfd import refused: %s; attach the fds "
				"(SCM_RIGHTS)",
				why);
	}
	return 0;
}

/*
 * Step 5b: what the uid may hold. dma-buf planes need the policy's
 * dmabuf permission (a dma-buf cannot be handed out read-only, see
 * docs/reliability.md); every descriptor the version keeps counts
 * against the uid's fds limit.
 */
static int pub_check_tenant(struct pub *x)
{
	struct td__peer *p = x->p;
	unsigned n = 0;
	bool dmabuf = false;
	int rc;

	for (uint32_t i = 0; i < x->ntab; i++) {
		bool recyc = x->alloc && x->alloc->recycle &&
			     i < x->alloc->count;

		n += x->own[i];
		/* a recyclable plane keeps a read-only reopen besides */
		n += recyc && x->alloc->fds[i].ro < 0 && x->is_plane[i];
		dmabuf = dmabuf || (x->is_plane[i] &&
				    x->info[i].type == TD__PLANE_DMABUF);
	}
	if (dmabuf &&
	    !td__access_may(p, TD__PERM_DMABUF, x->m.name.ptr, x->m.name.len))
		return td__pub_fail(x, -EACCES,
				"uid %u may not publish dma-buf planes as "
				"\"%.*s\" (policy %s: allow ... dmabuf): "
				"consumers could write into them",
				(unsigned)p->uid, (int)x->m.name.len,
				x->m.name.ptr, td__d->opts.policy_path);
	x->nkeep = n;
	rc = td__tenant_check(p->uid, TD__LIM_FDS, x->prior + n, x->why,
			      sizeof(x->why));
	if (rc < 0) {
		char why[sizeof(x->why)];

		memcpy(why, x->why, sizeof(why));
		return td__pub_fail(x, rc, "PUBLISH: %s", why);
	}
	return 0;
}

/* Step 5: every descriptor checked before anything is sealed or kept. */
int td__pub_check_fds(struct pub *x)
{
	const struct td_blob_view *v = &x->view;
	struct td_blob_plane pl;
	const char *why = NULL;
	struct td_err e = {0};
	int rc;

	for (uint32_t i = 0; i < x->ntab; i++) {
		if (!x->is_plane[i]) {
			rc = td__fence_check(x->tab[i], &why);
			if (rc < 0)
				return td__pub_fail(x, rc, "fd table entry %u: %s",
						i, why);
			continue;
		}
		if (x->alloc && i < x->alloc->count &&
		    x->alloc->fds[i].tracked) {
			/*
			 * A plane this daemon made (td__plane_create): a
			 * memfd of the size asked, size-sealed since, whose
			 * file it stat()ed then. No syscall to learn it
			 * again on every handoff.
			 */
			const struct td__vfd *f = &x->alloc->fds[i];

			x->info[i] = (struct td__plane_info){
				.type = TD__PLANE_MEMFD, .size = f->size,
				.dev = f->dev, .ino = f->ino};
		} else {
			rc = td__plane_probe(x->tab[i], &x->info[i], &why);
			if (rc < 0)
				return td__pub_fail(x, rc,
						"fd table entry %u: %s", i,
						why);
		}
		bool dmabuf = x->info[i].type == TD__PLANE_DMABUF;

		if (dmabuf != (v->storage_kind == TD_STORAGE_DMABUF))
			return td__pub_fail(x, -EINVAL,
					"fd table entry %u is a %s but the "
					"blob says storage_kind %s",
					i, dmabuf ? "dma-buf" : "memfd",
					td_storage_kind_name(v->storage_kind));
		for (uint32_t j = 0; j < i; j++)
			if (x->is_plane[j] &&
			    x->info[j].dev == x->info[i].dev &&
			    x->info[j].ino == x->info[i].ino)
				return td__pub_fail(x, -EINVAL,
						"fd table entries %u and %u "
						"are the same buffer",
						j, i);
	}
	for (uint32_t i = 0; td_blob_plane_get(v, i, &pl) == 0; i++) {
		const struct td__plane_info *pi = &x->info[pl.handle];
		uint64_t end, need;

		if (td__add_ovf(pl.offset, pl.size, &end) || end > pi->size)
			return td__pub_fail(x, -EINVAL,
					"plane %u: offset %llu + size %llu is "
					"past the end of its buffer (%llu "
					"bytes)",
					i, (unsigned long long)pl.offset,
					(unsigned long long)pl.size,
					(unsigned long long)pi->size);
		if (pl.used > pl.size)
			return td__pub_fail(x, -EINVAL,
					"plane %u: used %llu > size %llu", i,
					(unsigned long long)pl.used,
					(unsigned long long)pl.size);
		if (pl.modifier != 0 && pi->type == TD__PLANE_MEMFD)
			return td__pub_fail(x, -EINVAL,
					"plane %u: a memfd plane is linear "
					"(modifier must be 0)",
					i);
		rc = td_blob_plane_need(v, i, &pl, &need, &e);
		if (rc < 0)
			return td__pub_fail(x, rc, "plane %u: %s", i, e.reason);
		if (need > pl.size)
			return td__pub_fail(x, -EINVAL,
					"plane %u holds %llu bytes but its "
					"layout needs %llu",
					i, (unsigned long long)pl.size,
					(unsigned long long)need);
	}
	return 0;
}

struct td__version *td__pub_build(struct pub *x)
{
	struct td__store *s = td__d->store;
	const struct td_blob_view *v = &x->view;
	size_t blen = (size_t)v->size; /* <= m.blob.len after decode */
	struct td__version *ver;

	ver = td__version_new(s, x->m.meta.len + blen);
	if (!ver)
		return NULL;
	ver->refs = 1;
	/* the version keeps PIN; the rest are this request's */
	ver->flags = x->m.flags & TD_WIRE_PUB_PIN;
	ver->fence_ix = (int8_t)v->fence_fd; /* -1 or an fd-table index */
	ver->dtype = v->dtype;
	ver->ndim = v->ndim;
	for (uint32_t i = 0; i < v->ndim; i++)
		ver->shape[i] = td_blob_shape(v, i);
	for (uint32_t i = 0; i < v->plane_count; i++) {
		struct td_blob_plane pl;

		td_blob_plane_get(v, i, &pl);
		ver->bytes += pl.size;
	}
	ver->name_len = x->m.name.len;
	memcpy(ver->name, x->m.name.ptr, x->m.name.len);
	ver->meta = ver->data;
	ver->meta_len = x->m.meta.len;
	if (x->m.meta.len)
		memcpy(ver->meta, x->m.meta.ptr, x->m.meta.len);
	ver->blob = ver->data + x->m.meta.len;
	ver->blob_len = (uint32_t)blen;
	memcpy(ver->blob, x->m.blob.ptr, blen);
	/* consumers import from the daemon: pid = ours, handles unchanged */
	td__put_le32(ver->blob + TD_BLOB_PID_OFFSET, (uint32_t)s->d->pid);
	return ver;
}

/* Steps 1-2: the request, its name and its alloc. */
static int pub_request(struct pub *x, const uint8_t *body, size_t len,
		       uint32_t perm, unsigned nfds)
{
	struct td__peer *p = x->p;
	struct td_err e = {0};
	int rc = td_wire_publish_req_decode(body, len, &x->m, &e);
	bool fired;

	if (rc < 0)
		return td__pub_fail(x, rc, "PUBLISH: %s: %s",
				e.field ? e.field : "body",
				e.reason ? e.reason : "invalid");
	/* one reply of versions: no loan, no stage, no notice of one */
	if (x->many && (x->m.flags & ~(TD_WIRE_PUB_PIN | TD_WIRE_PUB_IF)))
		return td__pub_fail(x, -EINVAL,
				"flags 0x%x: a PUBLISH_MANY element may carry "
				"PIN and IF only",
				x->m.flags);
	/* a FIRED notice's alloc was committed (pub_fired), as allowed
	 * when it was fired: a policy reload since refuses nothing done */
	fired = (x->m.flags & TD_WIRE_PUB_FIRED) &&
		td__peer_fired(p, x->m.alloc_id);
	if (!fired && !td__access_may(p, perm, x->m.name.ptr, x->m.name.len))
		return td__pub_fail(x, -EACCES,
				"uid %u may not write \"%.*s\" (policy %s)",
				(unsigned)p->uid, (int)x->m.name.len,
				x->m.name.ptr, td__d->opts.policy_path);
	/* one meaning per name, so GET and STAT are unambiguous */
	if (!fired && td__ring_find(x->m.name))
		return td__pub_fail(x, -EEXIST, "a ring named \"%.*s\" exists",
				(int)x->m.name.len, x->m.name.ptr);
	if (x->m.alloc_id && !fired) {
		x->alloc = td__loan_find(p, x->m.alloc_id);
		if (!x->alloc)
			return td__pub_fail(x, -ENOENT,
					"no alloc %llu on this connection",
					(unsigned long long)x->m.alloc_id);
		/* a named alloc's bytes may be readable under that name
		 * already (docs/fastpath.md, "Across names") */
		if (x->alloc->name_len &&
		    !td__alloc_is_for(x->alloc, x->m.name))
			return td__pub_fail(x, -EINVAL,
					"alloc %llu is for \"%.*s\", not "
					"\"%.*s\"",
					(unsigned long long)x->alloc->id,
					(int)x->alloc->name_len,
					x->alloc->name, (int)x->m.name.len,
					x->m.name.ptr);
	}
	if (nfds && nfds != x->m.fd_count)
		return td__pub_fail(x, -EINVAL,
				"%u fds attached but the fd table has %u "
				"entries",
				nfds, x->m.fd_count);
	x->ntab = x->m.fd_count;
	if (x->alloc && x->ntab == 0)
		x->ntab = x->alloc->count;
	if (x->alloc && x->ntab < x->alloc->count)
		return td__pub_fail(x, -EINVAL,
				"fd table has %u entries but alloc %llu has "
				"%u planes",
				x->ntab, (unsigned long long)x->alloc->id,
				x->alloc->count);
	return 0;
}

/*
 * The bytes of the version's metadata, which the daemon keeps on its
 * heap for as long as the version lives: charged like plane bytes.
 * Uncharged, a tenant held 16 KiB of metadata per 1-byte tensor, about
 * 1 GiB of the daemon's memory for every uid at the unit's
 * LimitNOFILE, against a quota that counted 64 KiB. (The blob, a few
 * hundred bytes, is overhead like the version record itself.)
 */
uint64_t td__pub_heap_bytes(const struct pub *x)
{
	return x->m.meta.len;
}

/*
 * Step 6: the new bytes fit (the alloc's are counted already), checked
 * only: eviction waits until after the seals, which cannot be undone.
 */
static int pub_room(struct pub *x, const struct td__version *old)
{
	struct td__room room;

	x->acct = td__pub_heap_bytes(x);
	for (uint32_t i = 0; i < x->ntab; i++)
		if (x->own[i] && x->is_plane[i])
			x->acct += x->info[i].size;
	if (td__store_make_room(td__d->store, x->p->uid, x->acct, old, true,
				&room) < 0) {
		char why[256];

		td__room_reason(why, sizeof(why), "PUBLISH", x->acct, &room);
		return td__pub_fail(x, room.rc, "%s", why);
	}
	return 0;
}

/*
 * Step 7, last because irreversible: seal, and the read-only reopens.
 * 1: a seal is still to make, queued off the loop (sealer.c), and the
 * request must park: nothing reopened.
 */
static int pub_seal(struct pub *x)
{
	const char *why = NULL;
	int rc = 0, wait = 0;

	for (int pass = 0; pass < 2 && !wait; pass++)
		for (uint32_t i = 0; i < x->ntab; i++) {
			bool recyc = x->alloc && x->alloc->recycle &&
				     i < x->alloc->count;

			if (!x->is_plane[i] ||
			    x->info[i].type != TD__PLANE_MEMFD)
				continue;
			/*
			 * A recyclable buffer keeps only its size seals (its
			 * producer writes it again once it comes back) and
			 * its read-only reopen, made the first time it is
			 * published.
			 */
			if (recyc && x->alloc->fds[i].ro >= 0)
				continue;
			if (pass == 0 && !recyc)
				wait |= rc = td__sealer_want(x->tab[i],
							     &x->info[i], &why);
			else if (pass == 1)
				rc = td__plane_readonly(x->tab[i], &x->ro[i],
							&why);
			if (rc < 0)
				return td__pub_fail(x, rc, "fd table entry %u: %s",
						i, why);
		}
	return wait;
}

/*
 * A request whose seals are queued (pub_seal 1) parks with its fds as
 * they came: those of x's table the request attached (at fds) go back.
 */
static void pub_untake(struct pub *x, int *fds, unsigned nfds)
{
	for (uint32_t i = 0; nfds && i < x->ntab; i++)
		if (fds[i] < 0 && x->own[i]) {
			fds[i] = x->tab[i];
			x->tab[i] = -1;
			x->own[i] = false;
		}
}

/* Step 8: the version's descriptors, from the alloc or the request. */
static void pub_move_fds(struct pub *x, struct td__version *ver)
{
	struct td__store *s = td__d->store;

	ver->nfds = x->ntab;
	ver->recycle = x->alloc && x->alloc->recycle;
	ver->owner = ver->recycle ? x->p : NULL;
	for (uint32_t i = 0; i < x->ntab; i++) {
		if (x->alloc && i < x->alloc->count) {
			td__vfd_move(&ver->fds[i], &x->alloc->fds[i]);
			if (ver->recycle)
				td__vfd_carry(s, &ver->fds[i], x->m.name);
		} else {
			td__vfd_set(s, &ver->fds[i], x->tab[i],
				    x->is_plane[i], x->p->uid);
			x->own[i] = false;
		}
		/* consumers get the read-only description (same inode) */
		if (x->ro[i] >= 0 && ver->recycle && i < x->alloc->count) {
			/* and the writable one stays */
			ver->fds[i].ro = x->ro[i];
			x->ro[i] = -1;
			td__tenant_add(x->p->uid, TD__LIM_FDS, 1);
		} else if (x->ro[i] >= 0) {
			close(ver->fds[i].fd);
			ver->fds[i].fd = x->ro[i];
			x->ro[i] = -1;
		}
	}
}

/*
 * The reply to PUBLISH m of p (version `number`), with the next loan of
 * `sizes` when m asked for one, staged when m can fire it (ver: the
 * version whose descriptor a stage repeats, NULL none).
 */
static void pub_reply(struct td__peer *p, const struct td_wire_hdr *h,
		      const struct td_wire_publish_req *m, uint64_t number,
		      uint32_t nsizes, const uint64_t *sizes, bool rewrite,
		      bool named, const struct td__version *ver)
{
	struct td__daemon *d = td__d;
	struct td_wire_publish_rep r = {.version = number};
	int fds[TD_WIRE_MAX_PLANES];
	unsigned nfds = 0;
	int64_t len;

	/* the version before went back to the free list just now, if free */
	r.has_loan = m->flags & TD_WIRE_PUB_LOAN;
	if (r.has_loan && nsizes)
		td__loan_lend(p, nsizes, sizes, rewrite,
			      (struct td_wire_str){m->name.ptr,
						   named ? m->name.len : 0},
			      m->held_count, m->held, &r.loan, fds, &nfds);
	if (ver && r.loan.alloc_id && (m->flags & TD_WIRE_PUB_STAGE))
		td__store_stage_offer(p, ver, td__loan_find(p, r.loan.alloc_id),
				      &r.stage_version, &r.stage_gen,
				      &r.stage_slot);
	len = td_wire_publish_rep_encode(&r, TD__TX_BODY(d), TD__TX_CAP);
	td__peer_send(p, h->opcode, TD_WIRE_F_REPLY, h->request_id, 0,
		      (size_t)len, fds,
		      (m->flags & TD_WIRE_PUB_LOAN_SCM) ? nfds : 0);
}

/*
 * Steps 8-9 of a version ver from alloc a (NULL: the request's fds):
 * the store's part of a commit, which a PUBLISH and a staged publish's
 * commit share. Nothing here fails.
 */
static void pub_insert(struct td__peer *p, struct td__version *ver,
		       struct td__alloc *a)
{
	struct td__store *s = td__d->store;
	struct td__version *old;

	ver->uid = p->uid;
	ver->used = ++s->tick;
	if (a) {
		ver->acct += a->acct;
		a->acct = 0; /* moved to the version */
		td__loan_done(p, a);
	}
	/*
	 * into systemd's fd store before the reply (fdstore.c); not a
	 * recyclable version, whose bytes are not sealed (its fd ids stay 0,
	 * so the state image leaves it out)
	 */
	for (uint32_t i = 0; i < ver->nfds && !ver->recycle; i++)
		ver->fds[i].sid = td__store_fd_kept(&ver->fds[i]);
	td__store_changed(ver->name, ver->name_len);
	td__list_add_tail(&s->versions, &ver->all);
	old = td__name_set(s, ver);
	if (old) {
		td__version_retire(s, old);
		td__version_unref(s, old);
	}
	td__rewrite_superseded(ver);
	td__log(TD_LOG_DEBUG, "published %.*s version %llu (%u fds)",
		(int)ver->name_len, ver->name,
		(unsigned long long)ver->number, ver->nfds);
	/*
	 * Parked GETs first: the consumer waiting for this version is woken
	 * before the producer, whose reply would otherwise make it runnable
	 * on the CPU the daemon runs on and delay the consumer's wake-up
	 * behind it. (A GET parked on this same connection is answered
	 * before this reply: parked GETs are answered when they complete,
	 * §1.) Watchers are still told after the reply (§6.9).
	 */
	td__lease_wake(s, ver);
}

void td__publish_staged(struct td__peer *p, struct td__alloc *a,
			struct td__version *sv)
{
	struct td__store *s = td__d->store;
	bool rewrite = a->rewrite;

	sv->nfds = a->count;
	sv->recycle = true;
	sv->owner = p;
	for (uint32_t i = 0; i < a->count; i++) {
		td__vfd_move(&sv->fds[i], &a->fds[i]);
		td__vfd_carry(s, &sv->fds[i],
			      (struct td_wire_str){sv->name, sv->name_len});
	}
	/* sv->acct: its metadata, charged to p when it was staged */
	pub_insert(p, sv, a);
	/* a rewritable loan's version is the one p may take back next */
	if (rewrite)
		td__rewrite_published(p, sv);
	td__notify(s, TD_EVENT_PUBLISHED, sv);
}

/* Steps 8-9: commit (nothing here fails), reply, tell and wake. */
static void pub_commit(struct pub *x, struct td__version *ver)
{
	struct td__store *s = td__d->store;
	struct td__peer *p = x->p;
	uint64_t sizes[TD_WIRE_MAX_PLANES];
	uint32_t nsizes = 0;
	bool rewrite = x->alloc && x->alloc->rewrite;
	bool named = x->alloc && x->alloc->name_len;

	pub_move_fds(x, ver);
	ver->acct = x->acct;
	/* a loan is lent only for a recyclable alloc's sizes */
	if (x->alloc && x->alloc->recycle) {
		nsizes = x->alloc->count;
		memcpy(sizes, x->alloc->sizes, nsizes * sizeof(*sizes));
	}
	ver->number = td__store_take_version();
	pub_insert(p, ver, x->alloc);
	x->alloc = NULL;
	pub_reply(p, x->h, &x->m, ver->number, nsizes, sizes, rewrite, named,
		  ver);
	/* after the reply, as events are: the name a rewrite of p's gave
	 * up (other than ver's) is told deleted first */
	if (rewrite)
		td__rewrite_published(p, ver);
	td__notify(s, TD_EVENT_PUBLISHED, ver);
}

/*
 * The notice of a stage p fired (TD_WIRE_PUB_FIRED), committed already
 * (td__stage_owner, before this request): answered with its version
 * and the next loan. False: no such commit, a PUBLISH as any other.
 */
static bool pub_fired(struct pub *x)
{
	struct td__store *s = td__d->store;
	struct td__peer *p = x->p;
	const struct td__version *cur;
	uint64_t sizes[TD_WIRE_MAX_PLANES];
	struct td__fired *f = td__peer_fired(p, x->m.alloc_id);
	struct td__fired done;

	if (!(x->m.flags & TD_WIRE_PUB_FIRED) || !f)
		return false;
	done = *f;
	*f = (struct td__fired){0};
	cur = td__name_lookup(s, x->m.name);
	/*
	 * The next loan, and its stage, are the next publish: only for a
	 * uid that may still write the name. A policy reload that committed
	 * this stage took no check of the notice's; without this one, its
	 * reply staged the next version, whose fire the reply after staged
	 * again, and a uid the reload refused went on publishing.
	 */
	if (!cur || cur->number != done.version || !cur->recycle ||
	    cur->nfds > TD_WIRE_MAX_PLANES ||
	    !td__access_may(p, TD__PERM_WRITE, x->m.name.ptr, x->m.name.len))
		cur = NULL;
	for (uint32_t i = 0; cur && i < cur->nfds; i++)
		sizes[i] = cur->fds[i].size;
	/* only named loans are staged; a rewritable one lends another */
	pub_reply(p, x->h, &x->m, done.version, cur ? cur->nfds : 0, sizes,
		  done.rewrite, true, cur);
	return true;
}

/*
 * TD_WIRE_PUB_IF: the name's current version (after a staged publish of
 * it went first, or went) is the one the request expects. Checked again
 * in the same step of the daemon as the commit, so a version published
 * meanwhile by anyone is never replaced.
 */
static int pub_check_if(struct pub *x)
{
	const struct td__version *cur;
	int n = (int)x->m.name.len;

	if (!(x->m.flags & TD_WIRE_PUB_IF))
		return 0;
	cur = td__name_lookup(td__d->store, x->m.name);
	if (cur && cur->number == x->m.expect)
		return 0;
	if (cur && !x->m.expect)
		return td__pub_fail(x, -EEXIST, "\"%.*s\" exists (version %" PRIu64
				"): not replaced", n, x->m.name.ptr,
				cur->number);
	if (cur)
		return td__pub_fail(x, -ESTALE, "\"%.*s\" is at version %" PRIu64
				", not %" PRIu64 ": not replaced", n,
				x->m.name.ptr, cur->number, x->m.expect);
	if (!x->m.expect)
		return 0;
	return td__pub_fail(x, -ESTALE, "\"%.*s\" has no version, not %" PRIu64
			": not published", n, x->m.name.ptr, x->m.expect);
}

/* Everything a PUBLISH did not keep is closed (the request's too). */
void td__pub_close(struct pub *x, int *fds, unsigned nfds)
{
	for (uint32_t i = 0; i < x->ntab && i < TD__TABLE_MAX; i++)
		if (x->own[i] && x->tab[i] >= 0)
			td__close_peer_fd(x->tab[i]);
	td__close_fds(x->ro, TD__TABLE_MAX);
	td__close_fds(fds, nfds);
}

void td__publish(struct td__peer *p, const struct td__req *rq)
{
	struct td__store *s = td__d->store;
	struct pub x = {.p = p, .h = rq->h};
	struct td__version *ver, *old;
	int rc;

	for (uint32_t i = 0; i < TD__TABLE_MAX; i++)
		x.tab[i] = x.ro[i] = -1;
	if (pub_request(&x, rq->body, rq->h->body_len, rq->op->perm,
			rq->nfds) < 0)
		goto out;
	if (pub_fired(&x))
		goto out;
	/* a staged publish of the name goes first, or goes (follow.c) */
	td__store_settle(x.m.name.ptr, x.m.name.len);
	/* the alloc may be the stage's, committed just now */
	if (x.alloc && x.alloc != td__loan_find(p, x.m.alloc_id)) {
		td__pub_fail(&x, -ENOENT, "no alloc %llu on this connection",
			 (unsigned long long)x.m.alloc_id);
		goto out;
	}
	if (pub_check_if(&x) < 0 || td__pub_check_blob(&x) < 0 ||
	    pub_take_fds(&x, rq->fds, rq->nfds) < 0 || td__pub_check_fds(&x) < 0 ||
	    pub_check_tenant(&x) < 0)
		goto out;
	old = td__name_lookup(s, x.m.name);
	if (pub_room(&x, old) < 0 || (rc = pub_seal(&x)) < 0)
		goto out;
	if (rc > 0) {
		char why[sizeof(x.why)];

		pub_untake(&x, rq->fds, rq->nfds);
		rc = td__sealer_park(p, rq, why, sizeof(why));
		if (rc < 0)
			td__pub_fail(&x, rc, "PUBLISH: %s", why);
		goto out;
	}
	ver = td__pub_build(&x);
	if (!ver || td__name_reserve(s) < 0) {
		if (ver)
			td__version_put(s, ver);
		td__pub_fail(&x, -ENOMEM, "out of memory");
		goto out;
	}
	/* cannot fail after the dry run above: nothing changed since */
	td__store_make_room(s, p->uid, x.acct, old, false,
			    &(struct td__room){0});
	if (td__acct_add(s, p->uid, x.acct) < 0) {
		td__version_put(s, ver);
		td__pub_fail(&x, -ENOMEM, "out of memory");
		goto out;
	}
	pub_commit(&x, ver);
out:
	td__sealer_drop(); /* queued by a request that failed after */
	td__pub_close(&x, rq->fds, rq->nfds);
	/*
	 * Refuse only now: once the reply is out the peer may look at our fd
	 * table (the tests do), and every fd of the request must be gone.
	 */
	if (x.rc < 0)
		td__peer_error(p, x.h->opcode, x.h->request_id, x.rc, "%s",
			       x.why);
}

/* ---- PUBLISH_MANY: several names in one step (docs/protocol.md §6.10) ---- */

/* Everything one PUBLISH_MANY gathers: its elements, each a PUBLISH. */
struct many {
	struct td__peer *p;
	const struct td__req *rq;
	struct td_wire_publish_many_req m;
	struct pub *x; /* m.count elements */
	struct td__version *ver[TD_WIRE_MANY_MAX];
	const struct td__version *old[TD_WIRE_MANY_MAX];
	uint64_t acct; /* the elements' x->acct together */
	/* the refusal: the element it names (UINT32_MAX: the whole) */
	int rc;
	uint32_t bad;
	char why[TD_WIRE_MAX_REASON];
};

/*
 * The elements of a PUBLISH_MANY: one table the loop reuses, so that a
 * handoff of several names allocates nothing in the daemon (the quality
 * bar; under ASan a calloc per request grew the daemon by its quarantine,
 * td-soak's many path). A request handled while another holds it (none
 * is known: the loop runs one at a time) takes its own.
 */
static struct pub many_tab[TD_WIRE_MANY_MAX];
static bool many_tab_busy;

static struct pub *many_tab_take(uint32_t n)
{
	if (many_tab_busy)
		return calloc(n, sizeof(struct pub));
	many_tab_busy = true;
	memset(many_tab, 0, n * sizeof(struct pub));
	return many_tab;
}

static void many_tab_give(struct pub *x)
{
	if (x == many_tab)
		many_tab_busy = false;
	else
		free(x);
}

static int many_bad(struct many *mm, uint32_t i)
{
	mm->bad = i;
	mm->rc = mm->x[i].rc;
	return mm->rc;
}

/* Steps 1-2 of every element, and no name or alloc twice. */
static int many_requests(struct many *mm)
{
	for (uint32_t i = 0; i < mm->m.count; i++) {
		struct pub *x = &mm->x[i];
		const struct td_wire_pub_elem *el = &mm->m.el[i];

		if (pub_request(x, el->body.ptr, el->body.len, TD__PERM_WRITE,
				el->attached) < 0)
			return many_bad(mm, i);
		if (el->attached != x->ntab && el->attached)
			td__pub_fail(x, -EINVAL, "%u fds attached but its fd "
				 "table has %u entries", el->attached,
				 x->ntab);
		for (uint32_t j = 0; j < i && !x->rc; j++) {
			const struct pub *y = &mm->x[j];

			if (y->m.name.len == x->m.name.len &&
			    !memcmp(y->m.name.ptr, x->m.name.ptr,
				    x->m.name.len))
				td__pub_fail(x, -EINVAL, "element %u publishes "
					 "that name too", j);
			else if (x->m.alloc_id &&
				 y->m.alloc_id == x->m.alloc_id)
				td__pub_fail(x, -EINVAL, "element %u publishes "
					 "alloc %llu too", j,
					 (unsigned long long)x->m.alloc_id);
		}
		if (x->rc)
			return many_bad(mm, i);
	}
	return 0;
}

/* Steps 3-6 of every element: nothing is sealed or kept yet. */
static int many_checks(struct many *mm)
{
	struct td__store *s = td__d->store;
	int *fds = mm->rq->fds;
	unsigned prior = 0;

	/* staged publishes of the names go first, or go (follow.c) */
	for (uint32_t i = 0; i < mm->m.count; i++)
		td__store_settle(mm->x[i].m.name.ptr, mm->x[i].m.name.len);
	for (uint32_t i = 0; i < mm->m.count; i++) {
		struct pub *x = &mm->x[i];

		/* the alloc may be a stage's, committed just now */
		if (x->alloc && x->alloc != td__loan_find(mm->p, x->m.alloc_id))
			td__pub_fail(x, -ENOENT, "no alloc %llu on this "
				 "connection", (unsigned long long)
				 x->m.alloc_id);
		x->prior = prior;
		if (x->rc || pub_check_if(x) < 0 || td__pub_check_blob(x) < 0 ||
		    pub_take_fds(x, fds, mm->m.el[i].attached) < 0 ||
		    td__pub_check_fds(x) < 0 || pub_check_tenant(x) < 0)
			return many_bad(mm, i);
		fds += mm->m.el[i].attached;
		prior += x->nkeep;
		mm->old[i] = td__name_lookup(s, x->m.name);
		x->acct = td__pub_heap_bytes(x);
		for (uint32_t k = 0; k < x->ntab; k++)
			if (x->own[k] && x->is_plane[k])
				x->acct += x->info[k].size;
		mm->acct += x->acct;
	}
	return 0;
}

/* A refusal of the whole request (what: NULL, the reason is in why) */
static int many_fail(struct many *mm, int rc, const char *what)
{
	mm->rc = rc;
	mm->bad = UINT32_MAX;
	if (what)
		snprintf(mm->why, sizeof(mm->why), "%s", what);
	return rc;
}

/* Steps 6-7: the room for all (checked only), the seals, the records. */
static int many_prepare(struct many *mm)
{
	struct td__store *s = td__d->store;
	struct td__room room = {0};
	uid_t uid = mm->p->uid;
	uint32_t n = mm->m.count;

	if (td__store_make_room_many(s, uid, mm->acct, mm->old, n, true,
				     &room) < 0) {
		td__room_reason(mm->why, sizeof(mm->why), "PUBLISH_MANY",
				mm->acct, &room);
		return many_fail(mm, room.rc, NULL);
	}
	for (uint32_t i = 0, wait = 0; i < n; i++) {
		int rc = pub_seal(&mm->x[i]);

		if (rc < 0)
			return many_bad(mm, i);
		wait |= (uint32_t)rc;
		if (i == n - 1 && wait)
			return 1; /* parks (td__publish_many) */
	}
	for (uint32_t i = 0; i < n; i++) {
		mm->ver[i] = td__pub_build(&mm->x[i]);
		if (!mm->ver[i])
			return many_fail(mm, -ENOMEM, "out of memory");
	}
	if (td__name_reserve_n(s, n) < 0)
		return many_fail(mm, -ENOMEM, "out of memory");
	/* cannot fail after the dry run above: nothing changed since */
	td__store_make_room_many(s, uid, mm->acct, mm->old, n, false, &room);
	if (td__acct_add(s, uid, mm->acct) < 0)
		return many_fail(mm, -ENOMEM, "out of memory");
	return 0;
}

/* Seals to make off the loop: the request parks, its fds as they came */
static void many_park(struct many *mm)
{
	int *fds = mm->rq->fds, rc;

	for (uint32_t i = 0; i < mm->m.count; i++) {
		pub_untake(&mm->x[i], fds, mm->m.el[i].attached);
		fds += mm->m.el[i].attached;
	}
	rc = td__sealer_park(mm->p, mm->rq, mm->why, sizeof(mm->why));
	if (rc < 0)
		many_fail(mm, rc, NULL);
}

/* Steps 8-9 of every element in this one call: no request of anyone
 * comes between them. Then the reply, and the watchers told. */
static void many_commit(struct many *mm)
{
	struct td__store *s = td__d->store;
	struct td_wire_publish_many_rep r = {.count = mm->m.count};
	bool rewrite[TD_WIRE_MANY_MAX];
	int64_t len;

	td__lease_many_hold(true);
	for (uint32_t i = 0; i < mm->m.count; i++) {
		struct pub *x = &mm->x[i];
		struct td__version *ver = mm->ver[i];

		rewrite[i] = x->alloc && x->alloc->rewrite;
		pub_move_fds(x, ver);
		ver->acct = x->acct;
		ver->number = td__store_take_version();
		pub_insert(mm->p, ver, x->alloc);
		x->alloc = NULL;
		r.versions[i] = ver->number;
	}
	td__lease_many_hold(false); /* a parked GET_MANY: the whole step */
	len = td_wire_publish_many_rep_encode(&r, TD__TX_BODY(td__d),
					      TD__TX_CAP);
	td__peer_send(mm->p, mm->rq->h->opcode, TD_WIRE_F_REPLY,
		      mm->rq->h->request_id, 0, len < 0 ? 0 : (size_t)len,
		      NULL, 0);
	for (uint32_t i = 0; i < mm->m.count; i++) {
		/* the last rewritable one is the one p may take back */
		if (rewrite[i])
			td__rewrite_published(mm->p, mm->ver[i]);
		td__notify(s, TD_EVENT_PUBLISHED, mm->ver[i]);
	}
}

void td__publish_many(struct td__peer *p, const struct td__req *rq)
{
	struct many mm = {.p = p, .rq = rq, .bad = UINT32_MAX};
	struct td_err e = {0};
	uint32_t nfds = 0;
	int rc = td_wire_publish_many_req_decode(rq->body, rq->h->body_len,
						 &mm.m, &e);

	if (rc < 0) {
		td__close_fds(rq->fds, rq->nfds);
		td__peer_bad_body(p, rq->h, rc, &e);
		return;
	}
	for (uint32_t i = 0; i < mm.m.count; i++)
		nfds += mm.m.el[i].attached;
	mm.x = nfds == rq->nfds ? many_tab_take(mm.m.count) : NULL;
	if (nfds != rq->nfds)
		many_fail(&mm, -EINVAL, "the elements attach a number of fds "
			  "other than the datagram's");
	else if (!mm.x)
		many_fail(&mm, -ENOMEM, "out of memory");
	for (uint32_t i = 0; mm.x && i < mm.m.count; i++) {
		mm.x[i].p = p;
		mm.x[i].h = rq->h;
		mm.x[i].many = true;
		for (uint32_t k = 0; k < TD__TABLE_MAX; k++)
			mm.x[i].tab[k] = mm.x[i].ro[k] = -1;
	}
	if (mm.x && many_requests(&mm) == 0 && many_checks(&mm) == 0 &&
	    (rc = many_prepare(&mm)) >= 0) {
		if (rc == 0)
			many_commit(&mm);
		else
			many_park(&mm);
		memset(mm.ver, 0, sizeof(mm.ver));
	}
	td__sealer_drop(); /* queued by a request that failed after */
	for (uint32_t i = 0; mm.x && i < mm.m.count; i++) {
		if (mm.ver[i])
			td__version_put(td__d->store, mm.ver[i]);
		td__pub_close(&mm.x[i], NULL, 0);
	}
	td__close_fds(rq->fds, rq->nfds);
	if (mm.rc < 0 && mm.bad == UINT32_MAX)
		td__peer_error(p, rq->h->opcode, rq->h->request_id, mm.rc,
			       "PUBLISH_MANY: %s: nothing published", mm.why);
	else if (mm.rc < 0)
		td__peer_error(p, rq->h->opcode, rq->h->request_id, mm.rc,
			       "PUBLISH_MANY element %u (\"%.*s\"): %s: "
			       "nothing published", mm.bad,
			       (int)mm.x[mm.bad].m.name.len,
			       mm.x[mm.bad].m.name.ptr, mm.x[mm.bad].why);
	if (mm.x)
		many_tab_give(mm.x);
}
