/* SPDX-License-Identifier: MIT */
/*
 * EdgeFirst tensor blob codec. Normative: ../shared/specs/blob.md. Section
 * numbers below (§) refer to it. Every length read from the buffer is
 * attacker-controlled: all region arithmetic is done in 64 bits with
 * explicit overflow checks, and nothing is read outside [0, size).
 */
#include "blob.h"

#include <assert.h>
#include <errno.h>
#include <string.h>

#include "bytes.h"

/* Header field offsets (§3). */
enum {
	OFF_SIZE = 0,
	OFF_REQUIRED_MASK = 8,
	OFF_PLANES_BYTES = 16,
	OFF_STORAGE_KIND = 24,
	OFF_PID = 28,
	OFF_FENCE_FD = 32,
	OFF_DTYPE = 36,
	OFF_QUANT_AXIS = 40,
	OFF_NDIM = 44,
	OFF_PLANE_COUNT = 48,
	OFF_QUANT_SCALES_LEN = 52,
	OFF_QUANT_ZPS_LEN = 56,
	OFF_STRINGS_BYTES = 60,
	OFF_STRIDES_LEN = 64,
	OFF_RESERVED = 68,
};

/* Plane record field offsets (§6.1). */
enum {
	POFF_HANDLE = 0,
	POFF_OFFSET = 8,
	POFF_STRIDE = 16,
	POFF_SIZE = 24,
	POFF_USED = 32,
	POFF_MODIFIER = 40,
	POFF_HBL = 48,
	POFF_DATA_LEN = 52,
};

static const char *const string_names[TD_BLOB_STRING_COUNT] = {
	"format", "color_space", "color_transfer", "color_encoding",
	"color_range",
};

const char *td_blob_string_name(unsigned i)
{
	return i < TD_BLOB_STRING_COUNT ? string_names[i] : NULL;
}

static const struct {
	const char *name;
	unsigned size;
} dtypes[TD_DTYPE_COUNT_] = {
	[TD_DTYPE_U8] = {"u8", 1},   [TD_DTYPE_I8] = {"i8", 1},
	[TD_DTYPE_U16] = {"u16", 2}, [TD_DTYPE_I16] = {"i16", 2},
	[TD_DTYPE_U32] = {"u32", 4}, [TD_DTYPE_I32] = {"i32", 4},
	[TD_DTYPE_U64] = {"u64", 8}, [TD_DTYPE_I64] = {"i64", 8},
	[TD_DTYPE_F16] = {"f16", 2}, [TD_DTYPE_F32] = {"f32", 4},
	[TD_DTYPE_F64] = {"f64", 8},
};

unsigned td_dtype_size(uint32_t dtype)
{
	return dtype < TD_DTYPE_COUNT_ ? dtypes[dtype].size : 0;
}

const char *td_dtype_name(uint32_t dtype)
{
	return dtype < TD_DTYPE_COUNT_ ? dtypes[dtype].name : NULL;
}

int td_dtype_from_name(const char *name)
{
	if (!name)
		return -1;
	for (int i = 0; i < TD_DTYPE_COUNT_; i++)
		if (strcmp(name, dtypes[i].name) == 0)
			return i;
	return -1;
}

const char *td_storage_kind_name(uint32_t kind)
{
	static const char *const names[] = {"mem", "shm", "dmabuf",
					    "iosurface", "pbo", "cuda"};
	return kind < sizeof(names) / sizeof(names[0]) ? names[kind] : NULL;
}

/* §11.4 image formats. */
enum layout { PACKED, PLANAR, SEMI_PLANAR };

static const struct format {
	const char *name;
	enum layout layout;
	unsigned planes;
	unsigned channels; /* packed: bytes per pixel; planar: planes */
	unsigned ndim;     /* rank of the addressing grid */
	unsigned uv_rows;  /* semi-planar: 0 = ceil(H/2), 1 = H, 2 = 2H */
} formats[] = {
	{"rgb8", PACKED, 1, 3, 3, 0},
	{"rgba8", PACKED, 1, 4, 3, 0},
	{"bgra8", PACKED, 1, 4, 3, 0},
	{"mono8", PACKED, 1, 1, 2, 0},
	{"YUYV", PACKED, 1, 2, 3, 0},
	{"VYUY", PACKED, 1, 2, 3, 0},
	{"NV12", SEMI_PLANAR, 2, 1, 2, 0},
	{"NV16", SEMI_PLANAR, 2, 1, 2, 1},
	{"rgb8_planar", PLANAR, 3, 3, 3, 0},
	{"rgba8_planar", PLANAR, 4, 4, 3, 0},
	{"NV24", SEMI_PLANAR, 2, 1, 2, 2},
};

