/* SPDX-License-Identifier: MIT */
/*
 * Hurray HRRYFILE container (container 1.0, tensor descriptor 1.0): reader
 * and forward-only writer over a caller-supplied transport. Part of
 * libtensord; needs no daemon. Normative format: specs/hurray.md; the API is
 * the function set of its §17.3 (hurray_ffi::file 0.2.0) with tensord names.
 *
 * Conventions (all functions):
 *  - Return >= 0 on success, a negative errno on failure. Constructors
 *    return the object through `**out`.
 *  - An optional last `struct td_hrry_err *err` receives, on failure, the
 *    error kind of specs/hurray.md §13 (td_hrry_error_name() gives the
 *    upstream name, e.g. "IndexCrc32cMismatch"), the file offset at fault
 *    and a static reason. The returned -errno is td_hrry_error_errno(kind),
 *    except for TD_HRRY_E_IO, which passes the transport's -errno through.
 *  - Names and KV keys are (pointer, length) UTF-8, not NUL-terminated.
 *  - Borrowed outputs (names, KV keys and values, descriptors' opaque byte
 *    ranges, memory-span views) stay valid until the reader is freed; the
 *    caller never frees them. Descriptors themselves are returned in the
 *    caller's memory (struct td_hrry_desc is about 6 KiB). Data buffers of td_hrry_file_reader_read_tensor() are released
 *    with td_hrry_tensor_fini().
 *  - `_free(&p)` accepts NULL, calls the transport's release exactly once,
 *    and sets p to NULL, so it is idempotent. After any writer error the writer is poisoned: later calls
 *    fail with TD_HRRY_E_WRITER_POISONED; `_free` still works.
 *  - A reader or writer is not thread-safe; distinct handles are
 *    independent.
 */
#ifndef TENSORD_HRRY_H
#define TENSORD_HRRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TD_HRRY_API __attribute__((visibility("default")))
#else
#define TD_HRRY_API
#endif

/* ---- format constants ---- */

#define TD_HRRY_HEADER_LEN 64
#define TD_HRRY_TRAILER_LEN 40
#define TD_HRRY_MIN_FILE_LEN 104          /* header + trailer */
#define TD_HRRY_DESC_HEADER_LEN 20
#define TD_HRRY_MAX_RANK 64
#define TD_HRRY_MAX_BUFFERS 255           /* buffer_count is a u8 */
#define TD_HRRY_MAX_NESTING 8             /* composite depth */
#define TD_HRRY_MAX_NAME_LEN 65535        /* name_len is a u16 */
#define TD_HRRY_DEFAULT_ALIGNMENT 4096
#define TD_HRRY_MIN_ALIGNMENT 4096
#define TD_HRRY_MAX_ALIGNMENT (2u << 20)
#define TD_HRRY_DYNAMIC_DIM UINT64_MAX   /* shape sentinel "dynamic" */
/*
 * tensord's caps on what a file may declare, checked before anything is
 * read or allocated for it (TD_HRRY_E_TOO_LARGE): the index and KV are
 * read whole (the CRC-32C covers the index whole). The index cap holds
 * 2^20 entries (the kernel's default nr_open: each tensor the daemon holds
 * keeps a plane fd) of the longest name tensord accepts (255 bytes, 289
 * per entry: 303 MiB); the KV cap holds 65536 tensors' metadata at
 * tensord's 16 KiB maximum. A real descriptor is a few hundred bytes.
 * The writer refuses to emit a file over them.
 */
#define TD_HRRY_MAX_INDEX_LEN (512ull << 20)
#define TD_HRRY_MAX_KV_LEN (1ull << 30)
#define TD_HRRY_MAX_DESC_LEN (16u << 20)
#define TD_HRRY_MAX_KV_ITEMS (1u << 20) /* decoded items of one array */

/* file_flags (header bytes 12-15) */
#define TD_HRRY_FILE_HAS_KV_METADATA 0x1u
#define TD_HRRY_FILE_SORTED_INDEX 0x2u
#define TD_HRRY_FILE_HAS_INDEX_CRC32C 0x4u

