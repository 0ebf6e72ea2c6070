/* SPDX-License-Identifier: MIT */
/*
 * proto/blob against ../shared/specs/blob.md and the vectors copied into
 * tests/data/blob (names unchanged). Expected values below are transcribed
 * from the vectors' README, not computed by the code under test.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blob.h"
#include "bytes.h"
#include "testutil.h"

TestSuite(blob, .timeout = TU_TEST_TIMEOUT_S);

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define S(lit) ((struct td_str){(lit), sizeof(lit) - 1})

static const char *const valid_vectors[] = {
	"v1_inline_f32_2x3.bin",
	"v2_ref_nv12_64x48_shared_fd0.bin",
	"v3_inline_i8_3x8_quant_per_tensor.bin",
	"v4_inline_rgb8_2x2_symquant_oddpad.bin",
};

/* ---- the writer reproduces every positive vector from its inputs ---- */

static void assert_encodes_to(const struct td_blob_desc *d, const char *file)
{
	size_t len;
	uint8_t *want = tu_read_file(tu_data_path(file), &len);
	uint64_t n = 0;
	struct td_err e;

	cr_assert_eq(td_blob_encoded_len(d, &n, &e), 0, "%s", e.reason);
	cr_assert_eq(n, len, "%s: encoded_len %llu, file %zu", file,
		     (unsigned long long)n, len);
	uint8_t *got = malloc(len);
	cr_assert(got);
	cr_assert_eq(td_blob_encode(d, got, len - 1, NULL), -ENOBUFS);
	cr_assert_eq(td_blob_encode(d, got, len, &e), (int64_t)len);
	for (size_t i = 0; i < len; i++)
		cr_assert_eq(got[i], want[i], "%s: byte %zu is %02x, want %02x",
			     file, i, got[i], want[i]);
	free(got);
	free(want);
}

Test(blob, writer_reproduces_v1_inline_f32)
{
	static const uint64_t shape[] = {2, 3};
	static const int64_t strides[] = {12, 4};
	uint8_t data[24];
	for (int i = 0; i < 6; i++)
		td__put_lef32(data + 4 * i, (float)(i + 1));
	struct td_blob_plane p = {.handle = -1, .stride = 24, .size = 24,
				  .used = 24, .data_len = 24, .data = data};
	struct td_blob_desc d = {
		.storage_kind = TD_STORAGE_MEM, .fence_fd = -1,
		.dtype = TD_DTYPE_F32, .quant_axis = TD_QUANT_NONE,
		.ndim = 2, .shape = shape, .strides_len = 2,
		.strides = strides, .plane_count = 1, .planes = &p,
	};
	assert_encodes_to(&d, "blob/v1_inline_f32_2x3.bin");
}

Test(blob, writer_reproduces_v2_reference_nv12_shared_index)
{
	static const uint64_t shape[] = {48, 64};
	static const int64_t strides[] = {64, 1};
	struct td_blob_plane p[2] = {
		{.handle = 0, .offset = 0, .stride = 64, .size = 3072,
		 .used = 3072},
		{.handle = 0, .offset = 3072, .stride = 64, .size = 1536,
		 .used = 1536},
	};
	struct td_blob_desc d = {
		.storage_kind = TD_STORAGE_DMABUF, .pid = 4242, .fence_fd = -1,
		.dtype = TD_DTYPE_U8, .quant_axis = TD_QUANT_NONE,
		.ndim = 2, .shape = shape, .strides_len = 2,
		.strides = strides, .plane_count = 2, .planes = p,
		.strings = {S("NV12")},
	};
	assert_encodes_to(&d, "blob/v2_ref_nv12_64x48_shared_fd0.bin");
}

Test(blob, writer_reproduces_v3_per_tensor_quant)
{
	static const uint64_t shape[] = {3, 8};
	static const int64_t strides[] = {8, 1};
	static const float scales[] = {0.5f};
	static const int32_t zps[] = {-7};
	uint8_t data[24];
	for (int i = 0; i < 24; i++)
		data[i] = (uint8_t)i;
	struct td_blob_plane p = {.handle = -1, .stride = 24, .size = 24,
				  .used = 24, .data_len = 24, .data = data};
	struct td_blob_desc d = {
		.fence_fd = -1, .dtype = TD_DTYPE_I8,
		.quant_axis = TD_QUANT_PER_TENSOR, .ndim = 2, .shape = shape,
		.strides_len = 2, .strides = strides, .quant_scales_len = 1,
		.quant_scales = scales, .quant_zero_points_len = 1,
		.quant_zero_points = zps, .plane_count = 1, .planes = &p,
	};
	assert_encodes_to(&d, "blob/v3_inline_i8_3x8_quant_per_tensor.bin");
}

Test(blob, writer_reproduces_v4_blob_absolute_padding)
{
	static const uint64_t shape[] = {2, 2, 3};
	static const int64_t strides[] = {6, 3, 1};
	static const float scales[] = {0.25f};
	uint8_t data[12];
	for (int i = 0; i < 12; i++)
		data[i] = (uint8_t)i;
	struct td_blob_plane p = {.handle = -1, .stride = 6, .size = 12,
				  .used = 12, .data_len = 12, .data = data};
	struct td_blob_desc d = {
		.fence_fd = -1, .dtype = TD_DTYPE_U8,
		.quant_axis = TD_QUANT_PER_TENSOR, .ndim = 3, .shape = shape,
		.strides_len = 3, .strides = strides, .quant_scales_len = 1,
		.quant_scales = scales, .plane_count = 1, .planes = &p,
		.strings = {S("rgb8"), S("srgb"), S("srgb"), S("bt601"),
			    S("full")},
	};
	assert_encodes_to(&d, "blob/v4_inline_rgb8_2x2_symquant_oddpad.bin");
}

/* ---- every field of every positive vector, as the README lists it ---- */

static uint8_t *decode_file(const char *rel, struct td_blob_view *v)
{
	size_t len;
	uint8_t *buf = tu_read_file(tu_data_path(rel), &len);
	struct td_err e;
	int rc = td_blob_decode(buf, len, v, &e);
	cr_assert_eq(rc, 0, "%s: %s %s", rel, td_err_kind_name(e.kind),
		     e.reason);
	return buf;
}

static void assert_str(struct td_str s, const char *want)
{
	cr_assert_eq(s.len, strlen(want));
	cr_assert(memcmp(s.ptr, want, s.len) == 0, "got '%.*s' want '%s'",
		  (int)s.len, s.ptr, want);
}

