/* SPDX-License-Identifier: MIT */
/*
 * The group's consolidated metadata (http.h, docs/zarr.md "What a request
 * costs the loop"): the root `zarr.json` of /zarr/ and `.zmetadata` and
 * `.zattrs` of /zarr-v2/, byte for byte what json/zarr.c prints for the
 * same arrays, put together from texts each version keeps.
 *
 * Building every array's metadata as json-c objects, sorting and printing
 * them took the loop most of a second a request at 8 000 tensors. A
 * version never changes once published, so the texts of its array are
 * printed once, on the first request that needs them, and kept on the
 * version (td__version.http_meta) until it is freed; a request then only
 * takes the nodes as named and sorted (td__http_nodes(), kept while the
 * exported names do not change) and copies the texts.
 *
 * What depends on the node name is kept apart from what does not: a node
 * name follows the other exported names (a duplicate suffix moves when a
 * name that gave the same node name goes), so the quoted name and the v2
 * `.zattrs` (its `_ARRAY_DIMENSIONS` name the node) are kept with the node
 * name they were printed for and printed again when it differs. A ring's
 * latest version changes with every handoff: its texts are printed per
 * request, as before.
 *
 * What the versions keep is bounded (meta_budget()): printed with JSON
 * escapes, a metadata byte can take six text bytes in each view, and no
 * uid is charged for the texts. A version whose texts would take the
 * kept ones past the budget keeps none; the request prints them for
 * itself, as a ring's, and frees them when answered.
 */
#include "http.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

/* The texts of one array (a version's, kept; or a ring's, per request). */
struct td__http_meta {
	char *v3;  /* zarr.json */
	char *v2a; /* .zarray */
	size_t v3_len, v2a_len;
	/* printed for node name `node` (empty: none yet) */
	char node[TD_ZARR_NAME_MAX + 16];
	char *key; /* the node name as a JSON string, quotes included */
	char *v2z; /* .zattrs */
	size_t key_len, v2z_len;
	size_t kept; /* bytes counted in td__http_stats.meta_bytes */
};

enum { WANT_V3 = 1, WANT_V2 = 2 };

/*
 * Versions' texts a group request prints before it waits, and that one
 * loop turn prints while it waits; and versions it looks at first
 * (whether they are served: a decode and a stat per plane, once per
 * version, td__http_refs()). A few ms each on the 2-vCPU VM, besides
 * the walk over the names.
 */
#define BATCH 256
#define LOOKS 256

/* A version's texts were refused for the budget; cleared when a version
 * that kept texts is freed. */
static bool full;

/* What versions may keep: a quarter of --max-bytes (1 GiB when it is
 * unlimited), as the group texts in flight (http.c). */
static uint64_t meta_budget(void)
{
	uint64_t max = td__d->opts.max_bytes;

	return max ? max / 4 : (uint64_t)1 << 30;
}

static void named_drop(struct td__http_meta *m)
{
	free(m->key);
	free(m->v2z);
	m->key = m->v2z = NULL;
	m->node[0] = 0;
}

static void meta_free(struct td__http_meta *m)
{
	if (!m)
		return;
	named_drop(m);
	free(m->v3);
	free(m->v2a);
	free(m);
}

void td__http_meta_free(struct td__version *v)
{
	if (!v->http_meta)
		return;
	if (v->http_meta->kept)
		full = false;
	td__http_stats.meta_bytes -= v->http_meta->kept;
	meta_free(v->http_meta);
	v->http_meta = NULL;
	td__http_stats.meta_cached--;
}

/* o printed (dropped); false on ENOMEM. */
static bool text(struct json_object *o, char **out, size_t *len)
{
	*out = o ? td_zarr_text(o, len) : NULL;
	json_object_put(o);
	return *out != NULL;
}

/* Whether m holds the texts `want` for node name `node`. */
static bool meta_has(const struct td__http_meta *m, const char *node,
                     unsigned want)
{
	return m && m->key && !strcmp(m->node, node) &&
	       (!(want & WANT_V3) || m->v3) &&
	       (!(want & WANT_V2) || (m->v2a && m->v2z));
}

/*
 * The texts `want` of r's array into m, printed from its node where m
 * lacks them (or holds them for another node name). 1 done, 2 done by
 * printing a version's texts, 0 the node is not served after all (left
 * out, as a failed node always was), -ENOMEM.
 */