/* descriptor flags (descriptor bytes 10-13), specs/hurray.md §6.1 */
#define TD_HRRY_DESC_HAS_QUANTIZATION 0x01u
#define TD_HRRY_DESC_HAS_SHARD 0x02u
#define TD_HRRY_DESC_HAS_EXTENSION_TYPE 0x04u
#define TD_HRRY_DESC_HAS_STATISTICS 0x08u
#define TD_HRRY_DESC_HAS_COMPOSITE_MEMBER 0x10u

/* Element type tags (§5). Tags 0xF0-0xFE are private extension types. */
enum td_hrry_type {
	TD_HRRY_TYPE_FLOAT16 = 0x01,
	TD_HRRY_TYPE_BFLOAT16 = 0x02,
	TD_HRRY_TYPE_FLOAT32 = 0x03,
	TD_HRRY_TYPE_FLOAT64 = 0x04,
	TD_HRRY_TYPE_INT8 = 0x10,
	TD_HRRY_TYPE_UINT8 = 0x11,
	TD_HRRY_TYPE_INT16 = 0x12,
	TD_HRRY_TYPE_UINT16 = 0x13,
	TD_HRRY_TYPE_INT32 = 0x14,
	TD_HRRY_TYPE_UINT32 = 0x15,
	TD_HRRY_TYPE_INT64 = 0x16,
	TD_HRRY_TYPE_UINT64 = 0x17,
	TD_HRRY_TYPE_BOOL = 0x20,
	TD_HRRY_TYPE_FLOAT8_E4M3 = 0x40,
	TD_HRRY_TYPE_FLOAT8_E5M2 = 0x41,
	TD_HRRY_TYPE_FLOAT8_E8M0 = 0x42,
	TD_HRRY_TYPE_FLOAT4_E2M1 = 0x43,
	TD_HRRY_TYPE_FLOAT6_E2M3 = 0x44,
	TD_HRRY_TYPE_FLOAT6_E3M2 = 0x45,
	TD_HRRY_TYPE_FLOAT128 = 0x46,
	TD_HRRY_TYPE_INT4 = 0x48,
	TD_HRRY_TYPE_UINT4 = 0x49,
	TD_HRRY_TYPE_INT2 = 0x4A,
	TD_HRRY_TYPE_UINT2 = 0x4B,
	TD_HRRY_TYPE_COMPLEX64 = 0x50,
	TD_HRRY_TYPE_COMPLEX128 = 0x51,
};

/* Layout tags (§6.2). Tags 0xF0-0xFE are private layouts. */
enum td_hrry_layout {
	TD_HRRY_LAYOUT_ROW_MAJOR = 0x01,
	TD_HRRY_LAYOUT_COLUMN_MAJOR = 0x02,
	TD_HRRY_LAYOUT_STRIDED = 0x03,
	TD_HRRY_LAYOUT_TILED = 0x04,
	TD_HRRY_LAYOUT_MORTON = 0x05,
	TD_HRRY_LAYOUT_COO = 0x06,
	TD_HRRY_LAYOUT_CSR = 0x07,
	TD_HRRY_LAYOUT_CSC = 0x08,
	TD_HRRY_LAYOUT_CSF = 0x09,
	TD_HRRY_LAYOUT_BLOCK_PAGED = 0x0A,
	TD_HRRY_LAYOUT_COMPOSITE = 0x0B,
	TD_HRRY_LAYOUT_HILBERT = 0x40,
};

/* Composite rules and overlay combine ops (§6.2, layout 0x0B). */
enum td_hrry_rule {
	TD_HRRY_RULE_PARTITION = 1,
	TD_HRRY_RULE_OVERLAY = 2,
	TD_HRRY_RULE_GROUP = 3,
};
enum td_hrry_combine {
	TD_HRRY_COMBINE_NONE = 0,
	TD_HRRY_COMBINE_REPLACE = 1,
	TD_HRRY_COMBINE_ADD = 2,
};
/* Composite-member roles (§6.4.5). */
enum td_hrry_role {
	TD_HRRY_ROLE_CORRECTION = 0,
	TD_HRRY_ROLE_BASE = 1,
};