static const struct format *format_find(struct td_str f)
{
	for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++)
		if (strlen(formats[i].name) == f.len &&
		    memcmp(formats[i].name, f.ptr, f.len) == 0)
			return &formats[i];
	return NULL;
}

unsigned td_blob_format_planes(struct td_str format)
{
	if (format.len == 0)
		return 1;
	const struct format *f = format_find(format);
	return f ? f->planes : 0;
}

static int forged(struct td_err *err, const char *field, uint64_t value,
		  uint64_t offset, const char *reason)
{
	return td__err_set(err, TD_ERR_FORGED_LENGTH, field, true, value,
			   offset, reason);
}

static int invalid(struct td_err *err, const char *field, bool has_value,
		   uint64_t value, uint64_t offset, const char *reason)
{
	return td__err_set(err, TD_ERR_INVALID_ARGUMENT, field, has_value,
			   value, offset, reason);
}

/* r + n * unit <= size, overflow counting as "past size" (§9.2). */
static bool region_fits(uint64_t r, uint64_t n, uint64_t unit, uint64_t size,
			uint64_t *out)
{
	uint64_t len;

	if (td__mul_ovf(n, unit, &len) || td__add_ovf(r, len, out))
		return false;
	return *out <= size;
}

static int decode_strings(const uint8_t *buf, struct td_blob_view *v,
			  struct td_err *err)
{
	const uint64_t base = v->r_strings;
	const uint64_t region = v->strings_bytes;
	uint64_t o = 0;

	for (unsigned i = 0; i < TD_BLOB_STRING_COUNT; i++) {
		if (o + 4 > region) /* o <= region <= 2^32: no overflow */
			return td__err_truncated(err, o + 4, region, base + o,
						 "string length prefix cut off");
		uint32_t len = td__le32(buf + base + o);
		if (o + 4 + len > region)
			return forged(err, string_names[i], len, base + o,
				      "string runs past the strings region");
		const uint8_t *s = buf + base + o + 4;
		if (!td__utf8_valid(s, len))
			return td__err_set(err, TD_ERR_INVALID_UTF8,
					   string_names[i], false, 0,
					   base + o + 4,
					   "string is not valid UTF-8");
		v->strings[i].ptr = (const char *)s;
		v->strings[i].len = len;
		o += 4 + (uint64_t)len;
	}
	return 0;
}

/* Read the record at planes-region offset o; bounds already validated. */
static void read_plane(const uint8_t *p, struct td_blob_plane *pl)
{
	pl->handle = (int64_t)td__le64(p + POFF_HANDLE);
	pl->offset = td__le64(p + POFF_OFFSET);
	pl->stride = td__le64(p + POFF_STRIDE);
	pl->size = td__le64(p + POFF_SIZE);
	pl->used = td__le64(p + POFF_USED);
	pl->modifier = td__le64(p + POFF_MODIFIER);
	pl->handle_bytes_len = td__le32(p + POFF_HBL);
	pl->data_len = td__le32(p + POFF_DATA_LEN);
	pl->handle_bytes = p + TD_BLOB_PLANE_RECORD_LEN;
	pl->data = pl->handle_bytes + pl->handle_bytes_len;
}

static int decode_planes(const uint8_t *buf, const struct td_blob_view *v,
			 struct td_err *err)
{
	const uint64_t base = v->r_planes;
	const uint64_t region = v->planes_bytes;
	uint64_t o = 0;

	for (uint32_t i = 0; i < v->plane_count; i++) {
		uint64_t end;

		/*
		 * o <= region + 7 and region <= size <= SIZE_MAX, and each
		 * addend below is at most 2^32: the sums cannot wrap, but
		 * check anyway so the invariant is local.
		 */
		if (td__add_ovf(o, TD_BLOB_PLANE_RECORD_LEN, &end))
			return td__err_set(err, TD_ERR_MALFORMED, NULL, false,
					   0, base, "plane offset overflow");
		if (end > region)
			return td__err_truncated(err, end, region, base + o,
						 "plane record cut off");
		const uint8_t *p = buf + base + o;
		uint32_t hbl = td__le32(p + POFF_HBL);
		uint32_t dl = td__le32(p + POFF_DATA_LEN);
		end += hbl;
		if (end > region)
			return forged(err, "handle_bytes_len", hbl,
				      base + o + POFF_HBL,
				      "handle bytes run past the planes region");
		end += dl;
		if (end > region)
			return forged(err, "data_len", dl,
				      base + o + POFF_DATA_LEN,
				      "plane data runs past the planes region");
		if (td__pad8_ovf(end, &o))
			return td__err_set(err, TD_ERR_MALFORMED, NULL, false,
					   0, base, "plane offset overflow");
	}
	return 0;
}

int td_blob_decode(const uint8_t *buf, size_t len, struct td_blob_view *view,
		   struct td_err *err)
{
	struct td_blob_view v;
	int rc;

