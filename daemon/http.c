/* SPDX-License-Identifier: MIT */
/*
 * The read-only HTTP store (`tensord --http ADDR`, docs/zarr.md): the
 * current tensors and the rings' latest versions as a Zarr v3 hierarchy
 * under /zarr/, the same as Zarr v2 under /zarr-v2/, and Prometheus text
 * at /metrics.
 *
 * libmicrohttpd parses HTTP; it runs without a thread of its own, from the
 * daemon's libuv loop: its epoll fd sits on a uv_poll_t and its timeout on
 * a uv_timer_t, and both call MHD_run(). Chunks come from http-body.c
 * (by sendfile, or repacked), leased until their response is done.
 * Metadata is byte for byte what `tensorctl zarr export` writes: a node's
 * own keys are built per request by json/zarr.c, the group's keys that
 * list every node are put together from texts kept per version
 * (http-meta.c).
 *
 * Only names under --http-prefix are served (none without it) and, with
 * --policy, only those an `allow http r PREFIX` line grants.
 */
#include "http.h"
#include "snapshot.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <json-c/json.h>
#include <xxhash.h>


/* Bytes of request state per connection (headers included): a request
 * whose headers do not fit is answered 431 and closed. */
#define HTTP_MEMORY (16u << 10)

/*
 * A connection while a request of it is incomplete (headers or a body
 * still coming): when that began, on the loop's clock. A connection past
 * its deadline is shut down (cut_slow_requests()).
 */
struct conn {
	struct conn *prev, *next;
	struct MHD_Connection *c;
	uint64_t since_ms;
	bool waiting; /* for a request's headers (or body) */
};

struct http {
	struct MHD_Daemon *mhd;
	uv_poll_t poll;
	uv_timer_t timer;
	uv_idle_t idle; /* MHD has work ready now: run once per loop turn */
	bool poll_on, timer_on, idle_on;
	int lfd;
	char unix_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct conn conns; /* list head */
	uint64_t next_check_ms;
};

static struct http H = {.lfd = -1, .conns = {&H.conns, &H.conns}};

static unsigned connections(void);

/*
 * Metadata texts held by responses in flight (docs/zarr.md, "Limits").
 * A group key's text is the whole store's metadata, printed with JSON
 * escapes (up to six bytes a metadata byte), built per request and held
 * until the reader has taken its last byte: a tenant's slow readers of
 * texts that differ (a publish between two requests) would otherwise hold
 * one copy each, a multiple of --max-bytes that no uid is charged for.
 * Equal texts are shared (readers of one store state hold one copy); a
 * new group text is taken while no group text is held or while those
 * held and it stay within text_budget(), else it is a 503 with
 * Retry-After. A node's own keys are one tensor's metadata (about
 * 100 KB at most, printed): never refused.
 */
struct text {
	struct text *next;
	XXH128_hash_t h;
	size_t len;
	unsigned refs;
	bool group; /* counted in td__http_stats.text_bytes */
	char *t;
};

static struct text *texts;

/* A quarter of --max-bytes; 1 GiB when it is unlimited. */
static uint64_t text_budget(void)
{
	uint64_t max = td__d->opts.max_bytes;

	return max ? max / 4 : (uint64_t)1 << 30;
}

static void text_unref(void *cls)
{
	struct text *x = cls;

	if (--x->refs)
		return;
	for (struct text **pp = &texts; *pp; pp = &(*pp)->next)
		if (*pp == x) {
			*pp = x->next;
			break;
		}
	if (x->group)
		td__http_stats.text_bytes -= x->len;
	free(x->t);
	free(x);
}

/* t (taken, hashed h; a group key's when group) held by one more
 * response: an equal held text, or a new one; NULL (t freed) over the
 * budget (*busy) or out of memory. */
static struct text *text_hold(char *t, size_t len, XXH128_hash_t h,
			      bool group, bool *busy)
{
	struct text *x;

	*busy = false;
	for (x = texts; x; x = x->next)
		if (x->group == group && x->len == len &&
		    XXH128_isEqual(x->h, h) &&
		    !memcmp(x->t, t, len)) {
			free(t);
			x->refs++;
			return x;
		}
	if (group && td__http_stats.text_bytes &&
	    td__http_stats.text_bytes + len > text_budget()) {
		free(t);
		td__http_stats.text_busy++;
		*busy = true;
		return NULL;
	}
	x = malloc(sizeof(*x));
	if (!x) {
		free(t);
		return NULL;
	}
	*x = (struct text){texts, h, len, 1, group, t};
	texts = x;
	if (group)
		td__http_stats.text_bytes += len;
	return x;
}

