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

enum td_err_kind {
	TD_ERR_NONE = 0,
	TD_ERR_TRUNCATED,               /* -ENODATA */
	TD_ERR_UNSUPPORTED_REQUIREMENT, /* -ENOTSUP */
	TD_ERR_FORGED_LENGTH,           /* -EOVERFLOW */
	TD_ERR_INVALID_UTF8,            /* -EILSEQ */
	TD_ERR_MALFORMED,               /* -EBADMSG */
	TD_ERR_INVALID_ARGUMENT,        /* -EINVAL */
	TD_ERR_NOT_IMPLEMENTED,         /* -ENOSYS */
	TD_ERR_IO,                      /* the failing call's -errno */
};

struct td_err {
	enum td_err_kind kind;
	const char *field;  /* NULL when no single field is at fault */
	const char *reason; /* static, human readable */
	uint64_t value;     /* meaningful when has_value */
	bool has_value;
	uint64_t offset; /* byte offset of the offending field */
	uint64_t need;   /* TRUNCATED: bytes needed ... */
	uint64_t have;   /* ... and bytes available */
};

/* Stable upper-case name of a kind ("FORGED_LENGTH"), never NULL. */
const char *td_err_kind_name(enum td_err_kind kind);

/* The -errno a decoder returns for a kind (TD_ERR_IO: -EIO). */
int td_err_kind_errno(enum td_err_kind kind);

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