	memset(&v, 0, sizeof(v));
	/* §9.1 header */
	if (len < TD_BLOB_HEADER_LEN)
		return td__err_truncated(err, TD_BLOB_HEADER_LEN, len, 0,
					 "buffer shorter than the blob header");
	v.buf = buf;
	v.required_mask = td__le64(buf + OFF_REQUIRED_MASK);
	if (v.required_mask & ~TD_BLOB_SUPPORTED_REQUIRED_MASK)
		return td__err_set(err, TD_ERR_UNSUPPORTED_REQUIREMENT,
				   "required_mask", true, v.required_mask,
				   OFF_REQUIRED_MASK,
				   "unknown required_mask bit set");
	v.size = td__le64(buf + OFF_SIZE);
	if (v.size < TD_BLOB_HEADER_LEN)
		return forged(err, "size", v.size, OFF_SIZE,
			      "size is smaller than the header");
	if (v.size > len)
		return td__err_truncated(err, v.size, len, OFF_SIZE,
					 "buffer shorter than the blob size");
	if (td__le32(buf + OFF_RESERVED) != 0)
		return td__err_set(err, TD_ERR_MALFORMED, "reserved", true,
				   td__le32(buf + OFF_RESERVED), OFF_RESERVED,
				   "reserved header word is not zero");
	v.planes_bytes = td__le64(buf + OFF_PLANES_BYTES);
	v.storage_kind = td__le32(buf + OFF_STORAGE_KIND);
	v.pid = td__le32(buf + OFF_PID);
	v.fence_fd = (int32_t)td__le32(buf + OFF_FENCE_FD);
	v.dtype = td__le32(buf + OFF_DTYPE);
	v.quant_axis = (int32_t)td__le32(buf + OFF_QUANT_AXIS);
	v.ndim = td__le32(buf + OFF_NDIM);
	v.plane_count = td__le32(buf + OFF_PLANE_COUNT);
	v.quant_scales_len = td__le32(buf + OFF_QUANT_SCALES_LEN);
	v.quant_zero_points_len = td__le32(buf + OFF_QUANT_ZPS_LEN);
	v.strings_bytes = td__le32(buf + OFF_STRINGS_BYTES);
	v.strides_len = td__le32(buf + OFF_STRIDES_LEN);

	/* §9.2 regions, each overrun attributed to its own field */
	if (v.strides_len != 0 && v.strides_len != v.ndim)
		return forged(err, "strides_len", v.strides_len,
			      OFF_STRIDES_LEN, "strides_len is neither 0 nor ndim");
	v.r_shape = TD_BLOB_HEADER_LEN;
	if (!region_fits(v.r_shape, v.ndim, 8, v.size, &v.r_strides))
		return forged(err, "ndim", v.ndim, OFF_NDIM,
			      "shape runs past size");
	if (!region_fits(v.r_strides, v.strides_len, 8, v.size, &v.r_scales))
		return forged(err, "strides_len", v.strides_len,
			      OFF_STRIDES_LEN, "strides run past size");
	if (!region_fits(v.r_scales, v.quant_scales_len, 4, v.size, &v.r_zps))
		return forged(err, "quant_scales_len", v.quant_scales_len,
			      OFF_QUANT_SCALES_LEN,
			      "quant_scales run past size");
	if (!region_fits(v.r_zps, v.quant_zero_points_len, 4, v.size,
			 &v.r_strings))
		return forged(err, "quant_zero_points_len",
			      v.quant_zero_points_len, OFF_QUANT_ZPS_LEN,
			      "quant_zero_points run past size");
	if (!region_fits(v.r_strings, v.strings_bytes, 1, v.size, &v.r_planes))
		return forged(err, "strings_bytes", v.strings_bytes,
			      OFF_STRINGS_BYTES, "strings run past size");
	if (v.r_planes % 8 != 0)
		return td__err_set(err, TD_ERR_MALFORMED, NULL, false, 0,
				   v.r_planes,
				   "planes region is not 8-aligned");
	if (!region_fits(v.r_planes, v.planes_bytes, 1, v.size, &v.r_end))
		return forged(err, "planes_bytes", v.planes_bytes,
			      OFF_PLANES_BYTES, "planes run past size");
	if (v.plane_count > v.planes_bytes / TD_BLOB_PLANE_RECORD_LEN)
		return forged(err, "plane_count", v.plane_count,
			      OFF_PLANE_COUNT,
			      "more planes than the planes region can hold");

	/* §9.3, §9.4 */
	rc = decode_strings(buf, &v, err);
	if (rc < 0)
		return rc;
	rc = decode_planes(buf, &v, err);
	if (rc < 0)
		return rc;
	*view = v;
	if (err)
		memset(err, 0, sizeof(*err));
	return 0;
}

