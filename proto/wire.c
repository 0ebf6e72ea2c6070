/* SPDX-License-Identifier: MIT */
/*
 * tensord socket protocol codecs (wire.h, docs/protocol.md). Sans-I/O.
 *
 * Every body is a fixed sequence of fields in the order of its struct in
 * wire.h. Decoding is strict: each variable length is bounded by its named
 * cap (-EOVERFLOW), a field that runs past the body is truncation
 * (-ENODATA), an enum or flag value outside its set and bytes left over
 * after the last field are -EBADMSG, and names are checked with
 * td_wire_name_check (-EINVAL). Error offsets are relative to the body.
 */
#include "wire.h"

#include <errno.h>
#include <string.h>

#include "bytes.h"
#include "wire-int.h"

/* Header field offsets (docs/protocol.md, "Header"). */
enum {
	HOFF_MAGIC = 0,
	HOFF_VERSION = 4,
	HOFF_OPCODE = 6,
	HOFF_FLAGS = 8,
	HOFF_FD_COUNT = 12,
	HOFF_REQUEST_ID = 16,
	HOFF_BODY_LEN = 24,
	HOFF_STATUS = 28,
};

#define HDR_FLAGS_KNOWN (TD_WIRE_F_REPLY | TD_WIRE_F_NOTIFY | TD_WIRE_F_CROWD)

/* One fd-table entry as described by the daemon: i32 fd + u64 buffer_id. */
#define FDENT_LEN 12

void td_wire_hdr_peek(const uint8_t *buf, size_t len, uint16_t *opcode,
		      uint64_t *request_id)
{
	*opcode = len >= HOFF_OPCODE + 2 ? td__le16(buf + HOFF_OPCODE) : 0;
	*request_id = len >= HOFF_REQUEST_ID + 8
			      ? td__le64(buf + HOFF_REQUEST_ID)
			      : 0;
}

int td_wire_hdr_decode(const uint8_t *buf, size_t len, struct td_wire_hdr *h,
		       struct td_err *err)
{
	if (len < TD_WIRE_HDR_LEN)
		return td__err_truncated(err, TD_WIRE_HDR_LEN, len, 0,
					 "datagram shorter than the header");
	h->magic = td__le32(buf + HOFF_MAGIC);
	h->version = td__le16(buf + HOFF_VERSION);
	h->opcode = td__le16(buf + HOFF_OPCODE);
	h->flags = td__le32(buf + HOFF_FLAGS);
	h->fd_count = td__le32(buf + HOFF_FD_COUNT);
	h->request_id = td__le64(buf + HOFF_REQUEST_ID);
	h->body_len = td__le32(buf + HOFF_BODY_LEN);
	h->status = (int32_t)td__le32(buf + HOFF_STATUS);

	if (h->magic != TD_WIRE_MAGIC)
		return td__err_set(err, TD_ERR_MALFORMED, "magic", true,
				   h->magic, HOFF_MAGIC, "bad magic");
	if (h->version != TD_WIRE_VERSION) {
		td__err_set(err, TD_ERR_INVALID_ARGUMENT, "version", true,
			    h->version, HOFF_VERSION,
			    "unsupported protocol version");
		return -EPROTONOSUPPORT;
	}
	/* Checked before body_len so an oversize datagram reads as such. */
	if (len > TD_WIRE_MAX_MSG) {
		td__err_set(err, TD_ERR_FORGED_LENGTH, "body_len", true,
			    h->body_len, HOFF_BODY_LEN,
			    "datagram larger than TD_WIRE_MAX_MSG");
		return -EMSGSIZE;
	}
	if (h->body_len != len - TD_WIRE_HDR_LEN)
		return td__err_set(err, TD_ERR_MALFORMED, "body_len", true,
				   h->body_len, HOFF_BODY_LEN,
				   "body_len does not match the datagram");
	if (h->fd_count > TD_WIRE_MAX_FDS) {
		td__err_set(err, TD_ERR_FORGED_LENGTH, "fd_count", true,
			    h->fd_count, HOFF_FD_COUNT,
			    "more fds than TD_WIRE_MAX_FDS");
		return -E2BIG;
	}
	if (h->flags & ~HDR_FLAGS_KNOWN)
		return td__err_set(err, TD_ERR_MALFORMED, "flags", true,
				   h->flags, HOFF_FLAGS,
				   "unknown header flag bits");
	return 0;
}

void td_wire_hdr_encode(const struct td_wire_hdr *h, uint8_t *out)
{
	td__put_le32(out + HOFF_MAGIC, h->magic);
	td__put_le16(out + HOFF_VERSION, h->version);
	td__put_le16(out + HOFF_OPCODE, h->opcode);
	td__put_le32(out + HOFF_FLAGS, h->flags);
	td__put_le32(out + HOFF_FD_COUNT, h->fd_count);
	td__put_le64(out + HOFF_REQUEST_ID, h->request_id);
	td__put_le32(out + HOFF_BODY_LEN, h->body_len);
	td__put_le32(out + HOFF_STATUS, (uint32_t)h->status);
}

/* ---- reader ---- */

void td_wire_rd_init(struct td_wire_rd *rd, const uint8_t *body, size_t len,
		     struct td_err *err)
{
	rd->p = body;
	rd->len = len;
	rd->off = 0;
	rd->rc = 0;
	rd->err = err;
}

/* Reserve n bytes; NULL (and a sticky -ENODATA) when they are not there. */
static const uint8_t *rd_take(struct td_wire_rd *rd, size_t n,
			      const char *field)
{
	const uint8_t *p;

	if (rd->rc)
		return NULL;
	/* off <= len always holds, so len - off cannot wrap. */
	if (n > rd->len - rd->off) {
		rd->rc = td__err_truncated(rd->err, (uint64_t)rd->off + n,
					   rd->len, rd->off,
					   "message body truncated");
		if (rd->err)
			rd->err->field = field;
		return NULL;
	}
	p = rd->p + rd->off;
	rd->off += n;
	return p;
}

