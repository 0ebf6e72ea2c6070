/* SPDX-License-Identifier: MIT */
/*
 * Hurray error kinds, element types and the tensor descriptor: decode in
 * the order of specs/hurray.md §6.7, the support check of §14, encode for
 * the writer. Pure: no I/O, no allocation.
 */
#include "hrry.h"

#include <errno.h>
#include <string.h>

#include "bytes.h"

static const struct {
	const char *name;
	int errnum;
} errors[TD_HRRY_E_COUNT_] = {
	[TD_HRRY_OK] = {"Ok", 0},
	[TD_HRRY_E_INVALID_HEADER] = {"InvalidHeader", -EBADMSG},
	[TD_HRRY_E_INVALID_FILE_MAGIC] = {"InvalidFileMagic", -EBADMSG},
	[TD_HRRY_E_UNSUPPORTED_CONTAINER_VERSION] =
		{"UnsupportedContainerVersion", -ENOTSUP},
	[TD_HRRY_E_RESERVED_FILE_FLAG_BITS] = {"ReservedFileFlagBits",
					       -EBADMSG},
	[TD_HRRY_E_RESERVED_BYTES_NON_ZERO] = {"ReservedBytesNonZero",
					       -EBADMSG},
	[TD_HRRY_E_INVALID_TRAILER_MAGIC] = {"InvalidTrailerMagic", -EBADMSG},
	[TD_HRRY_E_INDEX_OVERRUNS_TRAILER] = {"IndexOverrunsTrailer",
					      -EOVERFLOW},
	[TD_HRRY_E_INDEX_CRC32C_MISMATCH] = {"IndexCrc32cMismatch", -EBADMSG},
	[TD_HRRY_E_TENSOR_NAME_EMPTY] = {"TensorNameEmpty", -EBADMSG},
	[TD_HRRY_E_DUPLICATE_TENSOR_NAME] = {"DuplicateTensorName", -EBADMSG},
	[TD_HRRY_E_KV_KEY_EMPTY] = {"KvKeyEmpty", -EBADMSG},
	[TD_HRRY_E_DUPLICATE_KV_KEY] = {"DuplicateKvKey", -EBADMSG},
	[TD_HRRY_E_TENSOR_NOT_FOUND] = {"TensorNotFound", -ENOENT},
	[TD_HRRY_E_DESCRIPTOR_LENGTH_MISMATCH] = {"DescriptorLengthMismatch",
						  -EBADMSG},
	[TD_HRRY_E_INVALID_MAGIC] = {"InvalidMagic", -EBADMSG},
	[TD_HRRY_E_UNSUPPORTED_DESCRIPTOR_VERSION] =
		{"UnsupportedDescriptorVersion", -ENOTSUP},
	[TD_HRRY_E_DESCRIPTOR_TOO_SHORT] = {"DescriptorTooShort", -EBADMSG},
	[TD_HRRY_E_DESCRIPTOR_TRUNCATED] = {"DescriptorTruncated", -ENODATA},
	[TD_HRRY_E_RESERVED_DESCRIPTOR_FLAG_BITS_SET] =
		{"ReservedDescriptorFlagBitsSet", -EBADMSG},
	[TD_HRRY_E_INVALID_TYPE_TAG] = {"InvalidTypeTag", -EBADMSG},
	[TD_HRRY_E_RESERVED_TYPE_TAG] = {"ReservedTypeTag", -EBADMSG},
	[TD_HRRY_E_UNKNOWN_TYPE_TAG] = {"UnknownTypeTag", -EBADMSG},
	[TD_HRRY_E_INVALID_LAYOUT_TAG] = {"InvalidLayoutTag", -EBADMSG},
	[TD_HRRY_E_RESERVED_LAYOUT_TAG] = {"ReservedLayoutTag", -EBADMSG},
	[TD_HRRY_E_UNKNOWN_LAYOUT_TAG] = {"UnknownLayoutTag", -EBADMSG},
	[TD_HRRY_E_RANK_EXCEEDS_MAXIMUM] = {"RankExceedsMaximum", -EBADMSG},
	[TD_HRRY_E_EMPTY_BUFFER_TABLE] = {"EmptyBufferTable", -EBADMSG},
	[TD_HRRY_E_INVALID_DEVICE_TAG] = {"InvalidDeviceTag", -EBADMSG},
	[TD_HRRY_E_INVALID_SYNC_MODE] = {"InvalidSyncMode", -EBADMSG},
	[TD_HRRY_E_INVALID_MEMORY_CLASS] = {"InvalidMemoryClass", -EBADMSG},
	[TD_HRRY_E_ALIGNMENT_NOT_POWER_OF_TWO] = {"AlignmentNotPowerOfTwo",
						  -EBADMSG},
	[TD_HRRY_E_ALIGNMENT_BELOW_MINIMUM] = {"AlignmentBelowMinimum",
					       -EBADMSG},
	[TD_HRRY_E_CPU_BUFFER_NOT_PRODUCER_SYNCED] =
		{"CpuBufferNotProducerSynced", -EBADMSG},
	[TD_HRRY_E_EXTENSION_TYPE_FLAG_MISMATCH] = {"ExtensionTypeFlagMismatch",
						    -EBADMSG},
	[TD_HRRY_E_EXTENSION_TYPE_PACKING_INVALID] =
		{"ExtensionTypePackingInvalid", -EBADMSG},
	[TD_HRRY_E_INVALID_QUANTIZATION] = {"InvalidQuantization", -EBADMSG},
	[TD_HRRY_E_SHARD_OUT_OF_BOUNDS] = {"ShardOutOfBounds", -EBADMSG},
	[TD_HRRY_E_STATISTICS_RESERVED_MASK_BITS_SET] =
		{"StatisticsReservedMaskBitsSet", -EBADMSG},
	[TD_HRRY_E_INVALID_COMPOSITE_HEAD] = {"InvalidCompositeHead",
					      -EBADMSG},
	[TD_HRRY_E_OPEN_COMPOSITE] = {"OpenComposite", -EBADMSG},
	[TD_HRRY_E_INVALID_LAYOUT] = {"InvalidLayout", -EBADMSG},
	[TD_HRRY_E_UNSUPPORTED_LAYOUT] = {"UnsupportedLayout", -ENOTSUP},
	[TD_HRRY_E_UNSUPPORTED_QUANTIZATION] = {"UnsupportedQuantization",
						-ENOTSUP},
	[TD_HRRY_E_UNSUPPORTED_TYPE] = {"UnsupportedType", -ENOTSUP},
	[TD_HRRY_E_UNSUPPORTED_SHAPE] = {"UnsupportedShape", -ENOTSUP},
	[TD_HRRY_E_UNEXPECTED_EOF] = {"UnexpectedEof", -ENODATA},
	[TD_HRRY_E_IO] = {"Io", -EIO},
	[TD_HRRY_E_NOT_A_COMPOSITE] = {"NotAComposite", -EINVAL},
	[TD_HRRY_E_TORN_COMPOSITE] = {"TornComposite", -EBADMSG},
	[TD_HRRY_E_COMPOSITE_NESTING_TOO_DEEP] = {"CompositeNestingTooDeep",
						  -EBADMSG},
	[TD_HRRY_E_COMPOSITE_MEMBER_COUNT_MISMATCH] =
		{"CompositeMemberCountMismatch", -EBADMSG},
	[TD_HRRY_E_COMPOSITE_MEMBER_MISSING_SHARD] =
		{"CompositeMemberMissingShard", -EBADMSG},
	[TD_HRRY_E_COMPOSITE_MEMBER_PARENT_SHAPE_MISMATCH] =
		{"CompositeMemberParentShapeMismatch", -EBADMSG},
	[TD_HRRY_E_COMPOSITE_MEMBER_TYPE_MISMATCH] =
		{"CompositeMemberTypeMismatch", -EBADMSG},
	[TD_HRRY_E_COMPOSITE_MEMBER_FLAG_MISMATCH] =
		{"CompositeMemberFlagMismatch", -EBADMSG},
	[TD_HRRY_E_COMPOSITE_OVERLAY_BASE_NOT_FIRST] =
		{"CompositeOverlayBaseNotFirst", -EBADMSG},
	[TD_HRRY_E_COMPOSITE_OVERLAY_BASE_NOT_SPANNING] =
		{"CompositeOverlayBaseNotSpanning", -EBADMSG},
	[TD_HRRY_E_COMPOSITE_OVERLAY_EMPTY] = {"CompositeOverlayEmpty",
					       -EBADMSG},
	[TD_HRRY_E_COMPOSITE_PARTITION_OVERLAP] = {"CompositePartitionOverlap",
						   -EBADMSG},
	[TD_HRRY_E_COMPOSITE_PARTITION_GAP] = {"CompositePartitionGap",
					       -EBADMSG},
	[TD_HRRY_E_INVALID_ARGUMENT] = {"InvalidArgument", -EINVAL},
	[TD_HRRY_E_WRITER_POISONED] = {"WriterPoisoned", -ECANCELED},
	[TD_HRRY_E_NO_MEMORY] = {"OutOfMemory", -ENOMEM},
	[TD_HRRY_E_TOO_LARGE] = {"TooLarge", -EFBIG},
};