uint64_t td_blob_shape(const struct td_blob_view *v, uint32_t i)
{
	assert(i < v->ndim);
	return td__le64(v->buf + v->r_shape + 8 * (uint64_t)i);
}

int64_t td_blob_stride(const struct td_blob_view *v, uint32_t i)
{
	assert(i < v->strides_len);
	return (int64_t)td__le64(v->buf + v->r_strides + 8 * (uint64_t)i);
}

float td_blob_quant_scale(const struct td_blob_view *v, uint32_t i)
{
	assert(i < v->quant_scales_len);
	return td__lef32(v->buf + v->r_scales + 4 * (uint64_t)i);
}

int32_t td_blob_quant_zero_point(const struct td_blob_view *v, uint32_t i)
{
	assert(i < v->quant_zero_points_len);
	return (int32_t)td__le32(v->buf + v->r_zps + 4 * (uint64_t)i);
}

int td_blob_plane_next(const struct td_blob_view *v, struct td_blob_cursor *c,
		       struct td_blob_plane *plane)
{
	if (c->index >= v->plane_count)
		return -ENOENT;
	read_plane(v->buf + v->r_planes + c->off, plane);
	/* validated by decode_planes(): cannot overflow */
	c->off = (c->off + TD_BLOB_PLANE_RECORD_LEN + plane->handle_bytes_len +
		  plane->data_len + 7) &
		 ~(uint64_t)7;
	c->index++;
	return 0;
}

int td_blob_plane_get(const struct td_blob_view *v, uint32_t i,
		      struct td_blob_plane *plane)
{
	struct td_blob_cursor c = TD_BLOB_CURSOR_INIT;
	int rc;

	if (i >= v->plane_count)
		return -ENOENT;
	do {
		rc = td_blob_plane_next(v, &c, plane);
	} while (rc == 0 && c.index <= i);
	return rc;
}

static uint64_t plane_base(const struct td_blob_view *v,
			   const struct td_blob_cursor *c)
{
	return v->r_planes + c->off;
}

/* rows of row_bytes at stride: (rows-1)*stride + row_bytes, 0 when empty. */
static int rows_need(uint64_t rows, uint64_t row_bytes, uint64_t stride,
		     uint64_t *need)
{
	uint64_t n;

	if (rows == 0 || row_bytes == 0) {
		*need = 0;
		return 0;
	}
	if (rows > 1 && stride < row_bytes)
		return -1;
	if (td__mul_ovf(rows - 1, stride, &n) || td__add_ovf(n, row_bytes, &n))
		return -1;
	*need = n;
	return 0;
}

/* Why plane_grid refused a shape (td_blob_plane_need names the field). */
enum grid_refusal {
	GRID_OK,
	GRID_NDIM,     /* rank is not the format's */
	GRID_CHANNELS, /* the channel dimension is not the format's */
	GRID_OVERFLOW,
};

/*
 * The rows plane i of image format f holds (spec §11.4): *rows rows of
 * *row bytes, as the array shape[0..*nd) with *inner elements per row
 * after the row index (packed: W and channels; otherwise W). One piece
 * of logic for the checks (td_blob_plane_need) and for readers and
 * writers (td_format_plane_layout).
 */
static enum grid_refusal plane_grid(const struct format *f, uint64_t elem,
				    uint32_t ndim, const uint64_t *shape,
				    uint32_t i, struct td_plane_layout *l)
{
	uint64_t h, w, rows, row;

	if (ndim != f->ndim)
		return GRID_NDIM;
	if (f->layout == PLANAR) {
		if (shape[0] != f->channels)
			return GRID_CHANNELS;
		h = shape[1];
		w = shape[2];
	} else {
		h = shape[0];
		w = shape[1];
		if (f->ndim == 3 && shape[2] != f->channels)
			return GRID_CHANNELS;
	}
	rows = h;
	if (td__mul_ovf(w, elem, &row))
		return GRID_OVERFLOW;
	if (f->layout == PACKED && td__mul_ovf(row, f->channels, &row))
		return GRID_OVERFLOW;
	if (f->layout == SEMI_PLANAR && i == 1) {
		if (f->uv_rows == 0)
			rows = h / 2 + (h & 1);
		else if (f->uv_rows == 2 && td__mul_ovf(h, 2, &rows))
			return GRID_OVERFLOW;
	}
	l->ndim = f->layout == PACKED ? f->ndim : 2;
	l->shape[0] = rows;
	l->shape[1] = w;
	l->shape[2] = f->channels;
	l->strides[2] = (int64_t)elem;
	l->strides[1] = (int64_t)(l->ndim == 3 ? elem * f->channels : elem);
	l->row_bytes = row;
	return GRID_OK;
}

