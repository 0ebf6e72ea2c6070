/* SPDX-License-Identifier: MIT */
/* NumPy .npy headers (npy.h): a strict reader and numpy's own writer. */
#include "npy.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "blob.h"

static const uint8_t magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/* numpy's alignment of the data, and the spare room it leaves after the
 * dict for the first dimension to grow in place (format.py) */
#define ALIGN 64
#define GROWTH_DIGITS 21

/* A cursor over the dict text: [i, end) of buf, offsets for td_err. */
struct cur {
	const uint8_t *buf;
	size_t i, end;
	struct td_err *err;
};

static int bad(struct cur *c, const char *field, const char *reason)
{
	return td__err_set(c->err, TD_ERR_MALFORMED, field, false, 0, c->i,
			   reason);
}

static int unsupported(struct cur *c, const char *field, size_t at,
		       const char *reason)
{
	return td__err_set(c->err, TD_ERR_UNSUPPORTED_REQUIREMENT, field,
			   false, 0, at, reason);
}

static int peek(const struct cur *c)
{
	return c->i < c->end ? c->buf[c->i] : -1;
}

static void spaces(struct cur *c)
{
	while (peek(c) == ' ')
		c->i++;
}

/* ch, after spaces; else MALFORMED with reason */
static int expect(struct cur *c, int ch, const char *field,
		  const char *reason)
{
	spaces(c);
	if (peek(c) != ch)
		return bad(c, field, reason);
	c->i++;
	return 0;
}

/*
 * A quoted string without escapes (no key or descr numpy writes has one):
 * its text in [*s, *s + *n) of buf.
 */
static int string(struct cur *c, const char *field, size_t *s, size_t *n)
{
	int q = peek(c);

	if (q != '\'' && q != '"')
		return bad(c, field, "expected a quoted string");
	*s = ++c->i;
	while (peek(c) != q) {
		int ch = peek(c);

		if (ch < 0)
			return bad(c, field, "string not closed");
		if (ch == '\\' || ch < 0x20 || ch > 0x7e)
			return bad(c, field, "escapes and non-ASCII bytes are "
				   "not taken in a string");
		c->i++;
	}
	*n = c->i++ - *s;
	return 0;
}

/* 1 when [s, s + n) of buf is the word w */
static bool is(const struct cur *c, size_t s, size_t n, const char *w)
{
	return strlen(w) == n && !memcmp(c->buf + s, w, n);
}

/* A descr's type code (after its byte order): tensord's dtype, or -1. */
static int dtype_of(const char *code, size_t n)
{
	static const char *const codes[TD_DTYPE_COUNT_] = {
		[TD_DTYPE_U8] = "u1",  [TD_DTYPE_I8] = "i1",
		[TD_DTYPE_U16] = "u2", [TD_DTYPE_I16] = "i2",
		[TD_DTYPE_U32] = "u4", [TD_DTYPE_I32] = "i4",
		[TD_DTYPE_U64] = "u8", [TD_DTYPE_I64] = "i8",
		[TD_DTYPE_F16] = "f2", [TD_DTYPE_F32] = "f4",
		[TD_DTYPE_F64] = "f8",
	};

	for (int d = 0; d < TD_DTYPE_COUNT_; d++)
		if (n == 2 && !memcmp(code, codes[d], 2))
			return d;
	return -1;
}

/* 'descr': a plain dtype string such as '<f4' or '|u1' */
static int descr(struct cur *c, struct td_npy_header *h)
{
	size_t s, n, at = c->i;
	const char *t;
	int rc, d;

	if (peek(c) == '[')
		return unsupported(c, "descr", at, "structured dtypes (a list "
				   "descr) have no tensord dtype");
	rc = string(c, "descr", &s, &n);
	if (rc)
		return rc;
	t = (const char *)c->buf + s;
	if (n && (t[0] == 'O' || (n > 1 && t[1] == 'O')))
		return unsupported(c, "descr", at, "object arrays hold Python "
				   "objects, not numbers");
	/* '=' is the native order: numpy reads it as the host's */
	if (n < 1 || !strchr("<>|=", t[0]))
		return unsupported(c, "descr", at, "dtype has no tensord "
				   "equivalent (or no byte order)");
	d = dtype_of(t + 1, n - 1);
	if (d < 0)
		return unsupported(c, "descr", at, "dtype has no tensord "
				   "equivalent (u1 i1 u2 i2 u4 i4 u8 i8 f2 f4 "
				   "f8 are taken)");
	h->dtype = (uint32_t)d;
	if (td_dtype_size((uint32_t)d) == 1)
		h->order = TD_NPY_ORDER_NONE;
	else if (t[0] == '<')
		h->order = TD_NPY_ORDER_LITTLE;
	else if (t[0] == '>')
		h->order = TD_NPY_ORDER_BIG;
	else if (t[0] == '=')
		h->order = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
				   ? TD_NPY_ORDER_LITTLE
				   : TD_NPY_ORDER_BIG;
	else
		return bad(c, "descr", "'|' (no byte order) on a multi-byte "
			   "dtype");
	return 0;
}