Test(blob, v1_fields_match_readme)
{
	struct td_blob_view v;
	struct td_blob_plane p;
	uint8_t *buf = decode_file("blob/v1_inline_f32_2x3.bin", &v);

	cr_assert_eq(v.size, 208);
	cr_assert_eq(v.required_mask, 0);
	cr_assert_eq(v.planes_bytes, 80);
	cr_assert_eq(v.storage_kind, 0);
	cr_assert_eq(v.pid, 0);
	cr_assert_eq(v.fence_fd, -1);
	cr_assert_eq(v.dtype, 9);
	cr_assert_eq(v.quant_axis, -2);
	cr_assert_eq(v.ndim, 2);
	cr_assert_eq(v.plane_count, 1);
	cr_assert_eq(v.strings_bytes, 24);
	cr_assert_eq(v.strides_len, 2);
	cr_assert_eq(td_blob_shape(&v, 0), 2);
	cr_assert_eq(td_blob_shape(&v, 1), 3);
	cr_assert_eq(td_blob_stride(&v, 0), 12);
	cr_assert_eq(td_blob_stride(&v, 1), 4);
	for (unsigned i = 0; i < 5; i++)
		assert_str(v.strings[i], "");
	cr_assert_eq(v.r_planes, 128);
	cr_assert_eq(td_blob_plane_get(&v, 0, &p), 0);
	cr_assert_eq(p.handle, -1);
	cr_assert_eq(p.offset, 0);
	cr_assert_eq(p.stride, 24);
	cr_assert_eq(p.size, 24);
	cr_assert_eq(p.used, 24);
	cr_assert_eq(p.modifier, 0);
	cr_assert_eq(p.data_len, 24);
	/* the view borrows: data points into the file buffer, no copy */
	cr_assert_eq(p.data, buf + 0xb8);
	for (int i = 0; i < 6; i++)
		cr_assert_float_eq(td__lef32(p.data + 4 * i), (float)(i + 1),
				   0);
	cr_assert_eq(td_blob_plane_get(&v, 1, &p), -ENOENT);
	cr_assert_eq(td_blob_check(&v, 0, NULL), 0);
	free(buf);
}

Test(blob, v2_fields_match_readme)
{
	struct td_blob_view v;
	struct td_blob_plane p;
	uint8_t *buf = decode_file("blob/v2_ref_nv12_64x48_shared_fd0.bin", &v);

	cr_assert_eq(v.size, 240);
	cr_assert_eq(v.planes_bytes, 112);
	cr_assert_eq(v.storage_kind, 2);
	cr_assert_eq(v.pid, 4242);
	cr_assert_eq(v.dtype, 0);
	cr_assert_eq(v.plane_count, 2);
	cr_assert_eq(td_blob_shape(&v, 0), 48);
	cr_assert_eq(td_blob_shape(&v, 1), 64);
	cr_assert_eq(td_blob_stride(&v, 0), 64);
	cr_assert_eq(td_blob_stride(&v, 1), 1);
	assert_str(v.strings[TD_BLOB_FORMAT], "NV12");
	cr_assert_eq(td_blob_plane_get(&v, 0, &p), 0);
	cr_assert_eq(p.handle, 0);
	cr_assert_eq(p.offset, 0);
	cr_assert_eq(p.size, 3072);
	cr_assert_eq(p.used, 3072);
	cr_assert_eq(td_blob_plane_get(&v, 1, &p), 0);
	cr_assert_eq(p.handle, 0);
	cr_assert_eq(p.offset, 3072);
	cr_assert_eq(p.stride, 64);
	cr_assert_eq(p.size, 1536);
	cr_assert_eq(p.data_len, 0);
	free(buf);
}

Test(blob, v3_quantization_preserved)
{
	struct td_blob_view v;
	struct td_blob_plane p;
	uint8_t *buf =
		decode_file("blob/v3_inline_i8_3x8_quant_per_tensor.bin", &v);

	cr_assert_eq(v.size, 216);
	cr_assert_eq(v.dtype, 1);
	cr_assert_eq(v.quant_axis, -1);
	cr_assert_eq(v.quant_scales_len, 1);
	cr_assert_eq(v.quant_zero_points_len, 1);
	cr_assert_float_eq(td_blob_quant_scale(&v, 0), 0.5f, 0);
	cr_assert_eq(td_blob_quant_zero_point(&v, 0), -7);
	cr_assert_eq(v.r_strings, 0x70);
	cr_assert_eq(v.r_planes, 136);
	cr_assert_eq(td_blob_plane_get(&v, 0, &p), 0);
	for (int i = 0; i < 24; i++)
		cr_assert_eq(p.data[i], i);
	cr_assert_eq(td_blob_check(&v, TD_BLOB_NO_FD_TABLE, NULL), 0);
	free(buf);
}

Test(blob, v4_colorimetry_and_padding)
{
	struct td_blob_view v;
	struct td_blob_plane p;
	uint8_t *buf =
		decode_file("blob/v4_inline_rgb8_2x2_symquant_oddpad.bin", &v);

	cr_assert_eq(v.size, 240);
	cr_assert_eq(v.ndim, 3);
	cr_assert_eq(v.quant_axis, -1);
	cr_assert_float_eq(td_blob_quant_scale(&v, 0), 0.25f, 0);
	cr_assert_eq(v.quant_zero_points_len, 0);
	cr_assert_eq(v.r_strings, 124);
	cr_assert_eq(v.strings_bytes, 44);
	cr_assert_eq(v.r_planes, 168);
	assert_str(v.strings[0], "rgb8");
	assert_str(v.strings[1], "srgb");
	assert_str(v.strings[2], "srgb");
	assert_str(v.strings[3], "bt601");
	assert_str(v.strings[4], "full");
	cr_assert_eq(td_blob_plane_get(&v, 0, &p), 0);
	cr_assert_eq(p.stride, 6);
	cr_assert_eq(p.size, 12);
	cr_assert_eq(td_blob_check(&v, 0, NULL), 0);
	free(buf);
}

/* ---- negative vectors: exact kind, field and value ---- */

struct neg {
	const char *file;
	enum td_err_kind kind;
	const char *field; /* NULL: no field */
	int has_value;
	uint64_t value;
	int stage_import; /* refused by td_blob_check, not decode */
	uint64_t need, have; /* TRUNCATED */
};

static const struct neg negatives[] = {
	{"n01_truncated_71_bytes.bin", TD_ERR_TRUNCATED, NULL, 0, 0, 0, 72,
	 71},
	{"n02_short_read_size_exceeds_buffer.bin", TD_ERR_TRUNCATED, NULL, 0,
	 0, 0, 208, 200},
	{"n03_required_mask_bit63.bin", TD_ERR_UNSUPPORTED_REQUIREMENT,
	 "required_mask", 1, 0x8000000000000000ull, 0, 0, 0},
	{"n04_reserved_word_nonzero.bin", TD_ERR_MALFORMED, "reserved", 1, 1,
	 0, 0, 0},
	{"n05_size_below_header.bin", TD_ERR_FORGED_LENGTH, "size", 1, 8, 0,
	 0, 0},
	{"n06_strides_len_partial.bin", TD_ERR_FORGED_LENGTH, "strides_len",
	 1, 1, 0, 0, 0},
	{"n07_ndim_huge.bin", TD_ERR_FORGED_LENGTH, "ndim", 1, 4294967295u,
	 0, 0, 0},
	{"n08_strings_bytes_unpadded.bin", TD_ERR_MALFORMED, NULL, 0, 0, 0,
	 0, 0},
	{"n09_plane_count_exceeds_planes_bytes.bin", TD_ERR_FORGED_LENGTH,
	 "plane_count", 1, 2, 0, 0, 0},
	{"n10_planes_bytes_past_size.bin", TD_ERR_FORGED_LENGTH,
	 "planes_bytes", 1, 88, 0, 0, 0},
	{"n11_format_invalid_utf8.bin", TD_ERR_INVALID_UTF8, "format", 0, 0,
	 0, 0, 0},
	{"n12_format_length_forged.bin", TD_ERR_FORGED_LENGTH, "format", 1,
	 4294967295u, 0, 0, 0},
	{"n13_plane_data_len_forged.bin", TD_ERR_FORGED_LENGTH, "data_len",
	 1, 25, 0, 0, 0},
	{"n14_plane_handle_bytes_len_forged.bin", TD_ERR_FORGED_LENGTH,
	 "handle_bytes_len", 1, 4294967295u, 0, 0, 0},
	{"n15_inline_size_mismatch.bin", TD_ERR_INVALID_ARGUMENT, "size", 1,
	 9999, 1, 0, 0},
	{"n16_inline_modifier_nonzero.bin", TD_ERR_INVALID_ARGUMENT,
	 "modifier", 1, 1, 1, 0, 0},
	{"n17_mixed_transport_modes.bin", TD_ERR_INVALID_ARGUMENT, "handle",
	 0, 0, 1, 0, 0},
	{"n18_reference_plane_with_data.bin", TD_ERR_INVALID_ARGUMENT,
	 "data_len", 1, 24, 1, 0, 0},
	/* p01 (size 216, regions end at 208) with data_len 32: the data
	 * would end inside size and the buffer but past the planes region */
	{"n19_plane_data_into_appended_tail.bin", TD_ERR_FORGED_LENGTH,
	 "data_len", 1, 32, 0, 0, 0},
};