int td_blob_plane_need(const struct td_blob_view *v, uint32_t i,
		       const struct td_blob_plane *plane, uint64_t *need,
		       struct td_err *err)
{
	const uint64_t elem = td_dtype_size(v->dtype);
	const struct td_str fstr = v->strings[TD_BLOB_FORMAT];
	struct td_plane_layout l;
	uint64_t n, shape[3] = {0};

	if (elem == 0)
		return td__err_set(err, TD_ERR_NOT_IMPLEMENTED, "dtype", true,
				   v->dtype, OFF_DTYPE, "unknown dtype");
	if (fstr.len == 0) {
		/* dense: product of dims; strided: span of the strides */
		for (uint32_t d = 0; d < v->ndim; d++)
			if (td_blob_shape(v, d) == 0) {
				*need = 0;
				return 0;
			}
		n = elem;
		for (uint32_t d = 0; d < v->ndim; d++) {
			uint64_t dim = td_blob_shape(v, d), t;
			if (v->strides_len == 0) {
				if (td__mul_ovf(n, dim, &n))
					goto overflow;
				continue;
			}
			int64_t s = td_blob_stride(v, d);
			uint64_t mag = s < 0 ? -(uint64_t)s : (uint64_t)s;
			if (td__mul_ovf(dim - 1, mag, &t) ||
			    td__add_ovf(n, t, &n))
				goto overflow;
		}
		*need = n;
		return 0;
	}

	const struct format *f = format_find(fstr);
	if (!f)
		return td__err_set(err, TD_ERR_NOT_IMPLEMENTED, "format", false,
				   0, v->r_strings, "unknown image format");
	for (uint32_t d = 0; d < v->ndim && d < 3; d++)
		shape[d] = td_blob_shape(v, d);
	switch (plane_grid(f, elem, v->ndim, shape, i, &l)) {
	case GRID_OK:
		break;
	case GRID_NDIM:
		return invalid(err, "ndim", true, v->ndim, OFF_NDIM,
			       "shape rank does not match the image format");
	case GRID_CHANNELS:
		if (f->layout == PLANAR)
			return invalid(err, "shape", true, shape[0],
				       v->r_shape,
				       "planar channel count does not match "
				       "the image format");
		return invalid(err, "shape", true, shape[2], v->r_shape + 16,
			       "channel count does not match the image "
			       "format");
	case GRID_OVERFLOW:
		goto overflow;
	}
	if (rows_need(l.shape[0], l.row_bytes, plane->stride, need) < 0)
		return invalid(err, "stride", true, plane->stride, v->r_planes,
			       "plane stride is smaller than a row or the "
			       "plane span overflows");
	return 0;
overflow:
	return invalid(err, "shape", false, 0, v->r_shape,
		       "layout size overflows 64 bits");
}

unsigned td_format_plane_count(const char *format)
{
	if (!format)
		return 0;
	return td_blob_format_planes(
		(struct td_str){format, (uint32_t)strnlen(format, 64)});
}

int td_format_plane_layout(const char *format, uint32_t dtype, uint32_t ndim,
			   const uint64_t *shape, uint32_t i, uint64_t stride,
			   struct td_plane_layout *out)
{
	const uint64_t elem = td_dtype_size(dtype);
	const struct format *f;
	struct td_plane_layout l = {0};
	size_t len;

	if (!format || !out || (ndim && !shape) || elem == 0)
		return -EINVAL;
	len = strnlen(format, 64);
	if (len == 0 || len == 64)
		return -EINVAL;
	f = format_find((struct td_str){format, (uint32_t)len});
	if (!f)
		return -ENOTSUP;
	if (i >= f->planes)
		return -EINVAL;
	switch (plane_grid(f, elem, ndim, shape, i, &l)) {
	case GRID_OK:
		break;
	case GRID_OVERFLOW:
		return -EOVERFLOW;
	default:
		return -EINVAL;
	}
	if (stride == 0)
		stride = l.row_bytes;
	if (stride > INT64_MAX ||
	    rows_need(l.shape[0], l.row_bytes, stride, &l.need) < 0)
		return stride < l.row_bytes ? -EINVAL : -EOVERFLOW;
	l.strides[0] = (int64_t)stride;
	l.stride = stride;
	*out = l;
	return 0;
}

