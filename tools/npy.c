/* SPDX-License-Identifier: MIT */
/*
 * NumPy .npy files for put and get (npy.h): which format a command line
 * asks for, reading a header off an input, writing one tensor as a file
 * np.load() reads (the header np.save() writes, then the bytes).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "blob.h"
#include "input.h"
#include "npy.h"
#include "output.h"
#include "tensorctl.h"

_Static_assert(TD_NPY_MAX_DIMS == TD_ENTRY_MAX_DIMS,
	       "a .npy header takes what a tensor may have");
_Static_assert((int)TD_DTYPE_F64 == (int)TD_TENSOR_F64 &&
		       (int)TD_DTYPE_U8 == (int)TD_TENSOR_U8,
	       "proto's dtype codes are the client's");

int tctl_npy_format(const char *cmd, const char *format, const char *path,
		    int *npy)
{
	size_t n = path ? strlen(path) : 0;

	if (!format) {
		*npy = n >= 4 && !strcmp(path + n - 4, ".npy");
		return TCTL_OK;
	}
	*npy = !strcmp(format, "npy");
	if (!*npy && strcmp(format, "raw"))
		return tctl_usage(cmd, "bad --format '%s' (valid: raw, npy)",
				  format);
	return TCTL_OK;
}

static int refused(const char *who, int rc, const struct td_err *e)
{
	return tctl_fail(TCTL_REFUSED, "input", -rc, "%s: .npy header: %s%s%s",
			 who, e->field ? e->field : "", e->field ? ": " : "",
			 e->reason);
}

/* Up to cap bytes into dst: what *head still holds (*hl bytes) first,
 * then from in; *got. TCTL_OK or reported. */
static int take(struct tctl_in *in, const uint8_t **head, size_t *hl,
		uint8_t *dst, uint64_t cap, uint64_t *got)
{
	uint64_t n = *hl < cap ? *hl : cap, more = 0;
	int rc = TCTL_OK;

	if (n) {
		memcpy(dst, *head, (size_t)n);
		*head += n;
		*hl -= (size_t)n;
	}
	if (n < cap)
		rc = tctl_in_read(in, dst + n, cap - n, &more);
	*got = n + more;
	return rc;
}

/* The header of in, whose first *hl bytes were read into *head already
 * (what is left of them after the header is data); who for messages. */
static int read_header(struct tctl_in *in, const char *who,
		       const uint8_t **head, size_t *hl,
		       struct td_npy_header *h)
{
	uint8_t pre[TD_NPY_PREFIX_LEN], *buf;
	struct td_err e = {0};
	uint64_t off = 0, got = 0, more = 0;
	int rc;

	/* every valid header is longer than the prefix: a dict follows */
	rc = take(in, head, hl, pre, sizeof(pre), &got);
	if (rc)
		return rc;
	rc = td_npy_header_len(pre, (size_t)got, &off, &e);
	if (rc < 0)
		return refused(who, rc, &e);
	if (off < got)
		off = got; /* decode says what is wrong with it */
	buf = malloc((size_t)off); /* at most TD_NPY_MAX_HEADER_LEN + 12 */
	if (!buf)
		return tctl_fail(TCTL_REFUSED, "io", ENOMEM, "out of memory");
	memcpy(buf, pre, (size_t)got);
	rc = take(in, head, hl, buf + got, off - got, &more);
	if (!rc) {
		rc = td_npy_decode(buf, (size_t)(got + more), h, &e);
		rc = rc < 0 ? refused(who, rc, &e) : TCTL_OK;
	}
	free(buf);
	/* what is left of a regular file is the data */
	if (!rc && in->regular)
		in->size = in->size > off ? in->size - off : 0;
	return rc;
}

int tctl_npy_read_header(struct tctl_in *in, struct td_npy_header *h)
{
	const uint8_t *none = NULL;
	size_t nl = 0;

	return read_header(in, in->path, &none, &nl, h);
}

int tctl_npy_write(const struct td_tensor *t, const char *name,
		   const char *out)
{
	uint8_t hdr[TD_NPY_ENCODE_MAX];
	const char *why = tctl_dense_unsavable(t);
	struct td_err e = {0};
	struct tctl_out o;
	size_t n = 0;
	int rc;

	if (why)
		return tctl_fail(TCTL_REFUSED, "input", EINVAL,
				 "%s: cannot be a .npy file: %s", name, why);
	rc = td_npy_encode(td_tensor_dtype(t), td_tensor_ndim(t),
			   td_tensor_shape(t), hdr, sizeof(hdr), &n, &e);
	if (rc < 0)
		return tctl_fail(TCTL_REFUSED, "input", -rc,
				 "%s: cannot be a .npy file: %s", name,
				 e.reason);
	rc = tctl_out_open(&o, out, TCTL_OUT_BINARY, n + td_tensor_bytes(t));
	if (rc)
		return rc;
	rc = tctl_out_write(&o, hdr, n);
	if (!rc && td_tensor_bytes(t))
		rc = tctl_out_write(&o, td_tensor_plane_data(t, 0),
				    td_tensor_bytes(t));
	if (rc) {
		tctl_out_abort(&o);
		return rc;
	}
	return tctl_out_commit(&o);
}