Test(blob, negative_vectors_refused_with_exact_kind_and_field)
{
	for (size_t i = 0; i < ARRAY_LEN(negatives); i++) {
		const struct neg *n = &negatives[i];
		char rel[256];
		size_t len;
		struct td_blob_view v;
		struct td_err e;
		int rc;

		snprintf(rel, sizeof(rel), "blob/negative/%s", n->file);
		uint8_t *buf = tu_read_file(tu_data_path(rel), &len);
		rc = td_blob_decode(buf, len, &v, &e);
		if (n->stage_import) {
			cr_assert_eq(rc, 0, "%s: parse must accept", n->file);
			/* refused with or without an fd table */
			rc = td_blob_check(&v, TD_BLOB_NO_FD_TABLE, &e);
		}
		cr_assert_eq(rc, td_err_kind_errno(n->kind), "%s: rc %d",
			     n->file, rc);
		cr_assert_eq(e.kind, n->kind, "%s: kind %s", n->file,
			     td_err_kind_name(e.kind));
		if (n->field)
			cr_assert_str_eq(e.field ? e.field : "(null)",
					 n->field, "%s", n->file);
		if (n->has_value) {
			cr_assert(e.has_value, "%s", n->file);
			cr_assert_eq(e.value, n->value, "%s", n->file);
		}
		if (n->kind == TD_ERR_TRUNCATED) {
			cr_assert_eq(e.need, n->need, "%s", n->file);
			cr_assert_eq(e.have, n->have, "%s", n->file);
		}
		cr_assert(e.reason && *e.reason, "%s: no reason", n->file);
		free(buf);
	}
}

Test(blob, n08_and_old_writer_refused_as_misaligned_planes)
{
	const char *files[] = {
		"blob/negative/n08_strings_bytes_unpadded.bin",
		"blob/v4_inline_rgb8_2x2_symquant_oddpad.OLD_0.29-0.32_writer_"
		"unparseable.bin",
	};
	for (size_t i = 0; i < ARRAY_LEN(files); i++) {
		size_t len;
		struct td_blob_view v;
		struct td_err e;
		uint8_t *buf = tu_read_file(tu_data_path(files[i]), &len);
		cr_assert_eq(td_blob_decode(buf, len, &v, &e), -EBADMSG);
		cr_assert_eq(e.kind, TD_ERR_MALFORMED);
		cr_assert_str_eq(e.reason, "planes region is not 8-aligned");
		free(buf);
	}
}

Test(blob, appended_tail_and_longer_buffer_accepted)
{
	struct td_blob_view v;
	uint8_t *b1 = decode_file(
		"blob/negative/p01_appended_tail_within_size_ACCEPT.bin", &v);
	cr_assert_eq(v.size, 216);
	cr_assert_eq(v.r_end, 208);
	cr_assert_eq(td_blob_check(&v, 0, NULL), 0);
	uint8_t *b2 = decode_file(
		"blob/negative/p02_buffer_longer_than_size_ACCEPT.bin", &v);
	cr_assert_eq(v.size, 208);
	cr_assert_eq(td_blob_check(&v, 0, NULL), 0);
	free(b1);
	free(b2);
}

/* ---- truncation, bit flips, odd buffers ---- */

Test(blob, every_strict_prefix_is_truncated)
{
	for (size_t f = 0; f < ARRAY_LEN(valid_vectors); f++) {
		char rel[256];
		size_t len;
		snprintf(rel, sizeof(rel), "blob/%s", valid_vectors[f]);
		uint8_t *buf = tu_read_file(tu_data_path(rel), &len);
		for (size_t k = 0; k < len; k++) {
			/* a fresh heap copy so ASan catches any over-read */
			uint8_t *cut = malloc(k ? k : 1);
			cr_assert(cut);
			memcpy(cut, buf, k);
			struct td_blob_view v;
			struct td_err e;
			cr_assert_eq(td_blob_decode(cut, k, &v, &e), -ENODATA,
				     "%s prefix %zu", rel, k);
			cr_assert_eq(e.kind, TD_ERR_TRUNCATED);
			cr_assert_eq(e.need, k < 72 ? 72 : len);
			free(cut);
		}
		free(buf);
	}
}

Test(blob, single_bit_flips_never_crash)
{
	int refused = 0;
	for (size_t f = 0; f < ARRAY_LEN(valid_vectors); f++) {
		char rel[256];
		size_t len;
		snprintf(rel, sizeof(rel), "blob/%s", valid_vectors[f]);
		uint8_t *buf = tu_read_file(tu_data_path(rel), &len);
		for (size_t bit = 0; bit < len * 8; bit++) {
			uint8_t *m = malloc(len);
			cr_assert(m);
			memcpy(m, buf, len);
			m[bit / 8] ^= (uint8_t)(1u << (bit % 8));
			struct td_blob_view v;
			struct td_err e;
			int rc = td_blob_decode(m, len, &v, &e);
			if (rc == 0) {
				rc = td_blob_check(&v, 1, &e);
				struct td_blob_cursor c = TD_BLOB_CURSOR_INIT;
				struct td_blob_plane p;
				while (td_blob_plane_next(&v, &c, &p) == 0)
					cr_assert(p.data + p.data_len <=
						  m + v.size);
			}
			if (rc < 0) {
				refused++;
				cr_assert_neq(e.kind, TD_ERR_NONE);
				cr_assert(e.reason != NULL);
			}
			free(m);
		}
		free(buf);
	}
	/* flips in the header counts must be caught, not all accepted */
	cr_assert_gt(refused, 100);
}

