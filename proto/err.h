/* SPDX-License-Identifier: MIT */
/*
 * Error detail shared by every decoder (../shared/DESIGN.md, house style):
 * functions return -errno; a caller that wants to know *why* passes a
 * struct td_err, which is filled on failure with a kind, the offending
 * field, its value, and the byte offset of that field in the input.
 * Strings in it are static: the struct owns nothing and needs no cleanup.
 */
#ifndef TD_PROTO_ERR_H
#define TD_PROTO_ERR_H

#include <stdbool.h>
#include <stdint.h>

/* enum td_err_kind, struct td_err, td_err_kind_name/_errno: public */
#include "tensord/err.h"

/*
 * Fill *err (when not NULL) and return the kind's -errno. Internal helper
 * used by decoders; exposed so every codec reports the same way.
 */
int td__err_set(struct td_err *err, enum td_err_kind kind, const char *field,
		bool has_value, uint64_t value, uint64_t offset,
		const char *reason);

int td__err_truncated(struct td_err *err, uint64_t need, uint64_t have,
		      uint64_t offset, const char *reason);

#endif