/* ---- errors: the kinds of specs/hurray.md §13 ---- */

enum td_hrry_error {
	TD_HRRY_OK = 0,
	/* open: header, trailer, index, KV */
	TD_HRRY_E_INVALID_HEADER,               /* InvalidHeader */
	TD_HRRY_E_INVALID_FILE_MAGIC,           /* InvalidFileMagic */
	TD_HRRY_E_UNSUPPORTED_CONTAINER_VERSION,
	TD_HRRY_E_RESERVED_FILE_FLAG_BITS,
	TD_HRRY_E_RESERVED_BYTES_NON_ZERO,
	TD_HRRY_E_INVALID_TRAILER_MAGIC,
	TD_HRRY_E_INDEX_OVERRUNS_TRAILER,
	TD_HRRY_E_INDEX_CRC32C_MISMATCH,
	TD_HRRY_E_TENSOR_NAME_EMPTY,
	TD_HRRY_E_DUPLICATE_TENSOR_NAME,
	TD_HRRY_E_KV_KEY_EMPTY,
	TD_HRRY_E_DUPLICATE_KV_KEY,
	/* per tensor */
	TD_HRRY_E_TENSOR_NOT_FOUND,
	TD_HRRY_E_DESCRIPTOR_LENGTH_MISMATCH,
	TD_HRRY_E_INVALID_MAGIC,                /* descriptor magic */
	TD_HRRY_E_UNSUPPORTED_DESCRIPTOR_VERSION,
	TD_HRRY_E_DESCRIPTOR_TOO_SHORT,
	TD_HRRY_E_DESCRIPTOR_TRUNCATED,
	TD_HRRY_E_RESERVED_DESCRIPTOR_FLAG_BITS_SET,
	TD_HRRY_E_INVALID_TYPE_TAG,             /* 0x00, 0xFF */
	TD_HRRY_E_RESERVED_TYPE_TAG,            /* 0x47, 0x80-0xEF */
	TD_HRRY_E_UNKNOWN_TYPE_TAG,             /* unassigned */
	TD_HRRY_E_INVALID_LAYOUT_TAG,           /* 0x00, 0xFF */
	TD_HRRY_E_RESERVED_LAYOUT_TAG,          /* reserved ranges */
	TD_HRRY_E_UNKNOWN_LAYOUT_TAG,           /* unassigned */
	TD_HRRY_E_RANK_EXCEEDS_MAXIMUM,
	TD_HRRY_E_EMPTY_BUFFER_TABLE,
	TD_HRRY_E_INVALID_DEVICE_TAG,
	TD_HRRY_E_INVALID_SYNC_MODE,
	TD_HRRY_E_INVALID_MEMORY_CLASS,
	TD_HRRY_E_ALIGNMENT_NOT_POWER_OF_TWO,
	TD_HRRY_E_ALIGNMENT_BELOW_MINIMUM,
	TD_HRRY_E_CPU_BUFFER_NOT_PRODUCER_SYNCED,
	TD_HRRY_E_EXTENSION_TYPE_FLAG_MISMATCH,
	TD_HRRY_E_EXTENSION_TYPE_PACKING_INVALID,
	TD_HRRY_E_INVALID_QUANTIZATION,
	TD_HRRY_E_SHARD_OUT_OF_BOUNDS,
	TD_HRRY_E_STATISTICS_RESERVED_MASK_BITS_SET,
	TD_HRRY_E_INVALID_COMPOSITE_HEAD,
	TD_HRRY_E_OPEN_COMPOSITE,               /* member_count 0xFFFFFFFF */
	TD_HRRY_E_INVALID_LAYOUT,
	TD_HRRY_E_UNSUPPORTED_LAYOUT,
	TD_HRRY_E_UNSUPPORTED_QUANTIZATION,
	TD_HRRY_E_UNSUPPORTED_TYPE,
	TD_HRRY_E_UNSUPPORTED_SHAPE,
	TD_HRRY_E_UNEXPECTED_EOF,
	TD_HRRY_E_IO,
	/* composites */
	TD_HRRY_E_NOT_A_COMPOSITE,
	TD_HRRY_E_TORN_COMPOSITE,
	TD_HRRY_E_COMPOSITE_NESTING_TOO_DEEP,
	TD_HRRY_E_COMPOSITE_MEMBER_COUNT_MISMATCH,
	TD_HRRY_E_COMPOSITE_MEMBER_MISSING_SHARD,
	TD_HRRY_E_COMPOSITE_MEMBER_PARENT_SHAPE_MISMATCH,
	TD_HRRY_E_COMPOSITE_MEMBER_TYPE_MISMATCH,
	TD_HRRY_E_COMPOSITE_MEMBER_FLAG_MISMATCH,
	TD_HRRY_E_COMPOSITE_OVERLAY_BASE_NOT_FIRST,
	TD_HRRY_E_COMPOSITE_OVERLAY_BASE_NOT_SPANNING,
	TD_HRRY_E_COMPOSITE_OVERLAY_EMPTY,
	TD_HRRY_E_COMPOSITE_PARTITION_OVERLAP,
	TD_HRRY_E_COMPOSITE_PARTITION_GAP,
	/* caller side (not file contents) */
	TD_HRRY_E_INVALID_ARGUMENT,  /* -EINVAL: bad input to a writer/call */
	TD_HRRY_E_WRITER_POISONED,   /* -ECANCELED: an earlier call failed */
	TD_HRRY_E_NO_MEMORY,         /* -ENOMEM */
	/* -EFBIG: a declared length over a TD_HRRY_MAX_* cap above */
	TD_HRRY_E_TOO_LARGE,
	TD_HRRY_E_COUNT_
};