/* Record the first semantic error; later ones are ignored. */
void td__wire_rd_fail(struct td_wire_rd *rd, enum td_err_kind kind,
		    const char *field, uint64_t value, size_t off,
		    const char *reason)
{
	if (rd->rc)
		return;
	rd->rc = td__err_set(rd->err, kind, field, true, value, off, reason);
}

uint32_t td_wire_rd_u32(struct td_wire_rd *rd, const char *field)
{
	const uint8_t *p = rd_take(rd, 4, field);

	return p ? td__le32(p) : 0;
}

int32_t td_wire_rd_i32(struct td_wire_rd *rd, const char *field)
{
	return (int32_t)td_wire_rd_u32(rd, field);
}

uint64_t td_wire_rd_u64(struct td_wire_rd *rd, const char *field)
{
	const uint8_t *p = rd_take(rd, 8, field);

	return p ? td__le64(p) : 0;
}

struct td_wire_str td_wire_rd_str(struct td_wire_rd *rd, uint16_t max,
				  const char *field)
{
	struct td_wire_str s = {"", 0};
	size_t at = rd->off;
	const uint8_t *p = rd_take(rd, 2, field);
	uint16_t n;

	if (!p)
		return s;
	n = td__le16(p);
	if (n > max) {
		td__wire_rd_fail(rd, TD_ERR_FORGED_LENGTH, field, n, at,
			"string longer than its cap");
		return s;
	}
	p = rd_take(rd, n, field);
	if (!p)
		return s;
	s.ptr = (const char *)p;
	s.len = n;
	return s;
}

struct td_wire_bytes td_wire_rd_bytes(struct td_wire_rd *rd, uint32_t max,
				      const char *field)
{
	struct td_wire_bytes b = {NULL, 0};
	size_t at = rd->off;
	const uint8_t *p = rd_take(rd, 4, field);
	uint32_t n;

	if (!p)
		return b;
	n = td__le32(p);
	if (n > max) {
		td__wire_rd_fail(rd, TD_ERR_FORGED_LENGTH, field, n, at,
			"byte string longer than its cap");
		return b;
	}
	p = rd_take(rd, n, field);
	if (!p)
		return b;
	b.ptr = p;
	b.len = n;
	return b;
}

int td_wire_rd_end(struct td_wire_rd *rd)
{
	if (rd->rc)
		return rd->rc;
	if (rd->off != rd->len)
		rd->rc = td__err_set(rd->err, TD_ERR_MALFORMED, NULL, true,
				     rd->len - rd->off, rd->off,
				     "trailing bytes after the message");
	return rd->rc;
}

/* ---- writer ---- */

void td_wire_wr_init(struct td_wire_wr *wr, uint8_t *buf, size_t cap)
{
	wr->p = buf;
	wr->cap = cap;
	wr->off = 0;
	wr->overflow = false;
}

static uint8_t *wr_take(struct td_wire_wr *wr, size_t n)
{
	uint8_t *p;

	if (wr->overflow || n > wr->cap - wr->off) {
		wr->overflow = true;
		return NULL;
	}
	p = wr->p + wr->off;
	wr->off += n;
	return p;
}

void td_wire_wr_u32(struct td_wire_wr *wr, uint32_t v)
{
	uint8_t *p = wr_take(wr, 4);

	if (p)
		td__put_le32(p, v);
}

void td_wire_wr_i32(struct td_wire_wr *wr, int32_t v)
{
	td_wire_wr_u32(wr, (uint32_t)v);
}

void td_wire_wr_u64(struct td_wire_wr *wr, uint64_t v)
{
	uint8_t *p = wr_take(wr, 8);

	if (p)
		td__put_le64(p, v);
}

void td_wire_wr_str(struct td_wire_wr *wr, const char *s, size_t len)
{
	uint8_t *p;

	if (len > UINT16_MAX) {
		wr->overflow = true;
		return;
	}
	p = wr_take(wr, 2 + len);
	if (!p)
		return;
	td__put_le16(p, (uint16_t)len);
	if (len)
		memcpy(p + 2, s, len);
}

void td_wire_wr_bytes(struct td_wire_wr *wr, const void *src, size_t len)
{
	uint8_t *p;

	if (len > UINT32_MAX) {
		wr->overflow = true;
		return;
	}
	p = wr_take(wr, 4 + len);
	if (!p)
		return;
	td__put_le32(p, (uint32_t)len);
	if (len)
		memcpy(p + 4, src, len);
}

int64_t td__wire_wr_done(const struct td_wire_wr *wr)
{
	return wr->overflow ? -ENOBUFS : (int64_t)wr->off;
}

/* ---- shared field helpers ---- */

/* A name field: bounded, then td_wire_name_check (-EINVAL + reason). */
struct td_wire_str td__wire_rd_name(struct td_wire_rd *rd, bool prefix,
				  bool empty_ok, const char *field)
{
	size_t at = rd->off;
	struct td_wire_str s = td_wire_rd_str(rd, TD_WIRE_MAX_NAME, field);
	const char *why;

	if (rd->rc)
		return s;
	if (empty_ok && s.len == 0)
		return s;
	if (td_wire_name_check(s.ptr, s.len, prefix, &why) < 0)
		td__wire_rd_fail(rd, TD_ERR_INVALID_ARGUMENT, field, s.len, at,
				 why);
	return s;
}

/* A free-text field: bounded and valid UTF-8 without NUL bytes. */
static struct td_wire_str rd_text(struct td_wire_rd *rd, uint16_t max,
				  const char *field)
{
	size_t at = rd->off;
	struct td_wire_str s = td_wire_rd_str(rd, max, field);

	if (rd->rc)
		return s;
	if (!td__utf8_valid((const uint8_t *)s.ptr, s.len) ||
	    memchr(s.ptr, 0, s.len))
		td__wire_rd_fail(rd, TD_ERR_INVALID_UTF8, field, s.len, at,
			"text is not UTF-8 without NUL bytes");
	return s;
}

