/* SPDX-License-Identifier: MIT */
/*
 * Hurray HRRYFILE (specs/hurray.md): the core and the public handles of
 * <tensord/hrry.h>. Upstream golden vectors (read from $TD_VECTORS_DIR,
 * never copied here), the bad files of §18 derived from files our writer
 * makes, truncation of every descriptor, round trips, and the step API's
 * promise that nothing is requested before it is bounded.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "bytes.h"
#include "hrry-util.h"
#include "hrry.h"
#include "tensord/tensord.h"
#include "testutil.h"

TestSuite(hrry, .timeout = TU_TEST_TIMEOUT_S);

uint32_t td__hrry_crc32c_table(uint32_t crc, const void *buf, size_t len);

/* ---- helpers ---- */

static const char *golden_dir(void)
{
	return tu_vectors_or_skip("hurray/golden", "Hurray");
}

static uint8_t *golden_file(const char *rel, size_t *len)
{
	char path[4300];
	snprintf(path, sizeof(path), "%s/%s", golden_dir(), rel);
	return tu_read_file(path, len);
}

/* Open a reader over a memory copy; rc and *err. */
static int open_mem(const uint8_t *buf, size_t len,
		    struct td_hrry_file_reader **r, struct td_hrry_err *err)
{
	struct td_hrry_transport t;
	cr_assert_eq(td_hrry_transport_mem(buf, len, &t), 0);
	memset(err, 0, sizeof(*err));
	return td_hrry_file_reader_new(&t, r, err);
}

static void expect_open_error(const uint8_t *buf, size_t len,
			      enum td_hrry_error kind)
{
	struct td_hrry_file_reader *r = NULL;
	struct td_hrry_err e;
	int rc = open_mem(buf, len, &r, &e);
	cr_assert_lt(rc, 0, "expected %s, file opened",
		     td_hrry_error_name(kind));
	cr_assert_null(r);
	cr_assert_eq(e.kind, kind, "expected %s, got %s (%s)",
		     td_hrry_error_name(kind), td_hrry_error_name(e.kind),
		     e.reason);
	cr_assert_eq(rc, td_hrry_error_errno(kind));
	cr_assert_eq(e.code, rc);
	cr_assert_not_null(e.reason);
}

/* The two tensors and KV of basic.hrry through the public writer. */
static void write_basic(struct hu_sink *s, const struct td_hrry_writer_options *o)
{
	struct td_hrry_transport t = hu_sink_transport(s);
	struct td_hrry_file_writer *w;
	struct td_hrry_desc d;
	static const uint8_t zeros[16];
	const void *bufs[1] = {zeros};
	struct td_hrry_err e;
	cr_assert_eq(td_hrry_file_writer_new(&t, o, &w, &e), 0);
	cr_assert_eq(td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_FLOAT32, 2,
					     (uint64_t[]){2, 2}),
		     0);
	cr_assert_eq(td_hrry_file_writer_write_tensor(w, "weights", 7, &d, bufs,
						      &e),
		     0, "%s", e.reason);
	td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_INT8, 1, (uint64_t[]){3});
	cr_assert_eq(td_hrry_file_writer_write_tensor(w, "bias", 4, &d, bufs,
						      &e),
		     0);
	struct td_hrry_kv_entry kv[2] = {
		{.key = "producer", .key_len = 8,
		 .value = {.kind = TD_HRRY_KV_STRING,
			   .data = (const uint8_t *)"hurray-conformance",
			   .data_len = 18}},
		{.key = "tensor_count", .key_len = 12,
		 .value = {.kind = TD_HRRY_KV_INT64, .i64_value = 2}},
	};
	cr_assert_eq(td_hrry_file_writer_finish(w, kv, 2, &e), 0, "%s",
		     e.reason);
	td_hrry_file_writer_free(&w);
	cr_assert_null(w);
	td_hrry_file_writer_free(&w); /* idempotent */
}

/*
 * A KV key given twice is refused wherever the two are among many, and
 * keys that differ (one a prefix of another: "k1", "k10") pass. The
 * writer used to compare every pair of keys, twice: O(n^2), which held
 * tensord's loop for seconds when it saved 5000 versions (27 000 keys).
 * It sorts them now when given scratch (the file writer and the daemon
 * do); without, every pair is still compared (a handful of keys).
 */
Test(hrry, a_duplicate_kv_key_among_many_is_refused)
{
	enum { N = 3000 };
	static char keys[N][16];
	static struct td_hrry_kv_entry kv[N];
	static uint32_t scratch[N];
	struct td_hrry_err e = {0};

	for (unsigned i = 0; i < N; i++) {
		snprintf(keys[i], sizeof(keys[i]), "k%u", i);
		kv[i] = (struct td_hrry_kv_entry){
			keys[i], strlen(keys[i]),
			{.kind = TD_HRRY_KV_UINT64, .u64_value = i}};
	}
	cr_assert_eq(td_hrry_check_kv(kv, N, scratch, &e), 0, "%s", e.reason);
	cr_assert_eq(td_hrry_check_kv(kv, N, NULL, &e), 0, "%s", e.reason);
	/* the first key again, last */
	kv[N - 1].key = keys[0];
	kv[N - 1].key_len = strlen(keys[0]);
	for (int pass = 0; pass < 3; pass++) {
		e = (struct td_hrry_err){0};
		if (pass < 2) {
			cr_assert_lt(td_hrry_check_kv(kv, N,
						      pass ? NULL : scratch,
						      &e),
				     0);
		} else {
			struct hu_sink sk = {0};
			struct td_hrry_transport t = hu_sink_transport(&sk);
			struct td_hrry_file_writer *w;

			cr_assert_eq(td_hrry_file_writer_new(&t, NULL, &w,
							     NULL),
				     0);
			cr_assert_lt(td_hrry_file_writer_finish(w, kv, N, &e),
				     0);
			td_hrry_file_writer_free(&w);
			free(sk.buf);
		}
		cr_assert_eq(e.kind, TD_HRRY_E_DUPLICATE_KV_KEY, "pass %d: %s",
			     pass, td_hrry_error_name(e.kind));
	}
}

/* A file holding only the KV entries kv[0, n): free() its buf. */
static struct hu_sink kv_file(const struct td_hrry_kv_entry *kv, size_t n)
{
	struct hu_sink s = {0};
	struct td_hrry_transport t = hu_sink_transport(&s);
	struct td_hrry_file_writer *w;
	cr_assert_eq(td_hrry_file_writer_new(&t, NULL, &w, NULL), 0);
	cr_assert_eq(td_hrry_file_writer_finish(w, kv, n, NULL), 0);
	td_hrry_file_writer_free(&w);
	return s;
}

/* Recompute the trailer's CRC after the test patched the index. */
static void fix_crc(uint8_t *f, size_t len)
{
	uint8_t *t = f + len - 40;
	uint64_t io = td__le64(t), il = td__le64(t + 8);
	td__put_le32(t + 28, td_hrry_crc32c(0, f + io, il));
}

/* ---- CRC ---- */

Test(hrry, crc32c_check_value_both_paths)
{
	cr_assert_eq(td_hrry_crc32c(0, "123456789", 9), 0xE3069283u);
	cr_assert_eq(td__hrry_crc32c_table(0, "123456789", 9), 0xE3069283u);
	/* incremental == one shot, at odd splits (SSE path tails) */
	uint8_t buf[1000];
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 7 + 3);
	uint32_t one = td_hrry_crc32c(0, buf, sizeof(buf));
	cr_assert_eq(td__hrry_crc32c_table(0, buf, sizeof(buf)), one);
	for (size_t cut = 0; cut < 20; cut++)
		cr_assert_eq(td_hrry_crc32c(td_hrry_crc32c(0, buf, cut),
					    buf + cut, sizeof(buf) - cut),
			     one);
}

Test(hrry, error_names_are_upstream_and_errnos_distinct_per_family)
{
	cr_assert_str_eq(td_hrry_error_name(TD_HRRY_E_INDEX_CRC32C_MISMATCH),
			 "IndexCrc32cMismatch");
	cr_assert_str_eq(td_hrry_error_name(TD_HRRY_E_TORN_COMPOSITE),
			 "TornComposite");
	cr_assert_str_eq(td_hrry_error_name(TD_HRRY_E_COUNT_), "Unknown");
	for (int k = 1; k < TD_HRRY_E_COUNT_; k++) {
		cr_assert_lt(td_hrry_error_errno(k), 0);
		cr_assert_neq(strcmp(td_hrry_error_name(k), "Unknown"), 0);
	}
	cr_assert_eq(td_hrry_error_errno(TD_HRRY_E_UNSUPPORTED_TYPE), -ENOTSUP);
	cr_assert_eq(td_hrry_error_errno(TD_HRRY_E_TENSOR_NOT_FOUND), -ENOENT);
	cr_assert_eq(td_hrry_error_errno(TD_HRRY_E_DESCRIPTOR_TRUNCATED),
		     -ENODATA);
}

/* ---- golden vectors ---- */

/* README: expected tensord result per descriptor file */
static const struct {
	const char *file;
	enum td_hrry_error support;
} golden_support[] = {
	{"row_major_f32_3x4.bin", TD_HRRY_OK},
	{"row_major_int8_5.bin", TD_HRRY_OK},
	{"row_major_f16_2x2.bin", TD_HRRY_OK},
	{"bool_packed_10.bin", TD_HRRY_E_UNSUPPORTED_TYPE},
	{"empty_f32_0x4.bin", TD_HRRY_OK},
	{"strided_f32_3x4.bin", TD_HRRY_E_UNSUPPORTED_LAYOUT},
	{"morton_f32_4x4.bin", TD_HRRY_E_UNSUPPORTED_LAYOUT},
	{"sharded_f32_8x4.bin", TD_HRRY_OK},
	{"csr_f32_3x3.bin", TD_HRRY_E_UNSUPPORTED_LAYOUT},
	{"composite_head_partition.bin", TD_HRRY_OK},
	{"quant_per_block_int4_128x128.bin", TD_HRRY_E_UNSUPPORTED_QUANTIZATION},
};
#define NGOLDEN (sizeof(golden_support) / sizeof(golden_support[0]))

Test(hrry, golden_descriptors_decode_with_the_readme_support_result)
{
	char rel[256];
	for (size_t i = 0; i < NGOLDEN; i++) {
		size_t len;
		struct td_hrry_desc d;
		struct td_hrry_err e = {0};
		snprintf(rel, sizeof(rel), "descriptors/%s",
			 golden_support[i].file);
		uint8_t *b = golden_file(rel, &len);
		cr_assert_eq(td_hrry_desc_decode(b, len, &d, &e), 0, "%s: %s",
			     rel, e.reason);
		cr_assert_eq(d.descriptor_length, len, "%s", rel);
		memset(&e, 0, sizeof(e));
		int rc = td_hrry_desc_supported(&d, &e);
		if (golden_support[i].support == TD_HRRY_OK) {
			cr_assert_eq(rc, 0, "%s: %s", rel, e.reason);
		} else {
			cr_assert_eq(rc, -ENOTSUP, "%s", rel);
			cr_assert_eq(e.kind, golden_support[i].support,
				     "%s: %s", rel, td_hrry_error_name(e.kind));
		}
		free(b);
	}
}

Test(hrry, golden_descriptors_fed_one_byte_at_a_time)
{
	char rel[256];
	for (size_t i = 0; i < NGOLDEN; i++) {
		size_t len;
		struct td_hrry_desc d;
		snprintf(rel, sizeof(rel), "descriptors/%s",
			 golden_support[i].file);
		uint8_t *b = golden_file(rel, &len);
		for (size_t k = 0; k < len; k++) {
			/* a fresh copy of exactly k bytes: ASan sees any
			 * read past the prefix */
			uint8_t *p = malloc(k ? k : 1);
			memcpy(p, b, k);
			struct td_hrry_err e = {0};
			int rc = td_hrry_desc_decode(p, k, &d, &e);
			cr_assert_eq(rc, -ENODATA, "%s prefix %zu: rc %d %s",
				     rel, k, rc, td_hrry_error_name(e.kind));
			cr_assert_eq(e.kind, TD_HRRY_E_DESCRIPTOR_TRUNCATED);
			free(p);
		}
		cr_assert_eq(td_hrry_desc_decode(b, len, &d, NULL), 0);
		free(b);
	}
}

Test(hrry, golden_csr_and_quantized_structure_stays_listable)
{
	size_t len;
	struct td_hrry_desc d;
	uint8_t *b = golden_file("descriptors/csr_f32_3x3.bin", &len);
	cr_assert_eq(td_hrry_desc_decode(b, len, &d, NULL), 0);
	cr_assert_eq(d.buffer_count, 3);
	cr_assert_eq(d.layout_payload_len, 16);
	free(b);
	b = golden_file("descriptors/quant_per_block_int4_128x128.bin", &len);
	cr_assert_eq(td_hrry_desc_decode(b, len, &d, NULL), 0);
	cr_assert_eq(d.quantization_len, 24);
	cr_assert_eq(d.quant_scheme, 0x03);
	cr_assert_eq(d.buffers[1].byte_size, 256);
	free(b);
	b = golden_file("descriptors/sharded_f32_8x4.bin", &len);
	cr_assert_eq(td_hrry_desc_decode(b, len, &d, NULL), 0);
	cr_assert_eq(d.parent_shape[1], 8);
	cr_assert_eq(d.shard_offset[1], 4);
	free(b);
	b = golden_file("descriptors/composite_head_partition.bin", &len);
	cr_assert_eq(td_hrry_desc_decode(b, len, &d, NULL), 0);
	cr_assert_eq(d.rule, TD_HRRY_RULE_PARTITION);
	cr_assert_eq(d.member_count, 2);
	cr_assert_eq(d.buffer_count, 0);
	free(b);
}

Test(hrry, writer_reproduces_basic_hrry_byte_for_byte)
{
	size_t len;
	uint8_t *gold = golden_file("basic.hrry", &len);
	struct hu_sink s = {0};
	/* the upstream head-padding form: no composite here, so the default
	 * gives the same bytes; both are checked */
	struct td_hrry_writer_options o = {
		.head_padding = TD_HRRY_HEAD_PAD_UPSTREAM};
	write_basic(&s, &o);
	cr_assert_eq(s.len, len);
	cr_assert_eq(memcmp(s.buf, gold, len), 0);
	free(s.buf);
	memset(&s, 0, sizeof(s));
	s.max_put = 7; /* partial writes are continued */
	write_basic(&s, NULL);
	cr_assert_eq(s.len, len);
	cr_assert_eq(memcmp(s.buf, gold, len), 0);
	free(s.buf);
	free(gold);
}

Test(hrry, basic_hrry_reads_through_fd_and_mapped_transports)
{
	char path[4300];
	snprintf(path, sizeof(path), "%s/basic.hrry", golden_dir());
	for (int mode = 0; mode < 2; mode++) {
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		cr_assert_geq(fd, 0);
		struct td_hrry_transport t;
		cr_assert_eq(mode ? td_hrry_transport_map_fd(fd, &t) :
				    td_hrry_transport_fd(fd, &t),
			     0);
		if (mode)
			close(fd); /* the mapping outlives the fd */
		struct td_hrry_file_reader *r;
		struct td_hrry_err e;
		cr_assert_eq(td_hrry_file_reader_new(&t, &r, &e), 0, "%s",
			     e.reason);
		cr_assert_eq(td_hrry_file_reader_alignment(r), 4096);
		cr_assert_eq(td_hrry_file_reader_flags(r), 0x4);
		uint64_t io, il;
		uint32_t crc;
		td_hrry_file_reader_index(r, &io, &il, &crc);
		cr_assert_eq(io, 8264);
		cr_assert_eq(il, 87);
		cr_assert_eq(crc, 0x51349F72u);
		struct td_hrry_tensor tt;
		cr_assert_eq(td_hrry_file_reader_read_tensor(r, "weights", 7,
							     &tt, &e),
			     0);
		cr_assert_eq(tt.entry.data_offset, 4096);
		cr_assert_eq(tt.data_len, 16);
		/* zero copy on the mapped span: no owned buffer */
		cr_assert_eq(tt.owned_ == NULL, mode == 1);
		td_hrry_tensor_fini(&tt);
		cr_assert_eq(td_hrry_file_reader_read_tensor(r, "nope", 4, &tt,
							     &e),
			     -ENOENT);
		cr_assert_eq(e.kind, TD_HRRY_E_TENSOR_NOT_FOUND);
		td_hrry_file_reader_free(&r);
		if (!mode)
			close(fd);
	}
}

static json_object *jget(json_object *o, const char *k)
{
	json_object *v = NULL;
	cr_assert(json_object_object_get_ex(o, k, &v), "missing %s", k);
	return v;
}

static void check_shape(json_object *js, const struct td_hrry_desc *d,
			const char *what)
{
	cr_assert_eq(json_object_array_length(js), d->rank, "%s rank", what);
	for (uint32_t i = 0; i < d->rank; i++)
		cr_assert_eq((uint64_t)json_object_get_int64(
				     json_object_array_get_idx(js, i)),
			     d->shape[i], "%s dim %u", what, i);
}