/* Failure detail. Holds no resources. */
struct td_hrry_err {
	enum td_hrry_error kind;
	int code;           /* the -errno also returned */
	uint64_t offset;    /* absolute file offset at fault (0 when none) */
	const char *reason; /* static, human readable, never NULL when set */
};

/* Upstream name of a kind ("InvalidHeader"); "Unknown" when out of range. */
TD_HRRY_API const char *td_hrry_error_name(enum td_hrry_error kind);
/* The -errno a kind maps to (TD_HRRY_OK: 0; TD_HRRY_E_IO: -EIO). */
TD_HRRY_API int td_hrry_error_errno(enum td_hrry_error kind);

/* ---- descriptor ---- */

/* One buffer handle (§6.3), host values. */
struct td_hrry_buffer {
	uint64_t byte_size;
	uint32_t alignment;
	uint8_t device_tag;
	uint8_t sync_mode;
	uint8_t memory_class;
};

/* Statistics section (§6.4.3): parsed, validated, advisory. */
struct td_hrry_stats {
	uint32_t computed_mask;
	uint64_t nnz;
	double sparsity, min, max, absmax, mean, stddev;
	uint8_t nm_n, nm_m, has_nan, has_inf;
};

/* Extension-type section (§6.4.4). */
struct td_hrry_ext_type {
	uint32_t bit_width;
	uint8_t packing, is_float, is_signed, sign_bits, exponent_bits,
		mantissa_bits;
	uint32_t exponent_bias;
	uint8_t has_nan, has_inf;
};

/*
 * A decoded tensor descriptor (§6), self-contained except for the two
 * opaque byte ranges, which borrow the decoded bytes (for a reader: valid
 * until the reader is freed). For the writer, fill version/flags/type/
 * layout/rank/shape/byte_offset, buffer_count and buffers[].byte_size, the
 * shard arrays when HAS_SHARD, member_role when HAS_COMPOSITE_MEMBER and
 * the composite fields for a head; descriptor_length is computed.
 */
