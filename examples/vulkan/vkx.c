/* SPDX-License-Identifier: MIT */
/* vkx: see vkx.h. Errors print one line on stderr and return -1. */
#include "vkx.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

/* SPIR-V compiled at build time (glslc -mfmt=c, or glslangValidator -x) */
static const uint32_t produce_spv[] =
#if VKX_SPV_BRACED
#include "produce.spv.h"
#else
{
#include "produce.spv.h"
}
#endif
;
static const uint32_t reduce_spv[] =
#if VKX_SPV_BRACED
#include "reduce.spv.h"
#else
{
#include "reduce.spv.h"
}
#endif
;

/* workgroups per dispatch (far below the limit): the fill has no
 * cross-invocation work; the reduction's invocations each fold many
 * words and add them with an atomic, so fewer of them is cheaper */
#define GROUPS_FILL 4096u
#define GROUPS_REDUCE 64u

#define CHECK(call)                                                            \
	do {                                                                   \
		VkResult r_ = (call);                                          \
		if (r_ != VK_SUCCESS) {                                        \
			fprintf(stderr, "vulkan: %s failed: %d\n", #call,      \
				(int)r_);                                      \
			return -1;                                             \
		}                                                              \
	} while (0)

static bool has_ext(VkPhysicalDevice pd, const char *name)
{
	VkExtensionProperties props[512];
	uint32_t n = 512;

	if (vkEnumerateDeviceExtensionProperties(pd, NULL, &n, props) < 0)
		return false;
	for (uint32_t i = 0; i < n; i++)
		if (strcmp(props[i].extensionName, name) == 0)
			return true;
	return false;
}

static bool fence_exports_sync_fd(VkPhysicalDevice pd)
{
	VkPhysicalDeviceExternalFenceInfo info = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_FENCE_INFO,
		.handleType = VK_EXTERNAL_FENCE_HANDLE_TYPE_SYNC_FD_BIT,
	};
	VkExternalFenceProperties props = {
		.sType = VK_STRUCTURE_TYPE_EXTERNAL_FENCE_PROPERTIES,
	};

	if (!has_ext(pd, VK_KHR_EXTERNAL_FENCE_FD_EXTENSION_NAME))
		return false;
	vkGetPhysicalDeviceExternalFenceProperties(pd, &info, &props);
	return props.externalFenceFeatures &
	       VK_EXTERNAL_FENCE_FEATURE_EXPORTABLE_BIT;
}

#if defined(__SANITIZE_ADDRESS__)
static int pin(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	(void)arg;
	if (info->dlpi_name && info->dlpi_name[0])
		(void)dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD |
						      RTLD_NODELETE);
	return 0;
}
#endif

/*
 * Under ASan: keep every library loaded now (the driver the loader
 * opened, and LLVM under lavapipe) mapped after vkDestroyInstance. The
 * loader dlclose()s the driver, and LeakSanitizer then reports whatever
 * the driver's globals pointed to as leaked (from "<unknown module>"):
 * with the driver kept, the same run reports nothing.
 */
static void pin_driver(void)
{
#if defined(__SANITIZE_ADDRESS__)
	dl_iterate_phdr(pin, NULL);
#endif
}