/* An enum value: v must lie in [min, max]. */
void td__wire_rd_enum(struct td_wire_rd *rd, uint32_t v, uint32_t min,
		    uint32_t max, size_t at, const char *field)
{
	if (!rd->rc && (v < min || v > max))
		td__wire_rd_fail(rd, TD_ERR_MALFORMED, field, v, at,
			"value outside its defined set");
}

uint32_t td__wire_rd_flags(struct td_wire_rd *rd, uint32_t known,
			 const char *field)
{
	size_t at = rd->off;
	uint32_t v = td_wire_rd_u32(rd, field);

	if (!rd->rc && (v & ~known))
		td__wire_rd_fail(rd, TD_ERR_MALFORMED, field, v, at,
			"unknown flag bits");
	return v;
}

/* A count bounded by its cap (the array it fills). */
uint32_t td__wire_rd_count(struct td_wire_rd *rd, uint32_t max,
			 const char *field)
{
	size_t at = rd->off;
	uint32_t v = td_wire_rd_u32(rd, field);

	if (!rd->rc && v > max) {
		td__wire_rd_fail(rd, TD_ERR_FORGED_LENGTH, field, v, at,
			"count over its cap");
		return 0;
	}
	return v;
}

/*
 * Flags appended to a message after version 1 shipped: absent means 0.
 * Exactly four bytes left are the field; any other remainder is left for
 * td_wire_rd_end() to refuse as trailing bytes. A present 0 is refused so
 * that every body has one encoding (the encoder leaves 0 out).
 */
uint32_t td__wire_rd_opt_flags(struct td_wire_rd *rd, uint32_t known,
				 const char *field)
{
	size_t at = rd->off;
	uint32_t v;

	if (rd->rc || rd->len - rd->off != 4)
		return 0;
	v = td__wire_rd_flags(rd, known, field);
	if (!rd->rc && v == 0)
		td__wire_rd_fail(rd, TD_ERR_MALFORMED, field, v, at,
			"optional flags of 0 are sent by leaving them out");
	return v;
}

void td__wire_wr_opt_flags(struct td_wire_wr *wr, uint32_t v)
{
	if (v)
		td_wire_wr_u32(wr, v);
}

/* ---- HELLO ---- */

/* The optional features word at the end of both HELLO bodies. */
static void wr_features(struct td_wire_wr *wr, uint32_t features)
{
	if (features)
		td_wire_wr_u32(wr, features); /* none: left out */
}

/*
 * Absent when the body ends here (0); fewer bytes than a word are
 * trailing bytes, which td_wire_rd_end() refuses. Unknown bits are kept: they
 * name what a newer peer knows, and each side uses only the bits it
 * knows itself.
 */
static uint32_t rd_features(struct td_wire_rd *rd)
{
	uint32_t f;
	size_t at;

	if (rd->rc || rd->len - rd->off < 4)
		return 0;
	at = rd->off;
	f = td_wire_rd_u32(rd, "features");
	if (!rd->rc && f == 0)
		td__wire_rd_fail(rd, TD_ERR_MALFORMED, "features", 0, at,
			"no feature bits are sent by leaving the word out");
	return rd->rc ? 0 : f;
}

int64_t td_wire_hello_req_encode(const struct td_wire_hello_req *m,
				 uint8_t *buf, size_t cap)
{
	struct td_wire_wr wr;

	if (m->client_name.len > TD_WIRE_MAX_NAME)
		return -EINVAL;
	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_u32(&wr, m->import_pref);
	td_wire_wr_i32(&wr, m->probe_fd);
	td_wire_wr_str(&wr, m->client_name.ptr, m->client_name.len);
	wr_features(&wr, m->features);
	return td__wire_wr_done(&wr);
}

int td_wire_hello_req_decode(const uint8_t *body, size_t len,
			     struct td_wire_hello_req *m, struct td_err *err)
{
	struct td_wire_rd rd;
	size_t at;

	td_wire_rd_init(&rd, body, len, err);
	at = rd.off;
	m->import_pref = td_wire_rd_u32(&rd, "import_pref");
	td__wire_rd_enum(&rd, m->import_pref, TD_IMPORT_AUTO, TD_IMPORT_SCM, at,
		"import_pref");
	m->probe_fd = td_wire_rd_i32(&rd, "probe_fd");
	m->client_name = rd_text(&rd, TD_WIRE_MAX_NAME, "client_name");
	m->features = rd_features(&rd);
	return td_wire_rd_end(&rd);
}

int64_t td_wire_hello_rep_encode(const struct td_wire_hello_rep *m,
				 uint8_t *buf, size_t cap)
{
	struct td_wire_wr wr;

	if (m->ident.len > TD_WIRE_MAX_NAME)
		return -EINVAL;
	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_u32(&wr, m->daemon_pid);
	td_wire_wr_u32(&wr, m->import_in);
	td_wire_wr_u32(&wr, m->out_pidfd);
	td_wire_wr_i32(&wr, m->probe_fd);
	td_wire_wr_u32(&wr, m->max_msg);
	td_wire_wr_u32(&wr, m->max_fds);
	td_wire_wr_u32(&wr, m->max_name);
	td_wire_wr_u32(&wr, m->max_meta);
	td_wire_wr_u32(&wr, m->max_planes);
	td_wire_wr_u64(&wr, m->max_bytes);
	td_wire_wr_str(&wr, m->ident.ptr, m->ident.len);
	wr_features(&wr, m->features);
	return td__wire_wr_done(&wr);
}

int td_wire_hello_rep_decode(const uint8_t *body, size_t len,
			     struct td_wire_hello_rep *m, struct td_err *err)
{
	struct td_wire_rd rd;
	size_t at;