struct td_hrry_desc {
	uint8_t version_major;
	uint8_t version_minor;
	uint8_t type_tag;   /* enum td_hrry_type or private 0xF0-0xFE */
	uint8_t layout_tag; /* enum td_hrry_layout or private 0xF0-0xFE */
	uint32_t descriptor_length;
	uint32_t flags; /* TD_HRRY_DESC_* */
	uint32_t rank;
	uint64_t shape[TD_HRRY_MAX_RANK];
	uint64_t byte_offset;
	/* layout payload (§6.2) as stored, after byte_offset */
	const uint8_t *layout_payload;
	uint32_t layout_payload_len;
	/* composite head (layout 0x0B) */
	uint8_t rule;        /* enum td_hrry_rule */
	uint8_t combine_op;  /* enum td_hrry_combine */
	uint32_t member_count;
	/* buffer table (§6.3) */
	uint32_t buffer_count;
	struct td_hrry_buffer buffers[TD_HRRY_MAX_BUFFERS];
	/* quantization section, opaque (after its u32 length) */
	const uint8_t *quantization;
	uint32_t quantization_len;
	uint8_t quant_scheme; /* first byte of the section */
	/* shard (HAS_SHARD) */
	uint64_t parent_shape[TD_HRRY_MAX_RANK];
	uint64_t shard_offset[TD_HRRY_MAX_RANK];
	struct td_hrry_stats stats;      /* HAS_STATISTICS */
	struct td_hrry_ext_type ext;     /* HAS_EXTENSION_TYPE */
	uint8_t member_role;             /* HAS_COMPOSITE_MEMBER */
};

/* Name of a type tag ("float32"), NULL when not a listed tag. */
TD_HRRY_API const char *td_hrry_type_name(uint8_t type_tag);
/* Name of a layout tag ("row-major"), NULL when not a listed tag. */
TD_HRRY_API const char *td_hrry_layout_name(uint8_t layout_tag);
/*
 * Decode one descriptor from buf[0, len) with the checks and error kinds
 * of §6.7 (specs/hurray.md §13 step 8). The two opaque ranges of *out
 * borrow buf. 0 or -errno.
 */
TD_HRRY_API int td_hrry_desc_decode(const void *buf, size_t len,
				    struct td_hrry_desc *out,
				    struct td_hrry_err *err);
/*
 * tensord's support check (§14, in the order of its table): 0 when the
 * tensor can be read, else the -errno of TD_HRRY_E_UNSUPPORTED_LAYOUT,
 * _QUANTIZATION, _TYPE or _SHAPE. A composite head is supported.
 */
TD_HRRY_API int td_hrry_desc_supported(const struct td_hrry_desc *d,
				       struct td_hrry_err *err);

/* ---- KV ---- */

/* KV kinds: equal to the wire tags (§8). */
enum td_hrry_kv_kind {
	TD_HRRY_KV_STRING = 0x01,
	TD_HRRY_KV_INT64 = 0x02,
	TD_HRRY_KV_UINT64 = 0x03,
	TD_HRRY_KV_FLOAT64 = 0x04,
	TD_HRRY_KV_BOOL = 0x05,
	TD_HRRY_KV_BYTES = 0x06,
	TD_HRRY_KV_ARRAY = 0x07,
};

/*
 * A KV value: `kind` selects the field. STRING and BYTES use data/data_len
 * (strings are UTF-8, not NUL-terminated); ARRAY uses items/item_count, all
 * of kind item_kind (a scalar, string or bytes kind, never ARRAY).
 */
struct td_hrry_kv_value {
	enum td_hrry_kv_kind kind;
	int64_t i64_value;
	uint64_t u64_value;
	double f64_value;
	bool bool_value;
	const uint8_t *data;
	size_t data_len;
	enum td_hrry_kv_kind item_kind;
	const struct td_hrry_kv_value *items;
	size_t item_count;
};

struct td_hrry_kv_entry {
	const char *key; /* UTF-8, not NUL-terminated */
	size_t key_len;
	struct td_hrry_kv_value value;
};