int vkx_init(struct vkx *v)
{
	VkApplicationInfo app = {
		.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
		.pApplicationName = "tensord-example",
		.apiVersion = VK_API_VERSION_1_1,
	};
	VkInstanceCreateInfo ici = {
		.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
		.pApplicationInfo = &app,
	};
	VkPhysicalDevice pds[16];
	uint32_t n = 16;
	float prio = 1.0f;

	memset(v, 0, sizeof(*v));
	if (vkCreateInstance(&ici, NULL, &v->inst) != VK_SUCCESS) {
		fprintf(stderr, "vulkan: no Vulkan driver (vkCreateInstance "
				"failed; install mesa-vulkan-drivers)\n");
		return -2;
	}
	if (vkEnumeratePhysicalDevices(v->inst, &n, pds) < 0 || n == 0) {
		fprintf(stderr, "vulkan: no Vulkan device (install "
				"mesa-vulkan-drivers for lavapipe)\n");
		return -2;
	}
	for (uint32_t i = 0; i < n && !v->pdev; i++) {
		VkQueueFamilyProperties q[16];
		uint32_t nq = 16;

		if (!has_ext(pds[i], VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME))
			continue;
		vkGetPhysicalDeviceQueueFamilyProperties(pds[i], &nq, q);
		for (uint32_t k = 0; k < nq; k++)
			if (q[k].queueFlags & VK_QUEUE_COMPUTE_BIT) {
				v->pdev = pds[i];
				v->qfamily = k;
				break;
			}
	}
	if (!v->pdev) {
		fprintf(stderr, "vulkan: no device with "
				"VK_EXT_external_memory_host and compute\n");
		return -1;
	}
	VkPhysicalDeviceExternalMemoryHostPropertiesEXT hp = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT,
	};
	VkPhysicalDeviceProperties2 p2 = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
		.pNext = &hp,
	};
	vkGetPhysicalDeviceProperties2(v->pdev, &p2);
	v->host_align = hp.minImportedHostPointerAlignment;
	snprintf(v->name, sizeof(v->name), "%s", p2.properties.deviceName);
	v->sync_fd = fence_exports_sync_fd(v->pdev);

	const char *exts[2] = {VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME,
			       VK_KHR_EXTERNAL_FENCE_FD_EXTENSION_NAME};
	VkDeviceQueueCreateInfo qci = {
		.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
		.queueFamilyIndex = v->qfamily,
		.queueCount = 1,
		.pQueuePriorities = &prio,
	};
	VkDeviceCreateInfo dci = {
		.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
		.queueCreateInfoCount = 1,
		.pQueueCreateInfos = &qci,
		.enabledExtensionCount = v->sync_fd ? 2 : 1,
		.ppEnabledExtensionNames = exts,
	};
	CHECK(vkCreateDevice(v->pdev, &dci, NULL, &v->dev));
	pin_driver();
	vkGetDeviceQueue(v->dev, v->qfamily, 0, &v->queue);
	v->host_props = (PFN_vkGetMemoryHostPointerPropertiesEXT)
		vkGetDeviceProcAddr(v->dev,
				    "vkGetMemoryHostPointerPropertiesEXT");
	if (v->sync_fd)
		v->fence_fd = (PFN_vkGetFenceFdKHR)vkGetDeviceProcAddr(
			v->dev, "vkGetFenceFdKHR");
	VkCommandPoolCreateInfo pci = {
		.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
		.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
		.queueFamilyIndex = v->qfamily,
	};
	CHECK(vkCreateCommandPool(v->dev, &pci, NULL, &v->pool));
	return 0;
}

void vkx_fini(struct vkx *v)
{
	if (v->dev) {
		vkDeviceWaitIdle(v->dev);
		vkDestroyCommandPool(v->dev, v->pool, NULL);
		vkDestroyDevice(v->dev, NULL);
	}
	if (v->inst)
		vkDestroyInstance(v->inst, NULL);
	memset(v, 0, sizeof(*v));
}

static int make_buffer(struct vkx *v, VkDeviceSize size, bool external,
		       VkBuffer *out)
{
	VkExternalMemoryBufferCreateInfo ext = {
		.sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO,
		.handleTypes =
			VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT,
	};
	VkBufferCreateInfo bci = {
		.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
		.pNext = external ? &ext : NULL,
		.size = size,
		.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
		.sharingMode = VK_SHARING_MODE_EXCLUSIVE,
	};

	CHECK(vkCreateBuffer(v->dev, &bci, NULL, out));
	return 0;
}

