/* SPDX-License-Identifier: MIT */
/*
 * How a version maps to a Hurray file (docs/snapshot.md, "The file"):
 * its KV keys ("tensord:NAME#field") and whether its planes can be
 * written as one typed, dense tensor; and which names a snapshot keeps
 * (--snapshot-prefix, --snapshot-skip). Shared by the save, the restore
 * and the fd store's restore, below them all.
 */
#include "snapshot-int.h"

#include <string.h>

#include "bytes.h"

const char *const td__snap_field_names[F_COUNT_] = {
	"version", "flags", "blob", "meta", "files", "crc"};

uint64_t td__snap_crc_len(const uint64_t *fsize, uint32_t n)
{
	uint64_t len = 4;

	for (uint32_t i = 0; i < n; i++)
		if (fsize[i] != FENCE_FILE)
			len += td__snap_plane_crcs(fsize[i]);
	return len;
}

static uint32_t crc_u32(uint32_t crc, uint32_t v)
{
	uint8_t b[4];

	td__put_le32(b, v);
	return td_hrry_crc32c(crc, b, 4);
}

static uint32_t crc_u64(uint32_t crc, uint64_t v)
{
	uint8_t b[8];

	td__put_le64(b, v);
	return td_hrry_crc32c(crc, b, 8);
}

uint32_t td__snap_meta_crc(const char *name, size_t name_len,
			   uint64_t version, uint64_t flags,
			   const uint8_t *blob, uint32_t blob_len,
			   const uint8_t *meta, uint32_t meta_len,
			   const uint64_t *fsize, uint32_t n)
{
	uint32_t crc = crc_u32(0, (uint32_t)name_len);

	crc = td_hrry_crc32c(crc, name, name_len);
	crc = crc_u64(crc_u64(crc, version), flags);
	crc = td_hrry_crc32c(crc_u32(crc, blob_len), blob, blob_len);
	crc = crc_u32(crc, meta_len);
	if (meta_len)
		crc = td_hrry_crc32c(crc, meta, meta_len);
	crc = crc_u32(crc, n);
	for (uint32_t i = 0; i < n; i++)
		crc = crc_u64(crc, fsize[i]);
	return crc;
}

enum field td__snap_key_field(const struct td_hrry_kv_entry *k,
			      const char **name, size_t *name_len)
{
	size_t pl = strlen(KEY_PREFIX);
	const char *hash;

	if (k->key_len <= pl || memcmp(k->key, KEY_PREFIX, pl))
		return F_COUNT_;
	hash = memrchr(k->key, '#', k->key_len);
	if (!hash || hash < k->key + pl)
		return F_COUNT_;
	*name = k->key + pl;
	*name_len = (size_t)(hash - *name);
	for (int f = 0; f < F_COUNT_; f++)
		if (strlen(td__snap_field_names[f]) ==
			    k->key_len - (size_t)(hash + 1 - k->key) &&
		    !memcmp(hash + 1, td__snap_field_names[f],
			    strlen(td__snap_field_names[f])))
			return (enum field)f;
	return F_COUNT_;
}

int td__snap_dense(const struct td_blob_view *bv, const uint64_t *fsize,
		   uint8_t *type, uint32_t *ndim, uint64_t *shape)
{
	struct td_blob_plane pl;
	uint64_t need = td_dtype_size(bv->dtype);

	if (bv->plane_count != 1 || bv->strings[TD_BLOB_FORMAT].len ||
	    bv->ndim > TD_WIRE_MAX_DIMS || td_blob_plane_get(bv, 0, &pl) < 0 ||
	    pl.offset || !need)
		return -1;
	/* strides, when written (exporters do), must be dense C order */
	for (uint32_t k = bv->ndim; k-- > 0;) {
		shape[k] = td_blob_shape(bv, k);
		if (bv->strides_len && td_blob_stride(bv, k) != (int64_t)need)
			return -1;
		if (td__mul_ovf(need, shape[k], &need) || need > INT64_MAX)
			return -1;
	}
	if (need != fsize[pl.handle])
		return -1;
	*type = td_hrry_type_from_dtype(bv->dtype);
	*ndim = bv->ndim;
	return *type ? (int)pl.handle : -1;
}

/* ---- which names a snapshot keeps (snapshot.h) ---- */

/* name (len bytes) is under prefix: as LIST and --http-prefix match */
static bool under(const char *name, size_t len, const char *prefix)
{
	size_t pl = strlen(prefix);

	return len >= pl && !memcmp(name, prefix, pl);
}

bool td__snapshot_keeps(const char *name, size_t len)
{
	const struct td__opts *o = &td__d->opts;
	bool keep = !o->snapshot_nkeep;

	for (unsigned i = 0; i < o->snapshot_nkeep && !keep; i++)
		keep = under(name, len, o->snapshot_keep[i]);
	for (unsigned i = 0; i < o->snapshot_nskip && keep; i++)
		keep = !under(name, len, o->snapshot_skip[i]);
	return keep;
}
