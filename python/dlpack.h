/* SPDX-License-Identifier: MIT */
/*
 * The DLPack 0.x ABI (dlpack.h v0.6-0.8, Apache-2.0, data structures
 * only): what a "dltensor" capsule points at. Written out here because
 * Debian ships no dlpack header; the layout is frozen for 0.x consumers
 * (torch 1.13, numpy 1.24).
 */
#ifndef TDPY_DLPACK_H
#define TDPY_DLPACK_H

#include <stdint.h>

enum { TDPY_DL_CPU = 1 };

enum {
	TDPY_DL_INT = 0,
	TDPY_DL_UINT = 1,
	TDPY_DL_FLOAT = 2,
	TDPY_DL_BFLOAT = 4,
};

typedef struct {
	int32_t device_type;
	int32_t device_id;
} DLDevice;

typedef struct {
	uint8_t code;
	uint8_t bits;
	uint16_t lanes;
} DLDataType;

typedef struct {
	void *data;
	DLDevice device;
	int32_t ndim;
	DLDataType dtype;
	int64_t *shape;
	int64_t *strides; /* in elements; NULL = compact C order */
	uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
	DLTensor dl_tensor;
	void *manager_ctx;
	void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

#endif
