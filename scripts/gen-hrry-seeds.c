/* SPDX-License-Identifier: MIT */
/*
 * Writes the seed files of tests/fuzz/fuzz-hrry.c into a folder, made by
 * our own writer core (never upstream files):
 *
 *   ninja -C build tests/fuzz/gen-hrry-seeds
 *   build/tests/fuzz/gen-hrry-seeds tests/data/hrry-seeds
 *
 * A plain file with KV of every kind, a sorted index at A = 8192, the
 * three composite rules (one nested) in both head-padding forms, an
 * unsupported tensor beside a supported one, lone descriptors, and
 * four files fuzz-hrry reads with a 6 GiB hole after the header, each
 * declaring a length there (index, descriptor, KV: gigabytes past the
 * caps, and a KV of 600 MiB, over the index cap but under its own).
 */
#include <stdio.h>
#include <string.h>

#include "bytes.h"
#include "hrry-util.h"

static int save(const char *dir, const char *name, const void *p, size_t n)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n) {
		perror(path);
		return 1;
	}
	return fclose(f) != 0;
}

static int plain(const char *dir)
{
	struct hu_sink s = {0};
	struct hu_raw r;
	struct td_hrry_desc d;
	struct td_hrry_writer_options o = {.sorted_index = true,
					   .data_buffer_alignment = 8192};
	uint8_t data[96];
	const void *b[1] = {data};
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)i;
	struct td_hrry_kv_value items[2] = {
		{.kind = TD_HRRY_KV_STRING, .data = (const uint8_t *)"a",
		 .data_len = 1},
		{.kind = TD_HRRY_KV_STRING, .data = (const uint8_t *)"bc",
		 .data_len = 2}};
	struct td_hrry_kv_entry kv[] = {
		{"s", 1, {.kind = TD_HRRY_KV_STRING,
			  .data = (const uint8_t *)"x", .data_len = 1}},
		{"i", 1, {.kind = TD_HRRY_KV_INT64, .i64_value = -1}},
		{"u", 1, {.kind = TD_HRRY_KV_UINT64, .u64_value = 2}},
		{"f", 1, {.kind = TD_HRRY_KV_FLOAT64, .f64_value = 0.5}},
		{"b", 1, {.kind = TD_HRRY_KV_BOOL, .bool_value = true}},
		{"y", 1, {.kind = TD_HRRY_KV_BYTES,
			  .data = (const uint8_t *)"\1", .data_len = 1}},
		{"a", 1, {.kind = TD_HRRY_KV_ARRAY,
			  .item_kind = TD_HRRY_KV_STRING, .items = items,
			  .item_count = 2}},
	};
	hu_raw_init(&r, &s, &o);
	td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_FLOAT32, 2, (uint64_t[]){3, 4});
	d.flags = TD_HRRY_DESC_HAS_STATISTICS;
	hu_raw_tensor(&r, "w", &d, b);
	td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_INT8, 0, NULL);
	hu_raw_tensor(&r, "scalar", &d, b);
	td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_UINT16, 2, (uint64_t[]){0, 4});
	hu_raw_tensor(&r, "empty", &d, b);
	td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){4});
	d.layout_tag = TD_HRRY_LAYOUT_COLUMN_MAJOR;
	hu_raw_tensor(&r, "colmajor", &d, b);
	hu_raw_finish(&r, kv, sizeof(kv) / sizeof(kv[0]));
	int rc = save(dir, "plain-kv-sorted.hrry", s.buf, s.len);
	free(s.buf);
	return rc;
}

static int composites(const char *dir, uint32_t form)
{
	struct hu_sink s = {0};
	struct hu_raw r;
	struct td_hrry_desc h, m;
	struct td_hrry_writer_options o = {.head_padding = form};
	float v[16] = {0};
	const void *b[1] = {v};
	hu_raw_init(&r, &s, &o);
	hu_head(&h, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){4},
		TD_HRRY_RULE_PARTITION, 0, 2);
	hu_raw_tensor(&r, "p", &h, NULL);
	hu_member(&m, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){2},
		  (uint64_t[]){4}, (uint64_t[]){0});
	hu_raw_tensor(&r, "p.0", &m, b);
	hu_head(&h, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){2},
		TD_HRRY_RULE_GROUP, 0, 1);
	h.flags = TD_HRRY_DESC_HAS_SHARD;
	h.parent_shape[0] = 4;
	h.shard_offset[0] = 2;
	hu_raw_tensor(&r, "p.1", &h, NULL);
	hu_member(&m, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){2}, NULL, NULL);
	hu_raw_tensor(&r, "p.1.0", &m, b);
	hu_head(&h, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){4},
		TD_HRRY_RULE_OVERLAY, TD_HRRY_COMBINE_ADD, 2);
	hu_raw_tensor(&r, "o", &h, NULL);
	hu_member(&m, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){4},
		  (uint64_t[]){4}, (uint64_t[]){0});
	m.flags |= TD_HRRY_DESC_HAS_COMPOSITE_MEMBER;
	m.member_role = TD_HRRY_ROLE_BASE;
	hu_raw_tensor(&r, "o.base", &m, b);
	hu_member(&m, TD_HRRY_TYPE_FLOAT32, 1, (uint64_t[]){1},
		  (uint64_t[]){4}, (uint64_t[]){3});
	m.flags |= TD_HRRY_DESC_HAS_COMPOSITE_MEMBER;
	hu_raw_tensor(&r, "o.fix", &m, b);
	hu_raw_finish(&r, NULL, 0);
	int rc = save(dir, form ? "composites-upstream.hrry" :
				  "composites-spec.hrry",
		      s.buf, s.len);
	free(s.buf);
	return rc;
}