static int meta_fill(struct td__http_meta *m, const struct td__http_ref *r,
                     unsigned want)
{
	struct td__http_node nd;
	bool ok = true;

	if (strcmp(m->node, r->name))
		named_drop(m);
	if (meta_has(m, r->name, want))
		return 1;
	if (!td__http_node_of(r, &nd, true))
		return 0;
	if (r->v)
		td__http_stats.meta_builds++;
	if (!m->key) {
		memcpy(m->node, r->name, sizeof(m->node));
		ok = text(json_object_new_string(r->name), &m->key,
		          &m->key_len);
	}
	if (ok && (want & WANT_V3) && !m->v3)
		ok = text(td_zarr_v3_array(&nd.a), &m->v3, &m->v3_len);
	if (ok && (want & WANT_V2) && !m->v2a)
		ok = text(td_zarr_v2_array(&nd.a), &m->v2a, &m->v2a_len);
	if (ok && (want & WANT_V2) && !m->v2z)
		ok = text(td_zarr_v2_attrs(&nd.a), &m->v2z, &m->v2z_len);
	td_zarr_array_fini(&nd.a);
	if (!ok)
		named_drop(m); /* key and v2z go together */
	return !ok ? -ENOMEM : r->v ? 2 : 1;
}

/* One node of the group: its texts, and whether they are ours to free
 * (a ring's, or a version's past the budget). */
struct ent {
	struct td__http_meta *m;
	const char *name;
	bool owned;
};

/* One key of v2's consolidated metadata: a + b ("NAME" "/.zarray"). */
struct v2key {
	const char *a, *b;
	const struct ent *e; /* NULL: the group's .zattrs or .zgroup */
};

/* Byte order of a1 b1 against a2 b2, as json/zarr.c sorts keys. */
static int cat_cmp(const void *x, const void *y)
{
	const struct v2key *k1 = x, *k2 = y;
	const unsigned char *p = (const unsigned char *)k1->a,
	                    *q = (const unsigned char *)k2->a;
	bool p2 = false, q2 = false;

	for (;;) {
		if (!*p && !p2) {
			p = (const unsigned char *)k1->b;
			p2 = true;
			continue;
		}
		if (!*q && !q2) {
			q = (const unsigned char *)k2->b;
			q2 = true;
			continue;
		}
		if (*p != *q || !*p)
			return (int)*p - (int)*q;
		p++;
		q++;
	}
}

static size_t meta_size(const struct td__http_meta *m)
{
	return (m->v3 ? m->v3_len + 1 : 0) + (m->v2a ? m->v2a_len + 1 : 0) +
	       (m->key ? m->key_len + 1 : 0) + (m->v2z ? m->v2z_len + 1 : 0);
}

/*
 * v's texts e->m, as just filled, kept while all versions' kept texts
 * stay within meta_budget(); past it v keeps none and they are e's own
 * (freed with this request's entries).
 */
static void keep(struct td__version *v, struct ent *e)
{
	struct td__http_meta *m = e->m;
	uint64_t others = td__http_stats.meta_bytes - m->kept;
	size_t now = meta_size(m);

	if (others + now <= meta_budget()) {
		td__http_stats.meta_bytes = others + now;
		m->kept = now;
		return;
	}
	v->http_meta = NULL;
	td__http_stats.meta_cached--;
	td__http_stats.meta_bytes = others;
	m->kept = 0;
	e->owned = true;
	full = true;
}

/* Bytes counted (p NULL) or written. */
struct out {
	char *p;
	size_t len;
};

static void put(struct out *o, const char *s, size_t n)
{
	if (o->p)
		memcpy(o->p + o->len, s, n);
	o->len += n;
}

#define PUTS(o, s) put((o), (s), sizeof(s) - 1)

/* {"_tensord_variables":[names in the store's order]} */
static void put_vars(struct out *o, const struct ent *es, size_t n)
{
	PUTS(o, "{\"_tensord_variables\":[");
	for (size_t i = 0; i < n; i++) {
		if (i)
			PUTS(o, ",");
		put(o, es[i].m->key, es[i].m->key_len);
	}
	PUTS(o, "]}");
}

/* td_zarr_v3_group() of the nodes, printed; sorted: es by node name. */
static void put_v3(struct out *o, const struct ent *es,
                   const struct ent *sorted, size_t n)
{
	PUTS(o, "{\"attributes\":");
	put_vars(o, es, n);
	PUTS(o, ",\"consolidated_metadata\":{\"kind\":\"inline\","
	        "\"metadata\":{");
	for (size_t i = 0; i < n; i++) {
		if (i)
			PUTS(o, ",");
		put(o, sorted[i].m->key, sorted[i].m->key_len);
		PUTS(o, ":");
		put(o, sorted[i].m->v3, sorted[i].m->v3_len);
	}
	PUTS(o, "},\"must_understand\":false},\"node_type\":\"group\","
	        "\"zarr_format\":3}");
}