/* ---- transport (§17.2) ---- */

/*
 * What moves bytes. Callbacks return 0 or a negative errno (passed through
 * unchanged, reported as TD_HRRY_E_IO). read_at fills up to len bytes from
 * absolute offset; short reads are retried, *got == 0 before the request is
 * complete is TD_HRRY_E_UNEXPECTED_EOF. write accepts up to len bytes;
 * partial writes are continued, *put == 0 is TD_HRRY_E_IO. view_at
 * (optional, NULL when absent) returns a pointer to [offset, offset+len)
 * that stays valid until release: with it, reads are zero copy. release
 * (optional) is called exactly once, by the reader's or writer's _free.
 */
struct td_hrry_transport {
	void *ctx;
	uint64_t size; /* reader: total file size */
	int (*read_at)(void *ctx, uint64_t offset, void *buf, size_t len,
		       size_t *got);
	int (*write)(void *ctx, const void *buf, size_t len, size_t *put);
	void (*release)(void *ctx);
	int (*view_at)(void *ctx, uint64_t offset, size_t len,
		       const void **view);
};

/*
 * Stock transport over a file descriptor: pread() for readers (size from
 * fstat()), write() for writers (at the fd's current position, which
 * should be the start of an empty file). The fd is borrowed: it must stay
 * open until the reader/writer is freed, and is never closed. 0 or -errno.
 */
TD_HRRY_API int td_hrry_transport_fd(int fd, struct td_hrry_transport *out);
/*
 * Stock transport over a memory span [base, base+len) (e.g. an mmap'd
 * file) for readers: read_tensor() returns views into it, zero copy. The
 * span is borrowed and must outlive the reader. 0 or -errno.
 */
TD_HRRY_API int td_hrry_transport_mem(const void *base, uint64_t len,
				      struct td_hrry_transport *out);
/*
 * Map the whole file behind fd read-only (fd borrowed, may be closed
 * afterwards) and return a memory-span transport whose release unmaps it.
 * 0 or -errno (-EINVAL for an empty file).
 */
TD_HRRY_API int td_hrry_transport_map_fd(int fd,
					 struct td_hrry_transport *out);

/* ---- reader ---- */

struct td_hrry_file_reader;

/* One index entry (§9) as located by the reader. */
struct td_hrry_entry {
	const char *name; /* borrowed, not NUL-terminated */
	size_t name_len;
	uint64_t descriptor_offset;
	uint32_t descriptor_length;
	uint64_t data_offset;
	uint64_t data_length;
};

/*
 * A tensor read by td_hrry_file_reader_read_tensor(): its entry, its
 * descriptor and its data: the dense elements (Π shape × element size
 * bytes from byte_offset in buffer 0; a composite head has none: data
 * NULL, data_len 0). data is a view into the transport's
 * span (zero copy) or a copy owned by the struct; td_hrry_tensor_fini()
 * releases either.
 */
struct td_hrry_tensor {
	struct td_hrry_entry entry;
	struct td_hrry_desc desc;
	const void *data;
	uint64_t data_len;
	void *owned_; /* private */
};

/* Release what read_tensor put into *t (accepts a zeroed struct). */
TD_HRRY_API void td_hrry_tensor_fini(struct td_hrry_tensor *t);

/* One node of a composite, in preorder (the head first). */
struct td_hrry_node {
	struct td_hrry_tensor tensor;
	uint32_t depth;  /* 0 for the head read */
	uint32_t parent; /* index of the head in nodes[], UINT32_MAX for root */
};

struct td_hrry_composite {
	struct td_hrry_node *nodes;
	size_t node_count;
};

/* Release what read_composite put into *c (accepts a zeroed struct). */
TD_HRRY_API void td_hrry_composite_fini(struct td_hrry_composite *c);

/*
 * Open a reader over *transport (copied; its ctx is owned by the reader
 * from now on, also on failure: release is called before an error return).
 * Reads and validates header, trailer, index and KV (§13 steps 1-5).
 * 0 and *out, or -errno.
 */