	td_wire_rd_init(&rd, body, len, err);
	m->daemon_pid = td_wire_rd_u32(&rd, "daemon_pid");
	at = rd.off;
	m->import_in = td_wire_rd_u32(&rd, "import_in");
	td__wire_rd_enum(&rd, m->import_in, TD_IMPORT_PIDFD, TD_IMPORT_SCM, at,
		"import_in");
	at = rd.off;
	m->out_pidfd = td_wire_rd_u32(&rd, "out_pidfd");
	td__wire_rd_enum(&rd, m->out_pidfd, 0, 1, at, "out_pidfd");
	m->probe_fd = td_wire_rd_i32(&rd, "probe_fd");
	m->max_msg = td_wire_rd_u32(&rd, "max_msg");
	m->max_fds = td_wire_rd_u32(&rd, "max_fds");
	m->max_name = td_wire_rd_u32(&rd, "max_name");
	m->max_meta = td_wire_rd_u32(&rd, "max_meta");
	m->max_planes = td_wire_rd_u32(&rd, "max_planes");
	m->max_bytes = td_wire_rd_u64(&rd, "max_bytes");
	m->ident = rd_text(&rd, TD_WIRE_MAX_NAME, "ident");
	m->features = rd_features(&rd);
	return td_wire_rd_end(&rd);
}

/* ---- ALLOC ---- */

#define ALLOC_FLAGS                                                           \
	(TD_WIRE_REQ_SCM | TD_WIRE_ALLOC_RECYCLE | TD_WIRE_ALLOC_UNLOAN |      \
	 TD_WIRE_ALLOC_REWRITE | TD_WIRE_ALLOC_REWRITABLE |                  \
	 TD_WIRE_ALLOC_RESERVE | TD_WIRE_ALLOC_NAMED | TD_WIRE_ALLOC_STAGE)
#define ALLOC_REWRITE_FLAGS (TD_WIRE_ALLOC_REWRITE | TD_WIRE_ALLOC_REWRITABLE)
/* a staged take-back: of a REWRITE ALLOC of a name */
#define ALLOC_STAGE_NEEDS (TD_WIRE_ALLOC_REWRITE | TD_WIRE_ALLOC_NAMED)
#define PUB_FLAGS                                                             \
	(TD_WIRE_PUB_PIN | TD_WIRE_PUB_LOAN | TD_WIRE_PUB_LOAN_SCM |           \
	 TD_WIRE_PUB_STAGE | TD_WIRE_PUB_FIRED | TD_WIRE_PUB_IF)

/*
 * Held buffer ids (ALLOC and GET, optional trailing field): a list of
 * stored buffer ids (nonzero, not ring windows), none twice.
 */
static bool held_id_ok(uint64_t id)
{
	return id != 0 && !(id & TD_WIRE_BUF_WINDOW);
}

static bool held_list_ok(uint32_t n, const uint64_t *held)
{
	if (n > TD_WIRE_MAX_HELD)
		return false;
	for (uint32_t i = 0; i < n; i++) {
		if (!held_id_ok(held[i]))
			return false;
		for (uint32_t j = 0; j < i; j++)
			if (held[j] == held[i])
				return false;
	}
	return true;
}

static void wr_held(struct td_wire_wr *wr, uint32_t n, const uint64_t *held)
{
	if (!n)
		return; /* an empty list is sent by leaving it out */
	td_wire_wr_u32(wr, n);
	for (uint32_t i = 0; i < n; i++)
		td_wire_wr_u64(wr, held[i]);
}

/*
 * The optional held list at the end of a body: absent when the body ends
 * here (returns 0); fewer bytes than a count are trailing bytes, which
 * td_wire_rd_end() refuses. refused: the request's flags do not allow one
 * (why says which flag is missing). Returns the count, 0 on error.
 */
static uint32_t rd_held(struct td_wire_rd *rd, bool refused,
			const char *why, uint64_t *held)
{
	uint32_t n;
	size_t at;

	if (rd->rc || rd->len - rd->off < 4)
		return 0;
	at = rd->off;
	n = td__wire_rd_count(rd, TD_WIRE_MAX_HELD, "held_count");
	if (!rd->rc && n == 0)
		td__wire_rd_fail(rd, TD_ERR_MALFORMED, "held_count", 0, at,
			"an empty held list is sent by leaving it out");
	if (!rd->rc && refused)
		td__wire_rd_fail(rd, TD_ERR_MALFORMED, "held_count", n, at,
				 why);
	for (uint32_t i = 0; i < n && !rd->rc; i++) {
		at = rd->off;
		held[i] = td_wire_rd_u64(rd, "held");
		if (rd->rc)
			break;
		if (!held_id_ok(held[i])) {
			td__wire_rd_fail(
				rd, TD_ERR_INVALID_ARGUMENT, "held", held[i],
				at,
				"held id is not a stored buffer id (0 or a "
				"ring window)");
			break;
		}
		for (uint32_t j = 0; j < i; j++)
			if (held[j] == held[i]) {
				td__wire_rd_fail(rd, TD_ERR_INVALID_ARGUMENT,
						 "held", held[i], at,
						 "held id listed twice");
				break;
			}
	}
	return rd->rc ? 0 : n;
}

int64_t td_wire_alloc_req_encode(const struct td_wire_alloc_req *m,
				 uint8_t *buf, size_t cap)
{
	struct td_wire_wr wr;

	if (m->plane_count > TD_WIRE_MAX_PLANES || (m->flags & ~ALLOC_FLAGS) ||
	    ((m->held_count || (m->flags & ALLOC_REWRITE_FLAGS)) &&
	     !(m->flags & TD_WIRE_ALLOC_RECYCLE)) ||
	    !held_list_ok(m->held_count, m->held) ||
	    ((m->flags & TD_WIRE_ALLOC_NAMED) &&
	     (!m->name.len || m->name.len > TD_WIRE_MAX_NAME)) ||
	    ((m->flags & TD_WIRE_ALLOC_STAGE) &&
	     (m->flags & ALLOC_STAGE_NEEDS) != ALLOC_STAGE_NEEDS))
		return -EINVAL;
	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_u32(&wr, m->flags);
	td_wire_wr_u32(&wr, m->plane_count);
	for (uint32_t i = 0; i < m->plane_count; i++)
		td_wire_wr_u64(&wr, m->sizes[i]);
	if (m->flags & TD_WIRE_ALLOC_NAMED)
		td_wire_wr_str(&wr, m->name.ptr, m->name.len);
	/* optional: left out when empty, so a version-1 body is unchanged */
	wr_held(&wr, m->held_count, m->held);
	return td__wire_wr_done(&wr);
}

