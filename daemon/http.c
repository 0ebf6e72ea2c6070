/* SPDX-License-Identifier: MIT */
/*
 * The read-only HTTP store (`tensord --http ADDR`, docs/zarr.md): the
 * current tensors as a Zarr v3 hierarchy under /zarr/, the same as Zarr v2
 * under /zarr-v2/, and Prometheus text at /metrics.
 *
 * libmicrohttpd parses HTTP; it runs without a thread of its own, from the
 * daemon's libuv loop: its epoll fd sits on a uv_poll_t and its timeout on
 * a uv_timer_t, and both call MHD_run(). Chunk bodies are fd-backed
 * responses on a duplicate of the plane's memfd, so the kernel moves the
 * bytes (sendfile) and they never pass through a buffer of ours; the
 * version is leased (a reference, like a GET) until the response is done,
 * so a version replaced meanwhile is still sent whole. Metadata is built
 * per request by json/zarr.c, byte for byte what `tensorctl zarr export`
 * writes.
 *
 * Only names under --http-prefix are served (none without it) and, with
 * --policy, only those an `allow http r PREFIX` line grants.
 */
#include "store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <json-c/json.h>

#include "blob.h"
#include "td-zarr.h"

/* Bytes of request state per connection (headers included): a request
 * whose headers do not fit is answered 431 and closed. */
#define HTTP_MEMORY (16u << 10)

