/* SPDX-License-Identifier: MIT */
/*
 * The store's spare records: versions, allocs, free-list entries, parked
 * requests and their bodies, released and kept for reuse, so that the
 * steady state of a handoff calls the heap for none of them (store.h,
 * struct td__spares).
 */
#include "store.h"

#include <stdlib.h>
#include <string.h>

/* Released records of one kind kept at most (struct td__spares). */
#define SPARE_MAX 64
/* a spare version keeps its data[]: at least this much, so that small
 * blobs of different sizes share records (and a body's, the same) */
#define VERSION_DATA_MIN 512

/* ---- a version's HTTP metadata texts (http-meta.c's hook) ---- */

static td__version_put_fn *meta_hook;

void td__store_meta_hook_set(td__version_put_fn *fn)
{
	meta_hook = fn;
}

/* ---- spare records (no per-handoff allocation in the steady state) ---- */

static struct td__list *spare_take(struct td__spares *sp)
{
	struct td__list *l;

	if (td__list_empty(&sp->head))
		return NULL;
	l = sp->head.next;
	td__list_del(l);
	sp->n--;
	return l;
}

/* Keep l for reuse; false when SPARE_MAX are kept already (free it). */
static bool spare_keep(struct td__spares *sp, struct td__list *l)
{
	if (sp->n >= SPARE_MAX)
		return false;
	td__list_add_tail(&sp->head, l);
	sp->n++;
	return true;
}

/* Zeroed record of size bytes whose list member is at off. */
void *td__spare_new(struct td__spares *sp, size_t size, size_t off)
{
	struct td__list *l = spare_take(sp);
	void *r = l ? (char *)l - off : malloc(size);

	if (r)
		memset(r, 0, size);
	return r;
}

void td__spare_put(struct td__spares *sp, void *r, size_t off)
{
	if (!spare_keep(sp, (struct td__list *)(void *)((char *)r + off))) {
		free(r);
		td__d->store->freed++;
	}
}

void td__spares_fini(struct td__spares *sp, size_t off)
{
	struct td__list *l;

	while ((l = spare_take(sp)))
		free((char *)l - off);
}

/*
 * A zeroed version with room for data_len bytes of meta and blob: the
 * first spare one whose data[] is large enough, else a new one.
 */
/*
 * Take the first spare record whose capacity (a size_t at cap_off) is
 * at least need; NULL when none is. Records of one kind are kept by
 * capacity so that a reuse of a smaller size allocates nothing.
 */
static void *spare_fit(struct td__spares *sp, size_t need, size_t off,
		       size_t cap_off)
{
	for (struct td__list *l = sp->head.next; l != &sp->head; l = l->next) {
		char *r = (char *)l - off;
		size_t cap;

		memcpy(&cap, r + cap_off, sizeof(cap));
		if (cap >= need) {
			td__list_del(l);
			sp->n--;
			return r;
		}
	}
	return NULL;
}

struct td__version *td__version_new(struct td__store *s, size_t data_len)
{
	struct td__version *v =
		spare_fit(&s->spare_versions, data_len,
			  offsetof(struct td__version, all),
			  offsetof(struct td__version, data_cap));
	size_t cap;

	cap = v ? v->data_cap
		: data_len > VERSION_DATA_MIN ? data_len : VERSION_DATA_MIN;
	if (!v && !(v = malloc(sizeof(*v) + cap)))
		return NULL;
	memset(v, 0, sizeof(*v));
	v->data_cap = cap;
	v->fence_ix = -1;
	return v;
}

struct td__version *td__version_desc_copy(struct td__store *s,
					  const struct td__version *ver)
{
	struct td__version *sv =
		td__version_new(s, ver->meta_len + ver->blob_len);

	if (!sv)
		return NULL;
	sv->refs = 1;
	sv->flags = ver->flags;
	sv->dtype = ver->dtype;
	sv->ndim = ver->ndim;
	memcpy(sv->shape, ver->shape, sizeof(sv->shape));
	sv->bytes = ver->bytes;
	sv->recycle = ver->recycle;
	sv->name_len = ver->name_len;
	memcpy(sv->name, ver->name, ver->name_len);
	sv->meta = sv->data;
	sv->meta_len = ver->meta_len;
	memcpy(sv->meta, ver->meta, ver->meta_len);
	sv->blob = sv->data + ver->meta_len;
	sv->blob_len = ver->blob_len;
	memcpy(sv->blob, ver->blob, ver->blob_len);
	sv->nfds = ver->nfds;
	for (uint32_t i = 0; i < ver->nfds; i++)
		sv->fds[i] = (struct td__vfd){.fd = -1, .ro = -1,
					      .size = ver->fds[i].size,
					      .tracked = ver->fds[i].tracked};
	return sv;
}

void td__version_put(struct td__store *s, struct td__version *v)
{
	/* before it is kept as a spare (zeroed when taken again) */
	if (v->http_meta && meta_hook)
		meta_hook(v);
	if (!spare_keep(&s->spare_versions, &v->all)) {
		free(v);
		s->freed++;
	}
}

struct td__body *td__body_new(struct td__store *s, const void *p, size_t len)
{
	struct td__body *b = spare_fit(&s->spare_bodies, len,
				       offsetof(struct td__body, link),
				       offsetof(struct td__body, cap));
	size_t cap = len > VERSION_DATA_MIN ? len : VERSION_DATA_MIN;

	if (!b) {
		b = malloc(sizeof(*b) + cap);
		if (!b)
			return NULL;
		b->cap = cap;
	}
	memcpy(b->data, p, len);
	b->len = len;
	return b;
}

void td__body_put(struct td__store *s, struct td__body *b)
{
	if (b && !spare_keep(&s->spare_bodies, &b->link)) {
		free(b);
		s->freed++;
	}
}