const char *td_hrry_error_name(enum td_hrry_error kind)
{
	if ((unsigned)kind >= TD_HRRY_E_COUNT_)
		return "Unknown";
	return errors[kind].name;
}

int td_hrry_error_errno(enum td_hrry_error kind)
{
	if ((unsigned)kind >= TD_HRRY_E_COUNT_)
		return -EINVAL;
	return errors[kind].errnum;
}

int td__hrry_fail(struct td_hrry_err *err, enum td_hrry_error kind,
		  uint64_t offset, const char *reason)
{
	int rc = td_hrry_error_errno(kind);
	if (err) {
		err->kind = kind;
		err->code = rc;
		err->offset = offset;
		err->reason = reason;
	}
	return rc;
}

/* ---- element types ---- */

static const struct {
	uint8_t tag;
	const char *name;
	int8_t dtype; /* tensord blob dtype, -1 none */
} types[] = {
	{TD_HRRY_TYPE_FLOAT16, "float16", 8},
	{TD_HRRY_TYPE_BFLOAT16, "bfloat16", -1},
	{TD_HRRY_TYPE_FLOAT32, "float32", 9},
	{TD_HRRY_TYPE_FLOAT64, "float64", 10},
	{TD_HRRY_TYPE_INT8, "int8", 1},
	{TD_HRRY_TYPE_UINT8, "uint8", 0},
	{TD_HRRY_TYPE_INT16, "int16", 3},
	{TD_HRRY_TYPE_UINT16, "uint16", 2},
	{TD_HRRY_TYPE_INT32, "int32", 5},
	{TD_HRRY_TYPE_UINT32, "uint32", 4},
	{TD_HRRY_TYPE_INT64, "int64", 7},
	{TD_HRRY_TYPE_UINT64, "uint64", 6},
	{TD_HRRY_TYPE_BOOL, "bool", -1},
	{TD_HRRY_TYPE_FLOAT8_E4M3, "float8_e4m3", -1},
	{TD_HRRY_TYPE_FLOAT8_E5M2, "float8_e5m2", -1},
	{TD_HRRY_TYPE_FLOAT8_E8M0, "float8_e8m0", -1},
	{TD_HRRY_TYPE_FLOAT4_E2M1, "float4_e2m1", -1},
	{TD_HRRY_TYPE_FLOAT6_E2M3, "float6_e2m3", -1},
	{TD_HRRY_TYPE_FLOAT6_E3M2, "float6_e3m2", -1},
	{TD_HRRY_TYPE_FLOAT128, "float128", -1},
	{TD_HRRY_TYPE_INT4, "int4", -1},
	{TD_HRRY_TYPE_UINT4, "uint4", -1},
	{TD_HRRY_TYPE_INT2, "int2", -1},
	{TD_HRRY_TYPE_UINT2, "uint2", -1},
	{TD_HRRY_TYPE_COMPLEX64, "complex64", -1},
	{TD_HRRY_TYPE_COMPLEX128, "complex128", -1},
};
#define NTYPES (sizeof(types) / sizeof(types[0]))

