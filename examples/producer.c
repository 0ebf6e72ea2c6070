/* SPDX-License-Identifier: MIT */
/*
 * producer: publish a small f32 tensor under a name, COUNT times.
 *
 *   producer NAME [COUNT]
 *
 * Each version holds a 3x4 matrix whose element (r, c) is
 * version_index * 100 + r * 4 + c, so a consumer can check what it got.
 * The bytes are written straight into pages the daemon lent us
 * (td_client_alloc); publishing hands those very pages to every reader.
 * The socket is $TENSORD_SOCKET, else the default (see tensord.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensord/tensord.h>

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: %s NAME [COUNT]\n", argv[0]);
		return 2;
	}
	const char *name = argv[1];
	long count = argc == 3 ? strtol(argv[2], NULL, 10) : 1;
	if (count < 1) {
		fprintf(stderr, "producer: COUNT must be >= 1\n");
		return 2;
	}

	struct td_error err;
	struct td_client *c;
	int rc = td_client_connect(NULL, &c, &err);
	if (rc < 0) {
		fprintf(stderr, "producer: connect: %s (%s)\n", strerror(-rc),
			err.reason);
		return 1;
	}

	const uint64_t shape[2] = {3, 4};
	const uint64_t bytes = 3 * 4 * sizeof(float);
	for (long i = 0; i < count; i++) {
		/* 1. Borrow a zero-filled buffer from the daemon, mapped
		 *    writable here. */
		struct td_alloc *a;
		rc = td_client_alloc(c, 1, &bytes, &a, &err);
		if (rc < 0)
			break;

		/* 2. Write the tensor in place: no staging copy. */
		float *m = td_alloc_data(a, 0);
		for (int e = 0; e < 12; e++)
			m[e] = (float)(i * 100 + e);

		/* 3. Describe and publish it. The daemon seals the buffer:
		 *    from now on nobody can change these bytes. */
		char meta[64];
		int meta_len = snprintf(meta, sizeof(meta), "frame=%ld", i);
		struct td_publish p = {
			.name = name,
			.dtype = TD_TENSOR_F32,
			.ndim = 2,
			.shape = shape,
			.meta = meta,
			.meta_len = (size_t)meta_len,
		};
		uint64_t version;
		rc = td_client_publish_alloc(c, a, &p, &version, &err);
		if (rc < 0)
			break;
		printf("published %s version %llu (%s)\n", name,
		       (unsigned long long)version, meta);
	}
	if (rc < 0)
		fprintf(stderr, "producer: %s (%s)\n", strerror(-rc),
			err.reason);
	td_client_close(c);
	return rc < 0 ? 1 : 0;
}