bool tctl_npy_sniff(const uint8_t *buf, size_t len)
{
	return len >= 6 && !memcmp(buf, "\x93NUMPY", 6);
}

/* What inspect says of a header whose data the input holds have bytes
 * of: TCTL_OK when that is all of it, else TCTL_REFUSED (said). */
static int print_npy(const char *path, const struct td_npy_header *h,
		     uint64_t have)
{
	const char *name = td_tensor_dtype_name(h->dtype);
	char descr[8], shape[TD_NPY_MAX_DIMS * 21 + 4], status[96];
	size_t o = 0;

	snprintf(descr, sizeof(descr), "%c%c%u",
		 h->order == TD_NPY_ORDER_BIG      ? '>'
		 : h->order == TD_NPY_ORDER_LITTLE ? '<'
						   : '|',
		 name[0], td_tensor_dtype_size(h->dtype));
	if (have == h->data_len)
		snprintf(status, sizeof(status), "ok");
	else
		snprintf(status, sizeof(status), "%s: %" PRIu64 " bytes follow "
			 "the header", have < h->data_len ? "short" : "long",
			 have);
	if (tctl_json) {
		struct json_object *j = json_object_new_object(),
				   *sh = json_object_new_array();

		for (uint32_t k = 0; k < h->ndim; k++)
			json_object_array_add(sh, json_object_new_uint64(
							  h->shape[k]));
		json_object_object_add(j, "kind", json_object_new_string("npy"));
		json_object_object_add(j, "version", json_object_new_string(
						     h->major == 1 ? "1.0"
						     : h->major == 2 ? "2.0"
								     : "3.0"));
		json_object_object_add(j, "descr", json_object_new_string(descr));
		json_object_object_add(j, "dtype", json_object_new_string(name));
		json_object_object_add(j, "shape", sh);
		json_object_object_add(j, "data_offset",
				       json_object_new_uint64(h->data_offset));
		json_object_object_add(j, "data_length",
				       json_object_new_uint64(h->data_len));
		json_object_object_add(j, "status",
				       json_object_new_string(status));
		if (tctl_json_print(j))
			return TCTL_REFUSED;
	} else {
		o += (size_t)snprintf(shape, sizeof(shape), "(");
		for (uint32_t k = 0; k < h->ndim; k++)
			o += (size_t)snprintf(shape + o, sizeof(shape) - o,
					      "%s%" PRIu64, k ? "," : "",
					      h->shape[k]);
		snprintf(shape + o, sizeof(shape) - o, "%s)",
			 h->ndim == 1 ? "," : "");
		printf("%s: NumPy .npy %u.0, %s (%s) %s, C order, data "
		       "@%" PRIu64 "+%" PRIu64 ": %s\n",
		       path, h->major, descr, name, shape, h->data_offset,
		       h->data_len, status);
	}
	return have == h->data_len ? TCTL_OK : TCTL_REFUSED;
}

int tctl_npy_inspect(const char *path, const uint8_t *buf, size_t len)
{
	struct td_npy_header h;
	struct td_err e = {0};
	struct tctl_in in;
	int rc;

	if (buf) { /* a stream, read whole */
		rc = td_npy_decode(buf, len, &h, &e);
		if (rc < 0)
			return tctl_fail(TCTL_REFUSED, "input", -rc,
					 "%s: .npy header: %s%s%s", path,
					 e.field ? e.field : "",
					 e.field ? ": " : "", e.reason);
		return print_npy(path, &h, len - h.data_offset);
	}
	/* a regular file: its header, and its size says the rest */
	rc = tctl_in_open(&in, path);
	if (!rc)
		rc = tctl_npy_read_header(&in, &h);
	if (!rc)
		rc = print_npy(path, &h, in.size);
	tctl_in_close(&in);
	return rc;
}

int tctl_npy_inspect_stream(const char *path, struct tctl_in *in,
			    const uint8_t *head, size_t hl)
{
	static uint8_t buf[1 << 20];
	struct td_npy_header h;
	uint64_t have, got = 0;
	int rc = read_header(in, path, &head, &hl, &h);

	/* the data: counted to the end a piece at a time, never held */
	for (have = hl; !rc; have += got) {
		rc = tctl_in_read(in, buf, sizeof(buf), &got);
		if (!rc && got < sizeof(buf)) {
			have += got;
			break;
		}
	}
	return rc ? rc : print_npy(path, &h, have);
}