Test(blob, parses_identically_at_unaligned_offset)
{
	size_t len;
	uint8_t *buf = tu_read_file(tu_data_path("blob/v2_ref_nv12_64x48_"
						 "shared_fd0.bin"),
				    &len);
	for (size_t pre = 1; pre <= 16; pre++) {
		uint8_t *shifted = malloc(len + pre);
		cr_assert(shifted);
		memset(shifted, 0xAA, pre);
		memcpy(shifted + pre, buf, len);
		struct td_blob_view a, b;
		cr_assert_eq(td_blob_decode(buf, len, &a, NULL), 0);
		cr_assert_eq(td_blob_decode(shifted + pre, len, &b, NULL), 0);
		cr_assert_eq(a.size, b.size);
		cr_assert_eq(a.pid, b.pid);
		cr_assert_eq(a.r_planes, b.r_planes);
		cr_assert_eq(td_blob_shape(&b, 0), 48);
		assert_str(b.strings[0], "NV12");
		free(shifted);
	}
	free(buf);
}

Test(blob, garbage_0xab_refused)
{
	uint8_t buf[128];
	struct td_blob_view v;
	struct td_err e;
	memset(buf, 0xAB, sizeof(buf));
	/* required_mask = 0xABAB... is the first thing trusted */
	cr_assert_eq(td_blob_decode(buf, sizeof(buf), &v, &e), -ENOTSUP);
	cr_assert_eq(e.kind, TD_ERR_UNSUPPORTED_REQUIREMENT);
}

/* A minimal valid header-only blob: size 72, all counts 0 except the ones
 * a test sets. Not parseable as-is (strings need 20 bytes). */
static void header(uint8_t *b, uint64_t size)
{
	memset(b, 0, TD_BLOB_HEADER_LEN);
	td__put_le64(b, size);
	td__put_le32(b + 32, (uint32_t)-1);
	td__put_le32(b + 40, (uint32_t)-2);
}

Test(blob, huge_ndim_and_strides_do_not_wrap)
{
	uint8_t b[72];
	struct td_blob_view v;
	struct td_err e;
	header(b, 72);
	td__put_le32(b + 44, 0xFFFFFFFF); /* ndim */
	td__put_le32(b + 64, 0xFFFFFFFF); /* strides_len */
	cr_assert_eq(td_blob_decode(b, sizeof(b), &v, &e), -EOVERFLOW);
	cr_assert_str_eq(e.field, "ndim");
	cr_assert_eq(e.value, 0xFFFFFFFFu);
}

Test(blob, huge_plane_count_against_planes_bytes)
{
	uint8_t b[72 + 24 + 56];
	struct td_blob_view v;
	struct td_err e;
	memset(b, 0, sizeof(b));
	header(b, sizeof(b));
	td__put_le32(b + 60, 24);         /* strings_bytes */
	td__put_le64(b + 16, 56);         /* planes_bytes */
	td__put_le32(b + 48, 0xFFFFFFFF); /* plane_count */
	cr_assert_eq(td_blob_decode(b, sizeof(b), &v, &e), -EOVERFLOW);
	cr_assert_str_eq(e.field, "plane_count");
}

Test(blob, strings_bytes_overrun_attributed_to_itself)
{
	uint8_t b[96];
	struct td_blob_view v;
	struct td_err e;
	header(b, sizeof(b));
	memset(b + 72, 0, sizeof(b) - 72);
	td__put_le32(b + 60, 0xFFFFFFFF);
	cr_assert_eq(td_blob_decode(b, sizeof(b), &v, &e), -EOVERFLOW);
	cr_assert_str_eq(e.field, "strings_bytes");
	/* a 4-byte strings region of zeros runs out of length prefixes */
	td__put_le32(b + 60, 24);
	cr_assert_eq(td_blob_decode(b, sizeof(b), &v, &e), 0);
	cr_assert_eq(v.plane_count, 0);
}

Test(blob, header_words_extreme_values_never_crash)
{
	static const uint32_t vals[] = {0xFFFFFFFF, 0x7FFFFFFF, 1,
					0x80000000};
	const char *files[] = {"blob/v1_inline_f32_2x3.bin",
			       "blob/v2_ref_nv12_64x48_shared_fd0.bin"};
	for (size_t f = 0; f < ARRAY_LEN(files); f++) {
		size_t len;
		uint8_t *buf = tu_read_file(tu_data_path(files[f]), &len);
		struct td_blob_view v0;
		cr_assert_eq(td_blob_decode(buf, len, &v0, NULL), 0);
		/* every 4-byte header word, then every plane scalar word */
		for (size_t off = 0; off + 4 <= v0.r_end; off += 4) {
			if (off >= 72 && off < v0.r_planes)
				continue;
			for (size_t k = 0; k < ARRAY_LEN(vals); k++) {
				uint8_t *m = malloc(len);
				cr_assert(m);
				memcpy(m, buf, len);
				td__put_le32(m + off, vals[k]);
				struct td_blob_view v;
				if (td_blob_decode(m, len, &v, NULL) == 0) {
					(void)td_blob_check(&v, 1, NULL);
					(void)td_blob_check(
						&v, TD_BLOB_NO_FD_TABLE, NULL);
				}
				free(m);
			}
		}
		free(buf);
	}
}

/* ---- writer properties ---- */

Test(blob, little_endian_pins)
{
	uint8_t b[8];
	td__put_le64(b, 0x0102030405060708ull);
	for (int i = 0; i < 8; i++)
		cr_assert_eq(b[i], 8 - i);
	cr_assert_eq(TD_BLOB_HEADER_LEN, 72);
	cr_assert_eq(TD_BLOB_PLANE_RECORD_LEN, 56);
	cr_assert_eq(TD_BLOB_PID_OFFSET, 28);

	/* pid 0x0BADF00D lands at offset 28, little-endian */
	uint8_t out[256];
	struct td_blob_plane p = {.handle = 0, .size = 4, .used = 4,
				  .stride = 4};
	static const uint64_t shape[] = {4};
	struct td_blob_desc d = {.storage_kind = 1, .pid = 0x0BADF00D,
				 .fence_fd = -1, .quant_axis = -2, .ndim = 1,
				 .shape = shape, .plane_count = 1,
				 .planes = &p};
	int64_t n = td_blob_encode(&d, out, sizeof(out), NULL);
	cr_assert_gt(n, 0);
	cr_assert_eq(out[28], 0x0D);
	cr_assert_eq(out[29], 0xF0);
	cr_assert_eq(out[30], 0xAD);
	cr_assert_eq(out[31], 0x0B);
	/* size field equals bytes written, little-endian */
	cr_assert_eq(td__le64(out), (uint64_t)n);
	/* empty strides occupy zero bytes: strings start right after shape */
	cr_assert_eq(td__le32(out + 64), 0);
	struct td_blob_view v;
	cr_assert_eq(td_blob_decode(out, (size_t)n, &v, NULL), 0);
	cr_assert_eq(v.r_strings, 72 + 8);
	cr_assert_eq(v.strides_len, 0);
}

