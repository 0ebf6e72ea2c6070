/* SPDX-License-Identifier: MIT */
/*
 * vkx: the little Vulkan the GPU examples share: one compute queue,
 * buffers imported from host pages (VK_EXT_external_memory_host), the
 * producer's fill shader and the consumer's reduction shader, a fence per
 * submission (exportable as a sync_file where the driver can).
 */
#ifndef TD_EXAMPLES_VKX_H
#define TD_EXAMPLES_VKX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <vulkan/vulkan.h>

struct vkx {
	VkInstance inst;
	VkPhysicalDevice pdev;
	VkDevice dev;
	VkQueue queue;
	uint32_t qfamily;
	VkCommandPool pool;
	char name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
	VkDeviceSize host_align; /* minImportedHostPointerAlignment */
	bool sync_fd;            /* fences export SYNC_FD sync_files */
	PFN_vkGetMemoryHostPointerPropertiesEXT host_props;
	PFN_vkGetFenceFdKHR fence_fd;
};

/* A buffer whose memory is imported host pages (or allocated, below). */
struct vkx_buf {
	VkBuffer buf;
	VkDeviceMemory mem;
	void *host; /* the pages it uses */
	VkDeviceSize size;
	bool owned; /* allocated by Vulkan (host-visible, mapped at host) */
};

/* A compute shader with its descriptor set (storage buffers only). */
struct vkx_prog {
	VkDescriptorSetLayout dsl;
	VkPipelineLayout layout;
	VkPipeline pipe;
	VkDescriptorPool dpool;
	VkDescriptorSet set;
	uint32_t nbind;
	VkCommandBuffer cmd;
	VkFence fence;
};

enum vkx_shader { VKX_PRODUCE, VKX_REDUCE };

/*
 * The first device with VK_EXT_external_memory_host and a compute queue.
 * 0, or -1 with a line on stderr; -2 when no Vulkan device exists at all
 * (no driver installed).
 */
int vkx_init(struct vkx *v);
void vkx_fini(struct vkx *v);

/*
 * Import size bytes of host pages at p (both multiples of host_align) as
 * a storage buffer: the GPU works on those very pages, no copy. 0 or -1.
 */
int vkx_import(struct vkx *v, void *p, size_t size, struct vkx_buf *b);
/* Host-visible, host-coherent memory allocated by Vulkan, mapped. */
int vkx_alloc(struct vkx *v, size_t size, struct vkx_buf *b);
void vkx_buf_free(struct vkx *v, struct vkx_buf *b);

int vkx_prog_init(struct vkx *v, enum vkx_shader which, struct vkx_prog *p);
void vkx_prog_fini(struct vkx *v, struct vkx_prog *p);

/*
 * Record and submit the fill of b (words of u32) for frame: returns with
 * the work queued and p->fence to be waited (vkx_wait). 0 or -1.
 */
int vkx_produce(struct vkx *v, struct vkx_prog *p, struct vkx_buf *b,
		uint32_t words, uint32_t frame);
/* Submit the reduction of src into res (2 u32: sum, xor; zeroed here). */
int vkx_reduce(struct vkx *v, struct vkx_prog *p, struct vkx_buf *src,
	       uint32_t words, struct vkx_buf *res);
/* Wait for the program's last submission. 0 or -1. */
int vkx_wait(struct vkx *v, struct vkx_prog *p);
/*
 * A sync_file that signals when the program's last submission completes
 * (only with v->sync_fd; call right after the submit). fd, -EALREADY
 * when the submission had already completed (vkGetFenceFdKHR may then
 * give no fd, "-1", for a SYNC_FD), or -EIO.
 */
int vkx_sync_file(struct vkx *v, struct vkx_prog *p);

/* The value the fill shader writes at index i of frame (same on CPU). */
static inline uint32_t vkx_value(uint32_t i, uint32_t frame)
{
	return (i * 2654435761u) ^ (frame * 40503u + 1u);
}

/* The reduction on the CPU over words at p. */
static inline void vkx_cpu_reduce(const uint32_t *p, size_t words,
				  uint32_t *sum, uint32_t *xr)
{
	uint32_t s = 0, x = 0;

	for (size_t i = 0; i < words; i++) {
		s += p[i];
		x ^= p[i];
	}
	*sum = s;
	*xr = x;
}

/* The reduction of frame computed from the formula (what must come out). */
static inline void vkx_expect(size_t words, uint32_t frame, uint32_t *sum,
			      uint32_t *xr)
{
	uint32_t s = 0, x = 0;

	for (size_t i = 0; i < words; i++) {
		uint32_t w = vkx_value((uint32_t)i, frame);

		s += w;
		x ^= w;
	}
	*sum = s;
	*xr = x;
}

#endif