/* blob dtype -> element size (proto/blob.h order) */
static const uint8_t dtype_size[11] = {1, 1, 2, 2, 4, 4, 8, 8, 2, 4, 8};

static int type_index(uint8_t tag)
{
	for (size_t i = 0; i < NTYPES; i++)
		if (types[i].tag == tag)
			return (int)i;
	return -1;
}

const char *td_hrry_type_name(uint8_t type_tag)
{
	int i = type_index(type_tag);
	return i < 0 ? NULL : types[i].name;
}

int td_hrry_type_to_dtype(uint8_t type_tag)
{
	int i = type_index(type_tag);
	return i < 0 ? -1 : types[i].dtype;
}

uint8_t td_hrry_type_from_dtype(uint32_t dtype)
{
	for (size_t i = 0; i < NTYPES; i++)
		if (types[i].dtype >= 0 && (uint32_t)types[i].dtype == dtype)
			return types[i].tag;
	return 0;
}

unsigned td_hrry_type_size(uint8_t type_tag)
{
	int d = td_hrry_type_to_dtype(type_tag);
	return d < 0 ? 0 : dtype_size[d];
}

const char *td_hrry_layout_name(uint8_t tag)
{
	switch (tag) {
	case TD_HRRY_LAYOUT_ROW_MAJOR: return "row-major";
	case TD_HRRY_LAYOUT_COLUMN_MAJOR: return "column-major";
	case TD_HRRY_LAYOUT_STRIDED: return "strided";
	case TD_HRRY_LAYOUT_TILED: return "tiled";
	case TD_HRRY_LAYOUT_MORTON: return "morton";
	case TD_HRRY_LAYOUT_COO: return "coo";
	case TD_HRRY_LAYOUT_CSR: return "csr";
	case TD_HRRY_LAYOUT_CSC: return "csc";
	case TD_HRRY_LAYOUT_CSF: return "csf";
	case TD_HRRY_LAYOUT_BLOCK_PAGED: return "block-paged";
	case TD_HRRY_LAYOUT_COMPOSITE: return "composite";
	case TD_HRRY_LAYOUT_HILBERT: return "hilbert";
	}
	if (tag >= 0xF0 && tag <= 0xFE)
		return "private";
	return NULL;
}

static bool is_private(uint8_t tag)
{
	return tag >= 0xF0 && tag <= 0xFE;
}

/* ---- descriptor decode (§6.7) ---- */

/* A bounded cursor: reads past `end` are DescriptorTruncated. */
struct rd {
	const uint8_t *p;
	uint64_t pos, end;
	struct td_hrry_err *err;
	int rc;
};

static bool take(struct rd *r, uint64_t n, const uint8_t **out)
{
	if (r->rc)
		return false;
	if (n > r->end - r->pos) {
		r->rc = td__hrry_fail(r->err, TD_HRRY_E_DESCRIPTOR_TRUNCATED,
				      r->end,
				      "descriptor ends inside a field");
		return false;
	}
	*out = r->p + r->pos;
	r->pos += n;
	return true;
}

static bool rd8(struct rd *r, uint8_t *v)
{
	const uint8_t *q;
	if (!take(r, 1, &q))
		return false;
	*v = q[0];
	return true;
}

static bool rd32(struct rd *r, uint32_t *v)
{
	const uint8_t *q;
	if (!take(r, 4, &q))
		return false;
	*v = td__le32(q);
	return true;
}

static bool rd64(struct rd *r, uint64_t *v)
{
	const uint8_t *q;
	if (!take(r, 8, &q))
		return false;
	*v = td__le64(q);
	return true;
}