struct http {
	struct MHD_Daemon *mhd;
	uv_poll_t poll;
	uv_timer_t timer;
	bool poll_on, timer_on;
	int lfd;
	char unix_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

static struct http H = {.lfd = -1};

static unsigned connections(void);

/* One exported tensor: its array and where its chunk is. */
struct node {
	struct td__version *v;
	struct td_zarr_array a;
	int fd;          /* the plane's descriptor (borrowed) */
	uint64_t offset; /* of the chunk in fd */
	uint64_t len;    /* chunk bytes */
};

/* A response's lease on a version, dropped when the response is done. */
struct hold {
	struct td__version *v;
};

/* ---- what is exported ---- */

static bool exported(const struct td__version *v)
{
	const struct td__daemon *d = td__d;
	const char *pre = d->opts.http_prefix;
	size_t pl = pre ? strlen(pre) : 0;

	if (!pre || v->name_len < pl || memcmp(v->name, pre, pl))
		return false;
	return !d->policy ||
	       td__policy_allows_http(d->policy, v->name, v->name_len);
}

/* Tensor metadata of v for its attributes (strings copied to NUL-end). */
static struct json_object *attrs_of(const struct td__version *v,
				    const struct td_blob_view *bv)
{
	char name[TD_WIRE_MAX_NAME + 1], strs[5][TD_WIRE_MAX_NAME + 1];
	float scales[64];
	int32_t zps[64];
	struct td_zarr_tensor t = {.name = name,
				   .meta = v->meta,
				   .meta_len = v->meta_len,
				   .quant_axis = -2};

	memcpy(name, v->name, v->name_len);
	name[v->name_len] = 0;
	for (int i = 0; i < 5; i++) {
		size_t l = bv->strings[i].len < TD_WIRE_MAX_NAME
				   ? bv->strings[i].len
				   : TD_WIRE_MAX_NAME;

		memcpy(strs[i], bv->strings[i].ptr, l);
		strs[i][l] = 0;
		t.strings[i] = strs[i];
	}
	if (bv->quant_scales_len) {
		t.quant_axis = bv->quant_axis;
		t.nscales = bv->quant_scales_len < 64 ? bv->quant_scales_len
						      : 64;
		t.nzero_points = bv->quant_zero_points_len < 64
					 ? bv->quant_zero_points_len
					 : 64;
		for (uint32_t i = 0; i < t.nscales; i++)
			scales[i] = td_blob_quant_scale(bv, i);
		for (uint32_t i = 0; i < t.nzero_points; i++)
			zps[i] = td_blob_quant_zero_point(bv, i);
		t.scales = scales;
		t.zero_points = zps;
	}
	return td_zarr_tensor_attrs(&t);
}

/*
 * v as a node when it can be served from one fd without copying: a
 * dtype with a Zarr type, one dense plane in a regular file (a memfd; a
 * dma-buf or an inline plane cannot be sent by the kernel).
 */
static bool node_of(struct td__version *v, struct node *n, bool attrs)
{
	struct td_blob_view bv;
	struct td_blob_plane pl;
	struct td_err e = {0};
	struct stat st;
	uint64_t dense;

	memset(n, 0, sizeof(*n));
	if (td_blob_decode(v->blob, v->blob_len, &bv, &e) < 0 ||
	    bv.plane_count != 1 || td_blob_plane_get(&bv, 0, &pl) < 0 ||
	    pl.handle < 0 || (uint64_t)pl.handle >= v->nfds)
		return false;
	n->a.type = td_zarr_type_by_blob(bv.dtype);
	n->a.ndim = bv.ndim;
	if (!n->a.type || bv.ndim > TD_ZARR_MAX_DIMS)
		return false;
	for (uint32_t k = 0; k < bv.ndim; k++)
		n->a.shape[k] = td_blob_shape(&bv, k);
	if (td_zarr_chunk_bytes(&n->a, &n->len) < 0)
		return false;
	dense = n->a.type->size;
	for (uint32_t k = bv.strides_len; k-- > 0;) {
		if (n->a.shape[k] > 1 && td_blob_stride(&bv, k) != (int64_t)dense)
			return false;
		dense *= n->a.shape[k];
	}
	n->fd = td__vfd_out(&v->fds[pl.handle]);
	n->offset = pl.offset;
	if (n->len > pl.size || fstat(n->fd, &st) < 0 ||
	    !S_ISREG(st.st_mode) || n->offset + n->len > (uint64_t)st.st_size)
		return false;
	n->v = v;
	if (!attrs)
		return true;
	n->a.attrs = attrs_of(v, &bv);
	return n->a.attrs != NULL;
}

static void nodes_free(struct node *ns, size_t n)
{
	for (size_t i = 0; i < n; i++)
		td_zarr_array_fini(&ns[i].a);
	free(ns);
}

/*
 * Every exported tensor in name order, named as an export names them;
 * attrs: with their attributes (metadata keys; a chunk needs none).
 */
static int nodes_build(struct node **out, size_t *count, bool attrs)
{
	struct td__store *s = td__d->store;
	struct node *ns = calloc(s->count ? s->count : 1, sizeof(*ns));
	char **names = calloc(s->count ? s->count : 1, sizeof(*names));
	size_t n = 0;
	int rc = 0;

	if (!ns || !names) {
		free(ns);
		free(names);
		return -ENOMEM;
	}
	for (size_t i = 0; i < s->count; i++) {
		struct td__version *v = s->names[i];
		char name[TD_WIRE_MAX_NAME + 1];

		if (!exported(v) || !node_of(v, &ns[n], attrs))
			continue;
		memcpy(name, v->name, v->name_len);
		name[v->name_len] = 0;
		td_tgm_node_name(name, ns[n].a.name, TD_ZARR_NAME_MAX + 1);
		names[n] = ns[n].a.name;
		n++;
	}
	rc = td_tgm_names_unique(names, n, sizeof(ns->a.name));
	free(names);
	if (rc < 0) {
		nodes_free(ns, n);
		return rc;
	}
	*out = ns;
	*count = n;
	return 0;
}

static struct json_object *group_attrs(struct node *ns, size_t n,
				       struct td_zarr_array **arrs)
{
	*arrs = calloc(n ? n : 1, sizeof(**arrs));
	if (!*arrs)
		return NULL;
	for (size_t i = 0; i < n; i++)
		(*arrs)[i] = ns[i].a;
	return td_zarr_tensor_group(*arrs, n);
}

/* ---- responses ---- */

static struct http_stats {
	uint64_t by_code[6]; /* 200 206 304 404 405 416 */
	uint64_t other;
	uint64_t leases; /* responses holding a version now */
} stats;

static void count(unsigned code)
{
	static const unsigned codes[] = {200, 206, 304, 404, 405, 416};

	for (size_t i = 0; i < 6; i++)
		if (codes[i] == code) {
			stats.by_code[i]++;
			return;
		}
	stats.other++;
}

static enum MHD_Result queue(struct MHD_Connection *c, unsigned code,
			     struct MHD_Response *r)
{
	enum MHD_Result res;

