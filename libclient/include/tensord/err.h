/* SPDX-License-Identifier: MIT */
/*
 * Error detail of the format decoders of libtensord (<tensord/blob.h>,
 * <tensord/tgm.h>). A function returns -errno; a caller that wants to
 * know why passes a struct td_err, filled on failure with a kind, the
 * offending field, its value and its byte offset in the input. Its
 * strings are static: it owns nothing and needs no cleanup.
 */
#ifndef TENSORD_ERR_H
#define TENSORD_ERR_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libtensord (the formats need no daemon). */
#if defined(__GNUC__)
#define TD_FORMAT_API __attribute__((visibility("default")))
#else
#define TD_FORMAT_API
#endif

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
TD_FORMAT_API const char *td_err_kind_name(enum td_err_kind kind);

/* The -errno a decoder returns for a kind (TD_ERR_IO: -EIO). */
TD_FORMAT_API int td_err_kind_errno(enum td_err_kind kind);

#ifdef __cplusplus
}
#endif

#endif
