/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the Hurray reader (specs/hurray.md §13): the input
 * is a whole file behind a memory-span transport. Open it, then read every
 * entry's descriptor, every tensor, every composite and every KV entry;
 * the same bytes are also decoded as a lone descriptor. Whatever is
 * returned must lie inside the input.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hrry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void inside(const uint8_t *data, size_t size, const void *p,
		   uint64_t len)
{
	const uint8_t *q = p;
	if (len && (q < data || len > size || q - data > (ptrdiff_t)(size - len)))
		abort();
}

/*
 * The same bytes as a sparse file: its 64-byte header, a hole of HOLE
 * zero bytes, then the rest (index, KV, trailer at the end). A trailer
 * or index entry may then declare lengths of gigabytes the file "holds";
 * the reader must check them against its caps before it asks for them:
 * any one read larger than the largest cap aborts (a reader allocates
 * what it reads before it reads it).
 */
#define HOLE (6ull << 30)
#define SPARSE_FILL_MAX (64u << 20)

struct sparse {
	const uint8_t *data;
	size_t size;
};

static int sparse_read(void *ctx, uint64_t off, void *buf, size_t len,
		       size_t *got)
{
	const struct sparse *s = ctx;
	uint8_t *p = buf;
	/* larger than the largest cap: the KV's 1 GiB, not the index's */
	if (len > TD_HRRY_MAX_KV_LEN && len > TD_HRRY_MAX_INDEX_LEN + (1u << 20))
		abort();
	/* under the caps but more than this harness will fill per run (a
	 * 600 MiB KV made the fuzzer 20x slower): a failing transport */
	if (len > SPARSE_FILL_MAX)
		return -EIO;
	*got = len;
	while (len) {
		/* [0, 64) the header, [64, 64 + HOLE) zeros, the rest after */
		uint64_t at = off < 64 ? off : off - HOLE, n;
		if (off >= 64 && off < 64 + HOLE) {
			n = 64 + HOLE - off;
			n = n < len ? n : len;
			memset(p, 0, n);
		} else if (at < s->size && (off < 64 || at >= 64)) {
			n = (off < 64 ? 64 : s->size) - at;
			n = n < len ? n : len;
			memcpy(p, s->data + at, n);
		} else {
			n = len; /* past the end: the transport size says */
			memset(p, 0, n);
		}
		p += n;
		off += n;
		len -= n;
	}
	return 0;
}

/* Open, every descriptor and KV entry (no tensor: their data may be
 * gigabytes of the hole, which is no declared length). */
static void sparse_pass(const uint8_t *data, size_t size)
{
	struct sparse sp = {data, size};
	struct td_hrry_transport t = {.ctx = &sp, .size = size + HOLE,
				      .read_at = sparse_read};
	struct td_hrry_file_reader *r = NULL;
	uint64_t n;
	if (size < TD_HRRY_MIN_FILE_LEN ||
	    td_hrry_file_reader_new(&t, &r, NULL) < 0)
		return;
	td_hrry_file_reader_tensor_count(r, &n);
	for (uint64_t i = 0; i < n; i++) {
		struct td_hrry_entry e;
		struct td_hrry_desc d;
		td_hrry_file_reader_entry(r, i, &e);
		td_hrry_file_reader_read_descriptor(r, e.name, e.name_len, &d,
						    NULL);
	}
	td_hrry_file_reader_kv_count(r, &n);
	for (uint64_t i = 0; i < n; i++) {
		struct td_hrry_kv_entry kv;
		td_hrry_file_reader_kv_entry(r, i, &kv);
	}
	td_hrry_file_reader_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct td_hrry_desc d;
	struct td_hrry_transport t;
	struct td_hrry_file_reader *r = NULL;
	volatile uint64_t sink = 0;
	uint64_t n;

	if (td_hrry_desc_decode(data, size, &d, NULL) == 0) {
		if (d.descriptor_length > size)
			abort();
		inside(data, size, d.layout_payload, d.layout_payload_len);
		inside(data, size, d.quantization, d.quantization_len);
		sink += (uint64_t)td_hrry_desc_supported(&d, NULL);
	}
	sparse_pass(data, size);
	if (td_hrry_transport_mem(data, size, &t) < 0)
		return 0;
	if (td_hrry_file_reader_new(&t, &r, NULL) < 0)
		return 0;
	td_hrry_file_reader_tensor_count(r, &n);
	for (uint64_t i = 0; i < n; i++) {
		struct td_hrry_entry e;
		struct td_hrry_tensor tt;
		struct td_hrry_composite c;
		td_hrry_file_reader_entry(r, i, &e);
		inside(data, size, e.name, e.name_len);
		if (td_hrry_file_reader_read_descriptor(r, e.name, e.name_len,
							&d, NULL) < 0)
			continue;
		if (td_hrry_file_reader_read_tensor(r, e.name, e.name_len, &tt,
						    NULL) == 0) {
			inside(data, size, tt.data, tt.data_len);
			if (tt.data_len)
				sink += ((const uint8_t *)tt.data)[0];
			td_hrry_tensor_fini(&tt);
		}
		if (d.layout_tag == TD_HRRY_LAYOUT_COMPOSITE &&
		    td_hrry_file_reader_read_composite(r, e.name, e.name_len,
						       &c, NULL) == 0) {
			if (c.node_count == 0 || c.node_count > n)
				abort();
			td_hrry_composite_fini(&c);
		}
	}
	td_hrry_file_reader_kv_count(r, &n);
	for (uint64_t i = 0; i < n; i++) {
		struct td_hrry_kv_entry kv;
		if (td_hrry_file_reader_kv_entry(r, i, &kv) < 0)
			continue;
		inside(data, size, kv.key, kv.key_len);
		if (kv.value.kind == TD_HRRY_KV_ARRAY)
			for (size_t k = 0; k < kv.value.item_count; k++)
				sink += kv.value.items[k].data_len;
		else
			inside(data, size, kv.value.data, kv.value.data_len);
	}
	td_hrry_file_reader_free(&r);
	(void)sink;
	return 0;
}