/* 'fortran_order': False (True is refused: the bytes are not C order) */
static int fortran_order(struct cur *c)
{
	size_t s = c->i;

	while (peek(c) >= 'A' && peek(c) <= 'z')
		c->i++;
	if (is(c, s, c->i - s, "False"))
		return 0;
	if (is(c, s, c->i - s, "True"))
		return unsupported(c, "fortran_order", s,
				   "fortran_order arrays: save with "
				   "np.ascontiguousarray");
	c->i = s;
	return bad(c, "fortran_order", "expected True or False");
}

/* One dimension: a non-negative decimal integer. */
static int dim(struct cur *c, uint64_t *v)
{
	size_t s = c->i;

	if (peek(c) == '-')
		return bad(c, "shape", "negative dimension");
	if (peek(c) < '0' || peek(c) > '9')
		return bad(c, "shape", "dimension is not an integer");
	*v = 0;
	while (peek(c) >= '0' && peek(c) <= '9') {
		if (__builtin_mul_overflow(*v, 10, v) ||
		    __builtin_add_overflow(*v, (uint64_t)(peek(c) - '0'), v))
			return td__err_set(c->err, TD_ERR_FORGED_LENGTH,
					   "shape", false, 0, s,
					   "dimension over 64 bits");
		c->i++;
	}
	if (c->i - s > 1 && c->buf[s] == '0')
		return bad(c, "shape", "dimension with a leading zero");
	if (peek(c) == 'L')
		c->i++; /* Python 2's long, in files it wrote: (3L, 4L) */
	if (peek(c) == '.' || peek(c) == '_' || (peek(c) >= 'A' &&
						  peek(c) <= 'z'))
		return bad(c, "shape", "dimension is not an integer");
	return 0;
}

/* 'shape': (), (N,), (N, M), ... with an optional trailing comma */
static int shape(struct cur *c, struct td_npy_header *h)
{
	bool comma = false;
	int rc;

	if (peek(c) != '(')
		return bad(c, "shape", "expected a tuple");
	c->i++;
	for (h->ndim = 0;; h->ndim++) {
		spaces(c);
		if (peek(c) == ')')
			break;
		if (h->ndim && !comma)
			return bad(c, "shape", "expected ',' or ')'");
		if (h->ndim == TD_NPY_MAX_DIMS)
			return unsupported(c, "shape", c->i, "more dimensions "
					   "than tensord takes (16)");
		rc = dim(c, &h->shape[h->ndim]);
		if (rc)
			return rc;
		spaces(c);
		comma = peek(c) == ',';
		c->i += comma;
	}
	if (h->ndim == 1 && !comma)
		return bad(c, "shape",
			   "(N) is no tuple: one dimension is (N,)");
	c->i++;
	return 0;
}

/* One "'key': value" of the dict; seen[] against repeats. */
static int entry(struct cur *c, struct td_npy_header *h, bool seen[3])
{
	static const char *const keys[3] = {"descr", "fortran_order",
					    "shape"};
	size_t s, n, at = c->i;
	int k, rc = string(c, "key", &s, &n);

	if (rc)
		return rc;
	for (k = 0; k < 3 && !is(c, s, n, keys[k]); k++)
		;
	if (k == 3 || seen[k]) {
		c->i = at;
		return bad(c, "key", k == 3 ? "unknown key (descr, "
			   "fortran_order and shape are taken)"
					    : "key given twice");
	}
	seen[k] = true;
	rc = expect(c, ':', keys[k], "expected ':' after the key");
	if (rc)
		return rc;
	spaces(c);
	if (k == 0)
		return descr(c, h);
	return k == 1 ? fortran_order(c) : shape(c, h);
}

/* The dict, then only spaces up to the final '\n' (c->end is before it). */
static int dict(struct cur *c, struct td_npy_header *h)
{
	bool seen[3] = {false, false, false};
	int rc = expect(c, '{', NULL, "the header is no dict");

	for (bool more = true; !rc;) {
		spaces(c);
		if (peek(c) == '}')
			break;
		if (!more)
			return bad(c, NULL, "expected ',' or '}'");
		rc = entry(c, h, seen);
		if (rc)
			return rc;
		spaces(c);
		more = peek(c) == ',';
		c->i += more;
	}
	if (rc)
		return rc;
	c->i++;
	if (!seen[0] || !seen[1] || !seen[2])
		return bad(c, !seen[0] ? "descr" : !seen[1] ? "fortran_order"
						       : "shape",
			   "key missing (descr, fortran_order and shape are "
			   "needed)");
	spaces(c);
	if (c->i != c->end)
		return bad(c, NULL, "bytes after the dict other than spaces");
	return 0;
}

int td_npy_header_len(const uint8_t *buf, size_t len, uint64_t *data_offset,
		      struct td_err *err)
{
	uint64_t hlen;
	size_t pre;