/* A held text's bytes for its multipart body (td__http_reader). */
static ssize_t text_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	memcpy(buf, ((const struct text *)cls)->t + pos, max);
	return (ssize_t)max;
}

/* A JSON text (malloc'ed, taken; NULL: out of memory; a group key's
 * when group) as the body. */
static enum MHD_Result text_body(struct MHD_Connection *c, char *t,
				 size_t len, bool group)
{
	XXH128_hash_t h = XXH3_128bits(t ? t : "", len);
	struct td__http_ranges rs;
	struct MHD_Response *r;
	enum MHD_Result res;
	struct text *x;
	char etag[40];
	bool busy;
	int rg;

	if (!t)
		return td__http_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
				     "out of memory\n");
	/* a strong ETag: a hash of the text (128 bits of XXH3) */
	snprintf(etag, sizeof(etag), "\"z.%016" PRIx64 "%016" PRIx64 "\"",
		 h.high64, h.low64);
	rg = td__http_conditions(c, len, etag, &rs, &res);
	if (rg < 0) {
		free(t);
		return res;
	}
	x = text_hold(t, len, h, group, &busy);
	if (!x)
		return td__http_text(c, busy ? MHD_HTTP_SERVICE_UNAVAILABLE
					     : MHD_HTTP_INTERNAL_SERVER_ERROR,
				     busy ? "metadata texts in flight are at "
					    "their limit; retry\n"
					  : "out of memory\n");
	if (rs.count > 1)
		/* the parts are read from the text, which the response
		 * lets go */
		r = td__http_multipart(&rs, len, "application/json", text_read,
				       x, text_unref, 64u << 10);
	else
		r = MHD_create_response_from_buffer_with_free_callback_cls(
			rs.n[0], x->t + rs.a[0], text_unref, x);
	if (!r) {
		text_unref(x);
		return MHD_NO;
	}
	return td__http_queue(c,
			      td__http_finish(r, rg, &rs, len,
					      "application/json", etag),
			      r);
}

/* A JSON document (json-c object, dropped) as the body. */
static enum MHD_Result json_body(struct MHD_Connection *c,
				 struct json_object *o)
{
	size_t len = 0;
	char *t = o ? td_zarr_text(o, &len) : NULL;

	json_object_put(o);
	return text_body(c, t, len, false);
}

/* "/NODE/REST" in path: the node's ref and REST, or NULL (-ENOMEM in
 * *rc) */
static const struct td__http_ref *find_ref(const char *path,
					   const char **rest, int *rc)
{
	const char *slash = strchr(path, '/');
	const struct td__http_ref *r = NULL;

	*rc = slash ? td__http_node_find(path, (size_t)(slash - path), &r)
		    : 0;
	if (r)
		*rest = slash + 1;
	return r;
}

/*
 * A node's key: its metadata or its chunk. Only that node is built in
 * full: a walk over the store names the nodes, and building every one's
 * attributes and chunk layout for each request made a store of thousands
 * of tensors block the daemon's loop for most of a second a request.
 */
static enum MHD_Result node_key(struct MHD_Connection *c, const char *path,
				bool v2, void **con_cls)
{
	const struct td__http_ref *r;
	struct td__http_node nd;
	struct json_object *o = NULL;
	const char *rest = NULL;
	char key[2 + 2 * TD_ZARR_MAX_DIMS + 1];
	bool meta;
	enum MHD_Result res;
	int rc;

	r = find_ref(path, &rest, &rc);
	if (rc < 0)
		return td__http_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
				     "out of memory\n");
	/* metadata keys are zarr.json and .z*; anything else is a chunk */
	meta = rest && (!strcmp(rest, "zarr.json") || rest[0] == '.');
	if (!r || !td__http_node_of(r, &nd, meta))
		return td__http_text(c, MHD_HTTP_NOT_FOUND, "no such key\n");
	if (!v2 && !strcmp(rest, "zarr.json"))
		o = td_zarr_v3_array(&nd.a);
	else if (v2 && !strcmp(rest, ".zarray"))
		o = td_zarr_v2_array(&nd.a);
	else if (v2 && !strcmp(rest, ".zattrs"))
		o = td_zarr_v2_attrs(&nd.a);
	else if (td_zarr_chunk_key(&nd.a, v2, key, sizeof(key)) == 1 &&
		 !strcmp(rest, key)) {
		res = td__http_chunk(c, &nd, con_cls);
		td_zarr_array_fini(&nd.a);
		return res;
	}
	td_zarr_array_fini(&nd.a);
	if (!o)
		return td__http_text(c, MHD_HTTP_NOT_FOUND, "no such key\n");
	return json_body(c, o);
}