int td_wire_alloc_req_decode(const uint8_t *body, size_t len,
			     struct td_wire_alloc_req *m, struct td_err *err)
{
	struct td_wire_rd rd;

	td_wire_rd_init(&rd, body, len, err);
	m->flags = td__wire_rd_flags(&rd, ALLOC_FLAGS, "flags");
	if (!rd.rc && (m->flags & ALLOC_REWRITE_FLAGS) &&
	    !(m->flags & TD_WIRE_ALLOC_RECYCLE))
		td__wire_rd_fail(&rd, TD_ERR_MALFORMED, "flags", m->flags, 0,
				 "REWRITE without the RECYCLE flag");
	if (!rd.rc && (m->flags & TD_WIRE_ALLOC_STAGE) &&
	    (m->flags & ALLOC_STAGE_NEEDS) != ALLOC_STAGE_NEEDS)
		td__wire_rd_fail(&rd, TD_ERR_MALFORMED, "flags", m->flags, 0,
				 "STAGE without REWRITE and NAMED");
	m->plane_count =
		td__wire_rd_count(&rd, TD_WIRE_MAX_PLANES, "plane_count");
	for (uint32_t i = 0; i < m->plane_count && !rd.rc; i++)
		m->sizes[i] = td_wire_rd_u64(&rd, "sizes");
	m->name = (struct td_wire_str){NULL, 0};
	if (m->flags & TD_WIRE_ALLOC_NAMED)
		m->name = td__wire_rd_name(&rd, false, false, "name");
	m->held_count = rd_held(&rd, !(m->flags & TD_WIRE_ALLOC_RECYCLE),
				"held buffer ids without the RECYCLE flag",
				m->held);
	return td_wire_rd_end(&rd);
}

void td__wire_wr_fdents(struct td_wire_wr *wr, uint32_t n,
		      const struct td_wire_fdent *fds)
{
	td_wire_wr_u32(wr, n);
	for (uint32_t i = 0; i < n; i++) {
		td_wire_wr_i32(wr, fds[i].fd);
		td_wire_wr_u64(wr, fds[i].buffer_id);
	}
}

uint32_t td__wire_rd_fdents(struct td_wire_rd *rd, uint32_t max,
			  struct td_wire_fdent *fds)
{
	uint32_t n = td__wire_rd_count(rd, max, "fd_count");

	for (uint32_t i = 0; i < n && !rd->rc; i++) {
		fds[i].fd = td_wire_rd_i32(rd, "fd");
		fds[i].buffer_id = td_wire_rd_u64(rd, "buffer_id");
	}
	return n;
}

/*
 * The planes an unreserved mask may name: those of the reply (bit i <
 * fd_count) that come with a descriptor (fd >= 0: a plane the client
 * already maps was not made now). NULL when it fits, else why not.
 */
static const char *unreserved_bad(uint32_t mask, uint32_t fd_count,
				  const struct td_wire_fdent *fds)
{
	for (uint32_t i = 0; i < 32; i++) {
		if (!(mask & (1u << i)))
			continue;
		if (i >= fd_count)
			return "unreserved names a plane the reply does not "
			       "have";
		if (fds[i].fd < 0)
			return "unreserved names a plane the client holds "
			       "(fd -1), which was not made now";
	}
	return NULL;
}

/* A stage section (docs/protocol.md §13): u64 version, u32 generation,
 * then u32 word when not 0; left out when version is 0. */
static void wr_stage(struct td_wire_wr *wr, uint64_t version, uint32_t gen,
		     uint32_t slot)
{
	if (!version)
		return;
	td_wire_wr_u64(wr, version);
	td_wire_wr_u32(wr, gen);
	if (slot)
		td_wire_wr_u32(wr, slot);
}

static bool stage_bad(uint64_t version, uint32_t slot, bool loan)
{
	return (version && !loan) || (slot && !version) ||
	       slot >= TD_WIRE_STAGE_SLOTS;
}

/* ... read where one is (a loan's: alloc_id, which a stage needs); the
 * word when the section's last 4 bytes are left. */
static void rd_stage(struct td_wire_rd *rd, uint64_t alloc_id,
		     uint64_t *version, uint32_t *gen, uint32_t *slot)
{
	size_t at = rd->off;

	*version = td_wire_rd_u64(rd, "stage_version");
	*gen = td_wire_rd_u32(rd, "stage_gen");
	if (!rd->rc && (!*version || !alloc_id))
		td__wire_rd_fail(rd, TD_ERR_MALFORMED, "stage_version",
				 *version, at,
				 "a stage names a version of a loan");
	if (rd->rc || rd->len - rd->off != 4)
		return;
	at = rd->off;
	*slot = td_wire_rd_u32(rd, "stage_slot");
	if (!rd->rc && (!*slot || *slot >= TD_WIRE_STAGE_SLOTS))
		td__wire_rd_fail(rd, TD_ERR_MALFORMED, "stage_slot", *slot,
				 at,
				 "a stage's word is one of the trigger "
				 "page's 1..63");
}

int64_t td_wire_alloc_rep_encode(const struct td_wire_alloc_rep *m,
				 uint8_t *buf, size_t cap)
{
	struct td_wire_wr wr;

	if (m->fd_count > TD_WIRE_MAX_PLANES ||
	    unreserved_bad(m->unreserved, m->fd_count, m->fds) ||
	    (m->stage_version && m->unreserved) ||
	    stage_bad(m->stage_version, m->stage_slot, m->alloc_id))
		return -EINVAL;
	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_u64(&wr, m->alloc_id);
	td__wire_wr_fdents(&wr, m->fd_count, m->fds);
	/* optional: left out when 0, so the body is as before; told
	 * apart by their length (4, or 12 or 16 bytes), never both */
	if (m->unreserved)
		td_wire_wr_u32(&wr, m->unreserved);
	wr_stage(&wr, m->stage_version, m->stage_gen, m->stage_slot);
	return td__wire_wr_done(&wr);
}

