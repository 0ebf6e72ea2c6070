/* SPDX-License-Identifier: MIT */
/*
 * consumer: wait for a tensor newer than a version, read it in place.
 *
 *   consumer NAME [AFTER_VERSION [TIMEOUT_MS]]
 *
 * Prints the version, shape, metadata and the sum of the elements of an
 * f32 tensor (other dtypes: the byte count). The pages read are the very
 * pages the producer wrote, mapped read-only; the lease taken by the get
 * keeps them unchanged until td_tensor_release(), even if the producer
 * publishes a newer version or deletes the name meanwhile.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensord/tensord.h>

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 4) {
		fprintf(stderr, "usage: %s NAME [AFTER_VERSION [TIMEOUT_MS]]\n",
			argv[0]);
		return 2;
	}
	const char *name = argv[1];
	uint64_t after = argc > 2 ? strtoull(argv[2], NULL, 10) : 0;
	int timeout_ms = argc > 3 ? atoi(argv[3]) : 5000;

	struct td_error err;
	struct td_client *c;
	int rc = td_client_connect(NULL, &c, &err);
	if (rc < 0) {
		fprintf(stderr, "consumer: connect: %s (%s)\n", strerror(-rc),
			err.reason);
		return 1;
	}

	/* Waits (at most timeout_ms) for a version newer than `after`. */
	struct td_tensor *t;
	rc = td_client_get_newer(c, name, after, timeout_ms, &t, &err);
	if (rc < 0) {
		fprintf(stderr, "consumer: get %s: %s (%s)\n", name,
			strerror(-rc), err.reason);
		td_client_close(c);
		return 1;
	}

	/* A GPU producer may attach a fence: wait for it before reading. */
	rc = td_tensor_fence_wait(t, timeout_ms);
	if (rc < 0) {
		fprintf(stderr, "consumer: fence: %s\n", strerror(-rc));
		td_tensor_release(t);
		td_client_close(c);
		return 1;
	}

	printf("%s version %llu dtype %s shape", name,
	       (unsigned long long)td_tensor_version(t),
	       td_tensor_dtype_name(td_tensor_dtype(t)));
	const uint64_t *shape = td_tensor_shape(t);
	for (uint32_t d = 0; d < td_tensor_ndim(t); d++)
		printf("%s%llu", d ? "x" : " ", (unsigned long long)shape[d]);

	size_t meta_len;
	const char *meta = td_tensor_meta(t, &meta_len);
	printf(" meta '%.*s'", (int)meta_len, meta ? meta : "");

	if (td_tensor_dtype(t) == TD_TENSOR_F32 &&
	    td_tensor_plane_count(t) == 1) {
		const float *m = td_tensor_plane_data(t, 0);
		size_t n = td_tensor_plane_size(t, 0) / sizeof(float);
		double sum = 0;
		for (size_t i = 0; i < n; i++)
			sum += m[i];
		printf(" sum %.1f\n", sum);
	} else {
		printf(" bytes %llu\n",
		       (unsigned long long)td_tensor_bytes(t));
	}

	td_tensor_release(t); /* ends the lease */
	td_client_close(c);
	return 0;
}
