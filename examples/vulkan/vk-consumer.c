/* SPDX-License-Identifier: MIT */
/*
 * vk-consumer: import a tensor read-only into Vulkan and reduce it on
 * the GPU, after waiting on its acquire fence.
 *
 *   vk-consumer NAME AFTER TIMEOUT_MS [FENCE_MS]
 *
 * Gets the first version of NAME newer than AFTER (waiting up to
 * TIMEOUT_MS), waits up to FENCE_MS (default forever, or until tensord
 * is gone, which leaves nothing to fire it) for its fence,
 * imports the mapped plane's pages into Vulkan (the GPU reads the
 * producer's pages: the imported host pointer is the mapped plane) and
 * runs the reduction shader (wrapping u32 sum and xor). Checks it against
 * the same reduction on the CPU and against what the producer's formula
 * gives for the frame named in the metadata; exit 0 only when all agree.
 * A fence that does not signal in time is an error: nothing is read.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensord/tensord.h>

#include "vkx.h"

int main(int argc, char **argv)
{
	if (argc < 4 || argc > 5) {
		fprintf(stderr, "usage: %s NAME AFTER TIMEOUT_MS [FENCE_MS]\n",
			argv[0]);
		return 2;
	}
	const char *name = argv[1];
	uint64_t after = strtoull(argv[2], NULL, 10);
	int timeout_ms = atoi(argv[3]);
	int fence_ms = argc == 5 ? atoi(argv[4]) : -1;

	struct td_error err;
	struct td_client *c;
	struct td_tensor *t;
	int rc;
	if (td_client_connect(NULL, &c, &err) < 0 ||
	    td_client_get_newer(c, name, after, timeout_ms, &t, &err) < 0) {
		fprintf(stderr, "vk-consumer: %s\n", err.reason);
		return 1;
	}
	/* before any read, CPU or GPU: the producer's work must be done.
	 * td_tensor_fence_wait, not td_fence_wait on the bare fd: it also
	 * knows when the connection that leased the fence is gone (tensord
	 * exited or restarted), which nothing fires any more */
	if (td_tensor_has_fence(t)) {
		printf("%s version %llu: waiting for its fence\n", name,
		       (unsigned long long)td_tensor_version(t));
		fflush(stdout);
	}
	rc = td_tensor_fence_wait(t, fence_ms);
	if (rc < 0) {
		fprintf(stderr, "vk-consumer: %s version %llu: fence fd %d ",
			name, (unsigned long long)td_tensor_version(t),
			td_tensor_fence_fd(t));
		if (rc == -ETIMEDOUT)
			fprintf(stderr, "did not signal within %d ms\n",
				fence_ms);
		else if (rc == -ECONNRESET)
			fprintf(stderr, "cannot signal any more: the "
					"connection that leased it is gone "
					"(GET the version again)\n");
		else if (rc == -EIO)
			fprintf(stderr, "signalled an error (a GPU fault)\n");
		else
			fprintf(stderr, "failed: %s\n", strerror(-rc));
		return 1;
	}
	size_t meta_len;
	const char *meta = td_tensor_meta(t, &meta_len);
	unsigned frame = 0;
	if (td_tensor_dtype(t) != TD_TENSOR_U32 || td_tensor_plane_count(t) != 1 ||
	    !meta || meta_len > 30 || sscanf(meta, "frame=%u", &frame) != 1) {
		fprintf(stderr, "vk-consumer: not a vk-producer tensor\n");
		return 1;
	}

	struct vkx v;
	struct vkx_prog prog;
	struct vkx_buf in, res;
	rc = vkx_init(&v);
	if (rc < 0)
		return rc == -2 ? 77 : 1;
	/* a memfd plane is mapped here: import those pages. A dma-buf
	 * would be imported from td_tensor_plane_fd() instead. */
	const void *data = td_tensor_plane_data(t, 0);
	uint64_t size = td_tensor_plane_size(t, 0);
	if (td_tensor_plane_kind(t, 0) != TD_PLANE_MEMFD) {
		fprintf(stderr, "vk-consumer: %s version %llu: its plane is "
				"not a memfd (a dma-buf: import "
				"td_tensor_plane_fd() instead), which this "
				"example does not do\n", name,
			(unsigned long long)td_tensor_version(t));
		return 1;
	}
	if (vkx_prog_init(&v, VKX_REDUCE, &prog) < 0 ||
	    vkx_import(&v, (void *)data, size, &in) < 0 ||
	    vkx_alloc(&v, 2 * sizeof(uint32_t), &res) < 0 ||
	    vkx_reduce(&v, &prog, &in, (uint32_t)(size / 4), &res) < 0 ||
	    vkx_wait(&v, &prog) < 0)
		return 1;
	const uint32_t *r = res.host;
	uint32_t gsum = r[0], gxor = r[1], csum, cxor, esum, exor;
	vkx_cpu_reduce(data, size / 4, &csum, &cxor);
	vkx_expect(size / 4, frame, &esum, &exor);
	int ok = gsum == csum && gxor == cxor && csum == esum && cxor == exor;
	printf("%s version %llu frame %u on %s: imported %p == mapped plane "
	       "%p (memfd, no copy)\n",
	       name, (unsigned long long)td_tensor_version(t), frame, v.name,
	       in.host, data);
	printf("gpu sum %08x xor %08x, cpu sum %08x xor %08x, expected sum "
	       "%08x xor %08x: %s\n",
	       gsum, gxor, csum, cxor, esum, exor, ok ? "match" : "MISMATCH");
	vkx_buf_free(&v, &in);
	vkx_buf_free(&v, &res);
	vkx_prog_fini(&v, &prog);
	vkx_fini(&v);
	td_tensor_release(t);
	td_client_close(c);
	return ok ? 0 : 1;
}