TD_HRRY_API int td_hrry_file_reader_new(const struct td_hrry_transport *transport,
					struct td_hrry_file_reader **out,
					struct td_hrry_err *err);
/* Number of index entries into *count. 0 or -EINVAL. */
TD_HRRY_API int td_hrry_file_reader_tensor_count(
	const struct td_hrry_file_reader *r, uint64_t *count);
/* Borrow the name of entry index (index order). 0 or -EINVAL. */
TD_HRRY_API int td_hrry_file_reader_tensor_name(
	const struct td_hrry_file_reader *r, uint64_t index, const char **name,
	size_t *name_len);
/* The whole index entry `index` (index order). 0 or -EINVAL. */
TD_HRRY_API int td_hrry_file_reader_entry(const struct td_hrry_file_reader *r,
					  uint64_t index,
					  struct td_hrry_entry *out);
/* Header fields. */
TD_HRRY_API uint32_t td_hrry_file_reader_alignment(
	const struct td_hrry_file_reader *r);
TD_HRRY_API uint32_t td_hrry_file_reader_flags(
	const struct td_hrry_file_reader *r);
/* Trailer fields: index offset, length and CRC-32C. */
TD_HRRY_API void td_hrry_file_reader_index(const struct td_hrry_file_reader *r,
					   uint64_t *offset, uint64_t *length,
					   uint32_t *crc32c);
/*
 * Decode the named tensor's descriptor without reading data (§13 steps
 * 6-9) into the caller's *out (its opaque byte ranges borrow the reader).
 * An unsupported tensor still decodes (0); td_hrry_desc_supported() says
 * whether it can be read. 0 or -errno.
 */
TD_HRRY_API int td_hrry_file_reader_read_descriptor(
	struct td_hrry_file_reader *r, const char *name, size_t name_len,
	struct td_hrry_desc *out, struct td_hrry_err *err);
/*
 * Descriptor and data of the named tensor (§13 steps 6-12): refuses an
 * unsupported tensor with its TD_HRRY_E_UNSUPPORTED_* kind. 0 and *out
 * (td_hrry_tensor_fini() it), or -errno with *out zeroed.
 */
TD_HRRY_API int td_hrry_file_reader_read_tensor(
	struct td_hrry_file_reader *r, const char *name, size_t name_len,
	struct td_hrry_tensor *out, struct td_hrry_err *err);
/*
 * Like read_tensor, but the data (exactly the tensor's dense size: Π
 * shape × element size) goes into the caller's dst[0, cap) (e.g. a
 * shared-memory plane): no allocation. -ENOBUFS (kind InvalidArgument)
 * when cap is too small. desc (optional, caller's memory) receives the
 * descriptor.
 */
TD_HRRY_API int td_hrry_file_reader_read_tensor_into(
	struct td_hrry_file_reader *r, const char *name, size_t name_len,
	void *dst, uint64_t cap, struct td_hrry_desc *desc,
	struct td_hrry_err *err);
/*
 * The composite headed by `name` (§7): head, then members in preorder,
 * recursively, each validated by the composite rules; every node's data
 * read like read_tensor (members must be supported). 0 and *out
 * (td_hrry_composite_fini() it), or -errno.
 */
TD_HRRY_API int td_hrry_file_reader_read_composite(
	struct td_hrry_file_reader *r, const char *name, size_t name_len,
	struct td_hrry_composite *out, struct td_hrry_err *err);
/* Number of KV entries into *count. 0 or -EINVAL. */
TD_HRRY_API int td_hrry_file_reader_kv_count(const struct td_hrry_file_reader *r,
					     uint64_t *count);
/*
 * Copy entry index (borrowed key and value) into *out. An ARRAY's items
 * are decoded on first use and kept with the reader: 0, -EINVAL, -ENOMEM,
 * or -EFBIG for an array of more than TD_HRRY_MAX_KV_ITEMS items (each
 * decoded item takes sizeof(struct td_hrry_kv_value), some 40 times a
 * one-byte bool's bytes in the file: a 1 GiB KV of them would want
 * 40 GiB).
 */