/* td_zarr_v2_consolidated() of the nodes, printed; ks: its keys sorted. */
static void put_v2(struct out *o, const struct ent *es, const struct v2key *ks,
                   size_t nk, size_t n)
{
	PUTS(o, "{\"metadata\":{");
	for (size_t i = 0; i < nk; i++) {
		const struct td__http_meta *m = ks[i].e ? ks[i].e->m : NULL;

		if (i)
			PUTS(o, ",");
		if (!m && !strcmp(ks[i].a, ".zgroup")) {
			PUTS(o, "\".zgroup\":{\"zarr_format\":2}");
			continue;
		}
		if (!m) {
			PUTS(o, "\".zattrs\":");
			put_vars(o, es, n);
			continue;
		}
		/* "NAME" as "NAME/.zarray": json-c escapes byte by byte
		 * and leaves '/' as it is (TD_JSON_FLAGS) */
		put(o, m->key, m->key_len - 1);
		put(o, ks[i].b, strlen(ks[i].b));
		PUTS(o, "\":");
		if (ks[i].b[4] == 'r') /* /.zarray */
			put(o, m->v2a, m->v2a_len);
		else
			put(o, m->v2z, m->v2z_len);
	}
	PUTS(o, "},\"zarr_consolidated_format\":1}");
}

/* The body of `key` for the nodes es (sorted: es by name; ks: v2 keys). */
static char *assemble(const char *key, const struct ent *es,
                      const struct ent *sorted, const struct v2key *ks,
                      size_t n, size_t *len)
{
	struct out o = {0};

	for (int pass = 0; pass < 2; pass++) {
		if (pass && !(o.p = malloc(o.len + 1)))
			return NULL;
		o.len = 0;
		if (!strcmp(key, "zarr.json"))
			put_v3(&o, es, sorted, n);
		else if (!strcmp(key, ".zattrs"))
			put_vars(&o, es, n);
		else
			put_v2(&o, es, ks, 2 * n + 2, n);
	}
	o.p[o.len] = 0;
	*len = o.len;
	return o.p;
}

/*
 * The nodes of refs rs with the texts `want` into es (*n of them: a node
 * that turns out not served is left out; at, if not NULL: rs[i]'s index
 * in es, or SIZE_MAX for one left out), printing at most `budget`
 * versions' texts, and any number once versions can keep no more
 * (`full`: waiting would not make them kept), except for a `build`
 * (on_idle()), which only prints texts to keep. 0, -EAGAIN (a version
 * past the budget lacks its texts), -ENOSPC (a build with nothing more
 * to keep), -ENOMEM.
 */
static int entries(const struct td__http_ref *rs, size_t nr, unsigned want,
                   struct ent *es, size_t *at, size_t *n, size_t budget,
                   bool build)
{
	*n = 0;
	for (size_t i = 0; i < nr; i++) {
		struct td__version *v = rs[i].v;
		struct ent *e = &es[*n];
		bool lacks = v && !meta_has(v->http_meta, rs[i].name, want);
		int rc;

		if (lacks && build && full)
			return -ENOSPC;
		if (lacks && !budget && !full)
			return -EAGAIN;
		e->name = rs[i].name;
		e->owned = !v;
		e->m = v ? v->http_meta : NULL;
		if (!e->m) {
			e->m = calloc(1, sizeof(*e->m));
			if (!e->m)
				return -ENOMEM;
			if (v) {
				v->http_meta = e->m;
				td__http_stats.meta_cached++;
			}
		}
		rc = meta_fill(e->m, &rs[i], want);
		if (v)
			keep(v, e);
		if (rc < 0 || (!rc && e->owned))
			meta_free(e->owned ? e->m : NULL);
		if (rc < 0)
			return rc;
		if (at)
			at[i] = rc > 0 ? *n : SIZE_MAX;
		*n += rc > 0;
		budget -= rc == 2 && budget;
	}
	return 0;
}

static void entries_free(struct ent *es, size_t n)
{
	for (size_t i = 0; es && i < n; i++)
		if (es[i].owned)
			meta_free(es[i].m);
	free(es);
}