/* td__http_group_wait()'s kick (below) */
static void kick(void);

/* *con_cls of a group request that waited for its texts (http-meta.c):
 * called again once they are printed, it is answered in full. */
static char waited;

static enum MHD_Result zarr(struct MHD_Connection *c, const char *path,
			    bool v2, void **con_cls)
{
	bool may_wait = *con_cls != &waited;
	char *t = NULL;
	size_t len = 0;
	int rc;

	*con_cls = NULL;
	if (v2 && !strcmp(path, ".zgroup"))
		return json_body(c, td_zarr_v2_group());
	/* the keys that list every node: from the versions' kept texts
	 * (http-meta.c); where many lack them, printed a batch per loop
	 * turn while the request waits */
	rc = td__http_group_text(path, v2, may_wait, &t, &len);
	if (rc == -EAGAIN && td__http_group_wait(c, v2, kick)) {
		*con_cls = &waited;
		return MHD_YES;
	}
	if (rc == -EAGAIN)
		rc = td__http_group_text(path, v2, false, &t, &len);
	if (rc < 0)
		return td__http_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
				     "out of memory\n");
	if (rc > 0)
		return text_body(c, t, len, true);
	return node_key(c, path, v2, con_cls);
}

/* ---- /metrics ---- */

static void metric(FILE *f, const char *name, const char *type,
		   const char *help, uint64_t v)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %" PRIu64 "\n", name, help,
		name, type, name, v);
}

/* what survives a restart (fdstore-image.c) and a stop (snapshot-save.c) */
static void persist_metrics(FILE *f, const struct td__daemon *d)
{
	metric(f, "tensord_state_images_total", "counter",
	       "fd store state images written.", d->stats.state_images);
	metric(f, "tensord_state_image_turns_total", "counter",
	       "Loop turns the state images' writing took.",
	       d->stats.state_image_turns);
	td__snapshot_metrics(f);
}

/* the loop's share-out: reads put off to a later turn (peer.c), write
 * seals made off the loop (sealer.c) */
static void turn_metrics(FILE *f, const struct td__daemon *d)
{
	metric(f, "tensord_reads_deferred_total", "counter",
	       "Connections whose reading waited for the next loop turn, "
	       "their uid's share of this one spent.",
	       d->stats.reads_deferred);
	metric(f, "tensord_seals_off_loop_total", "counter",
	       "Memfds a request left to the daemon to write-seal, sealed "
	       "off the loop.", d->stats.seals_off_loop);
	metric(f, "tensord_seals_waiting", "gauge",
	       "Requests parked while their seals are made.",
	       td__sealer_waiting());
	metric(f, "tensord_seal_yields_total", "counter",
	       "Times a request's seals stopped after one, for another "
	       "uid's turn on the sealing threads.", d->stats.seal_yields);
}