Test(hrry, golden_results_equal_manifest_json)
{
	char path[4300];
	snprintf(path, sizeof(path), "%s/manifest.json", golden_dir());
	json_object *m = json_object_from_file(path);
	cr_assert_not_null(m, "%s", path);
	json_object *descs = jget(m, "descriptors");
	size_t nd = json_object_array_length(descs);
	cr_assert_eq(nd, NGOLDEN);
	for (size_t i = 0; i < nd; i++) {
		json_object *o = json_object_array_get_idx(descs, i);
		json_object *x = jget(o, "expect");
		const char *file = json_object_get_string(jget(o, "file"));
		size_t len;
		struct td_hrry_desc d;
		uint8_t *b = golden_file(file, &len);
		cr_assert_eq(td_hrry_desc_decode(b, len, &d, NULL), 0, "%s",
			     file);
		cr_assert_eq(d.version_major,
			     json_object_get_int(jget(x, "version_major")));
		cr_assert_eq(d.version_minor,
			     json_object_get_int(jget(x, "version_minor")));
		cr_assert_eq(d.type_tag,
			     json_object_get_int(jget(x, "element_type_tag")),
			     "%s", file);
		cr_assert_str_eq(td_hrry_type_name(d.type_tag),
				 json_object_get_string(
					 jget(x, "element_type")));
		check_shape(jget(x, "shape"), &d, file);
		cr_assert_eq(d.byte_offset, (uint64_t)json_object_get_int64(
						    jget(x, "byte_offset")));
		cr_assert_eq(d.layout_tag,
			     json_object_get_int(jget(x, "layout_tag")));
		json_object *bs = jget(x, "buffer_byte_sizes");
		cr_assert_eq(json_object_array_length(bs), d.buffer_count,
			     "%s", file);
		for (uint32_t k = 0; k < d.buffer_count; k++)
			cr_assert_eq(d.buffers[k].byte_size,
				     (uint64_t)json_object_get_int64(
					     json_object_array_get_idx(bs, k)));
		cr_assert_eq(!!(d.flags & TD_HRRY_DESC_HAS_QUANTIZATION),
			     json_object_get_boolean(
				     jget(x, "has_quantization")));
		cr_assert_eq(!!(d.flags & TD_HRRY_DESC_HAS_SHARD),
			     json_object_get_boolean(jget(x, "has_shard")));
		free(b);
	}
	json_object *files = jget(m, "files");
	cr_assert_eq(json_object_array_length(files), 1);
	json_object *f = json_object_array_get_idx(files, 0);
	cr_assert_str_eq(json_object_get_string(jget(f, "file")),
			 "files/basic.hrry");
	size_t len;
	uint8_t *b = golden_file("basic.hrry", &len);
	struct td_hrry_file_reader *r;
	struct td_hrry_err e;
	cr_assert_eq(open_mem(b, len, &r, &e), 0, "%s", e.reason);
	json_object *ts = jget(f, "tensors");
	uint64_t n;
	td_hrry_file_reader_tensor_count(r, &n);
	cr_assert_eq(n, json_object_array_length(ts));
	for (uint64_t i = 0; i < n; i++) {
		json_object *t = json_object_array_get_idx(ts, i);
		const char *nm;
		size_t nl;
		td_hrry_file_reader_tensor_name(r, i, &nm, &nl);
		const char *want = json_object_get_string(jget(t, "name"));
		cr_assert_eq(nl, strlen(want));
		cr_assert_eq(memcmp(nm, want, nl), 0);
		struct td_hrry_tensor tt;
		cr_assert_eq(td_hrry_file_reader_read_tensor(r, nm, nl, &tt,
							     &e),
			     0);
		cr_assert_eq(tt.desc.type_tag,
			     json_object_get_int(jget(t, "element_type_tag")));
		cr_assert_str_eq(td_hrry_type_name(tt.desc.type_tag),
				 json_object_get_string(
					 jget(t, "element_type")));
		check_shape(jget(t, "shape"), &tt.desc, want);
		cr_assert_eq(tt.data_len, (uint64_t)json_object_get_int64(
						  jget(t, "data_bytes")));
		for (uint64_t k = 0; k < tt.data_len; k++)
			cr_assert_eq(((const uint8_t *)tt.data)[k], 0);
		td_hrry_tensor_fini(&tt);
	}
	json_object *kvs = jget(f, "kv");
	td_hrry_file_reader_kv_count(r, &n);
	cr_assert_eq(n, json_object_array_length(kvs));
	for (uint64_t i = 0; i < n; i++) {
		json_object *k = json_object_array_get_idx(kvs, i);
		struct td_hrry_kv_entry kv;
		cr_assert_eq(td_hrry_file_reader_kv_entry(r, i, &kv), 0);
		const char *key = json_object_get_string(jget(k, "key"));
		cr_assert_eq(kv.key_len, strlen(key));
		cr_assert_eq(memcmp(kv.key, key, kv.key_len), 0);
		const char *kind = json_object_get_string(jget(k, "kind"));
		if (!strcmp(kind, "string")) {
			const char *v = json_object_get_string(
				jget(k, "value_string"));
			cr_assert_eq(kv.value.kind, TD_HRRY_KV_STRING);
			cr_assert_eq(kv.value.data_len, strlen(v));
			cr_assert_eq(memcmp(kv.value.data, v, strlen(v)), 0);
		} else {
			cr_assert_str_eq(kind, "int64");
			cr_assert_eq(kv.value.kind, TD_HRRY_KV_INT64);
			cr_assert_eq(kv.value.i64_value,
				     json_object_get_int64(
					     jget(k, "value_int")));
		}
	}
	td_hrry_file_reader_free(&r);
	free(b);
	json_object_put(m);
}

/* ---- the bad files of §18, derived from our own writer's output ---- */

static uint8_t *basic_bytes(size_t *len)
{
	struct hu_sink s = {0};
	write_basic(&s, NULL);
	*len = s.len;
	return s.buf;
}

Test(hrry, bad_index_byte_is_crc_mismatch)
{
	size_t len;
	uint8_t *f = basic_bytes(&len);
	uint64_t io = td__le64(f + len - 40);
	f[io + 12] ^= 0x01; /* a name byte */
	expect_open_error(f, len, TD_HRRY_E_INDEX_CRC32C_MISMATCH);
	free(f);
}

Test(hrry, bad_reserved_file_flag_bit)
{
	size_t len;
	uint8_t *f = basic_bytes(&len);
	f[12] |= 0x08;
	expect_open_error(f, len, TD_HRRY_E_RESERVED_FILE_FLAG_BITS);
	free(f);
}

Test(hrry, bad_truncated_below_104_bytes)
{
	size_t len;
	uint8_t *f = basic_bytes(&len);
	for (size_t k = 0; k < TD_HRRY_MIN_FILE_LEN; k++)
		expect_open_error(f, k, TD_HRRY_E_INVALID_HEADER);
	free(f);
}

Test(hrry, bad_trailer_magic)
{
	size_t len;
	uint8_t *f = basic_bytes(&len);
	f[len - 1] = 'Z';
	expect_open_error(f, len, TD_HRRY_E_INVALID_TRAILER_MAGIC);
	/* every truncation of a valid file is refused too (its trailer is
	 * gone), never read past */
	f[len - 1] = 'Y';
	for (size_t k = 104; k < len; k += 97) {
		struct td_hrry_file_reader *r = NULL;
		struct td_hrry_err e;
		cr_assert_lt(open_mem(f, k, &r, &e), 0, "prefix %zu", k);
	}
	free(f);
}

Test(hrry, bad_duplicate_name)
{
	/* two 4-byte names, the second renamed to the first, CRC fixed so
	 * the duplicate check is what refuses it */
	uint64_t io;
	struct hu_sink s = {0};
	struct td_hrry_transport t = hu_sink_transport(&s);
	struct td_hrry_file_writer *w;
	struct td_hrry_desc d;
	uint8_t z[4] = {0};
	const void *bufs[1] = {z};
	cr_assert_eq(td_hrry_file_writer_new(&t, NULL, &w, NULL), 0);
	td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_UINT8, 1, (uint64_t[]){4});
	cr_assert_eq(td_hrry_file_writer_write_tensor(w, "aaaa", 4, &d, bufs,
						      NULL),
		     0);
	cr_assert_eq(td_hrry_file_writer_write_tensor(w, "bbbb", 4, &d, bufs,
						      NULL),
		     0);
	cr_assert_eq(td_hrry_file_writer_finish(w, NULL, 0, NULL), 0);
	td_hrry_file_writer_free(&w);
	io = td__le64(s.buf + s.len - 40);
	uint8_t *n2 = s.buf + io + 8 + 2 + 4 + 32 + 2;
	cr_assert_eq(memcmp(n2, "bbbb", 4), 0);
	memcpy(n2, "aaaa", 4);
	fix_crc(s.buf, s.len);
	expect_open_error(s.buf, s.len, TD_HRRY_E_DUPLICATE_TENSOR_NAME);
	free(s.buf);
}

Test(hrry, bad_kv_bool_byte)
{
	struct td_hrry_kv_entry kv = {
		.key = "flag", .key_len = 4,
		.value = {.kind = TD_HRRY_KV_BOOL, .bool_value = true}};
	struct hu_sink s = kv_file(&kv, 1);
	uint64_t ko = td__le64(s.buf + s.len - 40 + 16);
	/* count 4, key_len 2, "flag" 4, tag 1, value */
	cr_assert_eq(s.buf[ko + 4 + 2 + 4], TD_HRRY_KV_BOOL);
	cr_assert_eq(s.buf[ko + 4 + 2 + 4 + 1], 1);
	s.buf[ko + 4 + 2 + 4 + 1] = 0x02;
	expect_open_error(s.buf, s.len, TD_HRRY_E_INVALID_HEADER);
	free(s.buf);
}

/* A 2-member partition of [4] float32: [0,2) and [2,4). */
static void write_partition(struct hu_sink *s, uint64_t off2, bool cut_last,
			    uint32_t member_count)
{
	struct hu_raw r;
	struct td_hrry_desc h, m;
	float v[2] = {1, 2};
	const void *bufs[1] = {v};
	cr_assert_eq(hu_raw_init(&r, s, NULL), 0);
	hu_head(&h, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){4},
		TD_HRRY_RULE_PARTITION, 0, member_count);
	cr_assert_eq(hu_raw_tensor(&r, "p", &h, NULL), 0);
	hu_member(&m, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){2},
		  (uint64_t[]){4}, (uint64_t[]){0});
	cr_assert_eq(hu_raw_tensor(&r, "p.0", &m, bufs), 0);
	if (!cut_last) {
		hu_member(&m, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){2},
			  (uint64_t[]){4}, (uint64_t[]){off2});
		cr_assert_eq(hu_raw_tensor(&r, "p.1", &m, bufs), 0);
	}
	cr_assert_eq(hu_raw_finish(&r, NULL, 0), 0);
}

static void expect_composite_error(const struct hu_sink *s,
				   enum td_hrry_error kind)
{
	struct td_hrry_file_reader *r;
	struct td_hrry_err e;
	struct td_hrry_composite c;
	cr_assert_eq(open_mem(s->buf, s->len, &r, &e), 0, "%s", e.reason);
	int rc = td_hrry_file_reader_read_composite(r, "p", 1, &c, &e);
	cr_assert_eq(rc, td_hrry_error_errno(kind));
	cr_assert_eq(e.kind, kind, "want %s got %s (%s)",
		     td_hrry_error_name(kind), td_hrry_error_name(e.kind),
		     e.reason);
	cr_assert_null(c.nodes);
	/* the members themselves stay readable one by one */
	struct td_hrry_tensor t;
	cr_assert_eq(td_hrry_file_reader_read_tensor(r, "p.0", 3, &t, &e), 0);
	td_hrry_tensor_fini(&t);
	td_hrry_file_reader_free(&r);
}

Test(hrry, bad_open_composite_member_count)
{
	struct hu_sink s = {0};
	write_partition(&s, 2, false, 2);
	/* patch the head's member_count to 0xFFFFFFFF: the head descriptor
	 * is at 64; member_count sits at 20 + 8 + 8 + 4 */
	uint8_t *mc = s.buf + 64 + 20 + 8 + 8 + 4;
	cr_assert_eq(td__le32(mc), 2);
	td__put_le32(mc, UINT32_MAX);
	struct td_hrry_file_reader *r;
	struct td_hrry_err e;
	cr_assert_eq(open_mem(s.buf, s.len, &r, &e), 0);
	struct td_hrry_desc d;
	cr_assert_eq(td_hrry_file_reader_read_descriptor(r, "p", 1, &d, &e),
		     -EBADMSG);
	cr_assert_eq(e.kind, TD_HRRY_E_OPEN_COMPOSITE);
	cr_assert_eq(e.offset, 64);
	td_hrry_file_reader_free(&r);
	free(s.buf);
}

Test(hrry, bad_composite_last_member_cut_off)
{
	struct hu_sink s = {0};
	write_partition(&s, 2, true, 2);
	expect_composite_error(&s, TD_HRRY_E_TORN_COMPOSITE);
	free(s.buf);
}

Test(hrry, bad_partition_gap_and_overlap)
{
	struct hu_sink s = {0};
	write_partition(&s, 1, false, 2); /* [0,2) and [1,3) */
	expect_composite_error(&s, TD_HRRY_E_COMPOSITE_PARTITION_OVERLAP);
	free(s.buf);
	memset(&s, 0, sizeof(s));
	write_partition(&s, 0, false, 1); /* one member [0,2) of [4] */
	expect_composite_error(&s, TD_HRRY_E_COMPOSITE_PARTITION_GAP);
	free(s.buf);
}

/* ---- hostile trailers and indexes never cause big requests ---- */

/* Drive the core over buf and check every need against the file size. */
static int drive_core(const uint8_t *buf, size_t len, struct td_hrry_err *e)
{
	struct td_hrry_rcore c;
	struct td_hrry_need need;
	void *mem[2] = {NULL, NULL};
	int nm = 0, rc;
	td_hrry_rcore_init(&c, len);
	while ((rc = td_hrry_rcore_step(&c, &need, e)) == TD_HRRY_STEP_NEED) {
		if (need.kind == TD_HRRY_NEED_READ) {
			cr_assert_leq(need.offset, len);
			cr_assert_leq(need.len, len - need.offset);
			rc = td_hrry_rcore_supply(&c, buf + need.offset,
						  need.len, e);
		} else {
			/* working memory never exceeds the bytes it
			 * describes */
			cr_assert_leq(need.len, len);
			cr_assert_lt(nm, 2);
			mem[nm] = malloc(need.len ? need.len : 1);
			rc = td_hrry_rcore_supply(&c, mem[nm++], 0, e);
		}
		if (rc)
			break;
	}
	free(mem[0]);
	free(mem[1]);
	return rc;
}

Test(hrry, hostile_trailer_and_index_are_bounded_before_reading)
{
	size_t len;
	uint8_t *f = basic_bytes(&len);
	uint8_t *t = f + len - 40;
	struct td_hrry_err e;
	cr_assert_eq(drive_core(f, len, &e), TD_HRRY_STEP_DONE);
	/* index_length of 2^63: refused before any read of the index */
	uint8_t save[40];
	memcpy(save, t, 40);
	td__put_le64(t + 8, UINT64_C(1) << 63);
	cr_assert_eq(drive_core(f, len, &e), -EOVERFLOW);
	cr_assert_eq(e.kind, TD_HRRY_E_INDEX_OVERRUNS_TRAILER);
	td__put_le64(t + 8, UINT64_MAX);
	cr_assert_eq(drive_core(f, len, &e), -EOVERFLOW);
	memcpy(t, save, 40);
	/* entry_count far beyond what index_length can hold */
	uint64_t io = td__le64(t);
	td__put_le64(f + io, UINT64_C(1) << 40);
	fix_crc(f, len);
	cr_assert_eq(drive_core(f, len, &e), -EBADMSG);
	cr_assert_eq(e.kind, TD_HRRY_E_INVALID_HEADER);
	td__put_le64(f + io, 2);
	fix_crc(f, len);
	/* KV range past the index */
	td__put_le32(t + 24, 0xFFFFFFF0u);
	cr_assert_eq(drive_core(f, len, &e), -EBADMSG);
	cr_assert_eq(e.kind, TD_HRRY_E_INVALID_HEADER);
	memcpy(t, save, 40);
	/* kv_count beyond the section */
	uint64_t ko = td__le64(t + 16);
	td__put_le32(f + ko, 0x7FFFFFFF);
	cr_assert_eq(drive_core(f, len, &e), -EBADMSG);
	cr_assert_eq(e.kind, TD_HRRY_E_INVALID_HEADER);
	free(f);
}

/*
 * The index and KV are read whole, their lengths bounded only by the
 * file's size, which a sparse file makes anything: a trailer declaring a
 * 6 GiB index had the driver read (and allocate) 6 GiB. The core now
 * refuses a length over tensord's cap at the trailer, before it asks for
 * the bytes; at the cap it still asks.
 */