	if (memcmp(buf, magic, len < 6 ? len : 6))
		return td__err_set(err, TD_ERR_MALFORMED, "magic", false, 0, 0,
				   "not a .npy file (it does not start with "
				   "0x93 NUMPY)");
	if (len < 8)
		return td__err_truncated(err, 8, len, len, "header cut short");
	if ((buf[6] != 1 && buf[6] != 2 && buf[6] != 3) || buf[7] != 0)
		return td__err_set(err, TD_ERR_UNSUPPORTED_REQUIREMENT,
				   "version", true,
				   (uint64_t)buf[6] << 8 | buf[7], 6,
				   "unknown .npy version (1.0, 2.0 and 3.0 "
				   "are read)");
	pre = buf[6] == 1 ? 10 : 12;
	if (len < pre)
		return td__err_truncated(err, pre, len, len,
					 "header cut short");
	hlen = (uint64_t)buf[8] | (uint64_t)buf[9] << 8;
	if (pre == 12)
		hlen |= (uint64_t)buf[10] << 16 | (uint64_t)buf[11] << 24;
	if (hlen > TD_NPY_MAX_HEADER_LEN)
		return td__err_set(err, TD_ERR_FORGED_LENGTH, "header_len",
				   true, hlen, 8, "header longer than 1 MiB");
	*data_offset = pre + hlen;
	return 0;
}

int td_npy_decode(const uint8_t *buf, size_t len, struct td_npy_header *h,
		  struct td_err *err)
{
	struct cur c = {.buf = buf, .err = err};
	uint64_t off;
	int rc = td_npy_header_len(buf, len, &off, err);

	if (rc)
		return rc;
	if (len < off)
		return td__err_truncated(err, off, len, len,
					 "header cut short");
	memset(h, 0, sizeof(*h));
	h->major = buf[6];
	h->minor = buf[7];
	h->data_offset = off;
	c.i = h->major == 1 ? 10 : 12;
	c.end = (size_t)off - 1;
	if (off <= c.i || buf[c.end] != '\n') {
		c.i = c.end;
		return bad(&c, NULL, "header does not end in '\\n'");
	}
	rc = dict(&c, h);
	if (rc)
		return rc;
	h->data_len = td_dtype_size(h->dtype);
	/* an empty array holds no bytes whatever its other dimensions,
	 * in any order: (0, 2^32, 2^32) and (2^32, 2^32, 0) alike */
	for (uint32_t k = 0; k < h->ndim; k++)
		if (!h->shape[k])
			h->data_len = 0;
	for (uint32_t k = 0; k < h->ndim && h->data_len; k++)
		if (__builtin_mul_overflow(h->data_len, h->shape[k],
					   &h->data_len))
			return td__err_set(err, TD_ERR_FORGED_LENGTH, "shape",
					   false, 0, c.i, "shape's bytes "
					   "overflow 64 bits");
	return 0;
}

int td_npy_encode(uint32_t dtype, uint32_t ndim, const uint64_t *shape,
		  uint8_t *buf, size_t cap, size_t *len, struct td_err *err)
{
	char dict[TD_NPY_ENCODE_MAX], first[24];
	unsigned size = td_dtype_size(dtype);
	size_t n, pre = 10, pad;
	const char order = size == 1 ? '|'
		: __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? '<' : '>';
	static const char kind[TD_DTYPE_COUNT_] = "uiuiuiuifff";

	if (!size || ndim > TD_NPY_MAX_DIMS)
		return td__err_set(err, TD_ERR_INVALID_ARGUMENT,
				   size ? "ndim" : "dtype", false, 0, 0,
				   size ? "more than 16 dimensions"
					: "unknown dtype");
	/* keys sorted, each "'k': repr(v), ", as format.py writes them */
	n = (size_t)snprintf(dict, sizeof(dict), "{'descr': '%c%c%u', "
			     "'fortran_order': False, 'shape': (", order,
			     kind[dtype], size);
	for (uint32_t k = 0; k < ndim; k++)
		n += (size_t)snprintf(dict + n, sizeof(dict) - n, "%s%llu",
				      k ? ", " : "",
				      (unsigned long long)shape[k]);
	n += (size_t)snprintf(dict + n, sizeof(dict) - n, "%s), }",
			      ndim == 1 ? "," : "");
	if (ndim) {
		size_t grow = GROWTH_DIGITS - (size_t)snprintf(
			first, sizeof(first), "%llu",
			(unsigned long long)shape[0]);

		memset(dict + n, ' ', grow);
		n += grow;
	}
	/* always some padding: an aligned header still gets ALIGN more */
	pad = ALIGN - (pre + n + 1) % ALIGN;
	if (n + 1 + pad > 0xffff) {
		pre = 12;
		pad = ALIGN - (pre + n + 1) % ALIGN;
	}
	if (cap < pre + n + pad + 1)
		return td__err_set(err, TD_ERR_INVALID_ARGUMENT, "cap", true,
				   cap, 0, "buffer too small for the header");
	memcpy(buf, magic, 6);
	buf[6] = pre == 10 ? 1 : 2;
	buf[7] = 0;
	for (size_t k = 0; k < pre - 8; k++)
		buf[8 + k] = (uint8_t)((n + pad + 1) >> (8 * k));
	memcpy(buf + pre, dict, n);
	memset(buf + pre + n, ' ', pad);
	buf[pre + n + pad] = '\n';
	*len = pre + n + pad + 1;
	return 0;
}