static int fail_at(struct rd *r, enum td_hrry_error kind, uint64_t at,
		   const char *reason)
{
	r->rc = td__hrry_fail(r->err, kind, at, reason);
	return r->rc;
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* Skip n reserved bytes that must be 0. */
static bool reserved(struct rd *r, uint64_t n)
{
	uint64_t at = r->pos;
	const uint8_t *q;
	if (!take(r, n, &q))
		return false;
	if (!all_zero(q, n)) {
		fail_at(r, TD_HRRY_E_RESERVED_BYTES_NON_ZERO, at,
			"reserved descriptor bytes are not zero");
		return false;
	}
	return true;
}

static int check_type_tag(uint8_t t)
{
	if (t == 0x00 || t == 0xFF)
		return TD_HRRY_E_INVALID_TYPE_TAG;
	if (type_index(t) >= 0 || is_private(t))
		return TD_HRRY_OK;
	if (t == 0x47 || (t >= 0x80 && t <= 0xEF))
		return TD_HRRY_E_RESERVED_TYPE_TAG;
	return TD_HRRY_E_UNKNOWN_TYPE_TAG;
}

/* Tiled payload (§6.2), nested up to depth 8. */
static bool tiled(struct rd *r, uint32_t rank, unsigned depth)
{
	uint64_t at = r->pos;
	uint8_t outer, inner;
	const uint8_t *q;
	if (depth > TD_HRRY_MAX_NESTING) {
		fail_at(r, TD_HRRY_E_INVALID_LAYOUT, at,
			"tiled layout nested deeper than 8");
		return false;
	}
	if (!take(r, 8ull * rank, &q) || !rd8(r, &outer) || !rd8(r, &inner))
		return false;
	if (outer < 1 || outer > 3 || inner < 1 || inner > 4) {
		fail_at(r, TD_HRRY_E_INVALID_LAYOUT, at + 8ull * rank,
			"tiled layout: outer must be 1-3 and inner 1-4");
		return false;
	}
	if (!reserved(r, 2))
		return false;
	if (outer == 3 && !take(r, 8ull * rank, &q))
		return false;
	if (inner == 3 && !take(r, 8ull * rank, &q))
		return false;
	if (inner == 4)
		return tiled(r, rank, depth + 1);
	return true;
}

static bool layout_payload(struct rd *r, struct td_hrry_desc *d)
{
	uint64_t at = r->pos;
	uint32_t rank = d->rank;
	const uint8_t *q;
	uint32_t v32;
	uint64_t v64;
	uint8_t b;
	switch (d->layout_tag) {
	case TD_HRRY_LAYOUT_ROW_MAJOR:
	case TD_HRRY_LAYOUT_COLUMN_MAJOR:
		break;
	case TD_HRRY_LAYOUT_STRIDED:
		take(r, 8ull * rank, &q);
		break;
	case TD_HRRY_LAYOUT_TILED:
		tiled(r, rank, 1);
		break;
	case TD_HRRY_LAYOUT_MORTON:
		for (uint32_t i = 0; i < rank && !r->rc; i++)
			if (rd32(r, &v32) && v32 == 0)
				fail_at(r, TD_HRRY_E_INVALID_LAYOUT,
					r->pos - 4,
					"Morton bits per dimension must be > 0");
		break;
	case TD_HRRY_LAYOUT_COO:
		if (rd64(r, &v64) && rd8(r, &b) && b > 1)
			fail_at(r, TD_HRRY_E_INVALID_LAYOUT, r->pos - 1,
				"COO is_sorted must be 0 or 1");
		reserved(r, 7);
		break;
	case TD_HRRY_LAYOUT_CSR:
	case TD_HRRY_LAYOUT_CSC:
		if (rd64(r, &v64))
			reserved(r, 8);
		break;
	case TD_HRRY_LAYOUT_CSF: {
		uint64_t seen = 0;
		rd64(r, &v64);
		for (uint32_t i = 0; i < rank && !r->rc; i++) {
			if (!rd32(r, &v32))
				break;
			if (v32 >= rank || (seen >> v32 & 1))
				fail_at(r, TD_HRRY_E_INVALID_LAYOUT, r->pos - 4,
					"CSF mode_order is not a permutation");
			else
				seen |= 1ull << v32;
		}
		reserved(r, 8);
		break;
	}
	case TD_HRRY_LAYOUT_BLOCK_PAGED:
		/* page_size, num_pages, paged_axis, num_seqs, kv_role,
		 * layer_index, block_table_index_type */
		take(r, 4 + 8 + 4 + 4 + 1 + 4 + 1, &q);
		reserved(r, 6);
		break;
	case TD_HRRY_LAYOUT_COMPOSITE:
		if (rd8(r, &d->rule) && rd8(r, &d->combine_op) &&
		    reserved(r, 2))
			rd32(r, &d->member_count);
		break;
	case TD_HRRY_LAYOUT_HILBERT: {
		uint32_t order, hrank;
		if (rd32(r, &order) && rd32(r, &hrank) &&
		    (order == 0 || hrank != rank || hrank < 2))
			fail_at(r, TD_HRRY_E_INVALID_LAYOUT, at,
				"Hilbert needs order > 0 and hilbert_rank = "
				"rank >= 2");
		break;
	}
	default:
		if (is_private(d->layout_tag)) {
			if (rd64(r, &v64) && rd32(r, &v32))
				take(r, v32, &q);
			break;
		}
		if (d->layout_tag == 0x00 || d->layout_tag == 0xFF)
			fail_at(r, TD_HRRY_E_INVALID_LAYOUT_TAG, 15,
				"layout tag 0x00/0xFF is invalid");
		else
			fail_at(r, TD_HRRY_E_RESERVED_LAYOUT_TAG, 15,
				"reserved or unknown layout tag");
		return false;
	}
	if (r->rc)
		return false;
	d->layout_payload = r->p + at;
	d->layout_payload_len = (uint32_t)(r->pos - at);
	return true;
}

static bool buffer_table(struct rd *r, struct td_hrry_desc *d)
{
	uint8_t count;
	uint64_t at = r->pos;
	if (!rd8(r, &count))
		return false;
	if (count == 0 && d->layout_tag != TD_HRRY_LAYOUT_COMPOSITE) {
		fail_at(r, TD_HRRY_E_EMPTY_BUFFER_TABLE, at,
			"buffer_count is 0 for a tensor that is not a "
			"composite head");
		return false;
	}
	d->buffer_count = count;
	for (uint32_t k = 0; k < count; k++) {
		const uint8_t *h;
		uint64_t hat = r->pos;
		if (!take(r, 16, &h))
			return false;
		struct td_hrry_buffer *b = &d->buffers[k];
		b->byte_size = td__le64(h);
		b->alignment = td__le32(h + 8);
		b->device_tag = h[12];
		b->sync_mode = h[13];
		b->memory_class = h[14];
		if (h[15]) {
			fail_at(r, TD_HRRY_E_RESERVED_BYTES_NON_ZERO, hat + 15,
				"buffer handle reserved byte is not zero");
			return false;
		}
		if (b->device_tag == 0xFF ||
		    (b->device_tag > 8 && !is_private(b->device_tag))) {
			fail_at(r, TD_HRRY_E_INVALID_DEVICE_TAG, hat + 12,
				"invalid or reserved device tag");
			return false;
		}
		if (b->sync_mode > 2) {
			fail_at(r, TD_HRRY_E_INVALID_SYNC_MODE, hat + 13,
				"sync_mode must be 0, 1 or 2");
			return false;
		}
		if (b->memory_class > 3 && !is_private(b->memory_class)) {
			fail_at(r, TD_HRRY_E_INVALID_MEMORY_CLASS, hat + 14,
				"invalid or reserved memory class");
			return false;
		}
		if (b->alignment == 0 || (b->alignment & (b->alignment - 1))) {
			fail_at(r, TD_HRRY_E_ALIGNMENT_NOT_POWER_OF_TWO, hat + 8,
				"buffer alignment is not a power of two");
			return false;
		}
		if (b->byte_size > 0 && b->alignment < 64) {
			fail_at(r, TD_HRRY_E_ALIGNMENT_BELOW_MINIMUM, hat + 8,
				"a non-empty buffer needs alignment >= 64");
			return false;
		}
		if (b->device_tag == 0 && b->sync_mode != 0) {
			fail_at(r, TD_HRRY_E_CPU_BUFFER_NOT_PRODUCER_SYNCED,
				hat + 13, "a CPU buffer must be producer-synced");
			return false;
		}
	}
	return true;
}

static bool quantization(struct rd *r, struct td_hrry_desc *d)
{
	uint32_t qlen;
	const uint8_t *q;
	uint64_t at;
	if (!rd32(r, &qlen))
		return false;
	at = r->pos;
	if (!take(r, qlen, &q))
		return false;
	if (qlen < 4) {
		fail_at(r, TD_HRRY_E_INVALID_QUANTIZATION, at,
			"quantization section shorter than its 4-byte header");
		return false;
	}
	uint8_t scheme = q[0];
	if (scheme == 0 || scheme == 0xFF || (scheme > 5 && !is_private(scheme))) {
		fail_at(r, TD_HRRY_E_INVALID_QUANTIZATION, at,
			"invalid, reserved or unknown quantization scheme");
		return false;
	}
	if (q[1] != 1) {
		fail_at(r, TD_HRRY_E_INVALID_QUANTIZATION, at + 1,
			"quantization scheme_version must be 1");
		return false;
	}
	d->quant_scheme = scheme;
	d->quantization = q;
	d->quantization_len = qlen;
	return true;
}

static bool shard(struct rd *r, struct td_hrry_desc *d)
{
	uint64_t at = r->pos;
	for (uint32_t i = 0; i < d->rank; i++)
		if (!rd64(r, &d->parent_shape[i]))
			return false;
	for (uint32_t i = 0; i < d->rank; i++)
		if (!rd64(r, &d->shard_offset[i]))
			return false;
	if (d->layout_tag == TD_HRRY_LAYOUT_CSF ||
	    d->layout_tag == TD_HRRY_LAYOUT_BLOCK_PAGED) {
		fail_at(r, TD_HRRY_E_INVALID_LAYOUT, at,
			"a shard is not allowed with CSF or block-paged");
		return false;
	}
	for (uint32_t i = 0; i < d->rank; i++) {
		uint64_t end;
		if (td__add_ovf(d->shard_offset[i], d->shape[i], &end) ||
		    end > d->parent_shape[i]) {
			fail_at(r, TD_HRRY_E_SHARD_OUT_OF_BOUNDS,
				at + 8ull * d->rank + 8ull * i,
				"shard_offset + shape exceeds parent_shape");
			return false;
		}
	}
	return true;
}

static double f64_at(const uint8_t *p)
{
	uint64_t u = td__le64(p);
	double f;
	memcpy(&f, &u, sizeof(f));
	return f;
}

static bool statistics(struct rd *r, struct td_hrry_desc *d)
{
	const uint8_t *s;
	uint64_t at = r->pos;
	if (!take(r, 72, &s))
		return false;
	struct td_hrry_stats *st = &d->stats;
	st->computed_mask = td__le32(s);
	if (st->computed_mask >> 6) {
		fail_at(r, TD_HRRY_E_STATISTICS_RESERVED_MASK_BITS_SET, at,
			"statistics computed_mask has bits >= 6 set");
		return false;
	}
	if (!all_zero(s + 4, 4) || !all_zero(s + 68, 4)) {
		fail_at(r, TD_HRRY_E_RESERVED_BYTES_NON_ZERO,
			at + (all_zero(s + 4, 4) ? 68 : 4),
			"statistics reserved bytes are not zero");
		return false;
	}
	st->nnz = td__le64(s + 8);
	st->sparsity = f64_at(s + 16);
	st->min = f64_at(s + 24);
	st->max = f64_at(s + 32);
	st->absmax = f64_at(s + 40);
	st->mean = f64_at(s + 48);
	st->stddev = f64_at(s + 56);
	st->nm_n = s[64];
	st->nm_m = s[65];
	st->has_nan = s[66];
	st->has_inf = s[67];
	return true;
}

static bool ext_type(struct rd *r, struct td_hrry_desc *d)
{
	const uint8_t *s;
	uint64_t at = r->pos;
	if (!take(r, 20, &s))
		return false;
	struct td_hrry_ext_type *e = &d->ext;
	e->bit_width = td__le32(s);
	e->packing = s[4];
	e->is_float = s[5];
	e->is_signed = s[6];
	e->sign_bits = s[7];
	e->exponent_bits = s[8];
	e->mantissa_bits = s[9];
	e->exponent_bias = td__le32(s + 12);
	e->has_nan = s[16];
	e->has_inf = s[17];
	if (!all_zero(s + 10, 2) || !all_zero(s + 18, 2)) {
		fail_at(r, TD_HRRY_E_RESERVED_BYTES_NON_ZERO, at + 10,
			"extension type reserved bytes are not zero");
		return false;
	}
	bool ok;
	if (e->bit_width == 0)
		ok = false;
	else if (e->bit_width < 8)
		ok = (e->bit_width == 1 || e->bit_width == 2 ||
		      e->bit_width == 4) &&
		     e->packing == 8 / e->bit_width;
	else
		ok = e->bit_width % 8 == 0 && e->packing <= 1;
	if (!ok) {
		fail_at(r, TD_HRRY_E_EXTENSION_TYPE_PACKING_INVALID, at,
			"extension type: sub-byte widths are 1, 2 or 4 with "
			"packing 8/width; others whole bytes");
		return false;
	}
	return true;
}

static bool member_section(struct rd *r, struct td_hrry_desc *d)
{
	const uint8_t *s;
	uint64_t at = r->pos;
	if (!take(r, 16, &s))
		return false;
	if (s[0] > 1) {
		fail_at(r, TD_HRRY_E_COMPOSITE_MEMBER_FLAG_MISMATCH, at,
			"member_role must be 0 (correction) or 1 (base)");
		return false;
	}
	if (!all_zero(s + 1, 15)) {
		fail_at(r, TD_HRRY_E_RESERVED_BYTES_NON_ZERO, at + 1,
			"composite member reserved bytes are not zero");
		return false;
	}
	d->member_role = s[0];
	return true;
}

/* §6.7 step 20 */
static int cross_checks(struct rd *r, struct td_hrry_desc *d)
{
	if (d->layout_tag == TD_HRRY_LAYOUT_COMPOSITE) {
		const char *why = NULL;
		if (d->byte_offset != 0)
			why = "composite head with byte_offset != 0";
		else if (d->flags & TD_HRRY_DESC_HAS_QUANTIZATION)
			why = "composite head with a quantization section";
		else if (d->flags & TD_HRRY_DESC_HAS_COMPOSITE_MEMBER)
			why = "composite head with a composite-member section";
		else if (d->buffer_count != 0)
			why = "composite head with buffers";
		else if (d->rule < 1 || d->rule > 3)
			why = "composite rule must be 1, 2 or 3";
		else if (d->rule == TD_HRRY_RULE_OVERLAY ?
				 (d->combine_op < 1 || d->combine_op > 2) :
				 d->combine_op != 0)
			why = "combine_op must be 1/2 for overlay, else 0";
		if (why)
			return fail_at(r, TD_HRRY_E_INVALID_COMPOSITE_HEAD, 0,
				       why);
		if (d->member_count == UINT32_MAX)
			return fail_at(r, TD_HRRY_E_OPEN_COMPOSITE, 0,
				       "open composite (member_count "
				       "0xFFFFFFFF) is not accepted");
	}
	if (d->rank == 0 && d->layout_tag != TD_HRRY_LAYOUT_ROW_MAJOR)
		return fail_at(r, TD_HRRY_E_INVALID_LAYOUT, 16,
			       "a rank-0 scalar must be row-major");
	switch (d->layout_tag) {
	case TD_HRRY_LAYOUT_COO:
	case TD_HRRY_LAYOUT_CSR:
	case TD_HRRY_LAYOUT_CSC:
	case TD_HRRY_LAYOUT_CSF:
	case TD_HRRY_LAYOUT_BLOCK_PAGED:
		if (d->byte_offset != 0)
			return fail_at(r, TD_HRRY_E_INVALID_LAYOUT, 0,
				       "sparse and indirect layouts need "
				       "byte_offset 0");
		break;
	default:
		break;
	}
	if (d->buffer_count > 0 && d->byte_offset > d->buffers[0].byte_size)
		return fail_at(r, TD_HRRY_E_INVALID_LAYOUT, 0,
			       "byte_offset beyond buffer 0");
	return 0;
}

int td_hrry_desc_decode(const void *buf, size_t len, struct td_hrry_desc *d,
			struct td_hrry_err *err)
{
	const uint8_t *p = buf;
	memset(d, 0, sizeof(*d));
	if (len < 10)
		return td__hrry_fail(err, TD_HRRY_E_DESCRIPTOR_TRUNCATED, len,
				     "fewer than 10 descriptor bytes");
	if (memcmp(p, "HRRY", 4))
		return td__hrry_fail(err, TD_HRRY_E_INVALID_MAGIC, 0,
				     "descriptor magic is not HRRY");
	d->version_major = p[4];
	d->version_minor = p[5];
	if (d->version_major != 1)
		return td__hrry_fail(err,
				     TD_HRRY_E_UNSUPPORTED_DESCRIPTOR_VERSION,
				     4, "descriptor major version is not 1");
	d->descriptor_length = td__le32(p + 6);
	if (d->descriptor_length < TD_HRRY_DESC_HEADER_LEN)
		return td__hrry_fail(err, TD_HRRY_E_DESCRIPTOR_TOO_SHORT, 6,
				     "descriptor_length below 20");
	struct rd r = {.p = p,
		       .pos = 10,
		       .end = len < d->descriptor_length ? len :
							   d->descriptor_length,
		       .err = err};
	if (!rd32(&r, &d->flags))
		return r.rc;
	if (d->flags >> 5)
		return fail_at(&r, TD_HRRY_E_RESERVED_DESCRIPTOR_FLAG_BITS_SET,
			       10, "reserved descriptor flag bits set");
	if (!rd8(&r, &d->type_tag))
		return r.rc;
	int k = check_type_tag(d->type_tag);
	if (k)
		return fail_at(&r, k, 14,
			       k == TD_HRRY_E_INVALID_TYPE_TAG ?
				       "type tag 0x00/0xFF is invalid" :
				       "reserved or unknown type tag");
	if (!rd8(&r, &d->layout_tag) || !rd32(&r, &d->rank))
		return r.rc;
	if (d->rank > TD_HRRY_MAX_RANK)
		return fail_at(&r, TD_HRRY_E_RANK_EXCEEDS_MAXIMUM, 16,
			       "rank above 64");
	for (uint32_t i = 0; i < d->rank; i++)
		if (!rd64(&r, &d->shape[i]))
			return r.rc;
	if (!rd64(&r, &d->byte_offset) || !layout_payload(&r, d))
		return r.rc;
	if (!!(d->flags & TD_HRRY_DESC_HAS_EXTENSION_TYPE) !=
	    is_private(d->type_tag))
		return fail_at(&r, TD_HRRY_E_EXTENSION_TYPE_FLAG_MISMATCH, 10,
			       "HAS_EXTENSION_TYPE must be set iff the type "
			       "tag is private (0xF0-0xFE)");
	if (!buffer_table(&r, d))
		return r.rc;
	if ((d->flags & TD_HRRY_DESC_HAS_QUANTIZATION) && !quantization(&r, d))
		return r.rc;
	if ((d->flags & TD_HRRY_DESC_HAS_SHARD) && !shard(&r, d))
		return r.rc;
	if ((d->flags & TD_HRRY_DESC_HAS_STATISTICS) && !statistics(&r, d))
		return r.rc;
	if ((d->flags & TD_HRRY_DESC_HAS_EXTENSION_TYPE) && !ext_type(&r, d))
		return r.rc;
	if ((d->flags & TD_HRRY_DESC_HAS_COMPOSITE_MEMBER) &&
	    !member_section(&r, d))
		return r.rc;
	/* fields never run past r.end <= descriptor_length (take()) */
	if (d->descriptor_length > len)
		return fail_at(&r, TD_HRRY_E_DESCRIPTOR_TRUNCATED, len,
			       "descriptor_length beyond the bytes given");
	if (d->version_minor == 0 && r.pos != d->descriptor_length)
		return fail_at(&r, TD_HRRY_E_DESCRIPTOR_LENGTH_MISMATCH, 6,
			       "descriptor_length differs from the bytes its "
			       "fields take (version 1.0)");
	return cross_checks(&r, d);
}

int td_hrry_desc_supported(const struct td_hrry_desc *d,
			   struct td_hrry_err *err)
{
	if (d->layout_tag == TD_HRRY_LAYOUT_COMPOSITE)
		return 0;
	if (d->layout_tag != TD_HRRY_LAYOUT_ROW_MAJOR)
		return td__hrry_fail(err, TD_HRRY_E_UNSUPPORTED_LAYOUT, 15,
				     "tensord reads only row-major tensors");
	if (d->flags & TD_HRRY_DESC_HAS_QUANTIZATION)
		return td__hrry_fail(err, TD_HRRY_E_UNSUPPORTED_QUANTIZATION,
				     10, "quantized tensors are not supported");
	if (td_hrry_type_to_dtype(d->type_tag) < 0 ||
	    (d->flags & TD_HRRY_DESC_HAS_EXTENSION_TYPE))
		return td__hrry_fail(err, TD_HRRY_E_UNSUPPORTED_TYPE, 14,
				     "element type has no tensord dtype");
	for (uint32_t i = 0; i < d->rank; i++)
		if (d->shape[i] == TD_HRRY_DYNAMIC_DIM)
			return td__hrry_fail(err, TD_HRRY_E_UNSUPPORTED_SHAPE,
					     20 + 8ull * i,
					     "dynamic dimension");
	return 0;
}

int td_hrry_dense_size(const struct td_hrry_desc *d, uint64_t *size)
{
	uint64_t n = td_hrry_type_size(d->type_tag);
	if (!n)
		return -EINVAL;
	for (uint32_t i = 0; i < d->rank; i++)
		if (td__mul_ovf(n, d->shape[i], &n))
			return -EOVERFLOW;
	*size = n;
	return 0;
}

int td_hrry_desc_init_dense(struct td_hrry_desc *d, uint8_t type_tag,
			    uint32_t rank, const uint64_t *shape)
{
	uint64_t size;
	memset(d, 0, sizeof(*d));
	if (rank > TD_HRRY_MAX_RANK || !td_hrry_type_size(type_tag) ||
	    (rank && !shape))
		return -EINVAL;
	d->version_major = 1;
	d->type_tag = type_tag;
	d->layout_tag = TD_HRRY_LAYOUT_ROW_MAJOR;
	d->rank = rank;
	for (uint32_t i = 0; i < rank; i++)
		d->shape[i] = shape[i];
	int rc = td_hrry_dense_size(d, &size);
	if (rc)
		return rc;
	d->buffer_count = 1;
	d->buffers[0].byte_size = size;
	d->buffers[0].alignment = 64;
	return 0;
}

/* ---- descriptor encode ---- */

int td_hrry_desc_encoded_len(const struct td_hrry_desc *d, uint32_t *len,
			     struct td_hrry_err *err)
{
	uint64_t n = 20;
	if (d->rank > TD_HRRY_MAX_RANK || d->buffer_count > TD_HRRY_MAX_BUFFERS)
		return td__hrry_fail(err, TD_HRRY_E_INVALID_ARGUMENT, 0,
				     "rank above 64 or more than 255 buffers");
	n += 8ull * d->rank + 8;
	if (d->layout_tag == TD_HRRY_LAYOUT_COMPOSITE)
		n += 8;
	else
		n += d->layout_payload_len;
	n += 1 + 16ull * d->buffer_count;
	if (d->flags & TD_HRRY_DESC_HAS_QUANTIZATION)
		n += 4ull + d->quantization_len;
	if (d->flags & TD_HRRY_DESC_HAS_SHARD)
		n += 16ull * d->rank;
	if (d->flags & TD_HRRY_DESC_HAS_STATISTICS)
		n += 72;
	if (d->flags & TD_HRRY_DESC_HAS_EXTENSION_TYPE)
		n += 20;
	if (d->flags & TD_HRRY_DESC_HAS_COMPOSITE_MEMBER)
		n += 16;
	if (n > UINT32_MAX)
		return td__hrry_fail(err, TD_HRRY_E_INVALID_ARGUMENT, 0,
				     "descriptor longer than 4 GiB");
	*len = (uint32_t)n;
	return 0;
}

static void put_f64(uint8_t *p, double f)
{
	uint64_t u;
	memcpy(&u, &f, sizeof(u));
	td__put_le64(p, u);
}

int td_hrry_desc_encode(const struct td_hrry_desc *d, uint8_t *buf,
			size_t cap, struct td_hrry_err *err)
{
	uint32_t len;
	int rc = td_hrry_desc_encoded_len(d, &len, err);
	if (rc)
		return rc;
	if (len > cap || len > INT32_MAX)
		return td__hrry_fail(err, TD_HRRY_E_INVALID_ARGUMENT, 0,
				     "descriptor does not fit the buffer");
	uint8_t *p = buf;
	memcpy(p, "HRRY", 4);
	p[4] = 1;
	p[5] = 0;
	td__put_le32(p + 6, len);
	td__put_le32(p + 10, d->flags);
	p[14] = d->type_tag;
	p[15] = d->layout_tag;
	td__put_le32(p + 16, d->rank);
	p += 20;
	for (uint32_t i = 0; i < d->rank; i++, p += 8)
		td__put_le64(p, d->shape[i]);
	td__put_le64(p, d->byte_offset);
	p += 8;
	if (d->layout_tag == TD_HRRY_LAYOUT_COMPOSITE) {
		p[0] = d->rule;
		p[1] = d->combine_op;
		p[2] = p[3] = 0;
		td__put_le32(p + 4, d->member_count);
		p += 8;
	} else if (d->layout_payload_len) {
		memcpy(p, d->layout_payload, d->layout_payload_len);
		p += d->layout_payload_len;
	}
	*p++ = (uint8_t)d->buffer_count;
	for (uint32_t k = 0; k < d->buffer_count; k++, p += 16) {
		const struct td_hrry_buffer *b = &d->buffers[k];
		td__put_le64(p, b->byte_size);
		td__put_le32(p + 8, b->alignment);
		p[12] = b->device_tag;
		p[13] = b->sync_mode;
		p[14] = b->memory_class;
		p[15] = 0;
	}
	if (d->flags & TD_HRRY_DESC_HAS_QUANTIZATION) {
		td__put_le32(p, d->quantization_len);
		if (d->quantization_len)
			memcpy(p + 4, d->quantization, d->quantization_len);
		p += 4 + d->quantization_len;
	}
	if (d->flags & TD_HRRY_DESC_HAS_SHARD) {
		for (uint32_t i = 0; i < d->rank; i++, p += 8)
			td__put_le64(p, d->parent_shape[i]);
		for (uint32_t i = 0; i < d->rank; i++, p += 8)
			td__put_le64(p, d->shard_offset[i]);
	}
	if (d->flags & TD_HRRY_DESC_HAS_STATISTICS) {
		const struct td_hrry_stats *s = &d->stats;
		memset(p, 0, 72);
		td__put_le32(p, s->computed_mask);
		td__put_le64(p + 8, s->nnz);
		put_f64(p + 16, s->sparsity);
		put_f64(p + 24, s->min);
		put_f64(p + 32, s->max);
		put_f64(p + 40, s->absmax);
		put_f64(p + 48, s->mean);
		put_f64(p + 56, s->stddev);
		p[64] = s->nm_n;
		p[65] = s->nm_m;
		p[66] = s->has_nan;
		p[67] = s->has_inf;
		p += 72;
	}
	if (d->flags & TD_HRRY_DESC_HAS_EXTENSION_TYPE) {
		const struct td_hrry_ext_type *e = &d->ext;
		memset(p, 0, 20);
		td__put_le32(p, e->bit_width);
		p[4] = e->packing;
		p[5] = e->is_float;
		p[6] = e->is_signed;
		p[7] = e->sign_bits;
		p[8] = e->exponent_bits;
		p[9] = e->mantissa_bits;
		td__put_le32(p + 12, e->exponent_bias);
		p[16] = e->has_nan;
		p[17] = e->has_inf;
		p += 20;
	}
	if (d->flags & TD_HRRY_DESC_HAS_COMPOSITE_MEMBER) {
		memset(p, 0, 16);
		p[0] = d->member_role;
		p += 16;
	}
	return (int)len;
}