Test(hrry, declared_index_and_kv_over_the_cap_are_refused_at_the_trailer)
{
	static const struct {
		uint64_t index_len, kv_len;
		int rc;
		uint64_t at; /* offset in the trailer of the refused field */
	} c[] = {
		{6ull << 30, 0, -EFBIG, 8},
		{TD_HRRY_MAX_INDEX_LEN + 8, 0, -EFBIG, 8},
		{TD_HRRY_MAX_INDEX_LEN, 0, TD_HRRY_STEP_NEED, 0},
		{64, 0xFFFFFFF8u, -EFBIG, 24},
		{64, TD_HRRY_MAX_KV_LEN + 8, -EFBIG, 24},
		{64, TD_HRRY_MAX_KV_LEN, TD_HRRY_STEP_NEED, 0},
	};
	uint8_t h[64] = "HRRYFILE", t[40] = {0};
	h[8] = 1;
	td__put_le32(h + 16, 4096);
	td__put_le64(h + 20, 64);
	memcpy(t + 36, "HRRY", 4);
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		/* KV at 64, index after it, file ends after the trailer */
		uint64_t kv_off = c[i].kv_len ? 64 : 0;
		uint64_t io = (64 + c[i].kv_len + 7) & ~7ull;
		uint64_t size = io + c[i].index_len + 40;
		struct td_hrry_rcore core;
		struct td_hrry_need need;
		struct td_hrry_err e = {0};
		td__put_le64(t, io);
		td__put_le64(t + 8, c[i].index_len);
		td__put_le64(t + 16, kv_off);
		td__put_le32(t + 24, (uint32_t)c[i].kv_len);
		td_hrry_rcore_init(&core, size);
		cr_assert_eq(td_hrry_rcore_step(&core, &need, &e),
			     TD_HRRY_STEP_NEED);
		cr_assert_eq(td_hrry_rcore_supply(&core, h, 64, &e), 0);
		cr_assert_eq(td_hrry_rcore_step(&core, &need, &e),
			     TD_HRRY_STEP_NEED);
		int rc = td_hrry_rcore_supply(&core, t, 40, &e);
		if (rc == 0)
			rc = td_hrry_rcore_step(&core, &need, &e);
		cr_expect_eq(rc, c[i].rc, "case %zu: %d (%s)", i, rc,
			     e.reason ? e.reason : "");
		if (c[i].rc == -EFBIG) {
			cr_expect_eq(e.kind, TD_HRRY_E_TOO_LARGE);
			cr_expect_str_eq(td_hrry_error_name(e.kind),
					 "TooLarge");
			cr_expect_eq(e.offset, size - 40 + c[i].at);
		} else {
			/* at the cap: the index is asked for, whole */
			cr_expect_eq(need.kind, TD_HRRY_NEED_READ);
			cr_expect_eq(need.offset, io);
			cr_expect_eq(need.len, c[i].index_len);
		}
	}
}

/* The writer refuses to emit an index a reader would refuse: 8200 names
 * of 65535 bytes make one over 512 MiB (nothing is emitted). */
Test(hrry, writer_refuses_an_index_over_the_cap)
{
	struct td_hrry_wcore w;
	struct td_hrry_err e = {0};
	size_t n = 8200;
	char *name = malloc(TD_HRRY_MAX_NAME_LEN);
	struct td_hrry_wentry *ents = calloc(n, sizeof(*ents));
	cr_assert(name && ents);
	memset(name, 'a', TD_HRRY_MAX_NAME_LEN);
	for (size_t i = 0; i < n; i++)
		ents[i] = (struct td_hrry_wentry){
			.name = name, .name_len = TD_HRRY_MAX_NAME_LEN};
	struct td_hrry_slice sl;
	cr_assert_eq(td_hrry_wcore_init(&w, NULL, &e), 0);
	while (td_hrry_wcore_next(&w, &sl) == TD_HRRY_STEP_NEED)
		td_hrry_wcore_advance(&w, sl.len); /* the header */
	cr_expect_eq(td_hrry_wcore_begin_finish(&w, NULL, 0, NULL, ents, n,
						NULL, &e),
		     -EFBIG);
	cr_expect_eq(e.kind, TD_HRRY_E_TOO_LARGE);
	/* one fewer tenth fits */
	cr_expect_eq(td_hrry_wcore_begin_finish(&w, NULL, 0, NULL, ents,
						n - 820, NULL, &e),
		     0, "%s", e.reason);
	free(ents);
	free(name);
}

Test(hrry, header_checks_in_order)
{
	size_t len;
	uint8_t *f = basic_bytes(&len);
	uint8_t h[64];
	memcpy(h, f, 64);
	f[0] = 'X';
	expect_open_error(f, len, TD_HRRY_E_INVALID_FILE_MAGIC);
	memcpy(f, h, 64);
	f[8] = 2;
	expect_open_error(f, len, TD_HRRY_E_UNSUPPORTED_CONTAINER_VERSION);
	f[8] = 0;
	expect_open_error(f, len, TD_HRRY_E_UNSUPPORTED_CONTAINER_VERSION);
	memcpy(f, h, 64);
	f[9] = 7; /* a higher minor is accepted */
	struct td_hrry_file_reader *r;
	struct td_hrry_err e;
	cr_assert_eq(open_mem(f, len, &r, &e), 0);
	td_hrry_file_reader_free(&r);
	memcpy(f, h, 64);
	f[40] = 1;
	expect_open_error(f, len, TD_HRRY_E_RESERVED_BYTES_NON_ZERO);
	memcpy(f, h, 64);
	td__put_le32(f + 16, 4096 * 3);
	expect_open_error(f, len, TD_HRRY_E_INVALID_HEADER);
	td__put_le32(f + 16, 2048);
	expect_open_error(f, len, TD_HRRY_E_INVALID_HEADER);
	memcpy(f, h, 64);
	td__put_le64(f + 20, 60);
	expect_open_error(f, len, TD_HRRY_E_INVALID_HEADER);
	memcpy(f, h, 64);
	f[12] |= TD_HRRY_FILE_HAS_KV_METADATA; /* KV exists: fine */
	cr_assert_eq(open_mem(f, len, &r, &e), 0);
	td_hrry_file_reader_free(&r);
	memcpy(f, h, 64);
	f[12] &= (uint8_t)~TD_HRRY_FILE_HAS_INDEX_CRC32C; /* CRC field set */
	expect_open_error(f, len, TD_HRRY_E_INVALID_HEADER);
	free(f);
}

Test(hrry, per_tensor_length_mismatch_and_layout_checks)
{
	size_t len;
	uint8_t *f = basic_bytes(&len);
	uint64_t io = td__le64(f + len - 40);
	uint8_t *dl = f + io + 8 + 2 + 7 + 8; /* weights' descriptor_length */
	cr_assert_eq(td__le32(dl), 61);
	td__put_le32(dl, 64);
	fix_crc(f, len);
	struct td_hrry_file_reader *r;
	struct td_hrry_err e;
	cr_assert_eq(open_mem(f, len, &r, &e), 0);
	struct td_hrry_desc d;
	cr_assert_eq(td_hrry_file_reader_read_descriptor(r, "weights", 7, &d,
							 &e),
		     -EBADMSG);
	cr_assert_eq(e.kind, TD_HRRY_E_DESCRIPTOR_LENGTH_MISMATCH);
	/* bias stays readable */
	cr_assert_eq(td_hrry_file_reader_read_descriptor(r, "bias", 4, &d, &e),
		     0);
	td_hrry_file_reader_free(&r);
	td__put_le32(dl, 61);
	uint8_t *dlen = dl + 4 + 8; /* weights' data_length */
	td__put_le64(dlen, 15);
	fix_crc(f, len);
	cr_assert_eq(open_mem(f, len, &r, &e), 0);
	cr_assert_eq(td_hrry_file_reader_read_descriptor(r, "weights", 7, &d,
							 &e),
		     -EBADMSG);
	cr_assert_eq(e.kind, TD_HRRY_E_INVALID_LAYOUT);
	td_hrry_file_reader_free(&r);
	free(f);
}

/* ---- descriptor checks, one field at a time ---- */

static int desc_bytes(const struct td_hrry_desc *d, uint8_t *buf)
{
	int n = td_hrry_desc_encode(d, buf, 8192, NULL);
	cr_assert_gt(n, 0);
	return n;
}

static void expect_desc_error(const uint8_t *b, int n, enum td_hrry_error k)
{
	struct td_hrry_desc d;
	struct td_hrry_err e = {0};
	cr_assert_lt(td_hrry_desc_decode(b, (size_t)n, &d, &e), 0,
		     "expected %s", td_hrry_error_name(k));
	cr_assert_eq(e.kind, k, "expected %s got %s (%s)",
		     td_hrry_error_name(k), td_hrry_error_name(e.kind),
		     e.reason);
}

Test(hrry, descriptor_field_checks_name_their_error)
{
	uint8_t b[8192], c[8192];
	struct td_hrry_desc d;
	td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_FLOAT32, 2,
				(uint64_t[]){2, 3});
	int n = desc_bytes(&d, b);
	cr_assert_eq(n, 45 + 16);
#define MUT(stmt, kind)                                                       \
	do {                                                                  \
		memcpy(c, b, (size_t)n);                                      \
		stmt;                                                         \
		expect_desc_error(c, n, kind);                                \
	} while (0)
	MUT(c[0] = 'h', TD_HRRY_E_INVALID_MAGIC);
	MUT(c[4] = 2, TD_HRRY_E_UNSUPPORTED_DESCRIPTOR_VERSION);
	MUT(td__put_le32(c + 6, 19), TD_HRRY_E_DESCRIPTOR_TOO_SHORT);
	MUT(td__put_le32(c + 6, 62), TD_HRRY_E_DESCRIPTOR_TRUNCATED);
	MUT(td__put_le32(c + 6, 40), TD_HRRY_E_DESCRIPTOR_TRUNCATED);
	MUT(c[10] = 0x20, TD_HRRY_E_RESERVED_DESCRIPTOR_FLAG_BITS_SET);
	MUT(c[14] = 0x00, TD_HRRY_E_INVALID_TYPE_TAG);
	MUT(c[14] = 0x47, TD_HRRY_E_RESERVED_TYPE_TAG);
	MUT(c[14] = 0x30, TD_HRRY_E_UNKNOWN_TYPE_TAG);
	MUT(c[14] = 0xF3, TD_HRRY_E_EXTENSION_TYPE_FLAG_MISMATCH);
	MUT(c[15] = 0x00, TD_HRRY_E_INVALID_LAYOUT_TAG);
	MUT(c[15] = 0x20, TD_HRRY_E_RESERVED_LAYOUT_TAG);
	MUT(td__put_le32(c + 16, 65), TD_HRRY_E_RANK_EXCEEDS_MAXIMUM);
	/* buffer_count at 44, handle at 45: size 8, alignment 4, device, sync, mem, res */
	MUT(c[45 + 15] = 1, TD_HRRY_E_RESERVED_BYTES_NON_ZERO);
	MUT(c[45 + 12] = 0x20, TD_HRRY_E_INVALID_DEVICE_TAG);
	MUT(c[45 + 12] = 0xFF, TD_HRRY_E_INVALID_DEVICE_TAG);
	MUT(c[45 + 13] = 3, TD_HRRY_E_INVALID_SYNC_MODE);
	MUT(c[45 + 14] = 4, TD_HRRY_E_INVALID_MEMORY_CLASS);
	MUT(td__put_le32(c + 45 + 8, 48), TD_HRRY_E_ALIGNMENT_NOT_POWER_OF_TWO);
	MUT(td__put_le32(c + 45 + 8, 32), TD_HRRY_E_ALIGNMENT_BELOW_MINIMUM);
	MUT(c[45 + 13] = 1, TD_HRRY_E_CPU_BUFFER_NOT_PRODUCER_SYNCED);
	MUT(c[44] = 0, TD_HRRY_E_EMPTY_BUFFER_TABLE);
	MUT(td__put_le64(c + 36, 25), TD_HRRY_E_INVALID_LAYOUT);
	/* accepted variants: CUDA + event sync, private memory class */
	memcpy(c, b, (size_t)n);
	c[45 + 12] = 1;
	c[45 + 13] = 1;
	c[45 + 14] = 0xF0;
	cr_assert_eq(td_hrry_desc_decode(c, (size_t)n, &d, NULL), 0);
	/* a higher minor may carry trailing bytes */
	memcpy(c, b, (size_t)n);
	c[5] = 1;
	td__put_le32(c + 6, (uint32_t)n + 3);
	c[n] = c[n + 1] = c[n + 2] = 0xAA;
	cr_assert_eq(td_hrry_desc_decode(c, (size_t)n + 3, &d, NULL), 0);
	/* shard out of bounds, statistics mask, composite member role */
	struct td_hrry_desc s;
	hu_member(&s, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){4},
		  (uint64_t[]){8}, (uint64_t[]){5});
	n = td_hrry_desc_encode(&s, c, sizeof(c), NULL);
	expect_desc_error(c, n, TD_HRRY_E_SHARD_OUT_OF_BOUNDS);
	hu_member(&s, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){4},
		  (uint64_t[]){UINT64_MAX}, (uint64_t[]){UINT64_MAX});
	n = td_hrry_desc_encode(&s, c, sizeof(c), NULL);
	expect_desc_error(c, n, TD_HRRY_E_SHARD_OUT_OF_BOUNDS);
	td_hrry_desc_init_dense(&s, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){4});
	s.flags = TD_HRRY_DESC_HAS_STATISTICS;
	s.stats.computed_mask = 0x40;
	n = td_hrry_desc_encode(&s, c, sizeof(c), NULL);
	expect_desc_error(c, n, TD_HRRY_E_STATISTICS_RESERVED_MASK_BITS_SET);
	s.stats.computed_mask = 0x3F;
	n = td_hrry_desc_encode(&s, c, sizeof(c), NULL);
	cr_assert_eq(n, 45 + 8 + 72);
	cr_assert_eq(td_hrry_desc_decode(c, (size_t)n, &d, NULL), 0);
	/* heads: byte_offset, rule, combine_op, open */
	hu_head(&s, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){4},
		TD_HRRY_RULE_GROUP, 0, 1);
	n = td_hrry_desc_encode(&s, c, sizeof(c), NULL);
	cr_assert_eq(n, 37 + 8);
	cr_assert_eq(td_hrry_desc_decode(c, (size_t)n, &d, NULL), 0);
	s.rule = 4;
	n = td_hrry_desc_encode(&s, c, sizeof(c), NULL);
	expect_desc_error(c, n, TD_HRRY_E_INVALID_COMPOSITE_HEAD);
	s.rule = TD_HRRY_RULE_OVERLAY;
	s.combine_op = 0;
	n = td_hrry_desc_encode(&s, c, sizeof(c), NULL);
	expect_desc_error(c, n, TD_HRRY_E_INVALID_COMPOSITE_HEAD);
	s.rule = TD_HRRY_RULE_GROUP;
	s.member_count = UINT32_MAX;
	n = td_hrry_desc_encode(&s, c, sizeof(c), NULL);
	expect_desc_error(c, n, TD_HRRY_E_OPEN_COMPOSITE);
	/* rank 0 must be row-major */
	td_hrry_desc_init_dense(&s, TD_HRRY_TYPE_FLOAT32, 0, NULL);
	s.layout_tag = TD_HRRY_LAYOUT_COLUMN_MAJOR;
	n = td_hrry_desc_encode(&s, c, sizeof(c), NULL);
	expect_desc_error(c, n, TD_HRRY_E_INVALID_LAYOUT);
#undef MUT
}

Test(hrry, support_check_follows_the_table_order)
{
	struct td_hrry_desc d;
	struct td_hrry_err e;
	td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){4});
	d.type_tag = TD_HRRY_TYPE_INT4;
	d.flags = TD_HRRY_DESC_HAS_QUANTIZATION;
	d.shape[0] = TD_HRRY_DYNAMIC_DIM;
	d.layout_tag = TD_HRRY_LAYOUT_STRIDED;
	cr_assert_eq(td_hrry_desc_supported(&d, &e), -ENOTSUP);
	cr_assert_eq(e.kind, TD_HRRY_E_UNSUPPORTED_LAYOUT);
	d.layout_tag = TD_HRRY_LAYOUT_ROW_MAJOR;
	td_hrry_desc_supported(&d, &e);
	cr_assert_eq(e.kind, TD_HRRY_E_UNSUPPORTED_QUANTIZATION);
	d.flags = 0;
	td_hrry_desc_supported(&d, &e);
	cr_assert_eq(e.kind, TD_HRRY_E_UNSUPPORTED_TYPE);
	d.type_tag = TD_HRRY_TYPE_FLOAT32;
	td_hrry_desc_supported(&d, &e);
	cr_assert_eq(e.kind, TD_HRRY_E_UNSUPPORTED_SHAPE);
	d.shape[0] = 4;
	cr_assert_eq(td_hrry_desc_supported(&d, &e), 0);
}

/* ---- round trips ---- */

