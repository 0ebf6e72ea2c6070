/* SPDX-License-Identifier: MIT */
/*
 * vk-producer: a Vulkan compute stage writing tensors straight into
 * tensord's pages, published with a fence that signals when the GPU is
 * done.
 *
 *   vk-producer NAME FRAMES BYTES [DELAY_MS [die]]
 *
 * Per frame: borrow a recyclable loan of BYTES (a multiple of the
 * device's minImportedHostPointerAlignment; a size that is a multiple of
 * A maps A-aligned), import its pages into Vulkan
 * (VK_EXT_external_memory_host: the GPU writes the very pages consumers
 * will map), publish it at once with an acquire fence, then run the fill
 * shader and signal the fence when the GPU work is done. The fence is a
 * sync_file exported from the VkFence where the driver can
 * (VK_KHR_external_fence_fd, SYNC_FD), otherwise an eventfd signalled
 * after vkWaitForFences (lavapipe). DELAY_MS holds the GPU work back
 * after publishing (eventfd fences only), so a consumer that does not
 * wait reads an unwritten buffer; "die" ends the process before the last
 * frame's fence is signalled.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tensord/tensord.h>

#include "vkx.h"

static int fail(const char *what, const struct td_error *e)
{
	fprintf(stderr, "vk-producer: %s: %s\n", what, e->reason);
	return 1;
}

int main(int argc, char **argv)
{
	if (argc < 4 || argc > 6) {
		fprintf(stderr, "usage: %s NAME FRAMES BYTES [DELAY_MS "
				"[die]]\n", argv[0]);
		return 2;
	}
	const char *name = argv[1];
	long frames = strtol(argv[2], NULL, 10);
	uint64_t bytes = strtoull(argv[3], NULL, 10);
	long delay_ms = argc >= 5 ? strtol(argv[4], NULL, 10) : 0;
	int die = argc == 6 && strcmp(argv[5], "die") == 0;

	struct vkx v;
	struct vkx_prog prog;
	int rc = vkx_init(&v);
	if (rc < 0)
		return rc == -2 ? 77 : 1; /* 77: no Vulkan driver here */
	if (bytes == 0 || bytes % v.host_align || bytes / 4 > UINT32_MAX) {
		fprintf(stderr, "vk-producer: BYTES must be a multiple of "
				"%llu\n", (unsigned long long)v.host_align);
		return 2;
	}
	if (vkx_prog_init(&v, VKX_PRODUCE, &prog) < 0)
		return 1;
	printf("device %s, fences: %s\n", v.name,
	       v.sync_fd ? "sync_file (VK_KHR_external_fence_fd)"
			 : "eventfd (no SYNC_FD export in this driver)");

	struct td_error err;
	struct td_client *c;
	if (td_client_connect(NULL, &c, &err) < 0)
		return fail("connect", &err);
	const uint64_t shape[1] = {bytes / 4};
	for (long f = 0; f < frames; f++) {
		struct td_alloc *a;
		struct vkx_buf buf;
		uint64_t version;
		char meta[32];
		int fence = -1;
		bool sync_file = v.sync_fd && delay_ms == 0;

		if (td_client_alloc_named(c, name, 1, &bytes, TD_ALLOC_RECYCLE,
					  &a, &err) < 0)
			return fail("alloc", &err);
		/* the loan's pages become the GPU's buffer: no staging copy */
		if (vkx_import(&v, td_alloc_data(a, 0), bytes, &buf) < 0)
			return 1;
		if (sync_file) {
			if (vkx_produce(&v, &prog, &buf, (uint32_t)shape[0],
					(uint32_t)f) < 0)
				return 1;
			fence = vkx_sync_file(&v, &prog);
			/* done already: no sync_file, an eventfd says so */
			if (fence == -EALREADY &&
			    (fence = td_fence_create()) >= 0 &&
			    td_fence_signal(fence, &err) < 0)
				return fail("signal", &err);
		} else {
			fence = td_fence_create();
		}
		if (fence < 0) {
			fprintf(stderr, "vk-producer: no fence: %s\n",
				strerror(-fence));
			return 1;
		}
		snprintf(meta, sizeof(meta), "frame=%ld", f);
		struct td_publish p = {
			.name = name, .flags = TD_PUBLISH_FENCE,
			.dtype = TD_TENSOR_U32, .ndim = 1, .shape = shape,
			.fence_fd = fence, .meta = meta,
			.meta_len = strlen(meta),
		};
		/* a recyclable loan stays mapped after publish, so the GPU
		 * may go on writing it; consumers wait on the fence */
		if (td_client_publish_alloc(c, a, &p, &version, &err) < 0)
			return fail("publish", &err);
		printf("published %s version %llu frame %ld\n", name,
		       (unsigned long long)version, f);
		fflush(stdout);
		if (sync_file) {
			/* the driver signals it; we only wait to reuse */
			if (td_fence_wait(fence, -1, &err) < 0)
				return fail("wait", &err);
		} else {
			if (delay_ms)
				usleep((useconds_t)delay_ms * 1000);
			if (vkx_produce(&v, &prog, &buf, (uint32_t)shape[0],
					(uint32_t)f) < 0 ||
			    vkx_wait(&v, &prog) < 0)
				return 1;
			if (die && f == frames - 1) {
				printf("dying before signalling frame %ld\n",
				       f);
				fflush(stdout);
				_exit(3);
			}
			if (td_fence_signal(fence, &err) < 0)
				return fail("signal", &err);
		}
		close(fence); /* the daemon keeps its own */
		vkx_buf_free(&v, &buf);
	}
	td_client_close(c);
	vkx_prog_fini(&v, &prog);
	vkx_fini(&v);
	return 0;
}