	if (!r)
		return MHD_NO;
	count(code);
	res = MHD_queue_response(c, code, r);
	MHD_destroy_response(r);
	return res;
}

static enum MHD_Result text(struct MHD_Connection *c, unsigned code,
			    const char *msg)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(
		strlen(msg), (void *)(uintptr_t)msg, MHD_RESPMEM_PERSISTENT);

	if (r && code == 405)
		MHD_add_response_header(r, "Allow", "GET, HEAD");
	if (r)
		MHD_add_response_header(r, "Content-Type", "text/plain");
	return queue(c, code, r);
}

/*
 * The Range header against a body of len bytes (RFC 9110): 0 none, 1 a
 * satisfiable range in [*a, *a + *n), -1 unsatisfiable (or a form this
 * server does not serve: several ranges).
 */
static int range(struct MHD_Connection *c, uint64_t len, uint64_t *a,
		 uint64_t *n)
{
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						    "Range");
	unsigned long long x = 0, y = 0;
	char *end;

	if (!h)
		return 0;
	if (strncmp(h, "bytes=", 6) || strchr(h, ','))
		return -1;
	h += 6;
	if (*h == '-') {
		/* the last y bytes */
		errno = 0;
		y = strtoull(h + 1, &end, 10);
		if (errno || end == h + 1 || *end || !y || !len)
			return -1;
		*n = y < len ? y : len;
		*a = len - *n;
		return 1;
	}
	errno = 0;
	x = strtoull(h, &end, 10);
	if (errno || end == h || *end != '-' || x >= len)
		return -1;
	h = end + 1;
	if (!*h) {
		y = len - 1;
	} else {
		y = strtoull(h, &end, 10);
		if (errno || *end || y < x)
			return -1;
		if (y >= len)
			y = len - 1;
	}
	*a = x;
	*n = y - x + 1;
	return 1;
}

static enum MHD_Result unsatisfiable(struct MHD_Connection *c, uint64_t len)
{
	struct MHD_Response *r =
		MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
	char cr[64];

	snprintf(cr, sizeof(cr), "bytes */%" PRIu64, len);
	if (r)
		MHD_add_response_header(r, "Content-Range", cr);
	return queue(c, MHD_HTTP_RANGE_NOT_SATISFIABLE, r);
}

/* Add Content-Range and the common headers; 200 or 206. */
static unsigned finish(struct MHD_Response *r, int ranged, uint64_t a,
		       uint64_t n, uint64_t len, const char *type,
		       const char *etag)
{
	char cr[96];

	MHD_add_response_header(r, "Accept-Ranges", "bytes");
	MHD_add_response_header(r, "Content-Type", type);
	if (etag)
		MHD_add_response_header(r, "ETag", etag);
	if (!ranged)
		return MHD_HTTP_OK;
	snprintf(cr, sizeof(cr), "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, a,
		 a + n - 1, len);
	MHD_add_response_header(r, "Content-Range", cr);
	return MHD_HTTP_PARTIAL_CONTENT;
}

/* A JSON document (json-c object, dropped) as the body. */
static enum MHD_Result json_body(struct MHD_Connection *c,
				 struct json_object *o)
{
	struct MHD_Response *r;
	uint64_t a = 0, n = 0;
	size_t len;
	char *t = o ? td_zarr_text(o, &len) : NULL;
	int rg;

	json_object_put(o);
	if (!t)
		return text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
	rg = range(c, len, &a, &n);
	if (rg < 0) {
		free(t);
		return unsatisfiable(c, len);
	}
	if (rg == 0)
		n = len;
	/* the slice moves to the front of the same allocation */
	memmove(t, t + a, n);
	r = MHD_create_response_from_buffer(n, t, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(t);
		return MHD_NO;
	}
	return queue(c, finish(r, rg, a, n, len, "application/json", NULL), r);
}