static struct td_hrry_file_reader *reopen(struct hu_sink *s)
{
	struct td_hrry_file_reader *r;
	struct td_hrry_err e;
	cr_assert_eq(open_mem(s->buf, s->len, &r, &e), 0, "%s (%s @%lu)",
		     e.reason, td_hrry_error_name(e.kind),
		     (unsigned long)e.offset);
	return r;
}

Test(hrry, round_trip_every_dtype_rank0_empty_and_sorted_index)
{
	static const uint8_t tags[] = {
		TD_HRRY_TYPE_FLOAT16, TD_HRRY_TYPE_FLOAT32,
		TD_HRRY_TYPE_FLOAT64, TD_HRRY_TYPE_INT8,
		TD_HRRY_TYPE_UINT8,   TD_HRRY_TYPE_INT16,
		TD_HRRY_TYPE_UINT16,  TD_HRRY_TYPE_INT32,
		TD_HRRY_TYPE_UINT32,  TD_HRRY_TYPE_INT64,
		TD_HRRY_TYPE_UINT64,
	};
	for (int sorted = 0; sorted < 2; sorted++) {
		struct hu_sink s = {0};
		struct td_hrry_transport t = hu_sink_transport(&s);
		struct td_hrry_writer_options o = {.sorted_index = sorted,
						   .data_buffer_alignment =
							   sorted ? 8192 : 0};
		struct td_hrry_file_writer *w;
		struct td_hrry_desc d;
		uint8_t data[3 * 5 * 8];
		for (size_t i = 0; i < sizeof(data); i++)
			data[i] = (uint8_t)(i * 13 + 1);
		const void *bufs[1] = {data};
		char name[32];
		cr_assert_eq(td_hrry_file_writer_new(&t, &o, &w, NULL), 0);
		/* names written in reverse order so sorting matters */
		for (int i = (int)sizeof(tags) - 1; i >= 0; i--) {
			td_hrry_desc_init_dense(&d, tags[i], 2,
						(uint64_t[]){3, 5});
			snprintf(name, sizeof(name), "t%02d/%s", i,
				 td_hrry_type_name(tags[i]));
			cr_assert_eq(td_hrry_file_writer_write_tensor(
					     w, name, strlen(name), &d, bufs,
					     NULL),
				     0);
		}
		td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_FLOAT64, 0, NULL);
		cr_assert_eq(td_hrry_file_writer_write_tensor(w, "scalar", 6,
							      &d, bufs, NULL),
			     0);
		td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_INT32, 2,
					(uint64_t[]){0, 7});
		cr_assert_eq(td_hrry_file_writer_write_tensor(w, "empty", 5,
							      &d, bufs, NULL),
			     0);
		cr_assert_eq(td_hrry_file_writer_finish(w, NULL, 0, NULL), 0);
		td_hrry_file_writer_free(&w);

		struct td_hrry_file_reader *r = reopen(&s);
		uint64_t n;
		td_hrry_file_reader_tensor_count(r, &n);
		cr_assert_eq(n, sizeof(tags) + 2);
		cr_assert_eq(!!(td_hrry_file_reader_flags(r) &
				TD_HRRY_FILE_SORTED_INDEX),
			     sorted);
		cr_assert_eq(td_hrry_file_reader_alignment(r),
			     sorted ? 8192 : 4096);
		const char *prev = NULL;
		size_t prev_len = 0;
		for (uint64_t i = 0; i < n; i++) {
			const char *nm;
			size_t nl;
			td_hrry_file_reader_tensor_name(r, i, &nm, &nl);
			if (sorted && prev)
				cr_assert_lt(memcmp(prev, nm,
						    nl < prev_len ? nl :
								    prev_len),
					     1);
			prev = nm;
			prev_len = nl;
		}
		for (size_t i = 0; i < sizeof(tags); i++) {
			struct td_hrry_tensor tt;
			snprintf(name, sizeof(name), "t%02zu/%s", i,
				 td_hrry_type_name(tags[i]));
			cr_assert_eq(td_hrry_file_reader_read_tensor(
					     r, name, strlen(name), &tt, NULL),
				     0, "%s", name);
			cr_assert_eq(tt.desc.type_tag, tags[i]);
			uint64_t want = 15ull * td_hrry_type_size(tags[i]);
			cr_assert_eq(tt.data_len, want);
			cr_assert_eq(memcmp(tt.data, data, want), 0);
			cr_assert_eq(tt.entry.data_offset %
					     td_hrry_file_reader_alignment(r),
				     0);
			td_hrry_tensor_fini(&tt);
			/* read_tensor_into: exact fit, then too small */
			uint8_t into[sizeof(data)];
			cr_assert_eq(td_hrry_file_reader_read_tensor_into(
					     r, name, strlen(name), into, want,
					     NULL, NULL),
				     0);
			cr_assert_eq(memcmp(into, data, want), 0);
			cr_assert_eq(td_hrry_file_reader_read_tensor_into(
					     r, name, strlen(name), into,
					     want - 1, NULL, NULL),
				     -ENOBUFS);
		}
		struct td_hrry_tensor tt;
		cr_assert_eq(td_hrry_file_reader_read_tensor(r, "scalar", 6,
							     &tt, NULL),
			     0);
		cr_assert_eq(tt.desc.rank, 0);
		cr_assert_eq(tt.data_len, 8);
		cr_assert_eq(memcmp(tt.data, data, 8), 0);
		td_hrry_tensor_fini(&tt);
		cr_assert_eq(td_hrry_file_reader_read_tensor(r, "empty", 5, &tt,
							     NULL),
			     0);
		cr_assert_eq(tt.data_len, 0);
		cr_assert_eq(tt.entry.data_length, 0);
		cr_assert_eq(tt.desc.buffer_count, 1);
		td_hrry_tensor_fini(&tt);
		/* every name is found by the binary search; others not */
		cr_assert_eq(td_hrry_file_reader_read_tensor(r, "t99", 3, &tt,
							     NULL),
			     -ENOENT);
		cr_assert_eq(td_hrry_file_reader_read_tensor(r, "", 0, &tt,
							     NULL),
			     -ENOENT);
		td_hrry_file_reader_free(&r);
		free(s.buf);
	}
}

/*
 * An ARRAY's items are decoded into one td_hrry_kv_value each, some 40
 * times a one-byte bool's bytes in the file: a KV of 1 GiB of them had
 * td_hrry_file_reader_kv_entry() (inspect, load) calloc 40 GiB. An
 * array over TD_HRRY_MAX_KV_ITEMS is now -EFBIG, not decoded; one at
 * the cap still is.
 */
Test(hrry, kv_array_items_over_the_cap_are_not_decoded)
{
	size_t n = TD_HRRY_MAX_KV_ITEMS + 1;
	struct td_hrry_kv_value *items = calloc(n, sizeof(*items));
	cr_assert_not_null(items);
	for (size_t k = 0; k < n; k++)
		items[k] = (struct td_hrry_kv_value){.kind = TD_HRRY_KV_BOOL,
						     .bool_value = k & 1};
	struct td_hrry_kv_entry kv[] = {
		{"at", 2, {.kind = TD_HRRY_KV_ARRAY, .item_kind = TD_HRRY_KV_BOOL,
			   .items = items, .item_count = n - 1}},
		{"over", 4, {.kind = TD_HRRY_KV_ARRAY,
			     .item_kind = TD_HRRY_KV_BOOL, .items = items,
			     .item_count = n}},
	};
	struct hu_sink s = kv_file(kv, 2);
	free(items);
	struct td_hrry_file_reader *r = reopen(&s);
	struct td_hrry_kv_entry g;
	cr_assert_eq(td_hrry_file_reader_kv_entry(r, 0, &g), 0);
	cr_expect_eq(g.value.item_count, n - 1);
	cr_expect(g.value.items[n - 2].bool_value);
	cr_expect_eq(td_hrry_file_reader_kv_entry(r, 1, &g), -EFBIG);
	td_hrry_file_reader_free(&r);
	free(s.buf);
}

Test(hrry, round_trip_kv_of_all_seven_kinds)
{
	static const char *strs[] = {"a", "bc", ""};
	struct td_hrry_kv_value sitems[3], iitems[2], uitems[2], fitems[2],
		bitems[3], yitems[2];
	for (int i = 0; i < 3; i++)
		sitems[i] = (struct td_hrry_kv_value){
			.kind = TD_HRRY_KV_STRING,
			.data = (const uint8_t *)strs[i],
			.data_len = strlen(strs[i])};
	iitems[0] = (struct td_hrry_kv_value){.kind = TD_HRRY_KV_INT64,
					      .i64_value = -5};
	iitems[1] = (struct td_hrry_kv_value){.kind = TD_HRRY_KV_INT64,
					      .i64_value = INT64_MAX};
	uitems[0] = (struct td_hrry_kv_value){.kind = TD_HRRY_KV_UINT64,
					      .u64_value = 1};
	uitems[1] = (struct td_hrry_kv_value){.kind = TD_HRRY_KV_UINT64,
					      .u64_value = UINT64_MAX};
	fitems[0] = (struct td_hrry_kv_value){.kind = TD_HRRY_KV_FLOAT64,
					      .f64_value = 0.5};
	fitems[1] = (struct td_hrry_kv_value){.kind = TD_HRRY_KV_FLOAT64,
					      .f64_value = -1e300};
	for (int i = 0; i < 3; i++)
		bitems[i] = (struct td_hrry_kv_value){
			.kind = TD_HRRY_KV_BOOL, .bool_value = i != 1};
	yitems[0] = (struct td_hrry_kv_value){
		.kind = TD_HRRY_KV_BYTES, .data = (const uint8_t *)"\0\1",
		.data_len = 2};
	yitems[1] = (struct td_hrry_kv_value){.kind = TD_HRRY_KV_BYTES};
	struct td_hrry_kv_entry kv[] = {
		{"s", 1, {.kind = TD_HRRY_KV_STRING,
			  .data = (const uint8_t *)"héllo", .data_len = 6}},
		{"i", 1, {.kind = TD_HRRY_KV_INT64, .i64_value = INT64_MIN}},
		{"u", 1, {.kind = TD_HRRY_KV_UINT64, .u64_value = UINT64_MAX}},
		{"f", 1, {.kind = TD_HRRY_KV_FLOAT64, .f64_value = 3.25}},
		{"b", 1, {.kind = TD_HRRY_KV_BOOL, .bool_value = true}},
		{"y", 1, {.kind = TD_HRRY_KV_BYTES,
			  .data = (const uint8_t *)"\xff\x00\x7f", .data_len = 3}},
		{"as", 2, {.kind = TD_HRRY_KV_ARRAY, .item_kind = TD_HRRY_KV_STRING,
			   .items = sitems, .item_count = 3}},
		{"ai", 2, {.kind = TD_HRRY_KV_ARRAY, .item_kind = TD_HRRY_KV_INT64,
			   .items = iitems, .item_count = 2}},
		{"au", 2, {.kind = TD_HRRY_KV_ARRAY, .item_kind = TD_HRRY_KV_UINT64,
			   .items = uitems, .item_count = 2}},
		{"af", 2, {.kind = TD_HRRY_KV_ARRAY,
			   .item_kind = TD_HRRY_KV_FLOAT64, .items = fitems,
			   .item_count = 2}},
		{"ab", 2, {.kind = TD_HRRY_KV_ARRAY, .item_kind = TD_HRRY_KV_BOOL,
			   .items = bitems, .item_count = 3}},
		{"ay", 2, {.kind = TD_HRRY_KV_ARRAY, .item_kind = TD_HRRY_KV_BYTES,
			   .items = yitems, .item_count = 2}},
	};
	size_t nkv = sizeof(kv) / sizeof(kv[0]);
	struct hu_sink s = kv_file(kv, nkv);
	/* the spec's own array example bytes: ["a","bc"] as the first two */
	static const uint8_t ex[] = {7, 1, 3, 0, 0, 0, 1, 0, 0, 0, 'a',
				     2, 0, 0, 0, 'b', 'c'};
	cr_assert_not_null(memmem(s.buf, s.len, ex, sizeof(ex)));
	struct td_hrry_file_reader *r = reopen(&s);
	uint64_t n;
	td_hrry_file_reader_kv_count(r, &n);
	cr_assert_eq(n, nkv);
	for (size_t i = 0; i < nkv; i++) {
		struct td_hrry_kv_entry g;
		cr_assert_eq(td_hrry_file_reader_kv_entry(r, i, &g), 0);
		cr_assert_eq(g.key_len, kv[i].key_len);
		cr_assert_eq(memcmp(g.key, kv[i].key, g.key_len), 0);
		const struct td_hrry_kv_value *a = &kv[i].value, *b = &g.value;
		cr_assert_eq(b->kind, a->kind);
		size_t cnt = a->kind == TD_HRRY_KV_ARRAY ? a->item_count : 1;
		if (a->kind == TD_HRRY_KV_ARRAY) {
			cr_assert_eq(b->item_count, a->item_count);
			cr_assert_eq(b->item_kind, a->item_kind);
		}
		for (size_t k = 0; k < cnt; k++) {
			const struct td_hrry_kv_value *x =
				a->kind == TD_HRRY_KV_ARRAY ? &a->items[k] : a;
			const struct td_hrry_kv_value *y =
				a->kind == TD_HRRY_KV_ARRAY ? &b->items[k] : b;
			cr_assert_eq(y->kind, x->kind);
			cr_assert_eq(y->i64_value, x->i64_value);
			cr_assert_eq(y->u64_value, x->u64_value);
			cr_assert_eq(memcmp(&y->f64_value, &x->f64_value, 8), 0);
			cr_assert_eq(y->bool_value, x->bool_value);
			cr_assert_eq(y->data_len, x->data_len);
			if (x->data_len)
				cr_assert_eq(memcmp(y->data, x->data,
						    x->data_len),
					     0);
		}
	}
	td_hrry_file_reader_free(&r);
	/* flipping the KV's first key to the second's: DuplicateKvKey */
	uint64_t ko = td__le64(s.buf + s.len - 40 + 16);
	cr_assert_eq(s.buf[ko + 4 + 2], 's');
	s.buf[ko + 4 + 2] = 'i';
	expect_open_error(s.buf, s.len, TD_HRRY_E_DUPLICATE_KV_KEY);
	s.buf[ko + 4] = 0; /* key_len 0 */
	expect_open_error(s.buf, s.len, TD_HRRY_E_KV_KEY_EMPTY);
	free(s.buf);
}

Test(hrry, writer_refuses_bad_input_and_is_poisoned_after)
{
	struct hu_sink s = {0};
	struct td_hrry_transport t = hu_sink_transport(&s);
	struct td_hrry_file_writer *w;
	struct td_hrry_desc d;
	struct td_hrry_err e;
	uint8_t z[64] = {0};
	const void *bufs[1] = {z};
	struct td_hrry_writer_options bad = {.data_buffer_alignment = 1000};
	cr_assert_eq(td_hrry_file_writer_new(&t, &bad, &w, &e), -EINVAL);
	cr_assert_null(w);
	t = hu_sink_transport(&s);
	cr_assert_eq(td_hrry_file_writer_new(&t, NULL, &w, &e), 0);
	td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_UINT8, 1, (uint64_t[]){4});
	cr_assert_eq(td_hrry_file_writer_write_tensor(w, "a", 1, &d, bufs, &e),
		     0);
	cr_assert_eq(td_hrry_file_writer_write_tensor(w, "a", 1, &d, bufs, &e),
		     -EINVAL);
	cr_assert_eq(td_hrry_file_writer_write_tensor(w, "b", 1, &d, bufs, &e),
		     -ECANCELED);
	cr_assert_eq(e.kind, TD_HRRY_E_WRITER_POISONED);
	cr_assert_eq(td_hrry_file_writer_finish(w, NULL, 0, &e), -ECANCELED);
	td_hrry_file_writer_free(&w);
	free(s.buf);
	memset(&s, 0, sizeof(s));
	t = hu_sink_transport(&s);
	cr_assert_eq(td_hrry_file_writer_new(&t, NULL, &w, &e), 0);
	d.layout_tag = TD_HRRY_LAYOUT_STRIDED;
	cr_assert_eq(td_hrry_file_writer_write_tensor(w, "a", 1, &d, bufs, &e),
		     -ENOTSUP);
	cr_assert_eq(e.kind, TD_HRRY_E_UNSUPPORTED_LAYOUT);
	td_hrry_file_writer_free(&w);
	free(s.buf);
	memset(&s, 0, sizeof(s));
	t = hu_sink_transport(&s);
	cr_assert_eq(td_hrry_file_writer_new(&t, NULL, &w, &e), 0);
	td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_UINT8, 1, (uint64_t[]){4});
	d.buffers[0].byte_size = 5;
	cr_assert_eq(td_hrry_file_writer_write_tensor(w, "a", 1, &d, bufs, &e),
		     -EINVAL);
	td_hrry_file_writer_free(&w);
	free(s.buf);
}

static int fail_write(void *ctx, const void *p, size_t n, size_t *put)
{
	(void)ctx;
	(void)p;
	(void)n;
	(void)put;
	return -ENOSPC;
}

static int released;
static void count_release(void *ctx)
{
	(void)ctx;
	released++;
}