Test(blob, strings_padding_keeps_planes_aligned)
{
	static const char *const fmts[] = {"", "a", "ab", "abc", "NV12",
					   "rgb8_planar"};
	for (size_t f = 0; f < ARRAY_LEN(fmts); f++)
		for (uint32_t nscales = 0; nscales < 3; nscales++) {
			static const float sc[] = {1, 2, 3};
			static const uint64_t shape[] = {3};
			struct td_blob_plane p = {.handle = 0, .size = 3,
						  .used = 3};
			struct td_blob_desc d = {
				.storage_kind = 1, .fence_fd = -1,
				.quant_axis = nscales ? 0 : -2, .ndim = 1,
				.shape = shape, .quant_scales_len = nscales,
				.quant_scales = sc, .plane_count = 1,
				.planes = &p,
				.strings = {{fmts[f],
					     (uint32_t)strlen(fmts[f])}},
			};
			uint8_t out[512];
			int64_t n = td_blob_encode(&d, out, sizeof(out), NULL);
			cr_assert_gt(n, 0);
			struct td_blob_view v;
			cr_assert_eq(td_blob_decode(out, (size_t)n, &v, NULL),
				     0, "format '%s' scales %u", fmts[f],
				     nscales);
			cr_assert_eq(v.r_planes % 8, 0);
			cr_assert_eq(n % 8, 0);
		}
}

Test(blob, inline_payload_lengths_keep_records_aligned)
{
	uint8_t data[16], out[1024];
	for (int i = 0; i < 16; i++)
		data[i] = (uint8_t)(0xC0 + i);
	for (uint32_t n = 0; n <= 16; n++) {
		/* two planes (NV12 needs 2): the second must start aligned */
		struct td_blob_plane p[2] = {
			{.handle = -1, .size = n, .used = n, .data_len = n,
			 .data = data},
			{.handle = -1, .size = 1, .used = 1, .data_len = 1,
			 .data = data},
		};
		static const uint64_t shape[] = {1, 1};
		struct td_blob_desc d = {.fence_fd = -1, .quant_axis = -2,
					 .ndim = 2, .shape = shape,
					 .plane_count = 2, .planes = p,
					 .strings = {S("NV12")}};
		int64_t len = td_blob_encode(&d, out, sizeof(out), NULL);
		cr_assert_gt(len, 0);
		struct td_blob_view v;
		cr_assert_eq(td_blob_decode(out, (size_t)len, &v, NULL), 0);
		struct td_blob_cursor c = TD_BLOB_CURSOR_INIT;
		struct td_blob_plane q;
		cr_assert_eq(td_blob_plane_next(&v, &c, &q), 0);
		cr_assert_eq(q.data_len, n);
		cr_assert(memcmp(q.data, data, n) == 0);
		cr_assert_eq(c.off % 8, 0, "payload %u", n);
		cr_assert_eq(c.off, (56 + n + 7) / 8 * 8);
		cr_assert_eq(td_blob_plane_next(&v, &c, &q), 0);
		cr_assert_eq(q.data[0], 0xC0);
	}
}

Test(blob, writer_refuses_what_readers_refuse)
{
	static const uint64_t shape[] = {2, 2};
	static const int64_t strides[] = {2};
	struct td_blob_plane p = {.handle = -2};
	struct td_blob_desc d = {.fence_fd = -1, .quant_axis = -2, .ndim = 2,
				 .shape = shape, .strides_len = 1,
				 .strides = strides};
	uint64_t n;
	struct td_err e;
	cr_assert_eq(td_blob_encoded_len(&d, &n, &e), -EINVAL);
	cr_assert_str_eq(e.field, "strides_len");
	d.strides_len = 0;
	d.plane_count = 1;
	d.planes = &p;
	cr_assert_eq(td_blob_encoded_len(&d, &n, &e), -EINVAL);
	cr_assert_str_eq(e.field, "handle");
	p.handle = 0;
	d.strings[1] = (struct td_str){"\xC0\x80", 2}; /* overlong NUL */
	cr_assert_eq(td_blob_encoded_len(&d, &n, &e), -EILSEQ);
	cr_assert_str_eq(e.field, "color_space");
}

/* ---- randomised round trip: encode -> decode -> encode is identity ---- */

static const char *const utf8_samples[] = {
	"", "rgb8", "bt709", "h\xC3\xA9llo", "\xE2\x82\xAC uro",
	"\xF0\x9F\x98\x80", "\xE6\x97\xA5\xE6\x9C\xAC", "NV12",
};

Test(blob, randomised_round_trip_is_identity)
{
	uint64_t seed = 0x7E45012Dull;
	enum { MAXD = 6, MAXP = 4 };

	for (int iter = 0; iter < 2000; iter++) {
		uint64_t shape[MAXD];
		int64_t strides[MAXD];
		float scales[64];
		int32_t zps[64];
		uint8_t data[MAXP][24], hb[MAXP][8];
		struct td_blob_plane planes[MAXP];
		struct td_blob_desc d;

		memset(&d, 0, sizeof(d));
		d.ndim = (uint32_t)(tu_rand(&seed) % (MAXD + 1));
		for (uint32_t i = 0; i < d.ndim; i++) {
			shape[i] = tu_rand(&seed) % 9;
			strides[i] = (int64_t)(tu_rand(&seed) % 4096) - 2048;
		}
		d.shape = shape;
		d.strides_len = (tu_rand(&seed) & 1) ? d.ndim : 0;
		d.strides = strides;
		d.dtype = (uint32_t)(tu_rand(&seed) % TD_DTYPE_COUNT_);
		d.storage_kind = (uint32_t)(tu_rand(&seed) % 6);
		d.pid = (uint32_t)tu_rand(&seed);
		d.fence_fd = (int32_t)(tu_rand(&seed) % 4) - 1;
		d.quant_axis = (int32_t)(tu_rand(&seed) % 5) - 2;
		d.quant_scales_len = (uint32_t)(tu_rand(&seed) % 9);
		d.quant_zero_points_len =
			(tu_rand(&seed) & 1) ? d.quant_scales_len : 0;
		for (uint32_t i = 0; i < d.quant_scales_len; i++) {
			scales[i] = (float)(tu_rand(&seed) % 1000) / 7.0f;
			zps[i] = (int32_t)tu_rand(&seed);
		}
		d.quant_scales = scales;
		d.quant_zero_points = zps;
		for (int s = 0; s < 5; s++) {
			const char *str = utf8_samples[tu_rand(&seed) %
						       ARRAY_LEN(utf8_samples)];
			d.strings[s] = (struct td_str){str,
						       (uint32_t)strlen(str)};
		}
		d.plane_count = (uint32_t)(tu_rand(&seed) % (MAXP + 1));
		int inline_mode = tu_rand(&seed) & 1;
		for (uint32_t i = 0; i < d.plane_count; i++) {
			struct td_blob_plane *p = &planes[i];
			uint32_t n = (uint32_t)(tu_rand(&seed) % 18);
			if (n > sizeof(data[i]))
				n = sizeof(data[i]);
			for (uint32_t k = 0; k < n; k++)
				data[i][k] = (uint8_t)tu_rand(&seed);
			memset(p, 0, sizeof(*p));
			p->stride = tu_rand(&seed) % 100000;
			if (inline_mode) {
				p->handle = -1;
				p->size = p->used = n;
				p->data_len = n;
				p->data = data[i];
			} else {
				p->handle = (int64_t)(tu_rand(&seed) % 3);
				p->offset = tu_rand(&seed);
				p->size = tu_rand(&seed);
				p->used = p->size / 2;
				p->modifier = tu_rand(&seed) & 1
						      ? 0
						      : tu_rand(&seed);
				p->handle_bytes_len =
					(uint32_t)(tu_rand(&seed) % 9);
				for (uint32_t k = 0; k < p->handle_bytes_len;
				     k++)
					hb[i][k] = (uint8_t)tu_rand(&seed);
				p->handle_bytes = hb[i];
			}
		}
		d.planes = planes;

		uint64_t n;
		cr_assert_eq(td_blob_encoded_len(&d, &n, NULL), 0);
		uint8_t *a = malloc(n), *b = malloc(n);
		cr_assert(a && b);
		cr_assert_eq(td_blob_encode(&d, a, n, NULL), (int64_t)n);
		struct td_blob_view v;
		struct td_err e;
		cr_assert_eq(td_blob_decode(a, n, &v, &e), 0,
			     "iter %d: %s %s", iter, td_err_kind_name(e.kind),
			     e.reason);

		/* rebuild a description from the view alone */
		uint64_t shape2[MAXD];
		int64_t strides2[MAXD];
		float scales2[64];
		int32_t zps2[64];
		struct td_blob_plane planes2[MAXP];
		struct td_blob_desc d2 = {
			.storage_kind = v.storage_kind, .pid = v.pid,
			.fence_fd = v.fence_fd, .dtype = v.dtype,
			.quant_axis = v.quant_axis, .ndim = v.ndim,
			.shape = shape2, .strides_len = v.strides_len,
			.strides = strides2,
			.quant_scales_len = v.quant_scales_len,
			.quant_scales = scales2,
			.quant_zero_points_len = v.quant_zero_points_len,
			.quant_zero_points = zps2,
			.plane_count = v.plane_count, .planes = planes2,
		};
		memcpy(d2.strings, v.strings, sizeof(d2.strings));
		for (uint32_t i = 0; i < v.ndim; i++)
			shape2[i] = td_blob_shape(&v, i);
		for (uint32_t i = 0; i < v.strides_len; i++)
			strides2[i] = td_blob_stride(&v, i);
		for (uint32_t i = 0; i < v.quant_scales_len; i++)
			scales2[i] = td_blob_quant_scale(&v, i);
		for (uint32_t i = 0; i < v.quant_zero_points_len; i++)
			zps2[i] = td_blob_quant_zero_point(&v, i);
		for (uint32_t i = 0; i < v.plane_count; i++)
			cr_assert_eq(td_blob_plane_get(&v, i, &planes2[i]), 0);
		cr_assert_eq(td_blob_encode(&d2, b, n, NULL), (int64_t)n);
		cr_assert(memcmp(a, b, n) == 0, "iter %d differs", iter);
		free(a);
		free(b);
	}
}