/* The chunk of node n, from its fd, leased until the response ends. */
static enum MHD_Result chunk_body(struct MHD_Connection *c, struct node *n,
				  void **con_cls)
{
	const char *inm = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						      "If-None-Match");
	struct MHD_Response *r;
	struct hold *hd;
	uint64_t a = 0, len = 0;
	char etag[TD_WIRE_MAX_NAME + 48];
	int rg = range(c, n->len, &a, &len), fd;

	snprintf(etag, sizeof(etag), "\"%.*s@%" PRIu64 "\"",
		 (int)n->v->name_len, n->v->name, n->v->number);
	if (inm && !strcmp(inm, etag)) {
		r = MHD_create_response_from_buffer(0, NULL,
						    MHD_RESPMEM_PERSISTENT);
		if (r)
			MHD_add_response_header(r, "ETag", etag);
		return queue(c, MHD_HTTP_NOT_MODIFIED, r);
	}
	if (rg < 0)
		return unsatisfiable(c, n->len);
	if (rg == 0)
		len = n->len;
	hd = malloc(sizeof(*hd));
	fd = hd ? fcntl(n->fd, F_DUPFD_CLOEXEC, 3) : -1;
	if (fd < 0) {
		free(hd);
		return text(c, MHD_HTTP_SERVICE_UNAVAILABLE,
			    "out of descriptors\n");
	}
	/* MHD owns (and closes) fd; sendfile() reads it at an offset */
	r = MHD_create_response_from_fd_at_offset64(len, fd,
						    n->offset + a);
	if (!r) {
		close(fd);
		free(hd);
		return MHD_NO;
	}
	/* the lease: a reference like a GET's, so neither eviction nor a
	 * newer version frees the bytes while they are being sent */
	hd->v = n->v;
	n->v->refs++;
	n->v->lease_count++;
	stats.leases++;
	*con_cls = hd;
	return queue(c,
		     finish(r, rg, a, len, n->len, "application/octet-stream",
			    etag),
		     r);
}

/* "/NODE/REST" in path: the node and REST, or NULL. */
static struct node *find_node(struct node *ns, size_t n, const char *path,
			      const char **rest)
{
	const char *slash = strchr(path, '/');

	if (!slash)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strlen(ns[i].a.name) == (size_t)(slash - path) &&
		    !memcmp(ns[i].a.name, path, (size_t)(slash - path))) {
			*rest = slash + 1;
			return &ns[i];
		}
	return NULL;
}

static enum MHD_Result zarr(struct MHD_Connection *c, const char *path,
			    bool v2, void **con_cls)
{
	struct node *ns = NULL, *nd;
	struct td_zarr_array *arrs = NULL;
	struct json_object *g, *o = NULL;
	const char *rest = NULL;
	char key[2 + 2 * TD_ZARR_MAX_DIMS + 1];
	size_t n = 0;
	enum MHD_Result res;

	/* metadata keys are zarr.json and .z*; anything else is a chunk */
	if (nodes_build(&ns, &n, strstr(path, "zarr.json") ||
					 strstr(path, ".z")) < 0)
		return text(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
			    "out of memory\n");
	if (!v2 && !strcmp(path, "zarr.json")) {
		g = group_attrs(ns, n, &arrs);
		o = g ? td_zarr_v3_group(g, arrs, n) : NULL;
		json_object_put(g);
	} else if (v2 && !strcmp(path, ".zgroup")) {
		o = td_zarr_v2_group();
	} else if (v2 && !strcmp(path, ".zattrs")) {
		o = group_attrs(ns, n, &arrs);
	} else if (v2 && !strcmp(path, ".zmetadata")) {
		g = group_attrs(ns, n, &arrs);
		o = g ? td_zarr_v2_consolidated(g, arrs, n) : NULL;
		json_object_put(g);
	} else if ((nd = find_node(ns, n, path, &rest))) {
		if (!v2 && !strcmp(rest, "zarr.json"))
			o = td_zarr_v3_array(&nd->a);
		else if (v2 && !strcmp(rest, ".zarray"))
			o = td_zarr_v2_array(&nd->a);
		else if (v2 && !strcmp(rest, ".zattrs"))
			o = td_zarr_v2_attrs(&nd->a);
		else if (td_zarr_chunk_key(&nd->a, v2, key, sizeof(key)) == 1 &&
			 !strcmp(rest, key)) {
			res = chunk_body(c, nd, con_cls);
			nodes_free(ns, n);
			return res;
		}
	} else {
		goto missing;
	}
	free(arrs);
	nodes_free(ns, n);
	if (!o)
		return text(c, MHD_HTTP_NOT_FOUND, "no such key\n");
	return json_body(c, o);
missing:
	free(arrs);
	nodes_free(ns, n);
	return text(c, MHD_HTTP_NOT_FOUND, "no such key\n");
}