static enum MHD_Result metrics(struct MHD_Connection *c)
{
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
		return td__http_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
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
	       "Plane and metadata bytes held (against --max-bytes).",
	       s->total);
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
	metric(f, "tensord_store_visits_total", "counter",
	       "Names and buffer records the store's bookkeeping visited.",
	       d->stats.visits);
	metric(f, "tensord_follow_row_visits_total", "counter",
	       "Follower rows the followed names' bookkeeping visited.",
	       d->stats.row_visits);
	turn_metrics(f, d);
	persist_metrics(f, d);
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
			td__http_codes[i], td__http_stats.by_code[i]);
	fprintf(f, "tensord_http_responses_total{code=\"other\"} %" PRIu64 "\n",
		td__http_stats.other);
	metric(f, "tensord_http_leases", "gauge",
	       "Versions and ring slots held by HTTP responses being sent.",
	       td__http_stats.leases);
	metric(f, "tensord_http_connections", "gauge",
	       "Open HTTP connections.", connections());
	metric(f, "tensord_http_node_walks_total", "counter",
	       "Walks over every exported name to find the node a key "
	       "names (once per change of the names).",
	       td__http_stats.node_walks);
	metric(f, "tensord_http_meta_builds_total", "counter",
	       "Versions whose array metadata was printed for the group's "
	       "consolidated metadata.",
	       td__http_stats.meta_builds);
	metric(f, "tensord_http_meta_cached", "gauge",
	       "Versions keeping their printed array metadata.",
	       td__http_stats.meta_cached);
	metric(f, "tensord_http_meta_bytes", "gauge",
	       "Bytes of the printed array metadata versions keep (at most a "
	       "quarter of --max-bytes).",
	       td__http_stats.meta_bytes);
	metric(f, "tensord_http_meta_waits_total", "counter",
	       "Group metadata requests that waited while the loop printed "
	       "many versions' metadata a batch per turn.",
	       td__http_stats.meta_waits);
	metric(f, "tensord_http_text_bytes", "gauge",
	       "Bytes of the group's metadata texts held by HTTP responses "
	       "being sent.",
	       td__http_stats.text_bytes);
	metric(f, "tensord_http_text_busy_total", "counter",
	       "Group metadata requests refused (503) while the texts held "
	       "were at their limit.",
	       td__http_stats.text_busy);
	if (fclose(f) != 0) {
		free(buf);
		return td__http_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
				     "out of memory\n");
	}
	r = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(buf);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type",
				"text/plain; version=0.0.4");
	return td__http_queue(c, MHD_HTTP_OK, r);
}

/* ---- libmicrohttpd callbacks ---- */

/* *con_cls between the two calls for one request (no lease yet). */
static char announced;

/*
 * libmicrohttpd's unescape, except that a %00 does not end the path: the
 * handler reads the path as a C string, and "/zarr/zarr.json%00x" would
 * be served as "/zarr/zarr.json". Such a path becomes "%00", which names
 * nothing (404): 3 bytes and a NUL, which fit where the escaped text
 * was. ("/%00" and its NUL are 5 bytes: a request for "%00" alone had
 * the NUL written one byte past its path, over the next byte of
 * libmicrohttpd's buffer.)
 */
static size_t on_unescape(void *cls, struct MHD_Connection *c, char *uri)
{
	size_t n;

	(void)cls;
	(void)c;
	n = MHD_http_unescape(uri);
	if (strlen(uri) == n)
		return n;
	memcpy(uri, "%00", 4); /* no longer than what held a %00 */
	return 3;
}

/*
 * Slow requests. libmicrohttpd's timeout closes a connection only when
 * nothing comes for --http-timeout seconds: a client that sends its
 * headers (or a body) a byte at a time held its connection for ever, and
 * --http-max-connections such clients kept every other reader waiting in
 * the listen backlog. A request must now be whole within --http-timeout
 * seconds of the connection's start, or of the end of its previous
 * request; past that the connection is shut down (shutdown(2) on its
 * socket: libmicrohttpd sees the end and closes it as it closes any).
 */
static void on_connection(void *cls, struct MHD_Connection *c,
			  void **socket_context,
			  enum MHD_ConnectionNotificationCode code)
{
	struct conn *k = *socket_context;

	(void)cls;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		k = calloc(1, sizeof(*k));
		if (!k)
			return; /* not watched: only the idle timeout */
		k->c = c;
		k->waiting = true;
		k->since_ms = uv_now(td__d->loop);
		k->next = H.conns.next;
		k->prev = &H.conns;
		k->next->prev = k;
		H.conns.next = k;
		*socket_context = k;
	} else if (k) {
		k->prev->next = k->next;
		k->next->prev = k->prev;
		free(k);
		*socket_context = NULL;
	}
}

static struct conn *conn_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *i =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return i ? i->socket_context : NULL;
}

/* c's request is whole (headers, and a body if any): no deadline. */
static void request_whole(struct MHD_Connection *c)
{
	struct conn *k = conn_of(c);

	if (k)
		k->waiting = false;
}