Test(hrry, transport_errors_pass_through_and_release_once)
{
	struct td_hrry_transport t = {.write = fail_write,
				      .release = count_release};
	struct td_hrry_file_writer *w = NULL;
	struct td_hrry_err e;
	released = 0;
	cr_assert_eq(td_hrry_file_writer_new(&t, NULL, &w, &e), -ENOSPC);
	cr_assert_eq(e.kind, TD_HRRY_E_IO);
	cr_assert_eq(e.code, -ENOSPC);
	cr_assert_eq(released, 1);
	/* reader: short file through a transport with a release */
	struct td_hrry_transport rt;
	td_hrry_transport_mem("x", 1, &rt);
	struct td_hrry_file_reader *r = NULL;
	cr_assert_eq(td_hrry_file_reader_new(&rt, &r, &e), -EBADMSG);
	td_hrry_file_reader_free(NULL);
	td_hrry_file_reader_free(&r);
}

/* ---- composites of all three rules, nesting ---- */

static void node(struct td_hrry_node *n, const char *name,
		 const struct td_hrry_desc *d, const void *data)
{
	memset(n, 0, sizeof(*n));
	n->tensor.entry.name = name;
	n->tensor.entry.name_len = strlen(name);
	n->tensor.desc = *d;
	n->tensor.data = data;
	n->tensor.data_len = d->buffer_count ? d->buffers[0].byte_size : 0;
}

/*
 * partition [4,4] = rows 0-1 | rows 2-3, the second itself a nested
 * partition of two [1,4] shards: 5 nodes
 */
static void partition_tree(struct td_hrry_node *nodes, const float *v)
{
	struct td_hrry_desc h, m;
	hu_head(&h, TD_HRRY_TYPE_FLOAT32, 2, (uint64_t[]){4, 4},
		TD_HRRY_RULE_PARTITION, 0, 2);
	node(&nodes[0], "part", &h, NULL);
	hu_member(&m, TD_HRRY_TYPE_FLOAT32, 2, (uint64_t[]){2, 4},
		  (uint64_t[]){4, 4}, (uint64_t[]){0, 0});
	node(&nodes[1], "part.top", &m, v);
	hu_head(&h, TD_HRRY_TYPE_FLOAT32, 2, (uint64_t[]){2, 4},
		TD_HRRY_RULE_PARTITION, 0, 2);
	h.flags = TD_HRRY_DESC_HAS_SHARD;
	h.parent_shape[0] = 4;
	h.parent_shape[1] = 4;
	h.shard_offset[0] = 2;
	node(&nodes[2], "part.bottom", &h, NULL);
	hu_member(&m, TD_HRRY_TYPE_FLOAT32, 2, (uint64_t[]){1, 4},
		  (uint64_t[]){2, 4}, (uint64_t[]){0, 0});
	node(&nodes[3], "part.bottom.0", &m, v + 8);
	hu_member(&m, TD_HRRY_TYPE_FLOAT32, 2, (uint64_t[]){1, 4},
		  (uint64_t[]){2, 4}, (uint64_t[]){1, 0});
	node(&nodes[4], "part.bottom.1", &m, v + 12);
}

Test(hrry, composites_of_all_three_rules_and_nesting_round_trip)
{
	float v[16];
	for (int i = 0; i < 16; i++)
		v[i] = (float)i;
	for (int form = 0; form < 2; form++) {
		struct hu_sink s = {0};
		struct td_hrry_transport t = hu_sink_transport(&s);
		struct td_hrry_writer_options o = {.head_padding =
							   (uint32_t)form};
		struct td_hrry_file_writer *w;
		struct td_hrry_err e;
		struct td_hrry_desc h, m;
		struct td_hrry_node nodes[8];
		cr_assert_eq(td_hrry_file_writer_new(&t, &o, &w, &e), 0);
		partition_tree(nodes, v);
		cr_assert_eq(td_hrry_file_writer_write_composite(w, nodes, 5,
								 &e),
			     0, "%s", e.reason);
		/* overlay: base spanning [4], one correction [1] at 2 */
		hu_head(&h, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){4},
			TD_HRRY_RULE_OVERLAY, TD_HRRY_COMBINE_ADD, 2);
		node(&nodes[0], "ov", &h, NULL);
		hu_member(&m, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){4},
			  (uint64_t[]){4}, (uint64_t[]){0});
		m.flags |= TD_HRRY_DESC_HAS_COMPOSITE_MEMBER;
		m.member_role = TD_HRRY_ROLE_BASE;
		node(&nodes[1], "ov.base", &m, v);
		hu_member(&m, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){1},
			  (uint64_t[]){4}, (uint64_t[]){2});
		m.flags |= TD_HRRY_DESC_HAS_COMPOSITE_MEMBER;
		m.member_role = TD_HRRY_ROLE_CORRECTION;
		node(&nodes[2], "ov.fix", &m, v + 1);
		cr_assert_eq(td_hrry_file_writer_write_composite(w, nodes, 3,
								 &e),
			     0, "%s", e.reason);
		/* group: unrelated shapes */
		hu_head(&h, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){0},
			TD_HRRY_RULE_GROUP, 0, 2);
		node(&nodes[0], "grp", &h, NULL);
		hu_member(&m, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){3}, NULL,
			  NULL);
		node(&nodes[1], "grp.a", &m, v);
		hu_member(&m, TD_HRRY_TYPE_FLOAT32, 0, NULL, NULL, NULL);
		node(&nodes[2], "grp.b", &m, v + 5);
		cr_assert_eq(td_hrry_file_writer_write_composite(w, nodes, 3,
								 &e),
			     0, "%s", e.reason);
		/* a rule violation writes nothing and poisons */
		size_t before = s.len;
		hu_head(&h, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){4},
			TD_HRRY_RULE_PARTITION, 0, 1);
		node(&nodes[0], "bad", &h, NULL);
		hu_member(&m, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){2},
			  (uint64_t[]){4}, (uint64_t[]){0});
		node(&nodes[1], "bad.0", &m, v);
		cr_assert_eq(td_hrry_file_writer_write_composite(w, nodes, 2,
								 &e),
			     -EBADMSG);
		cr_assert_eq(e.kind, TD_HRRY_E_COMPOSITE_PARTITION_GAP);
		cr_assert_eq(s.len, before);
		td_hrry_file_writer_free(&w);

		/* write again without the bad one, then read back */
		free(s.buf);
		memset(&s, 0, sizeof(s));
		t = hu_sink_transport(&s);
		cr_assert_eq(td_hrry_file_writer_new(&t, &o, &w, &e), 0);
		partition_tree(nodes, v);
		cr_assert_eq(td_hrry_file_writer_write_composite(w, nodes, 5,
								 &e),
			     0);
		cr_assert_eq(td_hrry_file_writer_finish(w, NULL, 0, &e), 0);
		td_hrry_file_writer_free(&w);
		struct td_hrry_file_reader *r = reopen(&s);
		struct td_hrry_composite c;
		cr_assert_eq(td_hrry_file_reader_read_composite(r, "part", 4,
								&c, &e),
			     0, "%s", e.reason);
		cr_assert_eq(c.node_count, 5);
		static const char *names[] = {"part", "part.top",
					      "part.bottom", "part.bottom.0",
					      "part.bottom.1"};
		static const uint32_t depth[] = {0, 1, 1, 2, 2};
		static const uint32_t parent[] = {UINT32_MAX, 0, 0, 2, 2};
		for (size_t i = 0; i < 5; i++) {
			const struct td_hrry_node *nd = &c.nodes[i];
			cr_assert_eq(nd->tensor.entry.name_len,
				     strlen(names[i]));
			cr_assert_eq(memcmp(nd->tensor.entry.name, names[i],
					    strlen(names[i])),
				     0);
			cr_assert_eq(nd->depth, depth[i], "%s", names[i]);
			cr_assert_eq(nd->parent, parent[i], "%s", names[i]);
		}
		cr_assert_eq(memcmp(c.nodes[1].tensor.data, v, 32), 0);
		cr_assert_eq(memcmp(c.nodes[4].tensor.data, v + 12, 16), 0);
		/* head placement (§16.1) */
		const struct td_hrry_entry *he = &c.nodes[0].tensor.entry;
		cr_assert_eq(he->data_length, 0);
		if (form == TD_HRRY_HEAD_PAD_SPEC) {
			cr_assert_eq(he->data_offset,
				     (he->descriptor_offset +
				      he->descriptor_length + 7) & ~7ull);
			cr_assert_eq(c.nodes[1].tensor.entry.descriptor_offset,
				     he->data_offset);
		} else {
			cr_assert_eq(he->data_offset % 4096, 0);
			cr_assert_eq(c.nodes[1].tensor.entry.descriptor_offset,
				     he->data_offset);
		}
		td_hrry_composite_fini(&c);
		cr_assert_eq(td_hrry_file_reader_read_composite(
				     r, "part.top", 8, &c, &e),
			     -EINVAL);
		cr_assert_eq(e.kind, TD_HRRY_E_NOT_A_COMPOSITE);
		td_hrry_file_reader_free(&r);
		free(s.buf);
	}
}

Test(hrry, composite_rule_checks_name_their_error)
{
	struct td_hrry_desc h, a, b;
	const struct td_hrry_desc *t[3] = {&h, &a, &b};
	struct td_hrry_err e;
#define EXPECT(n, want)                                                       \
	do {                                                                  \
		cr_assert_lt(td_hrry_composite_check(t, n, NULL, &e), 0);     \
		cr_assert_eq(e.kind, want, "want %s got %s",                  \
			     td_hrry_error_name(want),                        \
			     td_hrry_error_name(e.kind));                     \
	} while (0)
	hu_head(&h, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){4},
		TD_HRRY_RULE_PARTITION, 0, 2);
	hu_member(&a, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){2},
		  (uint64_t[]){4}, (uint64_t[]){0});
	hu_member(&b, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){2},
		  (uint64_t[]){4}, (uint64_t[]){2});
	cr_assert_eq(td_hrry_composite_check(t, 3, NULL, &e), 0);
	EXPECT(2, TD_HRRY_E_COMPOSITE_MEMBER_COUNT_MISMATCH);
	b.type_tag = TD_HRRY_TYPE_INT32;
	EXPECT(3, TD_HRRY_E_COMPOSITE_MEMBER_TYPE_MISMATCH);
	b.type_tag = TD_HRRY_TYPE_FLOAT32;
	b.flags = 0;
	EXPECT(3, TD_HRRY_E_COMPOSITE_MEMBER_MISSING_SHARD);
	b.flags = TD_HRRY_DESC_HAS_SHARD;
	b.parent_shape[0] = 5;
	EXPECT(3, TD_HRRY_E_COMPOSITE_MEMBER_PARENT_SHAPE_MISMATCH);
	b.parent_shape[0] = 4;
	b.flags |= TD_HRRY_DESC_HAS_COMPOSITE_MEMBER;
	EXPECT(3, TD_HRRY_E_COMPOSITE_MEMBER_FLAG_MISMATCH);
	/* overlay */
	hu_head(&h, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){4},
		TD_HRRY_RULE_OVERLAY, TD_HRRY_COMBINE_REPLACE, 2);
	hu_member(&a, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){4},
		  (uint64_t[]){4}, (uint64_t[]){0});
	a.flags |= TD_HRRY_DESC_HAS_COMPOSITE_MEMBER;
	a.member_role = TD_HRRY_ROLE_BASE;
	hu_member(&b, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){2},
		  (uint64_t[]){4}, (uint64_t[]){1});
	b.flags |= TD_HRRY_DESC_HAS_COMPOSITE_MEMBER;
	cr_assert_eq(td_hrry_composite_check(t, 3, NULL, &e), 0);
	b.member_role = TD_HRRY_ROLE_BASE;
	EXPECT(3, TD_HRRY_E_COMPOSITE_OVERLAY_BASE_NOT_FIRST);
	b.member_role = TD_HRRY_ROLE_CORRECTION;
	a.shape[0] = 3;
	EXPECT(3, TD_HRRY_E_COMPOSITE_OVERLAY_BASE_NOT_SPANNING);
	a.shape[0] = 4;
	a.flags &= ~TD_HRRY_DESC_HAS_COMPOSITE_MEMBER;
	EXPECT(3, TD_HRRY_E_COMPOSITE_MEMBER_FLAG_MISMATCH);
	h.member_count = 0;
	EXPECT(1, TD_HRRY_E_COMPOSITE_OVERLAY_EMPTY);
	/* nesting deeper than 8 */
	struct td_hrry_desc deep[10];
	const struct td_hrry_desc *dp[10];
	for (int i = 0; i < 10; i++) {
		hu_head(&deep[i], TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){0},
			TD_HRRY_RULE_GROUP, 0, i < 9 ? 1 : 0);
		dp[i] = &deep[i];
	}
	cr_assert_eq(td_hrry_composite_check(dp, 8, NULL, &e), -EBADMSG);
	cr_assert_eq(e.kind, TD_HRRY_E_COMPOSITE_MEMBER_COUNT_MISMATCH);
	deep[7].member_count = 0;
	cr_assert_eq(td_hrry_composite_check(dp, 8, NULL, &e), 0);
	deep[7].member_count = 1;
	deep[8].member_count = 0;
	cr_assert_eq(td_hrry_composite_check(dp, 9, NULL, &e), -EBADMSG);
	cr_assert_eq(e.kind, TD_HRRY_E_COMPOSITE_NESTING_TOO_DEEP);
#undef EXPECT
}

Test(hrry, nesting_deeper_than_8_in_a_file_is_refused_by_the_walk)
{
	struct hu_sink s = {0};
	struct hu_raw r;
	struct td_hrry_desc h;
	/* the core borrows names until finish */
	static char names[9][8];
	cr_assert_eq(hu_raw_init(&r, &s, NULL), 0);
	for (int i = 0; i < 9; i++) {
		char *name = names[i];
		hu_head(&h, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){0},
			TD_HRRY_RULE_GROUP, 0, i < 8 ? 1 : 0);
		snprintf(name, sizeof(names[i]), "g%d", i);
		cr_assert_eq(hu_raw_tensor(&r, name, &h, NULL), 0);
	}
	cr_assert_eq(hu_raw_finish(&r, NULL, 0), 0);
	struct td_hrry_file_reader *rd = reopen(&s);
	struct td_hrry_composite c;
	struct td_hrry_err e;
	cr_assert_eq(td_hrry_file_reader_read_composite(rd, "g0", 2, &c, &e),
		     -EBADMSG);
	cr_assert_eq(e.kind, TD_HRRY_E_COMPOSITE_NESTING_TOO_DEEP);
	/* g1 heads a tree of depth 8: fine */
	cr_assert_eq(td_hrry_file_reader_read_composite(rd, "g1", 2, &c, &e),
		     0, "%s", e.reason);
	cr_assert_eq(c.node_count, 8);
	td_hrry_composite_fini(&c);
	td_hrry_file_reader_free(&rd);
	free(s.buf);
}

Test(hrry, unsupported_tensors_refused_one_by_one_file_stays_readable)
{
	struct hu_sink s = {0};
	struct hu_raw r;
	struct td_hrry_desc d;
	uint8_t data[64] = {1, 2, 3};
	const void *bufs[1] = {data};
	cr_assert_eq(hu_raw_init(&r, &s, NULL), 0);
	td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){4});
	d.layout_tag = TD_HRRY_LAYOUT_COLUMN_MAJOR;
	cr_assert_eq(hu_raw_tensor(&r, "colmajor", &d, bufs), 0);
	td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_UINT8, 1, (uint64_t[]){2});
	d.type_tag = TD_HRRY_TYPE_BOOL;
	cr_assert_eq(hu_raw_tensor(&r, "bools", &d, bufs), 0);
	td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_UINT8, 1, (uint64_t[]){3});
	cr_assert_eq(hu_raw_tensor(&r, "ok", &d, bufs), 0);
	cr_assert_eq(hu_raw_finish(&r, NULL, 0), 0);
	struct td_hrry_file_reader *rd = reopen(&s);
	struct td_hrry_tensor t;
	struct td_hrry_err e;
	struct td_hrry_desc dd;
	cr_assert_eq(td_hrry_file_reader_read_tensor(rd, "colmajor", 8, &t, &e),
		     -ENOTSUP);
	cr_assert_eq(e.kind, TD_HRRY_E_UNSUPPORTED_LAYOUT);
	cr_assert_eq(td_hrry_file_reader_read_descriptor(rd, "colmajor", 8,
							 &dd, &e),
		     0);
	cr_assert_eq(dd.buffers[0].byte_size, 16);
	cr_assert_eq(td_hrry_file_reader_read_tensor(rd, "bools", 5, &t, &e),
		     -ENOTSUP);
	cr_assert_eq(e.kind, TD_HRRY_E_UNSUPPORTED_TYPE);
	cr_assert_eq(td_hrry_file_reader_read_tensor(rd, "ok", 2, &t, &e), 0);
	cr_assert_eq(t.data_len, 3);
	cr_assert_eq(memcmp(t.data, data, 3), 0);
	td_hrry_tensor_fini(&t);
	td_hrry_file_reader_free(&rd);
	free(s.buf);
}