/* ---- /metrics ---- */

static void metric(FILE *f, const char *name, const char *type,
		   const char *help, uint64_t v)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %" PRIu64 "\n", name, help,
		name, type, name, v);
}

static enum MHD_Result metrics(struct MHD_Connection *c)
{
	static const unsigned codes[] = {200, 206, 304, 404, 405, 416};
	static struct td__ring *rl[TD__MAX_RINGS];
	struct td__daemon *d = td__d;
	struct td__store *s = d->store;
	struct td_wire_str none = {"", 0};
	uint64_t clients = 0, leases = 0, handoffs = 0;
	unsigned nr = td__ring_list(none, none, rl);
	struct MHD_Response *r;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return text(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
			    "out of memory\n");
	for (struct td__list *l = d->peers.next; l != &d->peers; l = l->next) {
		clients++;
		leases += td__container_of(l, struct td__peer, link)->n_leases;
	}
	for (unsigned i = 0; i < nr; i++) {
		struct td_wire_entry e;

		td__ring_entry(rl[i], false, &e);
		handoffs += e.version;
	}
	metric(f, "tensord_tensors", "gauge", "Current tensor names.",
	       s->count);
	metric(f, "tensord_rings", "gauge", "Live rings.", nr);
	metric(f, "tensord_bytes", "gauge",
	       "Plane bytes held (accounted against --max-bytes).", s->total);
	metric(f, "tensord_clients", "gauge", "Connected socket clients.",
	       clients);
	metric(f, "tensord_leases", "gauge",
	       "Leases held by socket clients.", leases);
	fprintf(f, "# HELP tensord_requests_total Replies by opcode and "
		   "result.\n# TYPE tensord_requests_total counter\n");
	for (unsigned op = 1; op < TD__STAT_OPS; op++)
		for (int err = 0; err < 2; err++)
			if (strcmp(td_wire_op_name((uint16_t)op), "UNKNOWN"))
				fprintf(f,
					"tensord_requests_total{op=\"%s\","
					"result=\"%s\"} %" PRIu64 "\n",
					td_wire_op_name((uint16_t)op),
					err ? "error" : "ok",
					d->stats.replies[op][err]);
	metric(f, "tensord_evictions_total", "counter",
	       "Versions evicted to make room.", d->stats.evictions);
	fprintf(f, "# HELP tensord_refusals_total Requests refused by the "
		   "policy, the memory cap or a quota.\n"
		   "# TYPE tensord_refusals_total counter\n"
		   "tensord_refusals_total{reason=\"access\"} %" PRIu64 "\n"
		   "tensord_refusals_total{reason=\"space\"} %" PRIu64 "\n"
		   "tensord_refusals_total{reason=\"quota\"} %" PRIu64 "\n",
		d->stats.refused_access, d->stats.refused_space,
		d->stats.refused_quota);
	metric(f, "tensord_ring_handoffs", "gauge",
	       "Versions published into the live rings.", handoffs);
	fprintf(f, "# HELP tensord_http_responses_total HTTP responses by "
		   "status.\n# TYPE tensord_http_responses_total counter\n");
	for (size_t i = 0; i < 6; i++)
		fprintf(f, "tensord_http_responses_total{code=\"%u\"} %" PRIu64
			   "\n",
			codes[i], stats.by_code[i]);
	fprintf(f, "tensord_http_responses_total{code=\"other\"} %" PRIu64 "\n",
		stats.other);
	metric(f, "tensord_http_leases", "gauge",
	       "Versions held by HTTP responses being sent.", stats.leases);
	metric(f, "tensord_http_connections", "gauge",
	       "Open HTTP connections.", connections());
	if (fclose(f) != 0) {
		free(buf);
		return text(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
			    "out of memory\n");
	}
	r = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(buf);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type",
				"text/plain; version=0.0.4");
	return queue(c, MHD_HTTP_OK, r);
}

/* ---- libmicrohttpd callbacks ---- */