/*
 * Whether the client of a connection waiting for its request has closed
 * its end: nothing more to read and end of file. libmicrohttpd (0.9.75,
 * edge-triggered epoll) reads a connection once per wakeup, so a client
 * whose request start and FIN were both there when it was accepted (it
 * sent them while it waited in the listen backlog, at the connection
 * limit) left its slot taken, in CLOSE_WAIT, until --http-timeout.
 */
static bool client_gone(int fd)
{
	char b;

	return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* Shut down the connections whose request is not whole in time, or
 * whose client is gone while it waits for one (at most once a second). */
static void cut_slow_requests(void)
{
	uint64_t now = uv_now(td__d->loop),
		 limit = (uint64_t)td__d->opts.http_timeout * 1000;

	if (now < H.next_check_ms)
		return;
	H.next_check_ms = now + 1000;
	for (struct conn *k = H.conns.next; k != &H.conns; k = k->next) {
		const union MHD_ConnectionInfo *i;
		bool late;

		if (!k->waiting)
			continue;
		i = MHD_get_connection_info(k->c,
					    MHD_CONNECTION_INFO_CONNECTION_FD);
		if (!i)
			continue;
		late = now - k->since_ms >= limit;
		if (!late && !client_gone(i->connect_fd))
			continue;
		if (shutdown(i->connect_fd, SHUT_RDWR) == 0)
			td__log(TD_LOG_DEBUG, "http: %s; connection cut",
				late ? "a request not whole in time"
				     : "the client left before its request");
		k->waiting = false; /* once */
	}
}

/* Whether a connection waits for its request (cut_slow_requests()). */
static bool any_waiting(void)
{
	for (struct conn *k = H.conns.next; k != &H.conns; k = k->next)
		if (k->waiting)
			return true;
	return false;
}

/* MHD_get_connection_values() iterator: *cls (a bool) set, and the
 * iteration ended, at the first name td__http_field_name_ok() refuses. */
static enum MHD_Result name_check(void *cls, enum MHD_ValueKind kind,
				  const char *key, const char *value)
{
	(void)kind;
	(void)value;
	if (td__http_field_name_ok(key))
		return MHD_YES;
	*(bool *)cls = true;
	return MHD_NO;
}

/* The field lines that say where a request ends, and Host (framing()). */
struct framing {
	unsigned host, length, coding;
	bool other_coding; /* a Transfer-Encoding other than "chunked" */
};

static enum MHD_Result framing_line(void *cls, enum MHD_ValueKind kind,
				    const char *key, const char *value)
{
	struct framing *f = cls;

	(void)kind;
	if (!strcasecmp(key, MHD_HTTP_HEADER_HOST)) {
		f->host++;
	} else if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
		f->length++;
	} else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
		f->coding++;
		/* exactly what libmicrohttpd reads as chunked: it takes
		 * "chunked " (a space after) for another coding */
		if (!value || strcasecmp(value + strspn(value, " \t"),
					 "chunked"))
			f->other_coding = true;
	}
	return MHD_YES;
}

/*
 * Why a request whose headers just came cannot be answered and its
 * connection kept (NULL: it can), with *code. libmicrohttpd 0.9.75 reads
 * a body by Transfer-Encoding over Content-Length, by the first of two
 * Content-Length lines, and a chunked body of an HTTP/1.0 request, and
 * then serves the next request on the connection: where a proxy in front
 * (docs/zarr.md, Security: one that authenticates) framed the request
 * otherwise, the bytes it took for a body are a request of the client's
 * own making, which the store answers into the proxy's connection
 * (request smuggling, RFC 9112 11.2). A Transfer-Encoding other than
 * "chunked" (another coding, a list, "chunked " with a space after) it
 * neither refused nor read: the connection hung until --http-timeout. RFC 9112 3.2 and 6.1, 6.3: a 400 (501 for a coding), and
 * the connection closed.
 */
static const char *framing(struct MHD_Connection *c, const char *version,
			   unsigned *code)
{
	struct framing f = {0};

	MHD_get_connection_values(c, MHD_HEADER_KIND, framing_line, &f);
	*code = MHD_HTTP_BAD_REQUEST;
	if (f.host > 1)
		return "more than one Host field line (RFC 9112 3.2)\n";
	if (f.length > 1)
		return "more than one Content-Length field line (RFC 9112 "
		       "6.3)\n";
	if (f.coding && f.length)
		return "both Transfer-Encoding and Content-Length: where the "
		       "body ends is in doubt (RFC 9112 6.1)\n";
	if (f.coding && strcmp(version, MHD_HTTP_VERSION_1_1))
		return "Transfer-Encoding in an HTTP/1.0 request (RFC 9112 "
		       "6.1)\n";
	*code = MHD_HTTP_NOT_IMPLEMENTED;
	if (f.coding > 1 || f.other_coding)
		return "a Transfer-Encoding other than \"chunked\"\n";
	return NULL;
}