int td_wire_alloc_rep_decode(const uint8_t *body, size_t len,
			     struct td_wire_alloc_rep *m, struct td_err *err)
{
	struct td_wire_rd rd;
	const char *why;
	size_t at;

	td_wire_rd_init(&rd, body, len, err);
	m->alloc_id = td_wire_rd_u64(&rd, "alloc_id");
	m->fd_count = td__wire_rd_fdents(&rd, TD_WIRE_MAX_PLANES, m->fds);
	m->unreserved = 0;
	m->stage_version = 0;
	m->stage_gen = 0;
	m->stage_slot = 0;
	/* a stage section is 12 or 16 bytes, unreserved 4 */
	if (!rd.rc && (rd.len - rd.off == 12 || rd.len - rd.off == 16))
		rd_stage(&rd, m->alloc_id, &m->stage_version, &m->stage_gen,
			 &m->stage_slot);
	/* fewer bytes than a u32 are trailing bytes, refused below */
	else if (!rd.rc && rd.len - rd.off >= 4) {
		at = rd.off;
		m->unreserved = td_wire_rd_u32(&rd, "unreserved");
		if (!m->unreserved)
			td__wire_rd_fail(&rd, TD_ERR_MALFORMED, "unreserved",
					 0, at,
					 "an empty unreserved mask is sent "
					 "by leaving it out");
		else if ((why = unreserved_bad(m->unreserved, m->fd_count,
					       m->fds)))
			td__wire_rd_fail(&rd, TD_ERR_INVALID_ARGUMENT,
					 "unreserved", m->unreserved, at, why);
	}
	return td_wire_rd_end(&rd);
}

/* ---- PUBLISH ---- */

int64_t td_wire_publish_req_encode(const struct td_wire_publish_req *m,
				   uint8_t *buf, size_t cap)
{
	struct td_wire_wr wr;

	if (m->fd_count > TD_WIRE_MAX_PLANES + 1 ||
	    m->name.len > TD_WIRE_MAX_NAME || m->meta.len > TD_WIRE_MAX_META ||
	    m->blob.len > TD_WIRE_MAX_BLOB || (m->flags & ~PUB_FLAGS) ||
	    ((m->flags & (TD_WIRE_PUB_LOAN_SCM | TD_WIRE_PUB_STAGE)) &&
	     !(m->flags & TD_WIRE_PUB_LOAN)) ||
	    ((m->flags & TD_WIRE_PUB_FIRED) && !m->alloc_id) ||
	    ((m->flags & TD_WIRE_PUB_FIRED) && (m->flags & TD_WIRE_PUB_IF)) ||
	    (!(m->flags & TD_WIRE_PUB_IF) && m->expect) ||
	    (m->held_count && !(m->flags & TD_WIRE_PUB_LOAN)) ||
	    !held_list_ok(m->held_count, m->held))
		return -EINVAL;
	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_str(&wr, m->name.ptr, m->name.len);
	td_wire_wr_u32(&wr, m->flags);
	td_wire_wr_u64(&wr, m->alloc_id);
	td_wire_wr_bytes(&wr, m->meta.ptr, m->meta.len);
	td_wire_wr_bytes(&wr, m->blob.ptr, m->blob.len);
	td_wire_wr_u32(&wr, m->fd_count);
	for (uint32_t i = 0; i < m->fd_count; i++)
		td_wire_wr_i32(&wr, m->fds[i]);
	if (m->flags & TD_WIRE_PUB_IF)
		td_wire_wr_u64(&wr, m->expect);
	wr_held(&wr, m->held_count, m->held);
	return td__wire_wr_done(&wr);
}

int td_wire_publish_req_decode(const uint8_t *body, size_t len,
			       struct td_wire_publish_req *m,
			       struct td_err *err)
{
	struct td_wire_rd rd;

	td_wire_rd_init(&rd, body, len, err);
	m->name = td__wire_rd_name(&rd, false, false, "name");
	m->flags = td__wire_rd_flags(&rd, PUB_FLAGS, "flags");
	m->alloc_id = td_wire_rd_u64(&rd, "alloc_id");
	m->meta = td_wire_rd_bytes(&rd, TD_WIRE_MAX_META, "meta");
	m->blob = td_wire_rd_bytes(&rd, TD_WIRE_MAX_BLOB, "blob");
	m->fd_count =
		td__wire_rd_count(&rd, TD_WIRE_MAX_PLANES + 1, "fd_count");
	for (uint32_t i = 0; i < m->fd_count && !rd.rc; i++)
		m->fds[i] = td_wire_rd_i32(&rd, "fds");
	m->expect = 0;
	if (m->flags & TD_WIRE_PUB_IF)
		m->expect = td_wire_rd_u64(&rd, "expect");
	if (!rd.rc && (m->flags & TD_WIRE_PUB_FIRED) &&
	    (m->flags & TD_WIRE_PUB_IF))
		td__wire_rd_fail(&rd, TD_ERR_MALFORMED, "flags", m->flags, 0,
				 "IF on the notice of a fired stage");
	if (!rd.rc && (m->flags & TD_WIRE_PUB_LOAN_SCM) &&
	    !(m->flags & TD_WIRE_PUB_LOAN))
		td__wire_rd_fail(&rd, TD_ERR_MALFORMED, "flags", m->flags, 0,
				 "LOAN_SCM without LOAN");
	if (!rd.rc && (m->flags & TD_WIRE_PUB_STAGE) &&
	    !(m->flags & TD_WIRE_PUB_LOAN))
		td__wire_rd_fail(&rd, TD_ERR_MALFORMED, "flags", m->flags, 0,
				 "STAGE without LOAN");
	if (!rd.rc && (m->flags & TD_WIRE_PUB_FIRED) && !m->alloc_id)
		td__wire_rd_fail(&rd, TD_ERR_MALFORMED, "flags", m->flags, 0,
				 "FIRED names no alloc");
	m->held_count = rd_held(&rd, !(m->flags & TD_WIRE_PUB_LOAN),
				"held buffer ids without the LOAN flag",
				m->held);
	return td_wire_rd_end(&rd);
}

