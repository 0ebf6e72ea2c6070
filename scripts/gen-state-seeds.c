/* SPDX-License-Identifier: MIT */
/*
 * Writes the seed images of tests/fuzz/fuzz-state.c into a folder:
 *
 *   cc -Iproto scripts/gen-state-seeds.c build/proto/libtd-proto.a \
 *      -lxxhash -o /tmp/gen && /tmp/gen tests/data/state-seeds
 *
 * (valid images: empty, one entry, several with shared fd ids, and
 * format 2, some entries without fds; the fuzzer finds the broken ones
 * from there).
 */
#include <stdio.h>
#include <string.h>

#include "state.h"

static const uint8_t blob[64] = {0x54, 0x44, 1, 0, 0, 0, 0, 0, 9};

/* n entries; with nofds, every other one without fds (format 2) */
static int write_image(const char *dir, const char *name, unsigned n,
		       int nofds)
{
	static const char *const names[] = {"a", "cam/left", "cam/right",
					    "z@9"};
	struct td_state_hdr h = {3, 40, 30, 0};
	struct td_state_wr w;
	uint8_t buf[4096];
	char path[512];
	int64_t len;
	FILE *f;

	td_state_encode_begin(&w, buf, sizeof(buf), &h);
	for (unsigned i = 0; i < n; i++) {
		struct td_state_entry e = {
			.name = {names[i], (uint16_t)strlen(names[i])},
			.flags = i == 1,
			.version = 5 + i * 3,
			.meta = {(const uint8_t *)"{\"k\":1}", i ? 7 : 0},
			.blob = {blob, 16 + 16 * i},
			.fd_count = nofds && i % 2 ? 0 : 1 + i % 3,
		};

		for (unsigned j = 0; j < e.fd_count; j++)
			e.fd_ids[j] = 1 + j + (i / 2) * 3; /* shared ids */
		td_state_encode_entry(&w, &e);
	}
	len = td_state_encode_finish(&w);
	if (len < 0)
		return 1;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(buf, 1, (size_t)len, f) != (size_t)len)
		return 1;
	return fclose(f) != 0;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s FOLDER\n", argv[0]);
		return 2;
	}
	return write_image(argv[1], "empty.bin", 0, 0) |
	       write_image(argv[1], "one.bin", 1, 0) |
	       write_image(argv[1], "four.bin", 4, 0) |
	       write_image(argv[1], "nofds.bin", 4, 1);
}