Test(hrry, struct_sizes_are_pinned)
{
	/* public ABI: a change here is an ABI change of TENSORD_HRRY_0.1 */
	cr_assert_eq(sizeof(struct td_hrry_transport), 48);
	cr_assert_eq(sizeof(struct td_hrry_err), 24);
	cr_assert_eq(sizeof(struct td_hrry_buffer), 16);
	cr_assert_eq(sizeof(struct td_hrry_entry), 48);
	cr_assert_eq(sizeof(struct td_hrry_writer_options), 12);
	cr_assert_eq(sizeof(struct td_hrry_kv_value), 80);
	cr_assert_eq(sizeof(struct td_hrry_kv_entry), 96);
}

Test(hrry, fuzz_seed_composites_are_valid)
{
	/* the seeds start the fuzzer from valid trees of every rule */
	static const char *files[] = {"hrry-seeds/composites-spec.hrry",
				      "hrry-seeds/composites-upstream.hrry"};
	for (int i = 0; i < 2; i++) {
		size_t len;
		uint8_t *b = tu_read_file(tu_data_path(files[i]), &len);
		struct td_hrry_file_reader *r;
		struct td_hrry_err e;
		struct td_hrry_composite c;
		cr_assert_eq(open_mem(b, len, &r, &e), 0);
		cr_assert_eq(td_hrry_file_reader_read_composite(r, "p", 1, &c,
								&e),
			     0, "%s", e.reason);
		cr_assert_eq(c.node_count, 4);
		td_hrry_composite_fini(&c);
		cr_assert_eq(td_hrry_file_reader_read_composite(r, "o", 1, &c,
								&e),
			     0, "%s", e.reason);
		cr_assert_eq(c.node_count, 3);
		td_hrry_composite_fini(&c);
		td_hrry_file_reader_free(&r);
		free(b);
	}
}

/* ---- tensorctl: inspect, load, save (a real daemon) ---- */

static void save_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(p, 1, n, f), n);
	fclose(f);
}

/* tensorctl without a daemon (inspect); its exit status and output */
static int ctl_nodaemon(char **out, const char *a1, const char *a2)
{
	struct tu_daemon none = {.sock = "/nonexistent"};
	return tu_tensorctl(&none, out, a1, a2, NULL);
}

Test(hrry, tensorctl_inspect_json_is_exactly_the_issue_schema)
{
	char path[] = "/tmp/td-hrry-XXXXXX";
	int fd = tu_mkstemp(path);
	size_t len;
	uint8_t *f = basic_bytes(&len); /* == golden basic.hrry */
	char *out;
	cr_assert_geq(fd, 0);
	close(fd);
	save_file(path, f, len);
	cr_assert_eq(ctl_nodaemon(&out, "inspect", "--json"), 2);
	free(out);
	struct tu_daemon none = {.sock = "/nonexistent"};
	cr_assert_eq(tu_tensorctl(&none, &out, "inspect", "--json", path, NULL),
		     0, "%s", out);
	cr_assert_str_eq(
		out,
		"{\"kind\":\"hrry\",\"alignment\":4096,\"flags\":4,"
		"\"index\":{\"offset\":8264,\"length\":87,\"crc32c\":"
		"1362403186},\"kv\":[{\"key\":\"producer\",\"type\":\"string\","
		"\"value\":\"hurray-conformance\"},{\"key\":\"tensor_count\","
		"\"type\":\"int64\",\"value\":2}],\"tensors\":[{\"name\":"
		"\"weights\",\"status\":\"ok\",\"dtype\":\"float32\",\"shape\":"
		"[2,2],\"data_offset\":4096,\"data_length\":16,\"error\":null},"
		"{\"name\":\"bias\",\"status\":\"ok\",\"dtype\":\"int8\","
		"\"shape\":[3],\"data_offset\":8192,\"data_length\":3,"
		"\"error\":null}]}\n");
	free(out);
	/* a file that cannot be opened: exit 1 and the error object */
	uint64_t io = td__le64(f + len - 40);
	f[io + 12] ^= 1;
	save_file(path, f, len);
	cr_assert_eq(tu_tensorctl(&none, &out, "inspect", "--json", path, NULL),
		     1);
	cr_assert_str_eq(out, "{\"error\":{\"kind\":\"IndexCrc32cMismatch\","
			      "\"offset\":8264,\"reason\":\"CRC-32C of the "
			      "index does not match the trailer\"}}\n");
	free(out);
	f[io + 12] ^= 1;
	/* u64 above 2^53 as a decimal string, bytes as hex, arrays */
	struct hu_sink s;
	struct td_hrry_kv_value it[2] = {
		{.kind = TD_HRRY_KV_BOOL, .bool_value = true},
		{.kind = TD_HRRY_KV_BOOL}};
	struct td_hrry_kv_entry kv[] = {
		{"big", 3, {.kind = TD_HRRY_KV_UINT64,
			    .u64_value = UINT64_C(18446744073709551615)}},
		{"raw", 3, {.kind = TD_HRRY_KV_BYTES,
			    .data = (const uint8_t *)"\x00\xab", .data_len = 2}},
		{"arr", 3, {.kind = TD_HRRY_KV_ARRAY, .item_kind = TD_HRRY_KV_BOOL,
			    .items = it, .item_count = 2}},
	};
	s = kv_file(kv, 3);
	save_file(path, s.buf, s.len);
	free(s.buf);
	cr_assert_eq(tu_tensorctl(&none, &out, "inspect", "--json", path, NULL),
		     0);
	cr_assert_not_null(strstr(out, "{\"key\":\"big\",\"type\":\"uint64\","
				       "\"value\":\"18446744073709551615\"}"),
			   "%s", out);
	cr_assert_not_null(strstr(out, "{\"key\":\"raw\",\"type\":\"bytes\","
				       "\"value\":\"00ab\"}"));
	cr_assert_not_null(strstr(out, "{\"key\":\"arr\",\"type\":\"array\","
				       "\"value\":[true,false]}"));
	cr_assert_not_null(strstr(out, "\"tensors\":[]}"));
	free(out);
	free(f);
	unlink(path);
}

Test(hrry, tensorctl_inspect_marks_unsupported_and_invalid_tensors)
{
	struct hu_sink s = {0};
	struct hu_raw r;
	struct td_hrry_desc d;
	uint8_t data[64] = {0};
	const void *bufs[1] = {data};
	char path[] = "/tmp/td-hrry-XXXXXX", *out;
	int fd = tu_mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	cr_assert_eq(hu_raw_init(&r, &s, NULL), 0);
	td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){4});
	d.layout_tag = TD_HRRY_LAYOUT_MORTON;
	d.layout_payload = (const uint8_t *)"\2\0\0\0";
	d.layout_payload_len = 4;
	cr_assert_eq(hu_raw_tensor(&r, "morton", &d, bufs), 0);
	td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_UINT8, 1, (uint64_t[]){4});
	cr_assert_eq(hu_raw_tensor(&r, "broken", &d, bufs), 0);
	cr_assert_eq(hu_raw_finish(&r, NULL, 0), 0);
	/* break "broken"'s descriptor: its type tag -> 0x00 */
	cr_assert_eq(s.buf[r.e[1].descriptor_offset + 14], TD_HRRY_TYPE_UINT8);
	s.buf[r.e[1].descriptor_offset + 14] = 0;
	save_file(path, s.buf, s.len);
	struct tu_daemon none = {.sock = "/nonexistent"};
	cr_assert_eq(tu_tensorctl(&none, &out, "inspect", "--json", path, NULL),
		     0, "%s", out);
	cr_assert_not_null(
		strstr(out, "{\"name\":\"morton\",\"status\":\"unsupported\","
			    "\"dtype\":\"float32\",\"shape\":[4],"),
		"%s", out);
	cr_assert_not_null(strstr(out, "\"error\":{\"kind\":"
				       "\"UnsupportedLayout\",\"reason\":"));
	cr_assert_not_null(
		strstr(out, "{\"name\":\"broken\",\"status\":\"invalid\","
			    "\"dtype\":null,\"shape\":null,"),
		"%s", out);
	cr_assert_not_null(strstr(out, "\"kind\":\"InvalidTypeTag\""));
	free(out);
	free(s.buf);
	unlink(path);
}

/* A file for load: dense tensors of several dtypes, a scalar, an empty
 * one, a 2-member partition and an unsupported tensor. */
static void load_fixture(const char *path, float *f6, int64_t *i1,
			 uint8_t *u5)
{
	struct hu_sink s = {0};
	struct hu_raw r;
	struct td_hrry_desc d, h;
	for (int i = 0; i < 6; i++)
		f6[i] = (float)i * 1.5f - 2;
	*i1 = -1234567890123;
	for (int i = 0; i < 5; i++)
		u5[i] = (uint8_t)(200 + i);
	cr_assert_eq(hu_raw_init(&r, &s, NULL), 0);
	td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_FLOAT32, 2, (uint64_t[]){2, 3});
	cr_assert_eq(hu_raw_tensor(&r, "f", &d, (const void *[]){f6}), 0);
	td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_INT64, 0, NULL);
	cr_assert_eq(hu_raw_tensor(&r, "scalar", &d, (const void *[]){i1}), 0);
	td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_UINT8, 1, (uint64_t[]){5});
	cr_assert_eq(hu_raw_tensor(&r, "u", &d, (const void *[]){u5}), 0);
	td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_UINT16, 2, (uint64_t[]){0, 3});
	cr_assert_eq(hu_raw_tensor(&r, "empty", &d, (const void *[]){u5}), 0);
	hu_head(&h, TD_HRRY_TYPE_UINT8, 1, (uint64_t[]){5},
		TD_HRRY_RULE_PARTITION, 0, 2);
	cr_assert_eq(hu_raw_tensor(&r, "p", &h, NULL), 0);
	hu_member(&d, TD_HRRY_TYPE_UINT8, 1, (uint64_t[]){2}, (uint64_t[]){5},
		  (uint64_t[]){0});
	cr_assert_eq(hu_raw_tensor(&r, "p.0", &d, (const void *[]){u5}), 0);
	hu_member(&d, TD_HRRY_TYPE_UINT8, 1, (uint64_t[]){3}, (uint64_t[]){5},
		  (uint64_t[]){2});
	cr_assert_eq(hu_raw_tensor(&r, "p.1", &d, (const void *[]){u5 + 2}),
		     0);
	td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){4});
	d.layout_tag = TD_HRRY_LAYOUT_COLUMN_MAJOR;
	cr_assert_eq(hu_raw_tensor(&r, "colmajor", &d, (const void *[]){f6}),
		     0);
	cr_assert_eq(hu_raw_finish(&r, NULL, 0), 0);
	save_file(path, s.buf, s.len);
	free(s.buf);
}

static void expect_tensor(struct td_client *c, const char *name,
			  uint32_t dtype, uint32_t ndim, const uint64_t *shape,
			  const void *bytes, size_t len)
{
	struct td_tensor *t = NULL;
	struct td_error e = {0};
	cr_assert_eq(td_client_get(c, name, &t, &e), 0, "get %s: %s", name,
		     e.reason);
	cr_assert_eq(td_tensor_dtype(t), dtype, "%s", name);
	cr_assert_eq(td_tensor_ndim(t), ndim, "%s", name);
	for (uint32_t i = 0; i < ndim; i++)
		cr_assert_eq(td_tensor_shape(t)[i], shape[i]);
	cr_assert_eq(td_tensor_bytes(t), len, "%s", name);
	if (len)
		cr_assert_eq(memcmp(td_tensor_plane_data(t, 0), bytes, len),
			     0, "%s bytes differ", name);
	td_tensor_release(t);
}

Test(hrry, tensorctl_load_then_get_returns_the_exact_bytes)
{
	struct tu_daemon d;
	struct td_client *c = NULL;
	struct td_error e = {0};
	char path[] = "/tmp/td-hrry-XXXXXX", *out;
	float f6[6];
	int64_t i1;
	uint8_t u5[5];
	int fd = tu_mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	load_fixture(path, f6, &i1, u5);
	tu_daemon_start(&d, "error");
	cr_assert_eq(tu_tensorctl(&d, &out, "load", path, "--prefix", "x/",
				  NULL),
		     0, "%s", out);
	cr_assert_not_null(strstr(out, "refused colmajor: UnsupportedLayout: "),
			   "%s", out);
	cr_assert_not_null(strstr(out, ": 6 published, 1 refused"), "%s", out);
	free(out);
	cr_assert_eq(td_client_connect(d.sock, &c, &e), 0, "%s", e.reason);
	expect_tensor(c, "x/f", TD_TENSOR_F32, 2, (uint64_t[]){2, 3}, f6, 24);
	expect_tensor(c, "x/scalar", TD_TENSOR_I64, 0, NULL, &i1, 8);
	expect_tensor(c, "x/u", TD_TENSOR_U8, 1, (uint64_t[]){5}, u5, 5);
	expect_tensor(c, "x/empty", TD_TENSOR_U16, 2, (uint64_t[]){0, 3}, NULL,
		      0);
	expect_tensor(c, "x/p.0", TD_TENSOR_U8, 1, (uint64_t[]){2}, u5, 2);
	expect_tensor(c, "x/p.1", TD_TENSOR_U8, 1, (uint64_t[]){3}, u5 + 2, 3);
	struct td_tensor *t = NULL;
	cr_assert_eq(td_client_get(c, "x/p", &t, &e), -ENOENT);
	cr_assert_eq(td_client_get(c, "x/colmajor", &t, &e), -ENOENT);

	/* save (named, then all) and read the files back */
	char saved[64];
	snprintf(saved, sizeof(saved), "%s.hrry", path);
	cr_assert_eq(tu_tensorctl(&d, &out, "save", "-o", saved, "x/f", "x/u",
				  "x/scalar", NULL),
		     0, "%s", out);
	free(out);
	struct tu_daemon none = {.sock = "/nonexistent"};
	cr_assert_eq(tu_tensorctl(&none, &out, "inspect", "--json", saved,
				  NULL),
		     0);
	cr_assert_not_null(strstr(out, "{\"name\":\"x/f\",\"status\":\"ok\","
				       "\"dtype\":\"float32\",\"shape\":[2,3]"),
			   "%s", out);
	cr_assert_not_null(strstr(out, "{\"name\":\"x/u\",\"status\":\"ok\","
				       "\"dtype\":\"uint8\",\"shape\":[5]"));
	cr_assert_not_null(strstr(out, "{\"name\":\"x/scalar\",\"status\":"
				       "\"ok\",\"dtype\":\"int64\",\"shape\":[]"));
	free(out);
	/* every readable tensor when no names are given, any extension
	 * with --format; the bytes come back through the reader */
	char all[64];
	snprintf(all, sizeof(all), "%s.bin", path);
	cr_assert_eq(tu_tensorctl(&d, &out, "save", "--format", "hrry", "-o",
				  all, NULL),
		     0, "%s", out);
	cr_assert_not_null(strstr(out, ": 6 tensor(s)"), "%s", out);
	free(out);
	fd = open(all, O_RDONLY | O_CLOEXEC);
	struct td_hrry_transport tr;
	struct td_hrry_file_reader *rd;
	cr_assert_eq(td_hrry_transport_fd(fd, &tr), 0);
	cr_assert_eq(td_hrry_file_reader_new(&tr, &rd, NULL), 0);
	uint64_t n;
	td_hrry_file_reader_tensor_count(rd, &n);
	cr_assert_eq(n, 6);
	struct td_hrry_tensor tt;
	cr_assert_eq(td_hrry_file_reader_read_tensor(rd, "x/p.1", 5, &tt, NULL),
		     0);
	cr_assert_eq(tt.data_len, 3);
	cr_assert_eq(memcmp(tt.data, u5 + 2, 3), 0);
	td_hrry_tensor_fini(&tt);
	td_hrry_file_reader_free(&rd);
	close(fd);
	td_client_close(c);
	unlink(path);
	unlink(saved);
	unlink(all);
	tu_daemon_stop(&d, true);
}

/* ---- more of §13, one check at a time ---- */

