/* SPDX-License-Identifier: MIT */
/*
 * zarr export's pieces shared between cmd-zarr.c (writing a hierarchy,
 * from a .tgm or Hurray file) and zarr-daemon.c (from the daemon's
 * tensors).
 */
#ifndef TD_TOOLS_ZARR_EXPORT_H
#define TD_TOOLS_ZARR_EXPORT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "td-zarr.h"

struct json_object;
struct td_tensor;
struct tgm_src;

/* One array to write: metadata and where its chunk bytes are. */
struct zsrc {
	struct td_zarr_array a;
	const uint8_t *data; /* chunk bytes as the source holds them */
	uint64_t len;
	unsigned swap;  /* element width to byte-swap, 0: none */
	uint8_t *owned; /* a repacked copy behind data, or NULL */
	struct td_tensor **held; /* the lease behind data, or NULL */
	bool in_file;   /* data NULL: len bytes of fd (or src) at off */
	int fd;
	struct tgm_src *src; /* a .tgm source, else NULL: fd */
	uint64_t off;
};

struct zset {
	struct zsrc *s;
	size_t n;
	struct json_object *gattrs;
	const char *from; /* the file in_file chunks are read from */
};

/* Frees what z owns (arrays' metadata, copies); z's memory stays. */
void tctl_zset_fini(struct zset *z);
/* Room for n arrays in z (z->s new): 0 or -ENOMEM. */
int tctl_zset_grow(struct zset *z, size_t n);
/* Distinct node names in order (tensogram.md §18 suffixes): 0 or -errno. */
int tctl_zset_unique_names(struct zset *z);
/* z->gattrs: the group attributes of z's arrays (td_zarr_tensor_group):
 * TCTL_OK, or reported. */
int tctl_zset_group(struct zset *z);
/* z as a new hierarchy DIR, whole or not at all: TCTL_OK or reported. */
int tctl_zarr_write(const char *dir, const struct zset *z);

/*
 * The same in steps, for arrays whose bytes cannot all be held at once:
 * the hierarchy is written in a new folder (tmp), arrays as they come,
 * and becomes DIR at close, or is removed.
 */
struct zout {
	const char *dir;
	char tmp[PATH_MAX], parent[PATH_MAX];
	int top; /* tmp, open; -1 */
	bool into;
	size_t written; /* z's arrays written so far */
};

/* The new folder for DIR made (checks as tctl_zarr_write()'s): TCTL_OK,
 * or reported and nothing made. */
int tctl_zarr_open(struct zout *o, const char *dir);
/* z's arrays from o->written on written (their names final): 0, or
 * -errno for tctl_zarr_close() to say. */
int tctl_zarr_put(struct zout *o, const struct zset *z);
/* rc 0: z's arrays left and its root group written, synced, made DIR;
 * else the new folder removed, rc said (-errno) or returned (a status
 * said already). TCTL_OK or a reported status. */
int tctl_zarr_close(struct zout *o, const struct zset *z, int rc);
/* What was exported (text or --json): TCTL_OK or reported. */
int tctl_zarr_print(const char *dir, const struct zset *z);
/* zarr export of the daemon's tensors NAMES (n 0: every one) (zarr-
 * daemon.c): TCTL_OK or reported. */
int tctl_zarr_export_daemon(const char *dir, char **names, size_t n);

#endif