/*
 * The path of an absolute-form request-target ("http://host/zarr/...",
 * RFC 9112 3.2.2: a server MUST accept it; it was a 404): from the first
 * "/" after the authority, "/" when there is none (a 404 too).
 */
static const char *origin_form(const char *url)
{
	size_t n = !strncasecmp(url, "http://", 7)    ? 7
		   : !strncasecmp(url, "https://", 8) ? 8
						      : 0;
	const char *p;

	if (!n)
		return url;
	p = strchr(url + n, '/');
	return p ? p : "/";
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
				  const char *url, const char *method,
				  const char *version, const char *upload,
				  size_t *upload_len, void **con_cls)
{
	const char *why;
	unsigned code;
	bool bad = false;

	(void)cls;
	(void)upload;
	/* the first call only announces the request: answering the second
	 * (headers complete, nothing to upload) keeps the connection
	 * alive for the next request; a request whose end is in doubt is
	 * answered here, before any body is read, and its connection
	 * closed */
	if (!*con_cls) {
		why = framing(c, version, &code);
		if (why) {
			request_whole(c);
			return td__http_text(c, code, why);
		}
		*con_cls = &announced;
		return MHD_YES;
	}
	if (*con_cls == &announced) {
		/* a body (a GET may carry one) is not read: each piece
		 * is dropped, and the call after the last one answers
		 * (libmicrohttpd takes no response while a body comes) */
		if (*upload_len) {
			*upload_len = 0;
			return MHD_YES;
		}
		*con_cls = NULL;
		request_whole(c);
	}
	/* a folded field line (obs-fold) may hide a Range: a 400, never
	 * the whole body as a 200 (http-hdr.h) */
	MHD_get_connection_values(c, MHD_HEADER_KIND, name_check, &bad);
	if (bad)
		return td__http_text(c, MHD_HTTP_BAD_REQUEST,
				     "a header field line folded onto the "
				     "next (obs-fold, RFC 9112 5.2) or a "
				     "field name that is not a token\n");
	/* RFC 9112 §3.2: an HTTP/1.1 request without Host is a 400 */
	if (!strcmp(version, MHD_HTTP_VERSION_1_1) &&
	    !MHD_lookup_connection_value(c, MHD_HEADER_KIND,
					 MHD_HTTP_HEADER_HOST))
		return td__http_text(c, MHD_HTTP_BAD_REQUEST,
				     "an HTTP/1.1 request needs Host\n");
	if (!strcmp(method, MHD_HTTP_METHOD_OPTIONS) && td__d->opts.http_cors)
		return td__http_preflight(c);
	if (strcmp(method, MHD_HTTP_METHOD_GET) &&
	    strcmp(method, MHD_HTTP_METHOD_HEAD))
		return td__http_text(c, MHD_HTTP_METHOD_NOT_ALLOWED,
				     "read-only: GET and HEAD only\n");
	url = origin_form(url);
	if (!strcmp(url, "/metrics"))
		return metrics(c);
	if (!strncmp(url, "/zarr/", 6))
		return zarr(c, url + 6, false, con_cls);
	if (!strncmp(url, "/zarr-v2/", 9))
		return zarr(c, url + 9, true, con_cls);
	return td__http_text(c, MHD_HTTP_NOT_FOUND, "no such key\n");
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode why)
{
	(void)cls;
	/* a sendfile response's lease (a repacked one's goes with it) */
	if (*con_cls && *con_cls != &announced && *con_cls != &waited)
		td__http_hold_drop(*con_cls);
	*con_cls = NULL;
	/* kept alive: the next request's headers are awaited from now */
	if (why == MHD_REQUEST_TERMINATED_COMPLETED_OK) {
		struct conn *k = conn_of(c);

		if (k) {
			k->waiting = true;
			k->since_ms = uv_now(td__d->loop);
		}
	}
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

static void on_idle(uv_idle_t *i)
{
	(void)i;
	run();
}

static void on_poll(uv_poll_t *p, int status, int events)
{
	(void)p;
	(void)status;
	(void)events;
	run();
}

/* td__http_group_wait()'s kick: libmicrohttpd runs after a resume. */
static void kick(void)
{
	if (H.mhd)
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
	MHD_UNSIGNED_LONG_LONG to = 0;
	unsigned before;
	bool has;

	cut_slow_requests();
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
	has = MHD_get_timeout(H.mhd, &to) == MHD_YES;
	/* a connection waiting for its request is looked at once a second
	 * (cut_slow_requests) */
	if (any_waiting() && (!has || to > 1000)) {
		to = 1000;
		has = true;
	}
	/*
	 * A timeout of 0 (a response with bytes ready to go to a reader that
	 * keeps taking them) runs MHD again on the next loop turn, after the
	 * loop has polled the socket clients, from an idle handle: a 0 ms
	 * timer started from its own callback ran again at once in libuv's
	 * (1.44) timer phase, which never polled meanwhile, so one HTTP
	 * reader of a slowly repacked chunk held every socket client until
	 * its whole body was sent (docs/zarr.md, "Limits").
	 */
	if (has && to == 0) {
		if (!H.idle_on)
			uv_idle_start(&H.idle, on_idle);
		H.idle_on = true;
		has = false;
	} else if (H.idle_on) {
		uv_idle_stop(&H.idle);
		H.idle_on = false;
	}
	if (has) {
		uv_timer_start(&H.timer, on_timer, to, 0);
		H.timer_on = true;
	} else if (H.timer_on) {
		uv_timer_stop(&H.timer);
		H.timer_on = false;
	}
}

/* ---- the listening socket ---- */

/*
 * A socket file at path that nobody listens on (a daemon that crashed, or
 * was killed, did not unlink it) is removed, as the main socket's is
 * (server.c): bind() would fail with EADDRINUSE and the daemon would not
 * start again until someone deleted it. A live one, or anything that is
 * not a socket, is left alone and refused. 0 or -errno with *why.
 */
static int unix_stale(const struct sockaddr_un *un, const char **why)
{
	struct stat st;
	int fd, rc;

	if (lstat(un->sun_path, &st) < 0)
		return 0; /* absent (else bind says why) */
	if (!S_ISSOCK(st.st_mode)) {
		*why = "the path exists and is not a socket";
		return -EEXIST;
	}
	/* non-blocking: a live server whose backlog is full says EAGAIN
	 * (in use) instead of holding the start until it accepts */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		*why = "socket";
		return -errno;
	}
	rc = connect(fd, (const struct sockaddr *)un, sizeof(*un));
	rc = rc == 0 || errno != ECONNREFUSED ? -EADDRINUSE : 0;
	close(fd);
	if (rc) {
		*why = "something is listening on the path";
		return rc;
	}
	if (unlink(un->sun_path) == 0)
		td__log(TD_LOG_INFO, "http: replaced stale socket %s",
			un->sun_path);
	return 0;
}