static int check_quant(const struct td_blob_view *v, struct td_err *err)
{
	const uint32_t ns = v->quant_scales_len, nz = v->quant_zero_points_len;
	const int32_t axis = v->quant_axis;

	if (axis == TD_QUANT_NONE) {
		if (ns != 0 || nz != 0)
			return invalid(err, "quant_scales_len", true, ns,
				       OFF_QUANT_SCALES_LEN,
				       "quantization parameters without a "
				       "quantization axis");
	} else if (axis == TD_QUANT_PER_TENSOR) {
		if (ns != 1)
			return invalid(err, "quant_scales_len", true, ns,
				       OFF_QUANT_SCALES_LEN,
				       "per-tensor quantization needs one scale");
		if (nz > 1)
			return invalid(err, "quant_zero_points_len", true, nz,
				       OFF_QUANT_ZPS_LEN,
				       "per-tensor quantization takes at most "
				       "one zero point");
	} else if (axis >= 0) {
		if ((uint32_t)axis >= v->ndim)
			return invalid(err, "quant_axis", true,
				       (uint64_t)axis, OFF_QUANT_AXIS,
				       "quantization axis out of range");
		if (ns != td_blob_shape(v, (uint32_t)axis))
			return invalid(err, "quant_scales_len", true, ns,
				       OFF_QUANT_SCALES_LEN,
				       "per-channel scales do not match the "
				       "axis length");
		if (nz != 0 && nz != ns)
			return invalid(err, "quant_zero_points_len", true, nz,
				       OFF_QUANT_ZPS_LEN,
				       "per-channel zero points do not match "
				       "the scales");
	} else {
		return invalid(err, "quant_axis", true, (uint64_t)(int64_t)axis,
			       OFF_QUANT_AXIS, "invalid quantization axis");
	}
	return 0;
}

/* 9.5.9: inline planes, as many as the format has, each big enough. */
static int check_inline_planes(const struct td_blob_view *v,
			       struct td_err *err)
{
	struct td_blob_cursor c;
	struct td_blob_plane p;
	unsigned want = td_blob_format_planes(v->strings[TD_BLOB_FORMAT]);
	int rc;

	if (v->plane_count != want)
		return invalid(err, "plane_count", true,
			       v->plane_count, OFF_PLANE_COUNT,
			       "inline plane count does not match the "
			       "format");
	c = TD_BLOB_CURSOR_INIT;
	for (uint32_t i = 0;; i++) {
		uint64_t at = plane_base(v, &c), need;
		if (td_blob_plane_next(v, &c, &p) != 0)
			break;
		rc = td_blob_plane_need(v, i, &p, &need, err);
		if (rc < 0)
			return rc;
		if (need > p.data_len)
			return invalid(err, "data_len", true,
				       p.data_len, at + POFF_DATA_LEN,
				       "inline plane is smaller than "
				       "its layout needs");
	}
	return 0;
}

int td_blob_check(const struct td_blob_view *v, long fd_count,
		  struct td_err *err)
{
	struct td_blob_cursor c;
	struct td_blob_plane p;
	bool reference = false;
	int rc;

	/* 9.5.1 mode of the first plane; 9.5.2-9.5.4 per plane */
	if (td_blob_plane_get(v, 0, &p) == 0)
		reference = p.handle >= 0;
	c = TD_BLOB_CURSOR_INIT;
	for (;;) {
		uint64_t at = plane_base(v, &c);
		if (td_blob_plane_next(v, &c, &p) != 0)
			break;
		if ((p.handle >= 0) != reference)
			return invalid(err, "handle", true, (uint64_t)p.handle,
				       at + POFF_HANDLE,
				       "mixed inline and referenced planes");
	}
	c = TD_BLOB_CURSOR_INIT;
	for (;;) {
		uint64_t at = plane_base(v, &c);
		if (td_blob_plane_next(v, &c, &p) != 0)
			break;
		if (p.handle < -1)
			return invalid(err, "handle", true, (uint64_t)p.handle,
				       at + POFF_HANDLE,
				       "plane handle below -1");
		if (!reference) {
			if (p.size != p.data_len)
				return invalid(err, "size", true, p.size,
					       at + POFF_SIZE,
					       "inline plane size must equal "
					       "data_len");
			if (p.modifier != 0)
				return invalid(err, "modifier", true,
					       p.modifier, at + POFF_MODIFIER,
					       "inline plane needs modifier 0");
			if (p.handle_bytes_len != 0)
				return invalid(err, "handle_bytes_len", true,
					       p.handle_bytes_len,
					       at + POFF_HBL,
					       "inline plane must not carry "
					       "handle bytes");
		} else if (p.data_len != 0) {
			return invalid(err, "data_len", true, p.data_len,
				       at + POFF_DATA_LEN,
				       "referenced plane must not carry bytes");
		}
	}
	/* 9.5.5, 9.5.6 */
	if (td_dtype_size(v->dtype) == 0)
		return td__err_set(err, TD_ERR_NOT_IMPLEMENTED, "dtype", true,
				   v->dtype, OFF_DTYPE, "unknown dtype");
	if (td_blob_format_planes(v->strings[TD_BLOB_FORMAT]) == 0)
		return td__err_set(err, TD_ERR_NOT_IMPLEMENTED, "format", false,
				   0, v->r_strings, "unknown image format");
	/* 9.5.7 */
	rc = check_quant(v, err);
	if (rc < 0)
		return rc;
	if (reference) {
		/* 9.5.8: all indices checked before any fd is used */
		if (fd_count != TD_BLOB_NO_FD_TABLE) {
			c = TD_BLOB_CURSOR_INIT;
			for (;;) {
				uint64_t at = plane_base(v, &c);
				if (td_blob_plane_next(v, &c, &p) != 0)
					break;
				if (p.handle >= fd_count)
					return invalid(err, "handle", true,
						       (uint64_t)p.handle,
						       at + POFF_HANDLE,
						       "plane handle is not an "
						       "index into the fd table");
			}
		}
		if (v->storage_kind != TD_STORAGE_SHM &&
		    v->storage_kind != TD_STORAGE_DMABUF)
			return td__err_set(err, TD_ERR_NOT_IMPLEMENTED,
					   "storage_kind", true,
					   v->storage_kind, OFF_STORAGE_KIND,
					   "storage kind cannot be imported "
					   "by reference");
	} else {
		rc = check_inline_planes(v, err);
		if (rc < 0)
			return rc;
	}
	/* 9.5.10 */
	if (v->fence_fd < -1)
		return invalid(err, "fence_fd", true,
			       (uint64_t)(int64_t)v->fence_fd, OFF_FENCE_FD,
			       "negative fence index other than -1");
	if (v->fence_fd >= 0 && fd_count != TD_BLOB_NO_FD_TABLE &&
	    v->fence_fd >= fd_count)
		return invalid(err, "fence_fd", true, (uint64_t)v->fence_fd,
			       OFF_FENCE_FD,
			       "fence index is not in the fd table");
	if (err)
		memset(err, 0, sizeof(*err));
	return 0;
}