static int pick_type(struct vkx *v, uint32_t bits, VkMemoryPropertyFlags want)
{
	VkPhysicalDeviceMemoryProperties mp;

	vkGetPhysicalDeviceMemoryProperties(v->pdev, &mp);
	for (uint32_t i = 0; i < mp.memoryTypeCount; i++)
		if ((bits & (1u << i)) &&
		    (mp.memoryTypes[i].propertyFlags & want) == want)
			return (int)i;
	return -1;
}

int vkx_import(struct vkx *v, void *p, size_t size, struct vkx_buf *b)
{
	VkMemoryHostPointerPropertiesEXT hpp = {
		.sType = VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT,
	};
	VkMemoryRequirements req;
	int type;

	memset(b, 0, sizeof(*b));
	/* zero bytes (a tensor of no elements: no mapping, p NULL) pass
	 * the alignment test, but no Vulkan memory is of size 0 and a NULL
	 * host pointer is invalid usage: lavapipe crashed on it */
	if (!p || !size) {
		fprintf(stderr, "vulkan: nothing to import (%zu bytes at %p): "
				"Vulkan memory is never empty\n", size, p);
		return -1;
	}
	if ((uintptr_t)p % v->host_align || size % v->host_align) {
		fprintf(stderr, "vulkan: %p+%zu is not aligned to "
				"minImportedHostPointerAlignment %llu\n",
			p, size, (unsigned long long)v->host_align);
		return -1;
	}
	CHECK(v->host_props(v->dev,
			    VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT,
			    p, &hpp));
	if (make_buffer(v, size, true, &b->buf) < 0)
		return -1;
	vkGetBufferMemoryRequirements(v->dev, b->buf, &req);
	type = pick_type(v, req.memoryTypeBits & hpp.memoryTypeBits, 0);
	if (type < 0) {
		fprintf(stderr, "vulkan: no memory type imports host pages\n");
		vkDestroyBuffer(v->dev, b->buf, NULL);
		return -1;
	}
	VkImportMemoryHostPointerInfoEXT imp = {
		.sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT,
		.handleType =
			VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT,
		.pHostPointer = p,
	};
	VkMemoryAllocateInfo mai = {
		.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
		.pNext = &imp,
		.allocationSize = size,
		.memoryTypeIndex = (uint32_t)type,
	};
	CHECK(vkAllocateMemory(v->dev, &mai, NULL, &b->mem));
	CHECK(vkBindBufferMemory(v->dev, b->buf, b->mem, 0));
	b->host = p;
	b->size = size;
	return 0;
}