Test(hrry, index_entry_checks_name_their_error)
{
	size_t len;
	uint8_t *f = basic_bytes(&len);
	uint8_t *copy = malloc(len);
	uint64_t io = td__le64(f + len - 40);
	uint8_t *e1 = f + io + 8; /* weights: name_len, name, 32 fixed */
#define PATCH(stmt, kind)                                                     \
	do {                                                                  \
		memcpy(copy, f, len);                                         \
		uint8_t *b = copy;                                            \
		uint8_t *e = copy + (e1 - f);                                 \
		(void)b;                                                      \
		(void)e;                                                      \
		stmt;                                                         \
		fix_crc(copy, len);                                           \
		expect_open_error(copy, len, kind);                           \
	} while (0)
	PATCH(td__put_le16(e, 0), TD_HRRY_E_TENSOR_NAME_EMPTY);
	PATCH(e[3] = 0xC3, TD_HRRY_E_INVALID_HEADER); /* not UTF-8 */
	PATCH(td__put_le32(e + 2 + 7 + 28, 1), TD_HRRY_E_INVALID_HEADER);
	PATCH(td__put_le64(e + 2 + 7, 60), TD_HRRY_E_INVALID_HEADER);
	PATCH(td__put_le64(e + 2 + 7, 68), TD_HRRY_E_INVALID_HEADER);
	PATCH(td__put_le32(e + 2 + 7 + 8, 19), TD_HRRY_E_INVALID_HEADER);
	/* data running into the KV section */
	PATCH(td__put_le64(e + 2 + 7 + 20, 8200 - 4096 + 1),
	      TD_HRRY_E_INVALID_HEADER);
	/* more entries than the bytes hold, fewer consumed */
	PATCH(td__put_le64(b + io, 3), TD_HRRY_E_INVALID_HEADER);
	PATCH(td__put_le64(b + io, 1), TD_HRRY_E_INVALID_HEADER);
	/* SORTED_INDEX claimed for "weights" before "bias" */
	PATCH(b[12] |= TD_HRRY_FILE_SORTED_INDEX, TD_HRRY_E_INVALID_HEADER);
	/* trailer: reserved word, index below 64, kv only half given */
	PATCH(b[len - 8] = 1, TD_HRRY_E_RESERVED_BYTES_NON_ZERO);
	PATCH(td__put_le64(b + len - 40, 56), TD_HRRY_E_INVALID_HEADER);
	PATCH(td__put_le32(b + len - 40 + 24, 0), TD_HRRY_E_INVALID_HEADER);
#undef PATCH
	free(copy);
	free(f);
}

Test(hrry, kv_tag_checks_name_their_error)
{
	struct td_hrry_kv_value it[1] = {{.kind = TD_HRRY_KV_INT64}};
	struct td_hrry_kv_entry kv[2] = {
		{"k", 1, {.kind = TD_HRRY_KV_INT64, .i64_value = 1}},
		{"a", 1, {.kind = TD_HRRY_KV_ARRAY, .item_kind = TD_HRRY_KV_INT64,
			  .items = it, .item_count = 1}},
	};
	struct hu_sink s = kv_file(kv, 2);
	uint64_t ko = td__le64(s.buf + s.len - 40 + 16);
	uint8_t *tag = s.buf + ko + 4 + 2 + 1;
	uint8_t *etag = tag + 1 + 8 + 2 + 1 + 1;
	cr_assert_eq(*tag, TD_HRRY_KV_INT64);
	cr_assert_eq(*etag, TD_HRRY_KV_INT64);
	for (int bad = 0; bad < 5; bad++) {
		static const uint8_t tags[] = {0x00, 0x08, 0xEF, 0xF0, 0xFF};
		uint8_t save = *tag;
		*tag = tags[bad];
		expect_open_error(s.buf, s.len, TD_HRRY_E_INVALID_HEADER);
		*tag = save;
	}
	*etag = 0x00;
	expect_open_error(s.buf, s.len, TD_HRRY_E_INVALID_HEADER);
	*etag = TD_HRRY_KV_ARRAY;
	expect_open_error(s.buf, s.len, TD_HRRY_E_INVALID_HEADER);
	*etag = TD_HRRY_KV_INT64;
	/* count 0 with a valid tag is read (tensord never writes it) */
	uint8_t *cnt = etag + 1;
	td__put_le32(cnt, 0);
	/* the 8 bytes of the item are now left over */
	expect_open_error(s.buf, s.len, TD_HRRY_E_INVALID_HEADER);
	free(s.buf);
}

/* A descriptor of layout tag with the given raw payload. */
static int layout_desc(uint8_t *buf, uint8_t tag, const void *payload,
		       uint32_t plen, uint32_t buffers)
{
	struct td_hrry_desc d;
	td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_FLOAT32, 2, (uint64_t[]){4, 4});
	d.layout_tag = tag;
	d.layout_payload = payload;
	d.layout_payload_len = plen;
	d.buffer_count = buffers;
	for (uint32_t k = 1; k < buffers; k++)
		d.buffers[k] = d.buffers[0];
	int n = td_hrry_desc_encode(&d, buf, 8192, NULL);
	cr_assert_gt(n, 0);
	return n;
}

/* name's current version has metadata meta (NUL-ended text). */
static void expect_meta(struct td_client *c, const char *name,
			const char *meta)
{
	struct td_error e = {0};
	struct td_tensor *t = NULL;
	size_t len = 99;
	const void *m;

	cr_assert_eq(td_client_get(c, name, &t, &e), 0, "%s: %s", name,
		     e.reason);
	m = td_tensor_meta(t, &len);
	cr_expect_eq(len, strlen(meta), "%s: %zu bytes of metadata", name,
		     len);
	if (len == strlen(meta) && len)
		cr_expect(!memcmp(m, meta, len), "%s: %.*s", name, (int)len,
			  (const char *)m);
	td_tensor_release(t);
}

/*
 * save -o FILE.hrry keeps each tensor's metadata (KV "tensord:NAME#meta",
 * bytes, the key a snapshot uses) and load gives it back: it used to be
 * dropped without a word, where a .tgm save keeps it. A snapshot file
 * loaded with tensorctl brings its metadata too.
 */
Test(hrry, tensorctl_save_then_load_keeps_the_metadata)
{
	static const char json[] = "{\"unit\":\"K\"}", text[] = "plain text";
	struct tu_daemon d;
	struct td_client *c = NULL;
	struct td_error e = {0};
	uint64_t two = 2;
	char path[sizeof(d.dir) + 16], *out;

	tu_daemon_start(&d, "error");
	cr_assert_eq(td_client_connect(d.sock, &c, &e), 0, "%s", e.reason);
	struct td_publish p = {.name = "m/json", .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = &two, .meta = json,
			       .meta_len = strlen(json)};
	cr_assert_eq(td_client_put(c, &p, "ab", 2, NULL, &e), 0, "%s",
		     e.reason);
	p.name = "m/text";
	p.meta = text;
	p.meta_len = strlen(text);
	cr_assert_eq(td_client_put(c, &p, "cd", 2, NULL, &e), 0, "%s",
		     e.reason);
	p.name = "m/none";
	p.meta = NULL;
	p.meta_len = 0;
	cr_assert_eq(td_client_put(c, &p, "ef", 2, NULL, &e), 0, "%s",
		     e.reason);
	snprintf(path, sizeof(path), "%s/m.hrry", d.dir);
	cr_assert_eq(tu_tensorctl(&d, &out, "save", "-o", path, "m/json",
				  "m/text", "m/none", NULL),
		     0, "%s", out);
	free(out);
	cr_assert_eq(tu_tensorctl(&d, &out, "load", path, "--prefix", "b/",
				  NULL),
		     0, "%s", out);
	free(out);
	expect_meta(c, "b/m/json", json);
	expect_meta(c, "b/m/text", text);
	expect_meta(c, "b/m/none", "");
	/* and a Zarr export of the file gives each array its metadata, as
	 * an export of the daemon's tensors does */
	char zdir[sizeof(d.dir) + 16], zj[sizeof(zdir) + 32], buf[1024];
	snprintf(zdir, sizeof(zdir), "%s/m.zarr", d.dir);
	cr_assert_eq(tu_tensorctl(&d, &out, "zarr", "export", zdir, "--from",
				  path, NULL),
		     0, "%s", out);
	free(out);
	static const struct {
		const char *node, *want;
	} attrs[] = {
		{"m_json", "{\"attributes\":{\"_tensord_name\":\"m/json\","
			   "\"unit\":\"K\"}"},
		{"m_text", "{\"attributes\":{\"_tensord_meta\":\"plain text\","
			   "\"_tensord_name\":\"m/text\"}"},
	};
	for (size_t i = 0; i < 2; i++) {
		FILE *f;
		size_t n;

		snprintf(zj, sizeof(zj), "%s/%s/zarr.json", zdir, attrs[i].node);
		f = fopen(zj, "r");
		cr_assert(f, "%s", zj);
		n = fread(buf, 1, sizeof(buf) - 1, f);
		buf[n] = 0;
		fclose(f);
		cr_expect(!strncmp(buf, attrs[i].want, strlen(attrs[i].want)),
			  "%s", buf);
	}
	{
		char *rm[] = {"/bin/rm", "-rf", zdir, NULL};

		cr_expect_eq(tu_run_capture_all(rm, &out), 0, "%s", out);
		free(out);
	}
	td_client_close(c);
	unlink(path);
	tu_daemon_stop(&d, true);
}