int td__http_group_text(const char *key, bool v2, bool may_wait, char **out,
                        size_t *len)
{
	const struct td__http_ref *rs = NULL;
	const size_t *order = NULL;
	struct ent *es = NULL, *sorted = NULL;
	struct v2key *ks = NULL;
	size_t nr = 0, n = 0, m = 0, *at = NULL;
	uint64_t t0 = uv_hrtime(), built = td__http_stats.meta_builds;
	size_t looks = LOOKS;
	int rc;

	*out = NULL;
	if (v2 ? strcmp(key, ".zattrs") && strcmp(key, ".zmetadata")
	       : strcmp(key, "zarr.json"))
		return 0;
	/* kept (and borrowed) while the exported names do not change */
	rc = td__http_nodes(may_wait ? &looks : NULL, &rs, &order, &nr);
	if (rc < 0)
		goto out;
	es = calloc(nr + 1, sizeof(*es));
	sorted = calloc(nr + 1, sizeof(*sorted));
	ks = calloc(2 * nr + 2, sizeof(*ks));
	at = calloc(nr + 1, sizeof(*at));
	rc = es && sorted && ks && at
	             ? entries(rs, nr, v2 ? WANT_V2 : WANT_V3, es, at, &n,
	                       may_wait ? BATCH : SIZE_MAX, false)
	             : -ENOMEM;
	if (rc < 0)
		goto out;
	/* by node name, as the walk sorted them: no sort per request */
	for (size_t k = 0; k < nr; k++)
		if (at[order[k]] != SIZE_MAX)
			sorted[m++] = es[at[order[k]]];
	ks[0] = (struct v2key){".zattrs", "", NULL};
	ks[1] = (struct v2key){".zgroup", "", NULL};
	for (size_t i = 0; i < n; i++) {
		ks[2 + 2 * i] = (struct v2key){es[i].name, "/.zarray", &es[i]};
		ks[3 + 2 * i] = (struct v2key){es[i].name, "/.zattrs", &es[i]};
	}
	if (v2 && !strcmp(key, ".zmetadata"))
		qsort(ks, 2 * n + 2, sizeof(*ks), cat_cmp);
	*out = assemble(key, es, sorted, ks, n, len);
	rc = *out ? 1 : -ENOMEM;
out:
	entries_free(es, n);
	free(ks);
	free(sorted);
	free(at);
	/* what the loop spent on it (docs/zarr.md: measured with this) */
	td__log(TD_LOG_DEBUG,
	        "http: %s%s: %zu nodes, %" PRIu64 " printed, %.1f ms%s",
	        v2 ? "v2 " : "", key, n, td__http_stats.meta_builds - built,
	        (double)(uv_hrtime() - t0) / 1e6,
	        rc == -EAGAIN ? ", waits" : "");
	return rc;
}

/* ---- a first build spread over loop turns ---- */

/* A group request waiting for the versions' texts (suspended). */
struct waiter {
	struct waiter *next;
	struct MHD_Connection *c;
};

static struct {
	uv_idle_t idle;
	bool idle_init;
	unsigned want; /* WANT_*: the views the waiters asked for */
	struct waiter *list;
	void (*kick)(void); /* http.c's: libmicrohttpd runs (a resume) */
} W;

/* Resume every waiting request (answered in full when it runs again). */
static void wake_all(void)
{
	while (W.list) {
		struct waiter *w = W.list;

		W.list = w->next;
		MHD_resume_connection(w->c);
		free(w);
	}
	W.want = 0;
	if (W.idle_init)
		uv_idle_stop(&W.idle);
}

/* One loop turn: the texts of up to BATCH more versions; the waiters go
 * on once no exported version lacks them, or versions can keep no more
 * (or on ENOMEM): they then print what they lack themselves, or fail. */
static void on_idle(uv_idle_t *h)
{
	const struct td__http_ref *rs = NULL;
	const size_t *order;
	struct ent *es = NULL;
	size_t nr = 0, n = 0, looks = LOOKS;
	uint64_t t0 = uv_hrtime(), built = td__http_stats.meta_builds;
	int rc = td__http_nodes(&looks, &rs, &order, &nr);

	(void)h;
	if (rc == 0) {
		es = calloc(nr + 1, sizeof(*es));
		rc = es ? entries(rs, nr, W.want, es, NULL, &n, BATCH, true)
		        : -ENOMEM;
	}
	entries_free(es, n);
	td__log(TD_LOG_DEBUG, "http: group texts: %" PRIu64 " printed, %.1f ms",
	        td__http_stats.meta_builds - built,
	        (double)(uv_hrtime() - t0) / 1e6);
	if (rc == -EAGAIN)
		return;
	wake_all();
	W.kick();
}

bool td__http_group_wait(struct MHD_Connection *c, bool v2,
                         void (*kick)(void))
{
	struct waiter *w = malloc(sizeof(*w));

	if (!w)
		return false;
	if (!W.idle_init) {
		uv_idle_init(td__d->loop, &W.idle);
		W.idle_init = true;
	}
	MHD_suspend_connection(c);
	w->c = c;
	w->next = W.list;
	W.list = w;
	W.want |= v2 ? WANT_V2 : WANT_V3;
	W.kick = kick;
	uv_idle_start(&W.idle, on_idle);
	td__http_stats.meta_waits++;
	return true;
}

void td__http_group_stop(void)
{
	wake_all();
}