int64_t td__wire_u64_encode(uint64_t v, uint8_t *buf, size_t cap)
{
	struct td_wire_wr wr;

	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_u64(&wr, v);
	return td__wire_wr_done(&wr);
}

int td__wire_u64_decode(const uint8_t *body, size_t len, uint64_t *v,
		      const char *field, struct td_err *err)
{
	struct td_wire_rd rd;

	td_wire_rd_init(&rd, body, len, err);
	*v = td_wire_rd_u64(&rd, field);
	return td_wire_rd_end(&rd);
}

int64_t td_wire_publish_rep_encode(const struct td_wire_publish_rep *m,
				   uint8_t *buf, size_t cap)
{
	struct td_wire_wr wr;

	/* a loan makes no plane: nothing in it is unreserved */
	if (m->has_loan && (m->loan.fd_count > TD_WIRE_MAX_PLANES ||
			    m->loan.unreserved || m->loan.stage_version ||
			    m->loan.stage_slot))
		return -EINVAL;
	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_u64(&wr, m->version);
	if (m->has_loan) {
		td_wire_wr_u64(&wr, m->loan.alloc_id);
		td__wire_wr_fdents(&wr, m->loan.fd_count, m->loan.fds);
	}
	/* a stage only of a loan; left out when none */
	if (stage_bad(m->stage_version, m->stage_slot,
		      m->has_loan && m->loan.alloc_id))
		return -EINVAL;
	wr_stage(&wr, m->stage_version, m->stage_gen, m->stage_slot);
	return td__wire_wr_done(&wr);
}

/*
 * The loan section is present when bytes follow the version (only in
 * reply to TD_WIRE_PUB_LOAN); no loan is alloc_id 0 with no planes.
 */
int td_wire_publish_rep_decode(const uint8_t *body, size_t len,
			       struct td_wire_publish_rep *m,
			       struct td_err *err)
{
	struct td_wire_rd rd;
	size_t at;

	td_wire_rd_init(&rd, body, len, err);
	m->version = td_wire_rd_u64(&rd, "version");
	/* fewer bytes than alloc_id + fd_count are trailing bytes */
	m->has_loan = !rd.rc && rd.len - rd.off >= 12;
	m->loan.alloc_id = 0;
	m->loan.fd_count = 0;
	m->loan.unreserved = 0;
	m->loan.stage_version = 0;
	m->loan.stage_gen = 0;
	m->loan.stage_slot = 0;
	if (m->has_loan) {
		m->loan.alloc_id = td_wire_rd_u64(&rd, "alloc_id");
		at = rd.off;
		m->loan.fd_count =
			td__wire_rd_fdents(&rd, TD_WIRE_MAX_PLANES, m->loan.fds);
		if (!rd.rc && !m->loan.alloc_id != !m->loan.fd_count)
			td__wire_rd_fail(&rd, TD_ERR_MALFORMED, "fd_count",
					 m->loan.fd_count, at,
					 "a loan has planes, no loan has none");
	}
	m->stage_version = 0;
	m->stage_gen = 0;
	m->stage_slot = 0;
	/* fewer bytes than the stage section are trailing bytes */
	if (!rd.rc && m->has_loan && rd.len - rd.off >= 12)
		rd_stage(&rd, m->loan.alloc_id, &m->stage_version,
			 &m->stage_gen, &m->stage_slot);
	return td_wire_rd_end(&rd);
}

/* ---- GET ---- */

int64_t td_wire_get_req_encode(const struct td_wire_get_req *m, uint8_t *buf,
			       size_t cap)
{
	struct td_wire_wr wr;

	if (m->name.len > TD_WIRE_MAX_NAME ||
	    (m->held_count && !(m->flags & TD_WIRE_REQ_SCM)) ||
	    !held_list_ok(m->held_count, m->held))
		return -EINVAL;
	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_str(&wr, m->name.ptr, m->name.len);
	td_wire_wr_u32(&wr, m->mode);
	td_wire_wr_u32(&wr, m->flags);
	td_wire_wr_u64(&wr, m->version);
	td_wire_wr_u32(&wr, m->timeout_ms);
	/* optional: left out when empty, so a version-1 body is unchanged */
	wr_held(&wr, m->held_count, m->held);
	return td__wire_wr_done(&wr);
}

int td_wire_get_req_decode(const uint8_t *body, size_t len,
			   struct td_wire_get_req *m, struct td_err *err)
{
	struct td_wire_rd rd;
	size_t at;

	td_wire_rd_init(&rd, body, len, err);
	m->name = td__wire_rd_name(&rd, false, false, "name");
	at = rd.off;
	m->mode = td_wire_rd_u32(&rd, "mode");
	td__wire_rd_enum(&rd, m->mode, TD_GET_LATEST, TD_GET_NEWER, at, "mode");
	m->flags = td__wire_rd_flags(&rd, TD_WIRE_REQ_SCM, "flags");
	m->version = td_wire_rd_u64(&rd, "version");
	m->timeout_ms = td_wire_rd_u32(&rd, "timeout_ms");
	m->held_count = rd_held(&rd, !(m->flags & TD_WIRE_REQ_SCM),
				"held buffer ids without the SCM flag",
				m->held);
	return td_wire_rd_end(&rd);
}