/*
 * ADDR's form (docs/zarr.md §3: unix:PATH, [IPv6]:PORT or IPv4:PORT,
 * numeric only) into *ss: 0, or -EINVAL and why. Opens
 * nothing, so main.c checks it with the other options (exit status 2).
 */
static int parse_addr(const char *addr, struct sockaddr_storage *ss,
		      socklen_t *sl, const char **why)
{
	const char *colon;
	char host[64];
	unsigned long port;
	char *end;

	memset(ss, 0, sizeof(*ss));
	if (!strncmp(addr, "unix:", 5)) {
		struct sockaddr_un *un = (struct sockaddr_un *)ss;

		if (strlen(addr + 5) >= sizeof(un->sun_path) || !addr[5]) {
			*why = "unix: path empty or too long";
			return -EINVAL;
		}
		un->sun_family = AF_UNIX;
		strcpy(un->sun_path, addr + 5);
		*sl = sizeof(*un);
		return 0;
	}
	colon = strrchr(addr, ':');
	if (!colon || (size_t)(colon - addr) >= sizeof(host)) {
		*why = "want 127.0.0.1:PORT, [::1]:PORT, unix:PATH or "
		       "another numeric address:PORT";
		return -EINVAL;
	}
	/* digits only: strtoul() also takes a sign and leading spaces
	 * ("127.0.0.1:+80", ":-0", ": 80" were served) */
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (errno || !isdigit((unsigned char)colon[1]) || *end ||
	    port > 65535) {
		*why = "bad port";
		return -EINVAL;
	}
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = 0;
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

		host[strlen(host) - 1] = 0;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, host + 1, &s6->sin6_addr) != 1) {
			*why = "not a numeric IPv6 address";
			return -EINVAL;
		}
		*sl = sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)ss;

		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
		if (inet_pton(AF_INET, host, &s4->sin_addr) != 1) {
			*why = "not a numeric IPv4 address (names are "
			       "not resolved)";
			return -EINVAL;
		}
		*sl = sizeof(*s4);
	}
	return 0;
}

