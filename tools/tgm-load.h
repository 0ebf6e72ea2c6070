/* SPDX-License-Identifier: MIT */
/*
 * Reading the objects of a .tgm message for tensorctl (load, zarr export):
 * the frame walk with hash checks, metadata frames, naming.
 */
#ifndef TD_TOOLS_TGM_LOAD_H
#define TD_TOOLS_TGM_LOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensorctl.h"
#include "tgm-desc.h"
#include "tgm-file.h"
#include "tgm.h"
#include "wire.h"

/* Room left after sanitising for a duplicate suffix ("_" + counter). */
#define BASE_NAME_MAX (TD_NAME_MAX - 15)

struct obj {
	struct td_tgm_object o; /* o.data NULL: the data is in the source */
	uint64_t data_off;      /* where, from the source's start */
	uint8_t *cbor;          /* o.cbor's bytes, malloc'ed */
	const struct td_tgm_meta *meta; /* where its attributes are */
	size_t meta_index;              /* its entry in meta's base */
	uint32_t dtype;                 /* enum td_tensor_dtype */
	bool swap;                      /* big-endian source: byte-swap */
	char name[TD_NAME_MAX + 1];
	char *attrs; /* JSON, malloc'ed */
	size_t attrs_len;
};

struct load {
	const char *path;
	struct tgm_src *src; /* where the objects' data is */
	uint64_t msg_index;
	struct obj *objs;
	size_t count, cap;
	struct td_tgm_meta *header, *footer;
	struct td_tgm_meta **preceders; /* owned, one per type-8 frame */
	size_t preceder_count;
};

/* Print "tensorctl: FILE: message N[ object I]: what" and refuse. */
int tctl_tgm_refuse(const struct load *l, long obj, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/*
 * Walk the message sp of s: objects (their descriptors; the data stays
 * in s), metadata frames, hashes (each hashed frame's payload streamed
 * through the hash). TCTL_OK or reported (a read error too).
 */
int tctl_tgm_collect(struct load *l, struct tgm_src *s,
                     const struct td_tgm_span *sp);
/*
 * Object i's raw name by the naming chain (variable_key first, may be
 * NULL), "object_<i>" when nothing matches; also settles which metadata
 * frame holds its attributes (objs[i].meta). TCTL_OK or reported.
 */
int tctl_tgm_obj_name(struct load *l, size_t i, const char *variable_key,
                      char *raw, size_t cap);
void tctl_tgm_load_fini(struct load *l);
/* Copy len bytes of width-byte elements, each byte-reversed. */
void tctl_copy_swapped(uint8_t *dst, const uint8_t *src, uint64_t len,
                       unsigned width);
/* The same in place. */
void tctl_swap_in_place(uint8_t *p, uint64_t len, unsigned width);

#endif
