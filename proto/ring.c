/* SPDX-License-Identifier: MIT */
/* proto/ring: geometry of a ring's data memfd (see ring.h). */
#include "ring.h"

#include <errno.h>

static bool is_pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

/* Round v up to a multiple of a (a power of two); false on overflow. */
static bool round_up(uint64_t v, uint64_t a, uint64_t *out)
{
	if (v > UINT64_MAX - (a - 1))
		return false;
	*out = (v + a - 1) & ~(a - 1);
	return true;
}

int td_ring_geom_compute(uint32_t slot_count, uint32_t plane_count,
			 const uint64_t *plane_size, uint64_t align,
			 struct td_ring_geom *g, const char **why)
{
	uint64_t off = 0;

	*g = (struct td_ring_geom){0};
	if (slot_count < TD_RING_MIN_SLOTS || slot_count > TD_RING_MAX_SLOTS) {
		*why = "slot count outside 2..64";
		return -EINVAL;
	}
	if (plane_count < 1 || plane_count > TD_RING_MAX_PLANES) {
		*why = "plane count outside 1..4";
		return -EINVAL;
	}
	if (!is_pow2(align) || align < TD_RING_PAGE) {
		*why = "slot alignment is not a page multiple";
		return -EINVAL;
	}
	g->slot_count = slot_count;
	g->plane_count = plane_count;
	for (uint32_t i = 0; i < plane_count; i++) {
		/*
		 * Sizes are capped before they are added, so neither the
		 * sum nor the 64-byte rounding can overflow.
		 */
		if (plane_size[i] == 0) {
			*why = "a plane of size 0 has nothing to share";
			return -EINVAL;
		}
		if (plane_size[i] > TD_RING_MAX_SLOT_BYTES) {
			*why = "plane larger than 16 GiB";
			return -EFBIG;
		}
		round_up(off, 64, &off);
		g->plane_off[i] = off;
		g->plane_size[i] = plane_size[i];
		off += plane_size[i];
		if (off > TD_RING_MAX_SLOT_BYTES) {
			*why = "slot (all planes) larger than 16 GiB";
			return -EFBIG;
		}
	}
	round_up(off, align, &g->slot_stride);
	/* <= 64 slots of <= 16 GiB + align: far below 2^64 */
	g->data_len = g->slot_stride * slot_count;
	return 0;
}

int td_ring_geom_check(const struct td_ring_geom *g)
{
	uint64_t end, prev_end = 0;

	if (g->slot_count < TD_RING_MIN_SLOTS ||
	    g->slot_count > TD_RING_MAX_SLOTS ||
	    g->plane_count < 1 || g->plane_count > TD_RING_MAX_PLANES)
		return -EBADMSG;
	if (g->slot_stride == 0 || g->slot_stride % TD_RING_PAGE ||
	    g->slot_stride > TD_RING_MAX_SLOT_BYTES + TD_RING_HUGE_PAGE)
		return -EBADMSG;
	for (uint32_t i = 0; i < g->plane_count; i++) {
		/* both bounded by the stride check, so the sum fits */
		if (g->plane_size[i] == 0 ||
		    g->plane_off[i] > g->slot_stride ||
		    g->plane_size[i] > g->slot_stride ||
		    g->plane_off[i] < prev_end)
			return -EBADMSG;
		end = g->plane_off[i] + g->plane_size[i];
		if (end > g->slot_stride)
			return -EBADMSG;
		prev_end = end;
	}
	if (g->data_len != g->slot_stride * g->slot_count)
		return -EBADMSG;
	return 0;
}