/* *con_cls between the two calls for one request (no lease yet). */
static char announced;

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
				  const char *url, const char *method,
				  const char *version, const char *upload,
				  size_t *upload_len, void **con_cls)
{
	(void)cls;
	(void)version;
	(void)upload;
	/* the first call only announces the request: answering the second
	 * (headers complete, nothing to upload) keeps the connection
	 * alive for the next request */
	if (!*con_cls) {
		*con_cls = &announced;
		return MHD_YES;
	}
	if (*con_cls == &announced)
		*con_cls = NULL;
	if (strcmp(method, MHD_HTTP_METHOD_GET) &&
	    strcmp(method, MHD_HTTP_METHOD_HEAD)) {
		*upload_len = 0; /* a body is not read: answered at once */
		return text(c, MHD_HTTP_METHOD_NOT_ALLOWED,
			    "read-only: GET and HEAD only\n");
	}
	if (!strcmp(url, "/metrics"))
		return metrics(c);
	if (!strncmp(url, "/zarr/", 6))
		return zarr(c, url + 6, false, con_cls);
	if (!strncmp(url, "/zarr-v2/", 9))
		return zarr(c, url + 9, true, con_cls);
	return text(c, MHD_HTTP_NOT_FOUND, "no such key\n");
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode why)
{
	struct hold *hd = *con_cls;

	(void)cls;
	(void)c;
	(void)why;
	if (!hd || *con_cls == &announced) /* no lease held */
		return;
	hd->v->lease_count--;
	stats.leases--;
	td__version_unref(td__d->store, hd->v);
	free(hd);
	*con_cls = NULL;
}

static void on_log(void *cls, const char *fmt, va_list ap)
{
	char msg[512];

	(void)cls;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	msg[strcspn(msg, "\n")] = 0;
	td__log(TD_LOG_DEBUG, "http: %s", msg);
}

static void run(void);

static void on_timer(uv_timer_t *t)
{
	(void)t;
	run();
}

static void on_poll(uv_poll_t *p, int status, int events)
{
	(void)p;
	(void)status;
	(void)events;
	run();
}

static unsigned connections(void)
{
	return MHD_get_daemon_info(H.mhd, MHD_DAEMON_INFO_CURRENT_CONNECTIONS)
		->num_connections;
}

/* Let MHD do what is ready, then wait for its next deadline. */
static void run(void)
{
	MHD_UNSIGNED_LONG_LONG to;
	unsigned before;

	/*
	 * A connection closed at the limit: MHD listens again only from its
	 * next run, and nothing else may wake the loop for it, so run again
	 * while connections go (bounded: each pass closes at least one).
	 */
	for (int i = 0; i < 64; i++) {
		before = connections();
		MHD_run(H.mhd);
		if (connections() >= before)
			break;
	}
	if (MHD_get_timeout(H.mhd, &to) == MHD_YES) {
		uv_timer_start(&H.timer, on_timer, to, 0);
		H.timer_on = true;
	} else if (H.timer_on) {
		uv_timer_stop(&H.timer);
		H.timer_on = false;
	}
}

/* ---- the listening socket ---- */

/*
 * ADDR as a bound, listening socket: unix:PATH, [IPv6]:PORT or
 * IPv4:PORT (numeric only). fd, or -errno with *why.
 */