/* ---- import-level checks (§9.5) ---- */

static int64_t enc(const struct td_blob_desc *d, uint8_t *out, size_t cap)
{
	int64_t n = td_blob_encode(d, out, cap, NULL);
	cr_assert_gt(n, 0);
	return n;
}

static int check_desc(const struct td_blob_desc *d, long fds,
		      struct td_err *e)
{
	uint8_t out[1024];
	struct td_blob_view v;
	int64_t n = enc(d, out, sizeof(out));
	cr_assert_eq(td_blob_decode(out, (size_t)n, &v, NULL), 0);
	return td_blob_check(&v, fds, e);
}

Test(blob, fd_table_index_checked_only_with_a_table)
{
	size_t len;
	struct td_blob_view v;
	struct td_err e;
	uint8_t *buf = tu_read_file(
		tu_data_path("blob/v2_ref_nv12_64x48_shared_fd0.bin"), &len);
	cr_assert_eq(td_blob_decode(buf, len, &v, NULL), 0);
	cr_assert_eq(td_blob_check(&v, TD_BLOB_NO_FD_TABLE, NULL), 0);
	cr_assert_eq(td_blob_check(&v, 1, NULL), 0);
	cr_assert_eq(td_blob_check(&v, 0, &e), -EINVAL);
	cr_assert_eq(e.kind, TD_ERR_INVALID_ARGUMENT);
	cr_assert_str_eq(e.field, "handle");
	free(buf);
}

Test(blob, quantization_relations_enforced)
{
	static const uint64_t shape[] = {4, 3};
	static const float sc[] = {1, 2, 3, 4};
	static const int32_t zp[] = {1, 2, 3, 4};
	struct td_blob_plane p = {.handle = 0, .size = 12, .used = 12};
	struct td_blob_desc d = {.storage_kind = 1, .fence_fd = -1,
				 .dtype = TD_DTYPE_U8, .ndim = 2,
				 .shape = shape, .plane_count = 1,
				 .planes = &p, .quant_scales = sc,
				 .quant_zero_points = zp};
	struct td_err e;
	struct {
		int32_t axis;
		uint32_t ns, nz;
		int ok;
		const char *field;
	} cases[] = {
		{-2, 0, 0, 1, NULL},
		{-2, 1, 0, 0, "quant_scales_len"},
		{-1, 1, 0, 1, NULL},
		{-1, 1, 1, 1, NULL},
		{-1, 2, 0, 0, "quant_scales_len"},
		{-1, 1, 2, 0, "quant_zero_points_len"},
		{0, 4, 0, 1, NULL},
		{0, 4, 4, 1, NULL},
		{1, 3, 3, 1, NULL},
		{0, 3, 0, 0, "quant_scales_len"},
		{0, 4, 2, 0, "quant_zero_points_len"},
		{2, 1, 0, 0, "quant_axis"},
		{-3, 0, 0, 0, "quant_axis"},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		d.quant_axis = cases[i].axis;
		d.quant_scales_len = cases[i].ns;
		d.quant_zero_points_len = cases[i].nz;
		int rc = check_desc(&d, 1, &e);
		if (cases[i].ok) {
			cr_assert_eq(rc, 0, "case %zu", i);
		} else {
			cr_assert_eq(rc, -EINVAL, "case %zu", i);
			cr_assert_str_eq(e.field, cases[i].field, "case %zu",
					 i);
		}
	}
}

Test(blob, unknown_dtype_format_and_storage_not_implemented)
{
	static const uint64_t shape[] = {4};
	struct td_blob_plane p = {.handle = 0, .size = 4, .used = 4};
	struct td_blob_desc d = {.storage_kind = 1, .fence_fd = -1,
				 .dtype = 11, .quant_axis = -2, .ndim = 1,
				 .shape = shape, .plane_count = 1,
				 .planes = &p};
	struct td_err e;
	cr_assert_eq(check_desc(&d, 1, &e), -ENOSYS);
	cr_assert_str_eq(e.field, "dtype");
	d.dtype = 0;
	d.strings[0] = S("NV21");
	cr_assert_eq(check_desc(&d, 1, &e), -ENOSYS);
	cr_assert_str_eq(e.field, "format");
	d.strings[0] = S("");
	d.strings[1] = S("some-future-primaries"); /* carried, not refused */
	cr_assert_eq(check_desc(&d, 1, &e), 0);
	d.storage_kind = TD_STORAGE_MEM;
	cr_assert_eq(check_desc(&d, 1, &e), -ENOSYS);
	cr_assert_str_eq(e.field, "storage_kind");
	d.storage_kind = TD_STORAGE_DMABUF;
	cr_assert_eq(check_desc(&d, 1, &e), 0);
}