TD_HRRY_API int td_hrry_file_reader_kv_entry(const struct td_hrry_file_reader *r,
					     uint64_t index,
					     struct td_hrry_kv_entry *out);
/*
 * Free *r, release the transport and set *r to NULL (so a second call is a
 * no-op, like upstream destroy(T**)). Accepts NULL and a pointer to NULL.
 */
TD_HRRY_API void td_hrry_file_reader_free(struct td_hrry_file_reader **r);

/* ---- writer ---- */

struct td_hrry_file_writer;

/* Composite-head padding (§16.1). */
enum td_hrry_head_padding {
	/* spec: after a head's descriptor pad to 8; data_offset = that */
	TD_HRRY_HEAD_PAD_SPEC = 0,
	/* hurray-io 0.1.0: pad to A; data_offset = the A-aligned offset */
	TD_HRRY_HEAD_PAD_UPSTREAM = 1,
};

struct td_hrry_writer_options {
	uint32_t data_buffer_alignment; /* power of two in [4096, 2 MiB]; 0 = 4096 */
	bool sorted_index;              /* SORTED_INDEX: index sorted by name */
	uint32_t head_padding;          /* enum td_hrry_head_padding */
};

/*
 * Create a writer over *transport (copied; its ctx is owned by the writer
 * from now on, also on failure) with *opts (NULL = defaults), and write
 * the 64-byte header at once. 0 and *out, or -errno.
 */
TD_HRRY_API int td_hrry_file_writer_new(const struct td_hrry_transport *transport,
					const struct td_hrry_writer_options *opts,
					struct td_hrry_file_writer **out,
					struct td_hrry_err *err);
/*
 * One named tensor: descriptor, padding, buffers (§15 step 2). d must be a
 * supported tensor (§14: row-major, one buffer of exactly the dense size,
 * optional shard and statistics); buffers[k] holds d->buffers[k].byte_size
 * bytes. Names are unique, 1..65535 bytes of UTF-8. 0 or -errno.
 */
TD_HRRY_API int td_hrry_file_writer_write_tensor(
	struct td_hrry_file_writer *w, const char *name, size_t name_len,
	const struct td_hrry_desc *d, const void *const *buffers,
	struct td_hrry_err *err);
/*
 * A composite: nodes[0] is the head, then every member in preorder (a
 * member may itself be a head, depth <= 8). The whole tree is validated
 * (§7) before anything is written. Node data comes from
 * nodes[i].tensor.data (data_len bytes); names from tensor.entry.name.
 * 0 or -errno.
 */
TD_HRRY_API int td_hrry_file_writer_write_composite(
	struct td_hrry_file_writer *w, const struct td_hrry_node *nodes,
	size_t node_count, struct td_hrry_err *err);
/*
 * KV section (kv[0, kv_count), written in that order; keys unique, arrays
 * non-empty), index and trailer. After finish the writer only accepts
 * _free. 0 or -errno.
 */
TD_HRRY_API int td_hrry_file_writer_finish(struct td_hrry_file_writer *w,
					   const struct td_hrry_kv_entry *kv,
					   size_t kv_count,
					   struct td_hrry_err *err);
/* Free *w (unfinished: the file is left incomplete), release the
 * transport, set *w to NULL. Accepts NULL and a pointer to NULL. */
TD_HRRY_API void td_hrry_file_writer_free(struct td_hrry_file_writer **w);

/*
 * Convenience for dense tensors: fill *d for a row-major tensor of
 * type_tag and shape[0, rank) in one buffer (byte_size from the element
 * size; alignment 64). 0, -EINVAL (rank > 64, type without a whole-byte
 * element size) or -EOVERFLOW.
 */
TD_HRRY_API int td_hrry_desc_init_dense(struct td_hrry_desc *d,
					uint8_t type_tag, uint32_t rank,
					const uint64_t *shape);

#ifdef __cplusplus
}
#endif

#endif
