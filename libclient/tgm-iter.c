/* SPDX-License-Identifier: MIT */
/*
 * <tensord/tgm.h>: the Tensogram frame iterator in the shape of the
 * format's own C API (create / next / free, the error kept in the
 * iterator), over proto/'s allocation-free walk.
 */
#include <errno.h>
#include <stdlib.h>

#include "tgm.h"

struct td_tgm_frame_iter {
	struct td_tgm_walk walk;
	int rc;            /* 0 walking or clean end, < 0 the damage */
	struct td_err err; /* with rc < 0 */
};

int td_tgm_message_header(const uint8_t *buf, size_t len,
			  struct td_tgm_header *out, struct td_err *err)
{
	if (!buf || !out)
		return -EINVAL;
	return td_tgm_header_decode(buf, len, out, err);
}

int td_tgm_frame_iter_create(const uint8_t *msg, size_t len,
			     struct td_tgm_frame_iter **out,
			     struct td_err *err)
{
	struct td_tgm_frame_iter *it;
	int rc;

	if (!msg || !out)
		return -EINVAL;
	*out = NULL;
	it = calloc(1, sizeof(*it));
	if (!it)
		return -ENOMEM;
	rc = td_tgm_walk_init(msg, len, &it->walk, err);
	if (rc < 0) {
		free(it);
		return rc;
	}
	*out = it;
	return 0;
}

bool td_tgm_frame_iter_next(struct td_tgm_frame_iter *it,
			    struct td_tgm_frame *frame)
{
	int rc;

	if (!it || !frame || it->rc < 0)
		return false;
	rc = td_tgm_walk_next(&it->walk, frame, &it->err);
	if (rc < 0)
		it->rc = rc;
	return rc == 1;
}

int td_tgm_frame_iter_error(const struct td_tgm_frame_iter *it,
			    struct td_err *err)
{
	if (!it)
		return -EINVAL;
	if (it->rc < 0 && err)
		*err = it->err;
	return it->rc;
}

void td_tgm_frame_iter_free(struct td_tgm_frame_iter *it)
{
	free(it);
}

bool td_tgm_frame_has_hash(const struct td_tgm_frame *frame)
{
	return frame && frame->has_hash;
}
