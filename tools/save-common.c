/* SPDX-License-Identifier: MIT */
/* What `tensorctl save` shares between its formats (.tgm, .hrry), and
 * with `zarr export`. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorctl.h"

int tctl_fence_wait(const char *name, const struct td_tensor *t,
                    int timeout_ms)
{
	struct td_error e = {0};
	int r = td_tensor_fence_wait_err(t, timeout_ms, &e);

	if (r >= 0)
		return TCTL_OK;
	return tctl_fail(TCTL_REFUSED, "fence", -r, "%s: fence: %s", name,
	                 e.reason[0] ? e.reason : strerror(-r));
}

const char *tctl_cpu_unreadable(const struct td_tensor *t)
{
	const char *why = NULL;

	if (td_tensor_linear(t, &why) < 0)
		return why;
	for (uint32_t i = 0; i < td_tensor_plane_count(t); i++)
		if (td_tensor_plane_size(t, i) && !td_tensor_plane_data(t, i))
			return "a plane is a dma-buf its exporter does not let "
			       "the CPU map";
	return NULL;
}

const char *tctl_dense_unsavable(const struct td_tensor *t)
{
	uint64_t want = td_tensor_dtype_size(td_tensor_dtype(t));
	const uint64_t *shape = td_tensor_shape(t);
	const int64_t *st;
	uint32_t n, ndim = td_tensor_ndim(t);
	const char *why = tctl_cpu_unreadable(t);

	if (why)
		return why;
	if (td_tensor_quant(t, NULL, NULL, NULL, NULL) != -2)
		return "it is quantized (the file has no place for the "
		       "scales)";
	st = td_tensor_strides(t, &n);
	for (uint32_t k = ndim; k-- > 0;) {
		if (st && (uint64_t)st[k] != want)
			return "its strides are not dense C order";
		if (__builtin_mul_overflow(want, shape[k], &want))
			return "its size overflows";
	}
	if (td_tensor_plane_count(t) > 1)
		return "it has more than one plane";
	if (td_tensor_bytes(t) != want)
		return "its bytes do not match its shape";
	return NULL;
}

bool tctl_gone_since_list(const char *cmd, const char *name, int rc,
                          bool listed)
{
	if (!listed || rc != -ENOENT)
		return false;
	tctl_say("%s: %s was deleted since the list: left out", cmd, name);
	return true;
}

bool tctl_get_together(struct td_client *c, const char *const *names,
                       size_t n, struct td_tensor **out)
{
	struct td_error e = {0};

	for (size_t i = 0; i < n; i++)
		out[i] = NULL;
	if (n < 2 || n > TD_MANY_MAX)
		return false;
	return td_client_get_many(c, (uint32_t)n, names, out, &e) == 0;
}

bool tctl_unsavable_left_out(const char *name, const char *why, bool skip)
{
	if (skip)
		tctl_say("save: %s cannot be saved (%s): left out", name,
		         why);
	return skip;
}

/* name (listed or not) at the end of out, room for it made. */
static int names_add(struct tctl_names *out, size_t *cap, const char *name,
                     bool listed)
{
	if (out->n == *cap) {
		size_t nc = *cap ? 2 * *cap : 16;
		char **v = realloc(out->v, nc * sizeof(*v));
		bool *l = v ? realloc(out->listed, nc * sizeof(*l)) : NULL;

		if (v)
			out->v = v;
		if (!l)
			return -ENOMEM;
		out->listed = l;
		*cap = nc;
	}
	out->v[out->n] = strdup(name);
	if (!out->v[out->n])
		return -ENOMEM;
	out->listed[out->n++] = listed;
	return 0;
}

static const struct tctl_names *dedup_of; /* for by_name, in qsort */

/* indices into dedup_of by name, equal names by index */
static int by_name(const void *a, const void *b)
{
	size_t i = *(const size_t *)a, j = *(const size_t *)b;
	int r = strcmp(dedup_of->v[i], dedup_of->v[j]);

	return r ? r : (i > j) - (i < j);
}

/*
 * Each name once, where it first stands: `save -o F run/ run/a` listed
 * run/a twice (under run/ and given), written as two objects (.tgm, zarr
 * export: run_a and run_a_1) or refused (.hrry: "a tensor of that name
 * was already written"). A name given is not listed (a missing one fails
 * the save) even when a NAME/ listed it too. Sorted, not pairwise: a
 * prefix may hold very many names.
 */
static int names_dedup(struct tctl_names *out)
{
	size_t *idx, k = 0;

	if (out->n < 2)
		return 0;
	idx = malloc(out->n * sizeof(*idx));
	if (!idx)
		return -ENOMEM;
	for (size_t i = 0; i < out->n; i++)
		idx[i] = i;
	dedup_of = out;
	qsort(idx, out->n, sizeof(*idx), by_name);
	dedup_of = NULL;
	for (size_t i = 1; i < out->n; i++) {
		size_t first = idx[i - 1], dup = idx[i];

		if (strcmp(out->v[first], out->v[dup]))
			continue;
		out->listed[first] &= out->listed[dup];
		free(out->v[dup]);
		out->v[dup] = NULL;
		idx[i] = first; /* later duplicates fold into the first */
	}
	free(idx);
	for (size_t i = 0; i < out->n; i++)
		if (out->v[i]) {
			out->v[k] = out->v[i];
			out->listed[k++] = out->listed[i];
		}
	out->n = k;
	return 0;
}

int tctl_names_expand(struct td_client *c, const char *cmd,
                      char *const *args, size_t nargs, bool rings,
                      struct tctl_names *out)
{
	size_t cap = 0;
	int r = 0;

	*out = (struct tctl_names){0};
	for (size_t i = 0; !r && i < nargs; i++) {
		const char *a = args[i];
		size_t len = strlen(a), had = out->n, count = 0;
		struct td_entry *list = NULL;
		struct td_error e = {0};

		if (!len || a[len - 1] != '/') {
			r = names_add(out, &cap, a, false);
			continue;
		}
		r = td_client_list(c, a, &list, &count, &e);
		if (r < 0)
			return tctl_refused(a, r, &e);
		for (size_t k = 0; !r && k < count; k++)
			if (rings || !(list[k].flags & TD_ENTRY_RING))
				r = names_add(out, &cap, list[k].name, true);
		td_entry_list_free(list, count);
		/* "no tensor but a ring starts with it" read as "a ring
		 * does" where nothing did: each case is said apart */
		if (!r && out->n == had && count)
			return tctl_fail(TCTL_REFUSED, "input", ENOENT,
			                 "%s: %s: only rings start with it, "
			                 "and %s leaves rings out",
			                 cmd, a, cmd);
		if (!r && out->n == had)
			return tctl_fail(TCTL_REFUSED, "input", ENOENT,
			                 "%s: %s: no tensor starts with it", cmd,
			                 a);
	}
	if (!r)
		r = names_dedup(out);
	return r ? tctl_fail(TCTL_REFUSED, "io", ENOMEM, "out of memory")
	         : TCTL_OK;
}

void tctl_names_fini(struct tctl_names *names)
{
	for (size_t i = 0; i < names->n; i++)
		free(names->v[i]);
	free(names->v);
	free(names->listed);
	*names = (struct tctl_names){0};
}