/* ---- writer ---- */

struct layout_sizes {
	uint64_t r_strings, r_planes, size, planes_bytes;
	uint32_t strings_bytes;
};

static int desc_sizes(const struct td_blob_desc *d, struct layout_sizes *ls,
		      struct td_err *err)
{
	uint64_t r, raw = 20;

	if (d->strides_len != 0 && d->strides_len != d->ndim)
		return invalid(err, "strides_len", true, d->strides_len,
			       OFF_STRIDES_LEN,
			       "strides_len must be 0 or ndim");
	if ((d->ndim && !d->shape) || (d->strides_len && !d->strides) ||
	    (d->quant_scales_len && !d->quant_scales) ||
	    (d->quant_zero_points_len && !d->quant_zero_points) ||
	    (d->plane_count && !d->planes))
		return invalid(err, NULL, false, 0, 0,
			       "NULL array with a non-zero count");
	/* counts are u32: these cannot overflow 64 bits */
	r = TD_BLOB_HEADER_LEN + 8 * (uint64_t)d->ndim +
	    8 * (uint64_t)d->strides_len + 4 * (uint64_t)d->quant_scales_len +
	    4 * (uint64_t)d->quant_zero_points_len;
	ls->r_strings = r;
	for (unsigned i = 0; i < TD_BLOB_STRING_COUNT; i++) {
		const struct td_str *s = &d->strings[i];
		if (s->len && !s->ptr)
			return invalid(err, string_names[i], false, 0, 0,
				       "NULL string with a non-zero length");
		if (!td__utf8_valid((const uint8_t *)s->ptr, s->len))
			return td__err_set(err, TD_ERR_INVALID_UTF8,
					   string_names[i], false, 0, 0,
					   "string is not valid UTF-8");
		raw += s->len;
	}
	ls->r_planes = (r + raw + 7) & ~(uint64_t)7; /* < 2^40: no overflow */
	if (ls->r_planes - r > UINT32_MAX)
		return forged(err, "strings_bytes", ls->r_planes - r,
			      OFF_STRINGS_BYTES,
			      "strings do not fit a 32-bit length");
	ls->strings_bytes = (uint32_t)(ls->r_planes - r);
	ls->planes_bytes = 0;
	for (uint32_t i = 0; i < d->plane_count; i++) {
		const struct td_blob_plane *p = &d->planes[i];
		if (p->handle < -1)
			return invalid(err, "handle", true, (uint64_t)p->handle,
				       0, "plane handle below -1");
		if ((p->handle_bytes_len && !p->handle_bytes) ||
		    (p->data_len && !p->data))
			return invalid(err, NULL, false, 0, 0,
				       "NULL plane bytes with a non-zero "
				       "length");
		uint64_t rec = (TD_BLOB_PLANE_RECORD_LEN +
				(uint64_t)p->handle_bytes_len + p->data_len +
				7) & ~(uint64_t)7;
		if (td__add_ovf(ls->planes_bytes, rec, &ls->planes_bytes))
			return forged(err, "planes_bytes", 0, OFF_PLANES_BYTES,
				      "planes region overflows 64 bits");
	}
	if (td__add_ovf(ls->r_planes, ls->planes_bytes, &ls->size) ||
	    ls->size > SIZE_MAX)
		return forged(err, "size", 0, OFF_SIZE,
			      "blob does not fit the address space");
	return 0;
}