static int descriptors(const char *dir)
{
	uint8_t buf[8192];
	struct td_hrry_desc d;
	int rc = 0, n;
	td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_FLOAT64, 3,
				(uint64_t[]){2, 3, 4});
	d.flags = TD_HRRY_DESC_HAS_STATISTICS | TD_HRRY_DESC_HAS_SHARD;
	d.parent_shape[0] = 4;
	d.parent_shape[1] = 3;
	d.parent_shape[2] = 4;
	n = td_hrry_desc_encode(&d, buf, sizeof(buf), NULL);
	rc |= save(dir, "desc-shard-stats.bin", buf, (size_t)n);
	hu_head(&d, TD_HRRY_TYPE_INT32, 2, (uint64_t[]){8, 8},
		TD_HRRY_RULE_PARTITION, 0, 4);
	n = td_hrry_desc_encode(&d, buf, sizeof(buf), NULL);
	rc |= save(dir, "desc-head.bin", buf, (size_t)n);
	return rc;
}

/* fuzz-hrry's sparse pass puts 6 GiB of zeros after byte 64 (HOLE). */
static int sparse(const char *dir)
{
	const uint64_t hole = 6ull << 30;
	uint8_t f[64 + 43 + 40] = "HRRYFILE", *ix = f + 64, *t;
	int rc = 0;
	f[8] = 1;
	td__put_le32(f + 16, 4096);
	td__put_le64(f + 20, 64);
	/* a trailer declaring the hole as a 6 GiB index */
	t = f + 64;
	memset(t, 0, 40);
	td__put_le64(t, 64);
	td__put_le64(t + 8, hole);
	memcpy(t + 36, "HRRY", 4);
	rc |= save(dir, "sparse-index-6g.hrry", f, 104);
	/* 768 MiB: over the index cap, under the KV cap (the largest) */
	td__put_le64(t + 8, 768ull << 20);
	rc |= save(dir, "sparse-index-768m.hrry", f, 104);
	/* one entry "a" whose descriptor at 64 declares 4 GiB of the hole */
	memset(ix, 0, sizeof(f) - 64);
	td__put_le64(ix, 1);
	td__put_le16(ix + 8, 1);
	ix[10] = 'a';
	td__put_le64(ix + 11, 64);
	td__put_le32(ix + 19, 0xFFFFFF00u);
	t = ix + 43;
	td__put_le64(t, 64 + hole);
	td__put_le64(t + 8, 43);
	memcpy(t + 36, "HRRY", 4);
	rc |= save(dir, "sparse-desc-4g.hrry", f, sizeof(f));
	/* 32 MiB: over the descriptor cap, under the other two */
	td__put_le32(ix + 19, 32u << 20);
	rc |= save(dir, "sparse-desc-32m.hrry", f, sizeof(f));
	/* an empty index after a KV declaring 4 GiB of the hole */
	memset(ix, 0, sizeof(f) - 64);
	t = ix + 8;
	td__put_le64(t, 64 + hole);
	td__put_le64(t + 8, 8);
	td__put_le64(t + 16, 64);
	td__put_le32(t + 24, 0xFFFFFFF8u);
	memcpy(t + 36, "HRRY", 4);
	rc |= save(dir, "sparse-kv-4g.hrry", f, 64 + 8 + 40);
	/* a KV of 600 MiB of the hole: over the index cap, under the KV cap,
	 * so the reader reads it (and refuses its zeros) */
	td__put_le32(t + 24, 600u << 20);
	rc |= save(dir, "sparse-kv-600m.hrry", f, 64 + 8 + 40);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	return plain(argv[1]) | composites(argv[1], 0) |
	       composites(argv[1], 1) | descriptors(argv[1]) |
	       sparse(argv[1]);
}
