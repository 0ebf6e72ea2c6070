/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the Hurray reader (specs/hurray.md §13): the input
 * is a whole file behind a memory-span transport. Open it, then read every
 * entry's descriptor, every tensor, every composite and every KV entry;
 * the same bytes are also decoded as a lone descriptor. Whatever is
 * returned must lie inside the input.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
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
 * any one request larger than the cap of what it reads aborts (a reader
 * allocates what it reads before it reads it). The index and the KV are
 * read whole, each in one request at the offset the trailer gives it:
 * there their caps hold; every other request of this pass (header,
 * trailer, a descriptor) is under the descriptor cap.
 *
 * The reader's read_full() asks for a request in pieces of at most 1 GiB
 * (the largest cap itself), so no one read_at() call is ever larger than
 * the cap: the size of a request shows only across its pieces. A read of
 * more than this harness fills (SPARSE_FILL_MAX) is answered short, one
 * byte, and the piece that continues it then tells how much the request
 * still wants: past its cap in all, abort; else the transport fails.
 */
#define HOLE (6ull << 30)
#define SPARSE_FILL_MAX (64u << 20)

struct sparse {
	const uint8_t *data;
	size_t size;
	/* the trailer's index_offset and kv_offset (the last 40 bytes) */
	uint64_t index_off, kv_off;
	/* after a short answer: the request goes on at cont_off, having
	 * got cont_done bytes, under cont_cap */
	bool cont;
	uint64_t cont_off, cont_done, cont_cap;
};

/* The cap of a request that starts at off. */
static uint64_t sparse_cap(const struct sparse *s, uint64_t off)
{
	uint64_t cap = TD_HRRY_MAX_DESC_LEN;

	if (off == s->index_off && cap < TD_HRRY_MAX_INDEX_LEN)
		cap = TD_HRRY_MAX_INDEX_LEN;
	if (off == s->kv_off && cap < TD_HRRY_MAX_KV_LEN)
		cap = TD_HRRY_MAX_KV_LEN;
	return cap;
}

static int sparse_read(void *ctx, uint64_t off, void *buf, size_t len,
		       size_t *got)
{
	struct sparse *s = ctx;
	uint8_t *p = buf;
	bool cont = s->cont && off == s->cont_off;
	uint64_t asked = len + (cont ? s->cont_done : 0);
	uint64_t cap = cont ? s->cont_cap : sparse_cap(s, off);

	s->cont = false;
	if (asked > cap)
		abort();
	if (len > SPARSE_FILL_MAX) {
		/* under the caps so far but more than this harness fills
		 * per run (a 600 MiB KV made the fuzzer 20x slower) */
		if (cont)
			return -EIO;
		len = 1; /* short: the next piece says how much is left */
		s->cont = true;
		s->cont_off = off + 1;
		s->cont_done = 1;
		s->cont_cap = cap;
	}
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
	struct sparse sp = {.data = data, .size = size};
	struct td_hrry_transport t = {.ctx = &sp, .size = size + HOLE,
				      .read_at = sparse_read};
	struct td_hrry_file_reader *r = NULL;
	uint64_t n;
	if (size < TD_HRRY_MIN_FILE_LEN)
		return;
	sp.index_off = td__le64(data + size - TD_HRRY_TRAILER_LEN);
	sp.kv_off = td__le64(data + size - TD_HRRY_TRAILER_LEN + 16);
	if (td_hrry_file_reader_new(&t, &r, NULL) < 0)
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
