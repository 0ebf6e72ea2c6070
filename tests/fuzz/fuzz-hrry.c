/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the Hurray reader (specs/hurray.md §13): the input
 * is a whole file behind a memory-span transport. Open it, then read every
 * entry's descriptor, every tensor, every composite and every KV entry;
 * the same bytes are also decoded as a lone descriptor. Whatever is
 * returned must lie inside the input.
 */
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
