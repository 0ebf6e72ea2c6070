/* SPDX-License-Identifier: MIT */
/*
 * tensorctl save: write tensors from the daemon as one buffered, hashed
 * Tensogram message (../shared/specs/tensogram.md §16). Each object's
 * base metadata holds its name; a tensor whose metadata is a JSON object
 * (what `load` stores) gets those keys back, so load -> save -> load
 * keeps names and attributes.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensorctl.h"
#include "tgm-desc.h"

#ifndef TD_VERSION
#define TD_VERSION "unknown"
#endif

#define SAVE_USAGE "usage: tensorctl save NAME... -o FILE.tgm\n"

static enum td_tgm_dtype tgm_dtype(uint32_t d)
{
	switch (d) {
	case TD_TENSOR_I8:
		return TD_TGM_INT8;
	case TD_TENSOR_I16:
		return TD_TGM_INT16;
	case TD_TENSOR_I32:
		return TD_TGM_INT32;
	case TD_TENSOR_I64:
		return TD_TGM_INT64;
	case TD_TENSOR_U8:
		return TD_TGM_UINT8;
	case TD_TENSOR_U16:
		return TD_TGM_UINT16;
	case TD_TENSOR_U32:
		return TD_TGM_UINT32;
	case TD_TENSOR_U64:
		return TD_TGM_UINT64;
	case TD_TENSOR_F16:
		return TD_TGM_FLOAT16;
	case TD_TENSOR_F32:
		return TD_TGM_FLOAT32;
	case TD_TENSOR_F64:
		return TD_TGM_FLOAT64;
	default:
		return TD_TGM_DTYPE_UNKNOWN;
	}
}

/*
 * A tensor the message can hold as it is: one dense plane in C order,
 * not quantized (a .tgm object has no place for scales). Returns NULL or
 * why not.
 */
static const char *unsavable(const struct td_tensor *t)
{
	if (tgm_dtype(td_tensor_dtype(t)) == TD_TGM_DTYPE_UNKNOWN)
		return "its dtype has no .tgm equivalent";
	if (td_tensor_ndim(t) > TD_TGM_MAX_DIMS)
		return "it has too many dimensions";
	return tctl_dense_unsavable(t);
}

static int write_all(int fd, const uint8_t *p, size_t len)
{
	while (len) {
		ssize_t n = write(fd, p, len > (1u << 30) ? 1u << 30 : len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * Write the whole message to a temporary file next to path, then rename
 * it over path: readers see the old file or the complete new one, never
 * a half-written message (§16).
 */
static int write_atomic(const char *path, const uint8_t *msg, size_t len)
{
	char *tmp;
	int fd = tctl_atomic_begin(path, &tmp), rc;

	if (fd < 0)
		return fd;
	rc = tctl_atomic_end(fd, tmp, path, write_all(fd, msg, len));
	free(tmp);
	return rc;
}

int cmd_save(int argc, char **argv)
{
	const char *out = NULL;
	const char **names = calloc((size_t)argc, sizeof(*names));
	struct td_tensor **ts = calloc((size_t)argc, sizeof(*ts));
	struct td_tgm_enc_object *objs = calloc((size_t)argc, sizeof(*objs));
	struct td_client *c = NULL;
	struct td_err te = {0};
	uint8_t *msg = NULL;
	size_t n = 0, len = 0;
	int rc = TCTL_USAGE;

	if (tctl_hrry_wanted(argc, argv, 0)) {
		free(names);
		free(ts);
		free(objs);
		return cmd_save_hrry(argc, argv);
	}
	if (!names || !ts || !objs) {
		fprintf(stderr, "tensorctl: out of memory\n");
		goto out;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "-o") && v)
			out = argv[++i];
		else if (!strcmp(a, "--socket") && v)
			tctl_socket = argv[++i];
		else if (!strcmp(a, "--format") && v && !strcmp(v, "tgm"))
			i++;
		else if (a[0] == '-')
			goto usage;
		else
			names[n++] = a;
	}
	if (!n || !out)
		goto usage;
	rc = tctl_connect(&c);
	if (rc)
		goto out;
	for (size_t i = 0; i < n; i++) {
		struct td_error e = {0};
		const char *why;
		int r = td_client_get(c, names[i], &ts[i], &e);

		if (r < 0) {
			rc = tctl_refused(names[i], r, &e);
			goto out;
		}
		r = td_tensor_fence_wait(ts[i], -1);
		if (r < 0) {
			fprintf(stderr, "tensorctl: %s: fence: %s\n", names[i],
			        strerror(-r));
			rc = TCTL_REFUSED;
			goto out;
		}
		why = unsavable(ts[i]);
		if (why) {
			fprintf(stderr, "tensorctl: %s: cannot be saved: %s\n",
			        names[i], why);
			rc = TCTL_REFUSED;
			goto out;
		}
		/* tensors hold host-order elements; the writer says
		 * "little", which is what every supported host has */
		if (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__ &&
		    td_tensor_dtype_size(td_tensor_dtype(ts[i])) > 1) {
			fprintf(stderr,
			        "tensorctl: %s: big-endian hosts "
			        "cannot save yet\n",
			        names[i]);
			rc = TCTL_REFUSED;
			goto out;
		}
		objs[i].dtype = tgm_dtype(td_tensor_dtype(ts[i]));
		objs[i].ndim = td_tensor_ndim(ts[i]);
		objs[i].shape = td_tensor_shape(ts[i]);
		objs[i].data = td_tensor_plane_data(ts[i], 0);
		objs[i].data_len = td_tensor_bytes(ts[i]);
		objs[i].name = names[i];
		objs[i].meta = td_tensor_meta(ts[i], &objs[i].meta_len);
	}
	if (td_tgm_message_encode(objs, n, TD_VERSION, &msg, &len, &te) < 0) {
		fprintf(stderr, "tensorctl: encoding the message: %s%s%s\n",
		        te.field ? te.field : "", te.field ? ": " : "",
		        te.reason);
		rc = TCTL_REFUSED;
		goto out;
	}
	rc = strcmp(out, "-") ? write_atomic(out, msg, len)
	                      : write_all(STDOUT_FILENO, msg, len);
	if (rc < 0) {
		fprintf(stderr, "tensorctl: %s: %s\n", out, strerror(-rc));
		rc = TCTL_USAGE;
		goto out;
	}
	if (strcmp(out, "-"))
		printf("%s: %zu object(s), %zu bytes\n", out, n, len);
	rc = TCTL_OK;
	goto out;
usage:
	fputs(SAVE_USAGE, stderr);
	rc = TCTL_USAGE;
out:
	for (size_t i = 0; ts && i < n; i++)
		td_tensor_release(ts[i]);
	td_client_close(c);
	free(msg);
	free(names);
	free(ts);
	free(objs);
	return rc;
}