Test(blob, fence_index_rules)
{
	static const uint64_t shape[] = {4};
	struct td_blob_plane p = {.handle = 0, .size = 4, .used = 4};
	struct td_blob_desc d = {.storage_kind = 1, .fence_fd = 1,
				 .quant_axis = -2, .ndim = 1, .shape = shape,
				 .plane_count = 1, .planes = &p};
	struct td_err e;
	cr_assert_eq(check_desc(&d, 2, &e), 0); /* plane 0, fence 1 */
	cr_assert_eq(check_desc(&d, TD_BLOB_NO_FD_TABLE, &e), 0);
	cr_assert_eq(check_desc(&d, 1, &e), -EINVAL);
	cr_assert_str_eq(e.field, "fence_fd");
	d.fence_fd = -2;
	cr_assert_eq(check_desc(&d, 2, &e), -EINVAL);
	cr_assert_str_eq(e.field, "fence_fd");
}

Test(blob, inline_layout_must_fit_data)
{
	static const uint64_t shape[] = {2, 3};
	uint8_t data[24] = {0};
	struct td_blob_plane p = {.handle = -1, .size = 23, .used = 23,
				  .data_len = 23, .data = data};
	struct td_blob_desc d = {.fence_fd = -1, .dtype = TD_DTYPE_F32,
				 .quant_axis = -2, .ndim = 2, .shape = shape,
				 .plane_count = 1, .planes = &p};
	struct td_err e;
	/* 2x3 f32 needs 24 bytes */
	cr_assert_eq(check_desc(&d, 0, &e), -EINVAL);
	cr_assert_str_eq(e.field, "data_len");
	p.size = p.used = p.data_len = 24;
	cr_assert_eq(check_desc(&d, 0, &e), 0);
	/* a format with two planes needs two inline planes */
	static const uint64_t img[] = {2, 2};
	d.shape = img;
	d.dtype = TD_DTYPE_U8;
	d.strings[0] = S("NV12");
	cr_assert_eq(check_desc(&d, 0, &e), -EINVAL);
	cr_assert_str_eq(e.field, "plane_count");
	/* and an image shape must match the format's grid */
	d.strings[0] = S("rgb8");
	cr_assert_eq(check_desc(&d, 0, &e), -EINVAL);
	cr_assert_str_eq(e.field, "ndim");
}

Test(blob, reference_plane_need_matches_layout)
{
	size_t len;
	struct td_blob_view v;
	struct td_blob_plane p;
	uint64_t need;
	uint8_t *buf = tu_read_file(
		tu_data_path("blob/v2_ref_nv12_64x48_shared_fd0.bin"), &len);
	cr_assert_eq(td_blob_decode(buf, len, &v, NULL), 0);
	cr_assert_eq(td_blob_plane_get(&v, 0, &p), 0);
	cr_assert_eq(td_blob_plane_need(&v, 0, &p, &need, NULL), 0);
	cr_assert_eq(need, 64 * 48);
	cr_assert_eq(td_blob_plane_get(&v, 1, &p), 0);
	cr_assert_eq(td_blob_plane_need(&v, 1, &p, &need, NULL), 0);
	cr_assert_eq(need, 64 * 24);
	free(buf);
}

/* What readers view each plane as: the grid plane_need checks. */
Test(blob, format_plane_layout_gives_each_planes_array)
{
	const uint64_t nv12[] = {5, 6}, rgb[] = {4, 3, 3}, pl[] = {3, 4, 5};
	struct td_plane_layout l;

	cr_assert_eq(td_format_plane_count("NV12"), 2);
	cr_assert_eq(td_format_plane_count("rgba8_planar"), 4);
	cr_assert_eq(td_format_plane_count(""), 1);
	cr_assert_eq(td_format_plane_count("h264"), 0);
	/* NV12 5x6, pitch 8: Y 5 rows, UV ceil(5/2) = 3 rows of 6 bytes */
	cr_assert_eq(td_format_plane_layout("NV12", 0, 2, nv12, 1, 8, &l), 0);
	cr_assert(l.ndim == 2 && l.shape[0] == 3 && l.shape[1] == 6);
	cr_assert(l.strides[0] == 8 && l.strides[1] == 1);
	cr_assert_eq(l.need, 2 * 8 + 6);
	cr_assert_eq(td_format_plane_layout("NV12", 0, 2, nv12, 0, 0, &l), 0);
	cr_assert(l.shape[0] == 5 && l.stride == 6 && l.need == 30);
	/* NV16: H chroma rows; NV24: 2H rows of W (2W bytes a chroma line) */
	cr_assert_eq(td_format_plane_layout("NV16", 0, 2, nv12, 1, 0, &l), 0);
	cr_assert(l.shape[0] == 5 && l.shape[1] == 6);
	cr_assert_eq(td_format_plane_layout("NV24", 0, 2, nv12, 1, 0, &l), 0);
	cr_assert(l.shape[0] == 10 && l.shape[1] == 6 && l.need == 60);
	/* packed f32 rgb8 grid: channels stay a dimension */
	cr_assert_eq(td_format_plane_layout("rgb8", 9, 3, rgb, 0, 64, &l), 0);
	cr_assert(l.ndim == 3 && l.shape[2] == 3 && l.strides[1] == 12 &&
		  l.strides[2] == 4 && l.need == 3 * 64 + 36);
	cr_assert_eq(td_format_plane_layout("rgb8_planar", 0, 3, pl, 2, 0, &l),
		     0);
	cr_assert(l.ndim == 2 && l.shape[0] == 4 && l.shape[1] == 5);
	/* refusals */
	cr_assert_eq(td_format_plane_layout("NV12", 0, 2, nv12, 2, 0, &l),
		     -EINVAL);
	cr_assert_eq(td_format_plane_layout("NV12", 0, 2, nv12, 0, 5, &l),
		     -EINVAL);
	cr_assert_eq(td_format_plane_layout("rgb8", 0, 3, pl, 0, 0, &l),
		     -EINVAL);
	cr_assert_eq(td_format_plane_layout("h264", 0, 2, nv12, 0, 0, &l),
		     -ENOTSUP);
	cr_assert_eq(td_format_plane_layout("", 0, 2, nv12, 0, 0, &l), -EINVAL);
}

/* ---- tensorctl inspect --json drives the built binary ---- */

static char *inspect(const char *rel, int *status)
{
	char *out;
	char path[4096];
	snprintf(path, sizeof(path), "%s", tu_data_path(rel));
	char *argv[] = {getenv("TD_TENSORCTL"), "inspect", "--json", path,
			NULL};
	cr_assert(argv[0], "TD_TENSORCTL not set");
	*status = tu_run_capture(argv, &out);
	return out;
}

