/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for proto/wire: the header decoder on the input, then
 * every body decoder on both the whole input and the part after a 32-byte
 * header. Decoding is strict and encoding canonical, so any body a decoder
 * accepts must re-encode to exactly the same bytes (abort otherwise).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"
#include "wire-status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t re[TD_WIRE_MAX_MSG];

static void same(int64_t n, const uint8_t *b, size_t len)
{
	if (n < 0 || (size_t)n != len || memcmp(re, b, len) != 0)
		abort();
}

#define TRY(type)                                                             \
	do {                                                                  \
		struct td_wire_##type m;                                      \
		if (td_wire_##type##_decode(b, len, &m, &e) == 0)             \
			same(td_wire_##type##_encode(&m, re, sizeof(re)), b,  \
			     len);                                            \
		else if (e.kind == TD_ERR_NONE)                               \
			abort(); /* a refusal always says why */              \
		e.kind = TD_ERR_NONE;                                         \
	} while (0)

static void list_rep(const uint8_t *b, size_t len)
{
	struct td_wire_list_rd lr;
	struct td_wire_entry ent;
	struct td_wire_wr wr;
	int rc;

	if (td_wire_list_rep_init(&lr, b, len, NULL) < 0)
		return;
	td_wire_wr_init(&wr, re, sizeof(re));
	if (td_wire_list_rep_begin(&wr) < 0)
		abort();
	while ((rc = td_wire_list_rep_next(&lr, &ent)) == 1)
		if (td_wire_entry_put(&wr, &ent) < 0)
			abort();
	if (rc < 0)
		return;
	td_wire_list_rep_finish(&wr, lr.count, lr.more);
	same((int64_t)wr.off, b, len);
}

static void status_rep(const uint8_t *b, size_t len)
{
	static struct td_wire_status_client cl[TD_WIRE_STATUS_MAX_CLIENTS];
	static struct td_wire_status_uid ui[TD_WIRE_STATUS_MAX_UIDS];
	/* the byte reserve's tail expected or not, by the length's parity;
	 * the uid rows' pinned figures by its next bit */
	struct td_wire_status_rep m = {.clients = cl, .uids = ui,
				       .has_reserve = len & 1,
				       .has_pinned = len & 2};
	struct td_err e = {0};

	if (td_wire_status_rep_decode(b, len, &m, TD_WIRE_STATUS_MAX_CLIENTS,
				      TD_WIRE_STATUS_MAX_UIDS, &e) == 0)
		same(td_wire_status_rep_encode(&m, re, sizeof(re)), b, len);
	else if (e.kind == TD_ERR_NONE)
		abort();
}

static void bodies(const uint8_t *b, size_t len)
{
	struct td_err e = {0};

	if (len > TD_WIRE_MAX_MSG)
		return;
	TRY(hello_req);
	TRY(hello_rep);
	TRY(alloc_req);
	TRY(alloc_rep);
	TRY(publish_req);
	TRY(publish_rep);
	TRY(get_req);
	TRY(get_rep);
	TRY(release_req);
	TRY(list_req);
	TRY(name_req);
	TRY(stat_req);
	TRY(entry);
	TRY(watch_req);
	TRY(watch_rep);
	TRY(unwatch_req);
	TRY(notify);
	TRY(delete_req);
	TRY(delete_rep);
	TRY(error);
	TRY(status_req);
	TRY(ring_create_req);
	TRY(ring_rep);
	TRY(ring_sub_req);
	TRY(ring_close_req);
	TRY(ring_stat_rep);
	TRY(ring_wake_rep);
	TRY(follow_rep);
	TRY(publish_many_req);
	TRY(publish_many_rep);
	TRY(get_many_req);
	TRY(get_many_rep);
	list_rep(b, len);
	status_rep(b, len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct td_wire_hdr h;
	uint8_t out[TD_WIRE_HDR_LEN];

	if (td_wire_hdr_decode(data, size, &h, NULL) == 0) {
		td_wire_hdr_encode(&h, out);
		if (memcmp(out, data, TD_WIRE_HDR_LEN) != 0)
			abort();
	}
	if (size >= TD_WIRE_HDR_LEN)
		bodies(data + TD_WIRE_HDR_LEN, size - TD_WIRE_HDR_LEN);
	bodies(data, size);
	return 0;
}