int td_blob_encoded_len(const struct td_blob_desc *desc, uint64_t *len,
			struct td_err *err)
{
	struct layout_sizes ls;
	int rc = desc_sizes(desc, &ls, err);

	if (rc < 0)
		return rc;
	*len = ls.size;
	return 0;
}

int64_t td_blob_encode(const struct td_blob_desc *d, uint8_t *buf, size_t cap,
		       struct td_err *err)
{
	struct layout_sizes ls;
	uint64_t o;
	int rc = desc_sizes(d, &ls, err);

	if (rc < 0)
		return rc;
	if (ls.size > INT64_MAX)
		return forged(err, "size", ls.size, OFF_SIZE,
			      "blob too large");
	if (cap < ls.size) {
		td__err_set(err, TD_ERR_INVALID_ARGUMENT, NULL, true, ls.size,
			    0, "output buffer too small");
		return -ENOBUFS;
	}
	/* zero first: padding bytes and the reserved word are all zero */
	memset(buf, 0, ls.size);
	td__put_le64(buf + OFF_SIZE, ls.size);
	td__put_le64(buf + OFF_REQUIRED_MASK, 0);
	td__put_le64(buf + OFF_PLANES_BYTES, ls.planes_bytes);
	td__put_le32(buf + OFF_STORAGE_KIND, d->storage_kind);
	td__put_le32(buf + OFF_PID, d->pid);
	td__put_le32(buf + OFF_FENCE_FD, (uint32_t)d->fence_fd);
	td__put_le32(buf + OFF_DTYPE, d->dtype);
	td__put_le32(buf + OFF_QUANT_AXIS, (uint32_t)d->quant_axis);
	td__put_le32(buf + OFF_NDIM, d->ndim);
	td__put_le32(buf + OFF_PLANE_COUNT, d->plane_count);
	td__put_le32(buf + OFF_QUANT_SCALES_LEN, d->quant_scales_len);
	td__put_le32(buf + OFF_QUANT_ZPS_LEN, d->quant_zero_points_len);
	td__put_le32(buf + OFF_STRINGS_BYTES, ls.strings_bytes);
	td__put_le32(buf + OFF_STRIDES_LEN, d->strides_len);
	o = TD_BLOB_HEADER_LEN;
	for (uint32_t i = 0; i < d->ndim; i++, o += 8)
		td__put_le64(buf + o, d->shape[i]);
	for (uint32_t i = 0; i < d->strides_len; i++, o += 8)
		td__put_le64(buf + o, (uint64_t)d->strides[i]);
	for (uint32_t i = 0; i < d->quant_scales_len; i++, o += 4)
		td__put_lef32(buf + o, d->quant_scales[i]);
	for (uint32_t i = 0; i < d->quant_zero_points_len; i++, o += 4)
		td__put_le32(buf + o, (uint32_t)d->quant_zero_points[i]);
	for (unsigned i = 0; i < TD_BLOB_STRING_COUNT; i++) {
		td__put_le32(buf + o, d->strings[i].len);
		if (d->strings[i].len)
			memcpy(buf + o + 4, d->strings[i].ptr,
			       d->strings[i].len);
		o += 4 + (uint64_t)d->strings[i].len;
	}
	o = ls.r_planes;
	for (uint32_t i = 0; i < d->plane_count; i++) {
		const struct td_blob_plane *p = &d->planes[i];
		uint8_t *r = buf + o;
		td__put_le64(r + POFF_HANDLE, (uint64_t)p->handle);
		td__put_le64(r + POFF_OFFSET, p->offset);
		td__put_le64(r + POFF_STRIDE, p->stride);
		td__put_le64(r + POFF_SIZE, p->size);
		td__put_le64(r + POFF_USED, p->used);
		td__put_le64(r + POFF_MODIFIER, p->modifier);
		td__put_le32(r + POFF_HBL, p->handle_bytes_len);
		td__put_le32(r + POFF_DATA_LEN, p->data_len);
		o += TD_BLOB_PLANE_RECORD_LEN;
		if (p->handle_bytes_len)
			memcpy(buf + o, p->handle_bytes, p->handle_bytes_len);
		o += p->handle_bytes_len;
		if (p->data_len)
			memcpy(buf + o, p->data, p->data_len);
		o = (o + p->data_len + 7) & ~(uint64_t)7;
	}
	return (int64_t)ls.size;
}