int td__http_addr_check(const char *addr, const char **why)
{
	struct sockaddr_storage ss;
	socklen_t sl;

	return parse_addr(addr, &ss, &sl, why);
}

/* ADDR as a bound, listening socket: fd, or -errno with *why. */
static int listen_on(const char *addr, const char **why)
{
	struct sockaddr_storage ss;
	socklen_t sl = 0;
	int fd, one = 1;

	fd = parse_addr(addr, &ss, &sl, why);
	if (fd < 0)
		return fd;
	if (ss.ss_family == AF_UNIX) {
		fd = unix_stale((const struct sockaddr_un *)&ss, why);
		if (fd < 0)
			return fd;
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

/* For an address of port 0, the port the kernel chose: " (port N)";
 * "" otherwise (the address as given says it). */
static const char *bound_port(const char *addr)
{
	static char buf[32];
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	const char *colon = strrchr(addr, ':');
	unsigned port;

	if (!strncmp(addr, "unix:", 5) || !colon || strcmp(colon, ":0") ||
	    getsockname(H.lfd, (struct sockaddr *)&ss, &sl) < 0)
		return "";
	port = ss.ss_family == AF_INET6
		       ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
		       : ntohs(((struct sockaddr_in *)&ss)->sin_port);
	snprintf(buf, sizeof(buf), " (port %u)", port);
	return buf;
}

int td__http_start(struct td__daemon *d)
{
	const union MHD_DaemonInfo *info;
	const char *why = NULL;
	int rc;

	if (!d->opts.http_addr)
		return 0;
	/* kept after td__http_stop(): versions freed later have texts */
	td__store_meta_hook_set(td__http_meta_free);
	H.lfd = listen_on(d->opts.http_addr, &why);
	if (H.lfd < 0) {
		td__log(TD_LOG_ERROR, "--http %s: %s: %s", d->opts.http_addr,
			why, strerror(-H.lfd));
		return -1;
	}
	H.mhd = MHD_start_daemon(
		MHD_USE_EPOLL | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME, 0,
		NULL, NULL, on_request, NULL, MHD_OPTION_LISTEN_SOCKET, H.lfd,
		MHD_OPTION_CONNECTION_LIMIT,
		(unsigned)d->opts.http_max_connections,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)d->opts.http_timeout,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_MEMORY,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
		MHD_OPTION_NOTIFY_CONNECTION, on_connection, NULL,
		MHD_OPTION_EXTERNAL_LOGGER, on_log, NULL,
		MHD_OPTION_UNESCAPE_CALLBACK, on_unescape, NULL,
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
	uv_idle_init(d->loop, &H.idle);
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
		"http: serving %s%s%s on %s%s (read-only, no authentication), "
		"%u connections, %u s timeout",
		d->opts.http_prefix ? "the names under \"" : "no name",
		d->opts.http_prefix ? d->opts.http_prefix : "",
		d->opts.http_prefix ? "\"" : "",
		d->opts.http_addr, bound_port(d->opts.http_addr),
		d->opts.http_max_connections, d->opts.http_timeout);
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
	if (H.idle_on)
		uv_idle_stop(&H.idle);
	H.poll_on = H.timer_on = H.idle_on = false;
	/* libmicrohttpd may not stop with a request suspended */
	td__http_group_stop();
	td__http_nodes_drop();
	/* finishes every response: their leases go back here */
	MHD_stop_daemon(H.mhd);
	H.mhd = NULL;
	if (H.lfd >= 0)
		close(H.lfd);
	H.lfd = -1;
	if (H.unix_path[0])
		unlink(H.unix_path);
}
