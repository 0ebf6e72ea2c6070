/* SPDX-License-Identifier: MIT */
#include "err.h"

#include <errno.h>
#include <stddef.h>

const char *td_err_kind_name(enum td_err_kind kind)
{
	switch (kind) {
	case TD_ERR_NONE:
		return "NONE";
	case TD_ERR_TRUNCATED:
		return "TRUNCATED";
	case TD_ERR_UNSUPPORTED_REQUIREMENT:
		return "UNSUPPORTED_REQUIREMENT";
	case TD_ERR_FORGED_LENGTH:
		return "FORGED_LENGTH";
	case TD_ERR_INVALID_UTF8:
		return "INVALID_UTF8";
	case TD_ERR_MALFORMED:
		return "MALFORMED";
	case TD_ERR_INVALID_ARGUMENT:
		return "INVALID_ARGUMENT";
	case TD_ERR_NOT_IMPLEMENTED:
		return "NOT_IMPLEMENTED";
	case TD_ERR_IO:
		return "IO";
	}
	return "UNKNOWN";
}

int td_err_kind_errno(enum td_err_kind kind)
{
	switch (kind) {
	case TD_ERR_NONE:
		return 0;
	case TD_ERR_TRUNCATED:
		return -ENODATA;
	case TD_ERR_UNSUPPORTED_REQUIREMENT:
		return -ENOTSUP;
	case TD_ERR_FORGED_LENGTH:
		return -EOVERFLOW;
	case TD_ERR_INVALID_UTF8:
		return -EILSEQ;
	case TD_ERR_MALFORMED:
		return -EBADMSG;
	case TD_ERR_INVALID_ARGUMENT:
		return -EINVAL;
	case TD_ERR_NOT_IMPLEMENTED:
		return -ENOSYS;
	case TD_ERR_IO:
		return -EIO;
	}
	return -EINVAL;
}

int td__err_set(struct td_err *err, enum td_err_kind kind, const char *field,
		bool has_value, uint64_t value, uint64_t offset,
		const char *reason)
{
	if (err) {
		err->kind = kind;
		err->field = field;
		err->has_value = has_value;
		err->value = has_value ? value : 0;
		err->offset = offset;
		err->reason = reason;
		err->need = 0;
		err->have = 0;
	}
	return td_err_kind_errno(kind);
}

int td__err_truncated(struct td_err *err, uint64_t need, uint64_t have,
		      uint64_t offset, const char *reason)
{
	int rc = td__err_set(err, TD_ERR_TRUNCATED, NULL, false, 0, offset,
			     reason);
	if (err) {
		err->need = need;
		err->have = have;
	}
	return rc;
}