Test(blob, inspect_json_matches_readme_for_valid_vectors)
{
	static const struct {
		const char *file, *json;
	} want[] = {
		{"blob/v1_inline_f32_2x3.bin",
		 "{\"kind\":\"blob\",\"size\":208,\"required_mask\":0,"
		 "\"planes_bytes\":80,\"storage_kind\":0,\"pid\":0,"
		 "\"fence_fd\":-1,\"dtype\":9,\"quant_axis\":-2,\"ndim\":2,"
		 "\"plane_count\":1,\"strings_bytes\":24,\"strides_len\":2,"
		 "\"quant_scales_len\":0,\"quant_zero_points_len\":0,"
		 "\"shape\":[2,3],\"strides\":[12,4],\"quant_scales\":[],"
		 "\"quant_zero_points\":[],\"format\":\"\","
		 "\"color_space\":\"\",\"color_transfer\":\"\","
		 "\"color_encoding\":\"\",\"color_range\":\"\",\"planes\":[{"
		 "\"handle\":-1,\"offset\":0,\"stride\":24,\"size\":24,"
		 "\"used\":24,\"modifier\":0,\"handle_bytes_len\":0,"
		 "\"data_len\":24}]}\n"},
		{"blob/v2_ref_nv12_64x48_shared_fd0.bin",
		 "{\"kind\":\"blob\",\"size\":240,\"required_mask\":0,"
		 "\"planes_bytes\":112,\"storage_kind\":2,\"pid\":4242,"
		 "\"fence_fd\":-1,\"dtype\":0,\"quant_axis\":-2,\"ndim\":2,"
		 "\"plane_count\":2,\"strings_bytes\":24,\"strides_len\":2,"
		 "\"quant_scales_len\":0,\"quant_zero_points_len\":0,"
		 "\"shape\":[48,64],\"strides\":[64,1],\"quant_scales\":[],"
		 "\"quant_zero_points\":[],\"format\":\"NV12\","
		 "\"color_space\":\"\",\"color_transfer\":\"\","
		 "\"color_encoding\":\"\",\"color_range\":\"\",\"planes\":[{"
		 "\"handle\":0,\"offset\":0,\"stride\":64,\"size\":3072,"
		 "\"used\":3072,\"modifier\":0,\"handle_bytes_len\":0,"
		 "\"data_len\":0},{\"handle\":0,\"offset\":3072,\"stride\":64,"
		 "\"size\":1536,\"used\":1536,\"modifier\":0,"
		 "\"handle_bytes_len\":0,\"data_len\":0}]}\n"},
		{"blob/v3_inline_i8_3x8_quant_per_tensor.bin",
		 "{\"kind\":\"blob\",\"size\":216,\"required_mask\":0,"
		 "\"planes_bytes\":80,\"storage_kind\":0,\"pid\":0,"
		 "\"fence_fd\":-1,\"dtype\":1,\"quant_axis\":-1,\"ndim\":2,"
		 "\"plane_count\":1,\"strings_bytes\":24,\"strides_len\":2,"
		 "\"quant_scales_len\":1,\"quant_zero_points_len\":1,"
		 "\"shape\":[3,8],\"strides\":[8,1],\"quant_scales\":[0.5],"
		 "\"quant_zero_points\":[-7],\"format\":\"\","
		 "\"color_space\":\"\",\"color_transfer\":\"\","
		 "\"color_encoding\":\"\",\"color_range\":\"\",\"planes\":[{"
		 "\"handle\":-1,\"offset\":0,\"stride\":24,\"size\":24,"
		 "\"used\":24,\"modifier\":0,\"handle_bytes_len\":0,"
		 "\"data_len\":24}]}\n"},
		{"blob/v4_inline_rgb8_2x2_symquant_oddpad.bin",
		 "{\"kind\":\"blob\",\"size\":240,\"required_mask\":0,"
		 "\"planes_bytes\":72,\"storage_kind\":0,\"pid\":0,"
		 "\"fence_fd\":-1,\"dtype\":0,\"quant_axis\":-1,\"ndim\":3,"
		 "\"plane_count\":1,\"strings_bytes\":44,\"strides_len\":3,"
		 "\"quant_scales_len\":1,\"quant_zero_points_len\":0,"
		 "\"shape\":[2,2,3],\"strides\":[6,3,1],"
		 "\"quant_scales\":[0.25],\"quant_zero_points\":[],"
		 "\"format\":\"rgb8\",\"color_space\":\"srgb\","
		 "\"color_transfer\":\"srgb\",\"color_encoding\":\"bt601\","
		 "\"color_range\":\"full\",\"planes\":[{\"handle\":-1,"
		 "\"offset\":0,\"stride\":6,\"size\":12,\"used\":12,"
		 "\"modifier\":0,\"handle_bytes_len\":0,\"data_len\":12}]}\n"},
	};
	for (size_t i = 0; i < ARRAY_LEN(want); i++) {
		int st;
		char *out = inspect(want[i].file, &st);
		cr_assert_eq(st, 0, "%s", want[i].file);
		cr_assert_str_eq(out, want[i].json);
		free(out);
	}
}

Test(blob, inspect_json_reports_refusals_with_status_1)
{
	for (size_t i = 0; i < ARRAY_LEN(negatives); i++) {
		const struct neg *n = &negatives[i];
		char rel[256], frag[256];
		int st;
		snprintf(rel, sizeof(rel), "blob/negative/%s", n->file);
		char *out = inspect(rel, &st);
		cr_assert_eq(st, 1, "%s: status %d", n->file, st);
		snprintf(frag, sizeof(frag), "{\"error\":{\"kind\":\"%s\"",
			 td_err_kind_name(n->kind));
		cr_assert(strncmp(out, frag, strlen(frag)) == 0, "%s: %s",
			  n->file, out);
		if (n->field) {
			snprintf(frag, sizeof(frag), "\"field\":\"%s\"",
				 n->field);
			cr_assert(strstr(out, frag), "%s: %s", n->file, out);
		}
		if (n->has_value) {
			snprintf(frag, sizeof(frag), "\"value\":%llu",
				 (unsigned long long)n->value);
			cr_assert(strstr(out, frag), "%s: %s", n->file, out);
		}
		cr_assert(strstr(out, "\"message\":\""), "%s", out);
		free(out);
	}
	/* the example, byte for byte up to the message */
	int st;
	char *out = inspect("blob/negative/n07_ndim_huge.bin", &st);
	cr_assert(strstr(out, "{\"error\":{\"kind\":\"FORGED_LENGTH\","
			      "\"field\":\"ndim\",\"value\":4294967295,"
			      "\"offset\":44,") == out);
	free(out);
}

Test(blob, inspect_table_and_accepted_edge_vectors)
{
	int st;
	char *out = inspect("blob/negative/p01_appended_tail_within_size_"
			    "ACCEPT.bin",
			    &st);
	cr_assert_eq(st, 0);
	cr_assert(strstr(out, "\"size\":216"));
	free(out);
	char path[4096];
	snprintf(path, sizeof(path), "%s",
		 tu_data_path("blob/v4_inline_rgb8_2x2_symquant_oddpad.bin"));
	char *argv[] = {getenv("TD_TENSORCTL"), "inspect", path, NULL};
	st = tu_run_capture(argv, &out);
	cr_assert_eq(st, 0);
	cr_assert(strstr(out, "\"rgb8\""));
	cr_assert(strstr(out, "planes: 1"));
	free(out);
}

Test(blob, dtype_names_go_both_ways_and_null_is_unknown)
{
	for (uint32_t i = 0; i < TD_DTYPE_COUNT_; i++)
		cr_assert_eq(td_dtype_from_name(td_dtype_name(i)), (int)i);
	cr_assert_null(td_dtype_name(TD_DTYPE_COUNT_));
	cr_assert_eq(td_dtype_from_name("float32"), -1, "numpy's names are "
		     "td_tensor_dtype_from_name()'s");
	cr_assert_eq(td_dtype_from_name(""), -1);
	cr_assert_eq(td_dtype_from_name(NULL), -1);
}