int vkx_alloc(struct vkx *v, size_t size, struct vkx_buf *b)
{
	VkMemoryRequirements req;
	int type;

	memset(b, 0, sizeof(*b));
	if (make_buffer(v, size, false, &b->buf) < 0)
		return -1;
	vkGetBufferMemoryRequirements(v->dev, b->buf, &req);
	type = pick_type(v, req.memoryTypeBits,
			 VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
				 VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
	if (type < 0) {
		fprintf(stderr, "vulkan: no host-visible memory\n");
		return -1;
	}
	VkMemoryAllocateInfo mai = {
		.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
		.allocationSize = req.size,
		.memoryTypeIndex = (uint32_t)type,
	};
	CHECK(vkAllocateMemory(v->dev, &mai, NULL, &b->mem));
	CHECK(vkBindBufferMemory(v->dev, b->buf, b->mem, 0));
	CHECK(vkMapMemory(v->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->host));
	b->size = size;
	b->owned = true;
	return 0;
}

void vkx_buf_free(struct vkx *v, struct vkx_buf *b)
{
	if (b->buf)
		vkDestroyBuffer(v->dev, b->buf, NULL);
	if (b->mem)
		vkFreeMemory(v->dev, b->mem, NULL);
	memset(b, 0, sizeof(*b));
}

int vkx_prog_init(struct vkx *v, enum vkx_shader which, struct vkx_prog *p)
{
	VkDescriptorSetLayoutBinding binds[2];
	const uint32_t *code = which == VKX_PRODUCE ? produce_spv : reduce_spv;
	size_t code_len = which == VKX_PRODUCE ? sizeof(produce_spv)
					       : sizeof(reduce_spv);

	memset(p, 0, sizeof(*p));
	p->nbind = which == VKX_PRODUCE ? 1 : 2;
	for (uint32_t i = 0; i < p->nbind; i++)
		binds[i] = (VkDescriptorSetLayoutBinding){
			.binding = i,
			.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
			.descriptorCount = 1,
			.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT,
		};
	VkDescriptorSetLayoutCreateInfo dli = {
		.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
		.bindingCount = p->nbind,
		.pBindings = binds,
	};
	CHECK(vkCreateDescriptorSetLayout(v->dev, &dli, NULL, &p->dsl));
	VkPushConstantRange pcr = {
		.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT,
		.size = 3 * sizeof(uint32_t),
	};
	VkPipelineLayoutCreateInfo pli = {
		.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
		.setLayoutCount = 1,
		.pSetLayouts = &p->dsl,
		.pushConstantRangeCount = 1,
		.pPushConstantRanges = &pcr,
	};
	CHECK(vkCreatePipelineLayout(v->dev, &pli, NULL, &p->layout));
	VkShaderModuleCreateInfo smi = {
		.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
		.codeSize = code_len,
		.pCode = code,
	};
	VkShaderModule mod;
	CHECK(vkCreateShaderModule(v->dev, &smi, NULL, &mod));
	VkComputePipelineCreateInfo cpi = {
		.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
		.stage = {
			.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
			.stage = VK_SHADER_STAGE_COMPUTE_BIT,
			.module = mod,
			.pName = "main",
		},
		.layout = p->layout,
	};
	VkResult r = vkCreateComputePipelines(v->dev, VK_NULL_HANDLE, 1, &cpi,
					      NULL, &p->pipe);
	vkDestroyShaderModule(v->dev, mod, NULL);
	CHECK(r);
	VkDescriptorPoolSize ps = {
		.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
		.descriptorCount = p->nbind,
	};
	VkDescriptorPoolCreateInfo dpi = {
		.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
		.maxSets = 1,
		.poolSizeCount = 1,
		.pPoolSizes = &ps,
	};
	CHECK(vkCreateDescriptorPool(v->dev, &dpi, NULL, &p->dpool));
	VkDescriptorSetAllocateInfo dsi = {
		.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
		.descriptorPool = p->dpool,
		.descriptorSetCount = 1,
		.pSetLayouts = &p->dsl,
	};
	CHECK(vkAllocateDescriptorSets(v->dev, &dsi, &p->set));
	VkCommandBufferAllocateInfo cai = {
		.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
		.commandPool = v->pool,
		.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
		.commandBufferCount = 1,
	};
	CHECK(vkAllocateCommandBuffers(v->dev, &cai, &p->cmd));
	VkExportFenceCreateInfo efi = {
		.sType = VK_STRUCTURE_TYPE_EXPORT_FENCE_CREATE_INFO,
		.handleTypes = VK_EXTERNAL_FENCE_HANDLE_TYPE_SYNC_FD_BIT,
	};
	VkFenceCreateInfo fci = {
		.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO,
		.pNext = v->sync_fd ? &efi : NULL,
	};
	CHECK(vkCreateFence(v->dev, &fci, NULL, &p->fence));
	return 0;
}

void vkx_prog_fini(struct vkx *v, struct vkx_prog *p)
{
	if (p->fence)
		vkDestroyFence(v->dev, p->fence, NULL);
	if (p->cmd)
		vkFreeCommandBuffers(v->dev, v->pool, 1, &p->cmd);
	if (p->dpool)
		vkDestroyDescriptorPool(v->dev, p->dpool, NULL);
	if (p->pipe)
		vkDestroyPipeline(v->dev, p->pipe, NULL);
	if (p->layout)
		vkDestroyPipelineLayout(v->dev, p->layout, NULL);
	if (p->dsl)
		vkDestroyDescriptorSetLayout(v->dev, p->dsl, NULL);
	memset(p, 0, sizeof(*p));
}

/* Bind bufs, push the constants, dispatch, submit with p->fence. */
static int run(struct vkx *v, struct vkx_prog *p, struct vkx_buf **bufs,
	       uint32_t words, uint32_t frame)
{
	VkDescriptorBufferInfo bi[2];
	VkWriteDescriptorSet w[2];
	uint32_t items = (words + 255) / 256;
	uint32_t gmax = p->nbind == 1 ? GROUPS_FILL : GROUPS_REDUCE;
	uint32_t per = (items + gmax - 1) / gmax;
	uint32_t groups = (items + per - 1) / per;
	uint32_t pc[3] = {words, per, frame};

	for (uint32_t i = 0; i < p->nbind; i++) {
		bi[i] = (VkDescriptorBufferInfo){bufs[i]->buf, 0,
						 VK_WHOLE_SIZE};
		w[i] = (VkWriteDescriptorSet){
			.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
			.dstSet = p->set,
			.dstBinding = i,
			.descriptorCount = 1,
			.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
			.pBufferInfo = &bi[i],
		};
	}
	vkUpdateDescriptorSets(v->dev, p->nbind, w, 0, NULL);
	VkCommandBufferBeginInfo cbi = {
		.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
		.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
	};
	CHECK(vkResetCommandBuffer(p->cmd, 0));
	CHECK(vkBeginCommandBuffer(p->cmd, &cbi));
	vkCmdBindPipeline(p->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p->pipe);
	vkCmdBindDescriptorSets(p->cmd, VK_PIPELINE_BIND_POINT_COMPUTE,
				p->layout, 0, 1, &p->set, 0, NULL);
	vkCmdPushConstants(p->cmd, p->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0,
			   sizeof(pc), pc);
	vkCmdDispatch(p->cmd, groups, 1, 1);
	/* device writes made available to the host once the fence signals */
	VkMemoryBarrier mb = {
		.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
		.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
		.dstAccessMask = VK_ACCESS_HOST_READ_BIT,
	};
	vkCmdPipelineBarrier(p->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
			     VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0,
			     NULL);
	CHECK(vkEndCommandBuffer(p->cmd));
	CHECK(vkResetFences(v->dev, 1, &p->fence));
	VkSubmitInfo si = {
		.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
		.commandBufferCount = 1,
		.pCommandBuffers = &p->cmd,
	};
	CHECK(vkQueueSubmit(v->queue, 1, &si, p->fence));
	return 0;
}

int vkx_produce(struct vkx *v, struct vkx_prog *p, struct vkx_buf *b,
		uint32_t words, uint32_t frame)
{
	struct vkx_buf *bufs[1] = {b};

	return run(v, p, bufs, words, frame);
}

int vkx_reduce(struct vkx *v, struct vkx_prog *p, struct vkx_buf *src,
	       uint32_t words, struct vkx_buf *res)
{
	struct vkx_buf *bufs[2] = {src, res};

	memset(res->host, 0, 2 * sizeof(uint32_t));
	return run(v, p, bufs, words, 0);
}

int vkx_wait(struct vkx *v, struct vkx_prog *p)
{
	CHECK(vkWaitForFences(v->dev, 1, &p->fence, VK_TRUE, UINT64_MAX));
	return 0;
}

int vkx_sync_file(struct vkx *v, struct vkx_prog *p)
{
	VkFenceGetFdInfoKHR gi = {
		.sType = VK_STRUCTURE_TYPE_FENCE_GET_FD_INFO_KHR,
		.fence = p->fence,
		.handleType = VK_EXTERNAL_FENCE_HANDLE_TYPE_SYNC_FD_BIT,
	};
	int fd = -1;

	if (!v->sync_fd || v->fence_fd(v->dev, &gi, &fd) != VK_SUCCESS)
		return -EIO;
	/* the spec allows -1 for a fence that is signalled already */
	return fd < 0 ? -EALREADY : fd;
}