static int listen_on(const char *addr, const char **why)
{
	struct sockaddr_storage ss = {0};
	socklen_t sl;
	const char *colon;
	char host[64];
	unsigned long port;
	char *end;
	int fd, one = 1;

	if (!strncmp(addr, "unix:", 5)) {
		struct sockaddr_un *un = (struct sockaddr_un *)&ss;

		if (strlen(addr + 5) >= sizeof(un->sun_path) || !addr[5]) {
			*why = "unix: path empty or too long";
			return -EINVAL;
		}
		un->sun_family = AF_UNIX;
		strcpy(un->sun_path, addr + 5);
		sl = sizeof(*un);
	} else {
		colon = strrchr(addr, ':');
		if (!colon || (size_t)(colon - addr) >= sizeof(host)) {
			*why = "want 127.0.0.1:PORT, [::1]:PORT, unix:PATH or "
			       "another numeric address:PORT";
			return -EINVAL;
		}
		errno = 0;
		port = strtoul(colon + 1, &end, 10);
		if (errno || end == colon + 1 || *end || port > 65535) {
			*why = "bad port";
			return -EINVAL;
		}
		memcpy(host, addr, (size_t)(colon - addr));
		host[colon - addr] = 0;
		if (host[0] == '[' && host[strlen(host) - 1] == ']') {
			struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

			host[strlen(host) - 1] = 0;
			s6->sin6_family = AF_INET6;
			s6->sin6_port = htons((uint16_t)port);
			if (inet_pton(AF_INET6, host + 1, &s6->sin6_addr) != 1) {
				*why = "not a numeric IPv6 address";
				return -EINVAL;
			}
			sl = sizeof(*s6);
		} else {
			struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

			s4->sin_family = AF_INET;
			s4->sin_port = htons((uint16_t)port);
			if (inet_pton(AF_INET, host, &s4->sin_addr) != 1) {
				*why = "not a numeric IPv4 address (names are "
				       "not resolved)";
				return -EINVAL;
			}
			sl = sizeof(*s4);
		}
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
		    0);
	if (fd < 0) {
		*why = "socket";
		return -errno;
	}
	if (ss.ss_family != AF_UNIX)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, 128) < 0) {
		int err = errno;

		close(fd);
		*why = "bind/listen";
		return -err;
	}
	if (ss.ss_family == AF_UNIX)
		snprintf(H.unix_path, sizeof(H.unix_path), "%s", addr + 5);
	return fd;
}

int td__http_start(struct td__daemon *d)
{
	const union MHD_DaemonInfo *info;
	const char *why = NULL;
	int rc;

	if (!d->opts.http_addr)
		return 0;
	H.lfd = listen_on(d->opts.http_addr, &why);
	if (H.lfd < 0) {
		td__log(TD_LOG_ERROR, "--http %s: %s: %s", d->opts.http_addr,
			why, strerror(-H.lfd));
		return -1;
	}
	H.mhd = MHD_start_daemon(
		MHD_USE_EPOLL | MHD_USE_ERROR_LOG, 0,
		NULL, NULL, on_request, NULL, MHD_OPTION_LISTEN_SOCKET, H.lfd,
		MHD_OPTION_CONNECTION_LIMIT,
		(unsigned)d->opts.http_max_connections,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)d->opts.http_timeout,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_MEMORY,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
		MHD_OPTION_EXTERNAL_LOGGER, on_log, NULL,
		MHD_OPTION_SIGPIPE_HANDLED_BY_APP, 1, MHD_OPTION_END);
	if (!H.mhd) {
		td__log(TD_LOG_ERROR, "--http %s: libmicrohttpd did not start",
			d->opts.http_addr);
		close(H.lfd);
		H.lfd = -1;
		return -1;
	}
	info = MHD_get_daemon_info(H.mhd, MHD_DAEMON_INFO_EPOLL_FD);
	uv_timer_init(d->loop, &H.timer);
	rc = uv_poll_init(d->loop, &H.poll, info->epoll_fd);
	if (rc == 0)
		rc = uv_poll_start(&H.poll, UV_READABLE, on_poll);
	if (rc < 0) {
		td__log(TD_LOG_ERROR, "--http: uv_poll: %s", uv_strerror(rc));
		return -1;
	}
	H.poll_on = true;
	run();
	td__log(TD_LOG_INFO,
		"http: serving %s%s%s on %s (read-only, no authentication), "
		"%u connections, %u s timeout",
		d->opts.http_prefix ? "the names under \"" : "no name",
		d->opts.http_prefix ? d->opts.http_prefix : "",
		d->opts.http_prefix ? "\"" : "",
		d->opts.http_addr, d->opts.http_max_connections,
		d->opts.http_timeout);
	if (!d->opts.http_prefix)
		td__log(TD_LOG_WARN, "http: no --http-prefix: no tensor is "
				     "exported");
	return 0;
}

void td__http_stop(struct td__daemon *d)
{
	(void)d;
	if (!H.mhd)
		return;
	if (H.poll_on)
		uv_poll_stop(&H.poll);
	if (H.timer_on)
		uv_timer_stop(&H.timer);
	/* finishes every response: their leases go back here */
	MHD_stop_daemon(H.mhd);
	H.mhd = NULL;
	if (H.lfd >= 0)
		close(H.lfd);
	H.lfd = -1;
	if (H.unix_path[0])
		unlink(H.unix_path);
}