int64_t td_wire_get_rep_encode(const struct td_wire_get_rep *m, uint8_t *buf,
			       size_t cap)
{
	struct td_wire_wr wr;

	if (m->fd_count > TD_WIRE_MAX_PLANES + 1 ||
	    m->meta.len > TD_WIRE_MAX_META || m->blob.len > TD_WIRE_MAX_BLOB)
		return -EINVAL;
	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_u64(&wr, m->version);
	td_wire_wr_u64(&wr, m->lease_id);
	td_wire_wr_bytes(&wr, m->meta.ptr, m->meta.len);
	td_wire_wr_bytes(&wr, m->blob.ptr, m->blob.len);
	td__wire_wr_fdents(&wr, m->fd_count, m->fds);
	return td__wire_wr_done(&wr);
}

int td_wire_get_rep_decode(const uint8_t *body, size_t len,
			   struct td_wire_get_rep *m, struct td_err *err)
{
	struct td_wire_rd rd;

	td_wire_rd_init(&rd, body, len, err);
	m->version = td_wire_rd_u64(&rd, "version");
	m->lease_id = td_wire_rd_u64(&rd, "lease_id");
	m->meta = td_wire_rd_bytes(&rd, TD_WIRE_MAX_META, "meta");
	m->blob = td_wire_rd_bytes(&rd, TD_WIRE_MAX_BLOB, "blob");
	m->fd_count = td__wire_rd_fdents(&rd, TD_WIRE_MAX_PLANES + 1, m->fds);
	return td_wire_rd_end(&rd);
}

/* ---- RELEASE ---- */

int64_t td_wire_release_req_encode(const struct td_wire_release_req *m,
				   uint8_t *buf, size_t cap)
{
	struct td_wire_wr wr;

	if (m->flags & ~(TD_WIRE_REL_QUIET | TD_WIRE_REL_ALLOC))
		return -EINVAL;
	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_u64(&wr, m->lease_id);
	td__wire_wr_opt_flags(&wr, m->flags);
	return td__wire_wr_done(&wr);
}

int td_wire_release_req_decode(const uint8_t *body, size_t len,
			       struct td_wire_release_req *m,
			       struct td_err *err)
{
	struct td_wire_rd rd;

	td_wire_rd_init(&rd, body, len, err);
	m->lease_id = td_wire_rd_u64(&rd, "lease_id");
	m->flags = td__wire_rd_opt_flags(&rd, TD_WIRE_REL_QUIET |
						      TD_WIRE_REL_ALLOC,
					 "flags");
	return td_wire_rd_end(&rd);
}

/* ---- error replies ---- */

int64_t td_wire_error_encode(const struct td_wire_error *m, uint8_t *buf,
			     size_t cap)
{
	struct td_wire_wr wr;
	size_t n = m->reason.len;

	/* Reasons are built by the daemon; cut rather than fail. */
	if (n > TD_WIRE_MAX_REASON)
		n = TD_WIRE_MAX_REASON;
	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_str(&wr, m->reason.ptr, n);
	return td__wire_wr_done(&wr);
}

int td_wire_error_decode(const uint8_t *body, size_t len,
			 struct td_wire_error *m, struct td_err *err)
{
	struct td_wire_rd rd;

	td_wire_rd_init(&rd, body, len, err);
	m->reason = rd_text(&rd, TD_WIRE_MAX_REASON, "reason");
	return td_wire_rd_end(&rd);
}

/* ---- names ---- */

static bool name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '.' || c == '_' || c == ':' ||
	       c == '/' || c == '@' || c == '+' || c == '-';
}

int td_wire_name_check(const char *s, size_t len, bool prefix,
		       const char **reason)
{
	const char *why = NULL;

	if (len == 0 && !prefix)
		why = "name is empty";
	else if (len > TD_WIRE_MAX_NAME)
		why = "name longer than 255 bytes";
	else if (len && s[0] == '/')
		why = "name starts with '/'";
	else if (len && !prefix && s[len - 1] == '/')
		why = "name ends with '/'";
	for (size_t i = 0; !why && i < len; i++) {
		if (!name_char(s[i]))
			why = "name has a byte outside [A-Za-z0-9._:/@+-]";
		else if (i && s[i] == '.' && s[i - 1] == '.')
			why = "name contains \"..\"";
		else if (i && s[i] == '/' && s[i - 1] == '/')
			why = "name contains \"//\"";
	}
	if (reason)
		*reason = why;
	return why ? -EINVAL : 0;
}

const char *td_wire_op_name(uint16_t op)
{
	switch (op) {
	case TD_OP_HELLO:
		return "HELLO";
	case TD_OP_ALLOC:
		return "ALLOC";
	case TD_OP_PUBLISH:
		return "PUBLISH";
	case TD_OP_GET:
		return "GET";
	case TD_OP_RELEASE:
		return "RELEASE";
	case TD_OP_LIST:
		return "LIST";
	case TD_OP_STAT:
		return "STAT";
	case TD_OP_DELETE:
		return "DELETE";
	case TD_OP_WATCH:
		return "WATCH";
	case TD_OP_UNWATCH:
		return "UNWATCH";
	case TD_OP_NOTIFY:
		return "NOTIFY";
	case TD_OP_STATUS:
		return "STATUS";
	case TD_OP_RING_WAKE:
		return "RING_WAKE";
	case TD_OP_FOLLOW:
		return "FOLLOW";
	case TD_OP_FOLLOW_CLOSE:
		return "FOLLOW_CLOSE";
	case TD_OP_FOLLOW_WAKE:
		return "FOLLOW_WAKE";
	case TD_OP_PUBLISH_MANY:
		return "PUBLISH_MANY";
	case TD_OP_GET_MANY:
		return "GET_MANY";
	case TD_OP_RING_CREATE:
		return "RING_CREATE";
	case TD_OP_RING_SUBSCRIBE:
		return "RING_SUBSCRIBE";
	case TD_OP_RING_CLOSE:
		return "RING_CLOSE";
	case TD_OP_RING_STAT:
		return "RING_STAT";
	case TD_OP_STAGE_PAGE:
		return "STAGE_PAGE";
	}
	return "UNKNOWN";
}
