/* SPDX-License-Identifier: MIT */
/*
 * Keeping what a load replaces, to put it back on a roll back (keep.h
 * says the rules; docs/tensorctl.md, "All or nothing").
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <json-c/json.h>

#include "keep.h"
#include "tensorctl.h"

/* Publishes of one object tried while its name keeps changing under it
 * (a producer publishing it all the while) before the load gives up. */
#define KEEP_TRIES 8
/* How long a roll back waits for a held version's acquire fence. */
#define KEEP_FENCE_MS 10000

void tctl_keep_init(struct tctl_keep *k, bool partial, bool no_replace)
{
	struct rlimit rl;

	*k = (struct tctl_keep){.hold = !partial && !no_replace,
				.no_replace = no_replace};
	/* each version held keeps its planes' descriptors here: as many
	 * as this process may have (the daemon's own limits still count) */
	if (k->hold && getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
	    rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static void drop_cur(struct tctl_keep *k)
{
	td_tensor_release(k->cur);
	k->cur = NULL;
}

/* Not replaced, since what it would replace cannot be kept. */
static int cannot_keep(const char *name, uint64_t version, int err,
		       const char *why)
{
	char v[32] = "";

	if (version) /* 0: unknown (a name this uid may not read) */
		snprintf(v, sizeof(v), " %" PRIu64, version);
	return tctl_fail(TCTL_REFUSED, "keep", err,
			 "%s: not replaced: its version%s could not be kept "
			 "to put back should this load fail (%s); --partial "
			 "replaces without a way back",
			 name, v, why);
}

int tctl_keep_before(struct tctl_keep *k, struct td_client *c,
		     struct td_publish *p)
{
	struct td_entry st = {0};
	struct td_error e = {0};
	const char *why;
	int rc;

	if (k->no_replace) {
		tctl_no_replace(p);
		return TCTL_OK;
	}
	drop_cur(k);
	k->blind = k->cond = false;
	if (!k->hold)
		return TCTL_OK;
	rc = td_client_stat(c, p->name, &st, &e);
	if (rc == -EACCES) {
		/* not ours to read, so not ours to keep: published only
		 * while it has no version (tctl_keep_after() refuses the
		 * rest), as a writer may publish new names */
		k->blind = true;
		rc = -ENOENT;
	}
	if (rc == -ENOENT) {
		/* nothing to keep: published only while that holds */
		p->flags |= TD_PUBLISH_IF;
		p->if_version = 0;
		k->cond = true;
		return TCTL_OK;
	}
	if (rc < 0)
		return cannot_keep(p->name, 0, -rc,
				   e.reason[0] ? e.reason : strerror(-rc));
	if (st.flags & TD_ENTRY_RING) {
		/* a ring's name is never replaced: the daemon says so */
		td_entry_fini(&st);
		return TCTL_OK;
	}
	k->cur_flags = st.flags;
	rc = td_client_get_version(c, p->name, st.version, &k->cur, &e);
	if (rc == -ENOENT) {
		/* gone since the STAT: publish on that condition; a
		 * version published meanwhile fails it, and the next try
		 * keeps that one */
		td_entry_fini(&st);
		k->cur = NULL;
		p->flags |= TD_PUBLISH_IF;
		p->if_version = st.version;
		k->cond = true;
		return TCTL_OK;
	}
	if (rc < 0) {
		k->cur = NULL;
		rc = cannot_keep(p->name, st.version, -rc,
				 e.reason[0] ? e.reason : strerror(-rc));
		td_entry_fini(&st);
		return rc;
	}
	why = tctl_cpu_unreadable(k->cur);
	if (why) {
		rc = cannot_keep(p->name, st.version, EOPNOTSUPP, why);
		drop_cur(k);
		td_entry_fini(&st);
		return rc;
	}
	p->flags |= TD_PUBLISH_IF;
	p->if_version = st.version;
	k->cond = true;
	td_entry_fini(&st);
	return TCTL_OK;
}

int tctl_keep_after(struct tctl_keep *k, struct td_client *c,
		    const char *name, int rc, const struct td_error *e,
		    uint64_t version, struct json_object *sk)
{
	struct tctl_kept *kp;

	(void)c;
	if (rc == 0) {
		if (k->n == k->cap) {
			size_t cap = k->cap ? 2 * k->cap : 16;
			struct tctl_kept *v = realloc(k->v, cap * sizeof(*v));

			if (!v) {
				drop_cur(k);
				return tctl_fail(TCTL_REFUSED, "io", ENOMEM,
						 "out of memory");
			}
			k->v = v;
			k->cap = cap;
		}
		kp = &k->v[k->n];
		kp->name = strdup(name);
		if (!kp->name) {
			drop_cur(k);
			return tctl_fail(TCTL_REFUSED, "io", ENOMEM,
					 "out of memory");
		}
		kp->ours = version;
		kp->old = k->cur;
		kp->old_flags = k->cur_flags;
		k->cur = NULL;
		k->n++;
		k->tries = 0;
		return TCTL_OK;
	}
	drop_cur(k);
	if (k->cond && k->blind && rc == -EEXIST)
		return cannot_keep(name, 0, EACCES,
				   "this uid may not read it");
	if (k->cond && rc == -EOPNOTSUPP) {
		/* no condition here: as before, without a way back */
		k->hold = false;
		tctl_say("this daemon cannot publish only if a name is at a "
			 "version (TD_WIRE_FEAT_PUB_IF): versions this load "
			 "replaces are not put back should it fail");
		return TCTL_KEEP_AGAIN;
	}
	if (k->cond && (rc == -ESTALE || rc == -EEXIST)) {
		/* published or deleted by someone else since our look:
		 * keep that version instead */
		if (++k->tries < KEEP_TRIES)
			return TCTL_KEEP_AGAIN;
		k->tries = 0;
		return tctl_fail(TCTL_REFUSED, "keep", -rc,
				 "%s: not replaced: it changed %u times "
				 "while this load tried to keep the version "
				 "it would replace",
				 name, KEEP_TRIES);
	}
	return tctl_pub_refused(name, rc, e, k->no_replace, sk);
}

/* A copy of kp->old published as kp->name, only while the name is at
 * if_version; its version in *nv. 0 or -errno (e). */
static int copy_publish(struct td_client *c, const struct tctl_kept *kp,
			uint64_t if_version, uint64_t *nv, struct td_error *e)
{
	const struct td_tensor *t = kp->old;
	uint32_t np = td_tensor_plane_count(t), nst = 0, nsc = 0, nzp = 0;
	uint64_t *sizes = calloc(np ? np : 1, sizeof(*sizes));
	struct td_plane *pl = calloc(np ? np : 1, sizeof(*pl));
	struct td_publish p = {0};
	const float *sc = NULL;
	const int32_t *zp = NULL;
	struct td_alloc *a = NULL;
	size_t mlen = 0;
	int rc;

	if (!sizes || !pl) {
		rc = -ENOMEM;
		goto out;
	}
	rc = td_tensor_fence_wait_err(t, KEEP_FENCE_MS, e);
	if (rc < 0)
		goto out;
	for (uint32_t i = 0; i < np; i++) {
		sizes[i] = td_tensor_plane_size(t, i);
		pl[i] = (struct td_plane){
			.buffer = i, .stride = td_tensor_plane_stride(t, i),
			.size = sizes[i]};
	}
	rc = td_client_alloc(c, np, sizes, &a, e);
	if (rc < 0)
		goto out;
	/* the one copy of the bytes: only on this path, a roll back */
	for (uint32_t i = 0; i < np; i++)
		if (sizes[i])
			memcpy(td_alloc_data(a, i), td_tensor_plane_data(t, i),
			       sizes[i]);
	p.name = kp->name;
	p.flags = TD_PUBLISH_IF | (kp->old_flags & TD_PUBLISH_PIN);
	p.if_version = if_version;
	p.dtype = td_tensor_dtype(t);
	p.ndim = td_tensor_ndim(t);
	p.shape = td_tensor_shape(t);
	p.strides = td_tensor_strides(t, &nst);
	p.quant_axis = td_tensor_quant(t, &sc, &nsc, &zp, &nzp);
	if (p.quant_axis != -2) {
		p.quant_scale_count = nsc;
		p.quant_scales = sc;
		p.quant_zero_point_count = nzp;
		p.quant_zero_points = zp;
	} else {
		p.quant_axis = 0;
	}
	p.format = td_tensor_string(t, TD_TENSOR_FORMAT);
	p.color_space = td_tensor_string(t, TD_TENSOR_COLOR_SPACE);
	p.color_transfer = td_tensor_string(t, TD_TENSOR_COLOR_TRANSFER);
	p.color_encoding = td_tensor_string(t, TD_TENSOR_COLOR_ENCODING);
	p.color_range = td_tensor_string(t, TD_TENSOR_COLOR_RANGE);
	p.plane_count = np;
	p.planes = pl;
	p.meta = td_tensor_meta(t, &mlen);
	p.meta_len = mlen;
	rc = td_client_publish_alloc(c, a, &p, nv, e);
out:
	free(sizes);
	free(pl);
	return rc;
}

/* Left alone: someone else's version is current (or the name was
 * deleted again meanwhile). 0. */
static int left_alone(const struct tctl_kept *kp, const char *why)
{
	tctl_say("%s version %" PRIu64 " not rolled back (%s)", kp->name,
		 kp->ours, why);
	return 0;
}

/*
 * Put kp->old back over this load's version: atomically while ours is
 * current. Failing that for any reason but "changed since" (most often
 * the quota that ended the load, which cannot hold both), ours is
 * deleted first (its version condition) and the copy published only
 * while the name has no version; so it is when ours went meanwhile and
 * nothing took its place (deleted, or evicted to make room for the
 * copy). 1 put back (*nv), 0 left alone (someone else's version is
 * current: said), -1 not put back (said; *deleted: ours was).
 */
static int put_back(struct td_client *c, struct tctl_kept *kp, uint64_t *nv,
		    bool *deleted)
{
	struct td_error e = {0}, d = {0};
	struct td_entry st;
	int rc = copy_publish(c, kp, kp->ours, nv, &e), r2;

	*deleted = false;
	if (rc == 0)
		return 1;
	if (rc == -ESTALE) {
		/* another version, or none: only none is ours to fill */
		r2 = td_client_stat(c, kp->name, &st, &d);
		if (r2 == 0) {
			td_entry_fini(&st);
			return left_alone(kp, "replaced since");
		}
	} else {
		r2 = td_client_delete_version(c, kp->name, kp->ours, &d);
		if (r2 == -ESTALE)
			return left_alone(kp, "replaced since");
		*deleted = r2 == 0;
	}
	if (r2 < 0 && r2 != -ENOENT) {
		rc = r2;
		e = d;
	} else {
		e = (struct td_error){0};
		rc = copy_publish(c, kp, 0, nv, &e);
		if (rc == 0) {
			*deleted = false;
			return 1;
		}
		if (rc == -EEXIST)
			return left_alone(kp, "replaced since");
	}
	tctl_say("%s: version %" PRIu64 ", which this load replaced, not "
		 "put back: %s",
		 kp->name, td_tensor_version(kp->old),
		 e.reason[0] ? e.reason : strerror(-rc));
	return -1;
}

size_t tctl_keep_roll_back(struct tctl_keep *k, struct td_client *c)
{
	struct json_object *put = json_object_new_array();
	struct json_object *lost = json_object_new_array();
	size_t removed = 0, back = 0;

	drop_cur(k);
	while (k->n) {
		struct tctl_kept *kp = &k->v[--k->n];
		uint64_t nv = 0;
		bool deleted;
		int r;

		if (!kp->old) {
			removed += (size_t)tctl_roll_back_one(c, kp->name,
							      kp->ours);
			free(kp->name);
			continue;
		}
		r = put_back(c, kp, &nv, &deleted);
		removed += deleted;
		if (r > 0) {
			struct json_object *j = json_object_new_object();

			json_object_object_add(j, "name",
					       json_object_new_string(kp->name));
			json_object_object_add(j, "version",
					       json_object_new_uint64(nv));
			json_object_object_add(
				j, "replaced",
				json_object_new_uint64(
					td_tensor_version(kp->old)));
			json_object_array_add(put, j);
			back++;
		} else if (r < 0) {
			json_object_array_add(
				lost, json_object_new_string(kp->name));
		}
		td_tensor_release(kp->old);
		free(kp->name);
	}
	if (back)
		tctl_say("%zu replaced version(s) put back, as new versions",
			 back);
	if (json_object_array_length(lost))
		tctl_say("%zu replaced version(s) could not be put back "
			 "(named above)",
			 json_object_array_length(lost));
	/* dropped unless an error object is held (tctl_json_hold()) */
	tctl_json_held_add("restored", put);
	tctl_json_held_add("not_restored", lost);
	return removed;
}

void tctl_keep_fini(struct tctl_keep *k)
{
	drop_cur(k);
	for (size_t i = 0; i < k->n; i++) {
		td_tensor_release(k->v[i].old);
		free(k->v[i].name);
	}
	free(k->v);
	k->v = NULL;
	k->n = k->cap = 0;
}