Test(hrry, every_layout_payload_decodes_to_its_size)
{
	uint8_t buf[8192], p[512];
	struct td_hrry_desc d;
	struct td_hrry_err e;
	memset(p, 0, sizeof(p));
	static const struct {
		uint8_t tag;
		uint32_t len;
		uint32_t buffers;
	} ok[] = {
		{TD_HRRY_LAYOUT_COLUMN_MAJOR, 0, 1},
		{TD_HRRY_LAYOUT_STRIDED, 16, 1},
		{TD_HRRY_LAYOUT_COO, 16, 2},
		{TD_HRRY_LAYOUT_CSR, 16, 3},
		{TD_HRRY_LAYOUT_CSC, 16, 3},
		{TD_HRRY_LAYOUT_BLOCK_PAGED, 32, 3},
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		int n = layout_desc(buf, ok[i].tag, p, ok[i].len,
				    ok[i].buffers);
		cr_assert_eq(td_hrry_desc_decode(buf, (size_t)n, &d, &e), 0,
			     "tag %u: %s", ok[i].tag, e.reason);
		cr_assert_eq(d.layout_payload_len, ok[i].len);
		cr_assert_eq(td_hrry_desc_supported(&d, &e), -ENOTSUP);
		cr_assert_eq(e.kind, TD_HRRY_E_UNSUPPORTED_LAYOUT);
		for (int k = 0; k < n; k++)
			cr_assert_eq(td_hrry_desc_decode(buf, (size_t)k, &d,
							 &e),
				     -ENODATA);
	}
	/* Morton: bits per dimension > 0 */
	td__put_le32(p, 2);
	td__put_le32(p + 4, 2);
	int n = layout_desc(buf, TD_HRRY_LAYOUT_MORTON, p, 8, 1);
	cr_assert_eq(td_hrry_desc_decode(buf, (size_t)n, &d, NULL), 0);
	td__put_le32(p + 4, 0);
	n = layout_desc(buf, TD_HRRY_LAYOUT_MORTON, p, 8, 1);
	expect_desc_error(buf, n, TD_HRRY_E_INVALID_LAYOUT);
	/* CSF: nnz, mode_order permutation, 8 reserved */
	memset(p, 0, sizeof(p));
	td__put_le32(p + 8, 1);
	td__put_le32(p + 12, 0);
	n = layout_desc(buf, TD_HRRY_LAYOUT_CSF, p, 24, 5);
	cr_assert_eq(td_hrry_desc_decode(buf, (size_t)n, &d, &e), 0, "%s",
		     e.reason);
	td__put_le32(p + 12, 1);
	n = layout_desc(buf, TD_HRRY_LAYOUT_CSF, p, 24, 5);
	expect_desc_error(buf, n, TD_HRRY_E_INVALID_LAYOUT);
	/* Hilbert: order > 0, hilbert_rank == rank >= 2 */
	memset(p, 0, sizeof(p));
	td__put_le32(p, 3);
	td__put_le32(p + 4, 2);
	n = layout_desc(buf, TD_HRRY_LAYOUT_HILBERT, p, 8, 1);
	cr_assert_eq(td_hrry_desc_decode(buf, (size_t)n, &d, NULL), 0);
	td__put_le32(p + 4, 3);
	n = layout_desc(buf, TD_HRRY_LAYOUT_HILBERT, p, 8, 1);
	expect_desc_error(buf, n, TD_HRRY_E_INVALID_LAYOUT);
	/* tiled: tile shape, outer 3 (+strides), inner 4 (nested) */
	memset(p, 0, sizeof(p));
	p[16] = 3;
	p[17] = 4;
	/* outer strides 16 bytes, then nested: tile 16, outer 1, inner 1 */
	p[20 + 16 + 16] = 1;
	p[20 + 16 + 17] = 1;
	n = layout_desc(buf, TD_HRRY_LAYOUT_TILED, p, 20 + 16 + 20, 1);
	cr_assert_eq(td_hrry_desc_decode(buf, (size_t)n, &d, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(d.layout_payload_len, 56);
	p[16] = 4;
	n = layout_desc(buf, TD_HRRY_LAYOUT_TILED, p, 56, 1);
	expect_desc_error(buf, n, TD_HRRY_E_INVALID_LAYOUT);
	/* private layout: id, len, bytes */
	memset(p, 0, sizeof(p));
	td__put_le32(p + 8, 5);
	n = layout_desc(buf, 0xF5, p, 17, 1);
	cr_assert_eq(td_hrry_desc_decode(buf, (size_t)n, &d, NULL), 0);
	cr_assert_eq(d.layout_payload_len, 17);
	/* reserved bytes inside payloads */
	memset(p, 0, sizeof(p));
	p[15] = 1;
	n = layout_desc(buf, TD_HRRY_LAYOUT_CSR, p, 16, 3);
	expect_desc_error(buf, n, TD_HRRY_E_RESERVED_BYTES_NON_ZERO);
}

Test(hrry, own_descriptors_fed_one_byte_at_a_time)
{
	uint8_t buf[8192];
	struct td_hrry_desc d, out;
	int n;
	/* shard + statistics + composite member, a head, a quantized one */
	hu_member(&d, TD_HRRY_TYPE_INT16, 3, (uint64_t[]){1, 2, 3},
		  (uint64_t[]){2, 2, 3}, (uint64_t[]){1, 0, 0});
	d.flags |= TD_HRRY_DESC_HAS_STATISTICS |
		   TD_HRRY_DESC_HAS_COMPOSITE_MEMBER;
	d.member_role = TD_HRRY_ROLE_BASE;
	struct td_hrry_desc h;
	hu_head(&h, TD_HRRY_TYPE_INT16, 2, (uint64_t[]){5, 5},
		TD_HRRY_RULE_OVERLAY, TD_HRRY_COMBINE_REPLACE, 3);
	struct td_hrry_desc q;
	td_hrry_desc_init_dense(&q, TD_HRRY_TYPE_UINT8, 1, (uint64_t[]){8});
	q.flags = TD_HRRY_DESC_HAS_QUANTIZATION;
	q.quantization = (const uint8_t *)"\x01\x01\x00\x00\x00\x00\x80\x3f";
	q.quantization_len = 8;
	const struct td_hrry_desc *all[] = {&d, &h, &q};
	for (int i = 0; i < 3; i++) {
		n = td_hrry_desc_encode(all[i], buf, sizeof(buf), NULL);
		cr_assert_gt(n, 0);
		cr_assert_eq(td_hrry_desc_decode(buf, (size_t)n, &out, NULL),
			     0);
		for (int k = 0; k < n; k++) {
			uint8_t *p = malloc(k ? (size_t)k : 1);
			memcpy(p, buf, (size_t)k);
			struct td_hrry_err e = {0};
			cr_assert_eq(td_hrry_desc_decode(p, (size_t)k, &out,
							 &e),
				     -ENODATA, "desc %d prefix %d", i, k);
			cr_assert_eq(e.kind, TD_HRRY_E_DESCRIPTOR_TRUNCATED);
			free(p);
		}
	}
	n = td_hrry_desc_encode(&d, buf, sizeof(buf), NULL);
	cr_assert_eq(n, 45 + 8 * 3 + 16 * 3 + 72 + 16);
	n = td_hrry_desc_encode(&h, buf, sizeof(buf), NULL);
	cr_assert_eq(n, 37 + 8 * 2);
	n = td_hrry_desc_encode(&q, buf, sizeof(buf), NULL);
	cr_assert_eq(n, 45 + 8 + 4 + 8);
	cr_assert_eq(td_hrry_desc_decode(buf, (size_t)n, &out, NULL), 0);
	cr_assert_eq(out.quant_scheme, 1);
	buf[n - 8 + 1] = 2; /* scheme_version 2 */
	expect_desc_error(buf, n, TD_HRRY_E_INVALID_QUANTIZATION);
}

/* A transport over a span that hands out at most one byte per read and
 * may claim a larger size than it holds. */
struct dribble {
	const uint8_t *p;
	size_t len;
	unsigned calls;
	uint64_t hole; /* reads from here on within 8 bytes give EOF */
};

static int dribble_read(void *ctx, uint64_t off, void *buf, size_t len,
			size_t *got)
{
	struct dribble *d = ctx;
	d->calls++;
	if (off >= d->len || !len || (d->hole && off >= d->hole &&
					 off < d->hole + 8)) {
		*got = 0;
		return 0;
	}
	*(uint8_t *)buf = d->p[off];
	*got = 1;
	return 0;
}

Test(hrry, short_reads_are_retried_and_a_short_file_is_unexpected_eof)
{
	size_t len;
	uint8_t *f = basic_bytes(&len);
	struct dribble dr = {f, len, 0, 0};
	struct td_hrry_transport t = {.ctx = &dr, .size = len,
				      .read_at = dribble_read};
	struct td_hrry_file_reader *r;
	struct td_hrry_err e;
	struct td_hrry_tensor tt;
	cr_assert_eq(td_hrry_file_reader_new(&t, &r, &e), 0, "%s", e.reason);
	cr_assert_eq(td_hrry_file_reader_read_tensor(r, "weights", 7, &tt, &e),
		     0);
	cr_assert_eq(tt.data_len, 16);
	cr_assert_gt(dr.calls, 64 + 40 + 87 + 60 + 61 + 16 - 1);
	td_hrry_tensor_fini(&tt);
	td_hrry_file_reader_free(&r);
	/* a transport that ends early inside "bias"'s data */
	dr.hole = 8192;
	cr_assert_eq(td_hrry_file_reader_new(&t, &r, &e), 0);
	cr_assert_eq(td_hrry_file_reader_read_tensor(r, "bias", 4, &tt, &e),
		     -ENODATA);
	cr_assert_eq(e.kind, TD_HRRY_E_UNEXPECTED_EOF);
	cr_assert_eq(e.offset, 8192);
	cr_assert_null(tt.data);
	td_hrry_file_reader_free(&r);
	free(f);
}

/* A Hurray file at path (a mkstemp template) of a u8[3] {7, 8, 9} under
 * each of names (NULL-terminated), written by the raw writer. */
static void u3_file(char *path, const char *const *names)
{
	static const uint8_t u3[3] = {7, 8, 9};
	struct hu_sink s = {0};
	struct hu_raw r;
	struct td_hrry_desc desc;
	int fd = tu_mkstemp(path);

	cr_assert_geq(fd, 0);
	close(fd);
	cr_assert_eq(hu_raw_init(&r, &s, NULL), 0);
	td_hrry_desc_init_dense(&desc, TD_HRRY_TYPE_UINT8, 1, (uint64_t[]){3});
	for (; *names; names++)
		cr_assert_eq(hu_raw_tensor(&r, *names, &desc,
					   (const void *[]){u3}),
			     0);
	cr_assert_eq(hu_raw_finish(&r, NULL, 0), 0);
	save_file(path, s.buf, s.len);
	free(s.buf);
}

/*
 * A Hurray name tensord does not take (a space, or a tensord snapshot's
 * extra plane "N#1") is listed as refused, and the rest is loaded: it
 * used to reach the daemon, whose refusal rolled the whole load back.
 */
Test(hrry, tensorctl_load_refuses_names_tensord_does_not_take)
{
	struct tu_daemon d;
	struct td_client *c = NULL;
	struct td_tensor *t = NULL;
	static const uint8_t u3[3] = {7, 8, 9};
	static const char *const names[] = {"good", "a b", "N#1", NULL};
	char path[] = "/tmp/td-hrry-XXXXXX", *out;

	u3_file(path, names);
	tu_daemon_start(&d, "error");
	cr_assert_eq(td_client_connect(d.sock, &c, NULL), 0);
	cr_assert_eq(tu_tensorctl(&d, &out, "load", path, "--prefix", "n/",
				  "--json", NULL),
		     0, "%s", out);
	cr_assert_not_null(strstr(out, "{\"name\":\"n/good\",\"version\":"),
			   "%s", out);
	cr_assert_not_null(strstr(out, "{\"name\":\"a b\",\"kind\":"
				       "\"InvalidArgument\""),
			   "%s", out);
	cr_assert_not_null(strstr(out, "{\"name\":\"N#1\",\"kind\":"
				       "\"InvalidArgument\""),
			   "%s", out);
	free(out);
	cr_assert_eq(td_client_get(c, "n/good", &t, NULL), 0);
	cr_assert_eq(memcmp(td_tensor_plane_data(t, 0), u3, 3), 0);
	td_tensor_release(t);
	td_client_close(c);
	unlink(path);
	tu_daemon_stop(&d, false);
}

/*
 * Names, KV keys and strings come from the file: inspect's table and
 * load's "refused NAME" line printed them raw, so a file could clear the
 * user's terminal or retitle it (ESC, C1 CSI). They are escaped as stat
 * escapes a tenant's metadata (docs/tensorctl.md); --json is unchanged.
 */
Test(hrry, tensorctl_text_escapes_what_the_file_says)
{
	static const char *const names[] = {"e\x1b[2Jx", NULL};
	struct td_hrry_kv_entry kv[] = {
		{"k\x1b]0;t\x07", 7, {.kind = TD_HRRY_KV_STRING,
				      .data = (const uint8_t *)"v\xc2\x9b" "1m",
				      .data_len = 5}},
	};
	struct tu_daemon none = {.sock = "/nonexistent"}, d;
	char path[] = "/tmp/td-hrry-XXXXXX", *out;
	struct hu_sink s;

	u3_file(path, names);
	cr_assert_eq(tu_tensorctl(&none, &out, "inspect", path, NULL), 0,
		     "%s", out);
	cr_expect_not_null(strstr(out, "\n  e\\x1b[2Jx: uint8 [3]"), "%s", out);
	cr_expect_null(strchr(out, '\x1b'), "%s", out);
	free(out);
	tu_daemon_start(&d, "error");
	cr_assert_eq(tu_tensorctl(&d, &out, "load", path, NULL), 0, "%s", out);
	cr_expect_not_null(strstr(out, "refused e\\x1b[2Jx: InvalidArgument: "),
			   "%s", out);
	cr_expect_null(strchr(out, '\x1b'), "%s", out);
	free(out);
	tu_daemon_stop(&d, false);
	s = kv_file(kv, 1);
	save_file(path, s.buf, s.len);
	free(s.buf);
	cr_assert_eq(tu_tensorctl(&none, &out, "inspect", path, NULL), 0,
		     "%s", out);
	cr_expect_not_null(strstr(out, "  k\\x1b]0;t\\x07 (string) = "
				       "\"v\\u009b1m\"\n"),
			   "%s", out);
	cr_expect(!strchr(out, '\x1b') && !strstr(out, "\xc2\x9b"), "%s", out);
	free(out);
	unlink(path);
	/* zarr export's list of node names, which keep C1 controls */
	{
		static const char *const c1[] = {"c\xc2\x9b" "2J", NULL};
		char p2[] = "/tmp/td-hrry-XXXXXX", dir[64];
		char *rm[] = {"/bin/rm", "-rf", dir, NULL};

		u3_file(p2, c1);
		snprintf(dir, sizeof(dir), "%s.zarr", p2);
		cr_assert_eq(tu_tensorctl(&none, &out, "zarr", "export", dir,
					  "--from", p2, NULL),
			     0, "%s", out);
		cr_expect_not_null(strstr(out, "\n  c\\u009b2J\n"), "%s", out);
		cr_expect_null(strstr(out, "\xc2\x9b"), "%s", out);
		free(out);
		cr_expect_eq(tu_run_capture(rm, &out), 0);
		free(out);
		unlink(p2);
	}
}

/* docs/hurray.md: --message and --variable-key are .tgm options, a usage
 * error with a Hurray file that says so (it said "unknown option") */
Test(hrry, tensorctl_load_names_the_tgm_options_a_hurray_file_refuses)
{
	struct tu_daemon d;
	char path[] = "/tmp/td-hrry-XXXXXX", *out;
	static const char *const names[] = {"good", NULL};
	static const char *const opt[][2] = {{"--message", "0"},
					     {"--variable-key", "k"},
					     {"--name-key", "k"}};

	u3_file(path, names);
	tu_daemon_start(&d, "error");
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(tu_tensorctl(&d, &out, "load", path, opt[i][0],
					  opt[i][1], "--json", NULL),
			     2, "%s", out);
		cr_assert_not_null(strstr(out, "--message and --variable-key "
					       "(--name-key) are for .tgm "
					       "files"),
				   "%s", out);
		cr_assert_null(strstr(out, "unknown option"), "%s", out);
		free(out);
	}
	unlink(path);
	tu_daemon_stop(&d, false);
}

Test(hrry, tensorctl_load_is_all_or_nothing_unless_partial)
{
	struct tu_daemon d;
	struct td_client *c = NULL;
	struct td_ring *ring, *ring2;
	uint64_t shape[1] = {4};
	struct td_ring_desc rd = {.dtype = TD_TENSOR_U8, .ndim = 1,
				  .shape = shape};
	char path[] = "/tmp/td-hrry-XXXXXX", *out;
	float f6[6];
	int64_t i1;
	uint8_t u5[5];
	int fd = tu_mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	load_fixture(path, f6, &i1, u5);
	tu_daemon_start(&d, "error");
	/* a live ring owns "y/u" (the third tensor): PUBLISH is refused */
	cr_assert_eq(td_client_connect(d.sock, &c, NULL), 0);
	cr_assert_eq(td_ring_create(c, "y/u", &rd, &ring, NULL), 0);
	cr_assert_eq(tu_tensorctl(&d, &out, "load", path, "--prefix", "y/",
				  NULL),
		     1);
	cr_assert_not_null(strstr(out, "2 tensor(s) published before the "
				       "failure, 2 removed again"),
			   "%s", out);
	cr_assert_null(strstr(out, "y/f version"), "%s", out);
	free(out);
	struct td_tensor *t = NULL;
	cr_assert_eq(td_client_get(c, "y/f", &t, NULL), -ENOENT);
	cr_assert_eq(td_client_get(c, "y/scalar", &t, NULL), -ENOENT);
	cr_assert_eq(tu_tensorctl(&d, &out, "load", path, "--prefix", "y/",
				  "--json", NULL),
		     1);
	cr_assert_not_null(strstr(out, "{\"error\":{\"kind\":\"daemon\","),
			   "%s", out);
	free(out);
	cr_assert_eq(tu_tensorctl(&d, &out, "load", path, "--prefix", "y/",
				  "--partial", NULL),
		     1);
	cr_assert_not_null(strstr(out, "2 tensor(s) published before the "
				       "failure, kept (--partial)"),
			   "%s", out);
	cr_assert_not_null(strstr(out, "y/f version"), "%s", out);
	free(out);
	cr_assert_eq(td_client_get(c, "y/f", &t, NULL), 0);
	td_tensor_release(t);
	/* --json --partial: the error object says what was kept */
	cr_assert_eq(td_ring_create(c, "w/u", &rd, &ring2, NULL), 0);
	cr_assert_eq(tu_tensorctl(&d, &out, "load", path, "--prefix", "w/",
				  "--partial", "--json", NULL),
		     1);
	cr_assert_not_null(strstr(out, "{\"error\":{\"kind\":\"daemon\","),
			   "%s", out);
	cr_assert_not_null(strstr(out, "\"published\":[{\"name\":\"w/f\","),
			   "%s", out);
	/* the refusal stopped the load before "colmajor" */
	cr_assert_not_null(strstr(out, "\"refused\":[]}"), "%s", out);
	free(out);
	cr_assert_eq(td_client_get(c, "w/f", &t, NULL), 0);
	td_tensor_release(t);
	td_ring_close(ring2);
	/* --json of a good load: published and refused lists */
	cr_assert_eq(tu_tensorctl(&d, &out, "load", path, "--prefix", "z/",
				  "--json", NULL),
		     0, "%s", out);
	cr_assert_not_null(strstr(out, "{\"name\":\"z/f\",\"version\":"),
			   "%s", out);
	cr_assert_not_null(strstr(out, "\"refused\":[{\"name\":\"colmajor\","
				       "\"kind\":\"UnsupportedLayout\","),
			   "%s", out);
	free(out);
	td_ring_close(ring);
	td_client_close(c);
	unlink(path);
	tu_daemon_stop(&d, false);
}

/*
 * zarr export --from FILE.hrry wrote the KV under keys cut at 1023
 * bytes: a key may be 65535 (hurray.md), and two long keys that shared
 * that much of a prefix became one attribute, the other value lost.
 * Every key is whole now, and non-finite floats are the strings Zarr
 * v3 gives them (docs/zarr.md), so the JSON stays strict.
 */
Test(hrry, zarr_export_keeps_long_kv_keys_whole)
{
	enum { K = 1500 };
	static char ka[K], kb[K];
	struct td_hrry_kv_entry kv[] = {
		{.key = ka, .key_len = K,
		 .value = {.kind = TD_HRRY_KV_INT64, .i64_value = 1}},
		{.key = kb, .key_len = K,
		 .value = {.kind = TD_HRRY_KV_INT64, .i64_value = 2}},
		{.key = "nan", .key_len = 3,
		 .value = {.kind = TD_HRRY_KV_FLOAT64, .f64_value = NAN}},
	};
	char path[] = "/tmp/td-hrry-XXXXXX", dir[64], zj[80];
	char *rm[] = {"/bin/rm", "-rf", dir, NULL}, *out, *text;
	struct json_object *root, *attrs, *hkv, *v;
	struct hu_sink s;
	size_t len;
	int fd = tu_mkstemp(path);

	cr_assert_geq(fd, 0);
	close(fd);
	memset(ka, 'k', K);
	memset(kb, 'k', K);
	ka[K - 1] = 'a';
	kb[K - 1] = 'b';
	s = kv_file(kv, 3);
	save_file(path, s.buf, s.len);
	free(s.buf);
	snprintf(dir, sizeof(dir), "%s.zarr", path);
	{
		struct tu_daemon none = {.sock = "/nonexistent"};

		cr_assert_eq(tu_tensorctl(&none, &out, "zarr", "export", dir,
					  "--from", path, NULL),
			     0, "%s", out);
		free(out);
	}
	snprintf(zj, sizeof(zj), "%s/zarr.json", dir);
	root = json_object_from_file(zj);
	cr_assert_not_null(root, "%s is no JSON", zj);
	cr_assert(json_object_object_get_ex(root, "attributes", &attrs));
	cr_assert(json_object_object_get_ex(attrs, "_tensord_hurray_kv", &hkv),
		  "%s", json_object_to_json_string(attrs));
	cr_assert_eq(json_object_object_length(hkv), 3, "%s",
		     json_object_to_json_string(hkv));
	{
		char a[K + 1], b[K + 1];

		memcpy(a, ka, K);
		memcpy(b, kb, K);
		a[K] = b[K] = 0;
		cr_assert(json_object_object_get_ex(hkv, a, &v));
		cr_assert_eq(json_object_get_int64(v), 1);
		cr_assert(json_object_object_get_ex(hkv, b, &v));
		cr_assert_eq(json_object_get_int64(v), 2);
	}
	cr_assert(json_object_object_get_ex(hkv, "nan", &v));
	cr_assert_str_eq(json_object_get_string(v), "NaN");
	text = (char *)tu_read_file(zj, &len);
	cr_assert_null(memmem(text, len, ":NaN", 4), "a bare NaN in %s", zj);
	free(text);
	json_object_put(root);
	cr_expect_eq(tu_run_capture(rm, &out), 0);
	free(out);
	unlink(path);
}

/* The node at zj (its zarr.json) holds _tensord_name `want`, whole. */
static void node_names(const char *zj, const char *want)
{
	struct json_object *root = json_object_from_file(zj), *attrs, *v;

	cr_assert_not_null(root, "no array at %s", zj);
	cr_assert(json_object_object_get_ex(root, "attributes", &attrs));
	cr_assert(json_object_object_get_ex(attrs, "_tensord_name", &v));
	cr_assert_eq((size_t)json_object_get_string_len(v), strlen(want));
	cr_assert_str_eq(json_object_get_string(v), want);
	json_object_put(root);
}

/*
 * zarr export --from FILE.hrry cut a tensor's name at 255 bytes in its
 * _tensord_name, which docs/zarr.md gives as the tensor's own name: a
 * Hurray name may be longer (u16 length). The node's folder name is
 * cut, as a file name must be; _tensord_name is whole. A second name
 * with the same first 255 bytes made the export fail ("File name too
 * long", nothing written): its suffix went past them. Its base is cut
 * for the suffix now.
 */
Test(hrry, zarr_export_keeps_a_long_tensor_name_whole)
{
	enum { N = 300 };
	static char a[N + 1], b[N + 1];
	const char *names[] = {a, b, NULL};
	char path[] = "/tmp/td-hrry-XXXXXX", dir[64], zj[64 + 300], *out;
	char *rm[] = {"/bin/rm", "-rf", dir, NULL};
	struct tu_daemon none = {.sock = "/nonexistent"};

	memset(a, 'n', N);
	memset(b, 'n', N);
	b[N - 1] = 'b';
	u3_file(path, names);
	snprintf(dir, sizeof(dir), "%s.zarr", path);
	cr_assert_eq(tu_tensorctl(&none, &out, "zarr", "export", dir, "--from",
				  path, NULL),
		     0, "%s", out);
	free(out);
	/* a's node name cut to 255 bytes, b's base cut for its suffix */
	snprintf(zj, sizeof(zj), "%s/%.255s/zarr.json", dir, a);
	node_names(zj, a);
	snprintf(zj, sizeof(zj), "%s/%.253s_1/zarr.json", dir, b);
	node_names(zj, b);
	cr_expect_eq(tu_run_capture(rm, &out), 0);
	free(out);
	unlink(path);
}
