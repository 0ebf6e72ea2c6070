/* SPDX-License-Identifier: MIT */
/* tensorctl inspect for EdgeFirst tensor blobs (../shared/specs/blob.md). */
#include <inttypes.h>
#include <stdio.h>

#include "blob.h"
#include "td-json.h"
#include "tensorctl.h"

static void print_json(const struct td_blob_view *v)
{
	struct td_blob_cursor c = TD_BLOB_CURSOR_INIT;
	struct td_blob_plane p;
	FILE *f = stdout;

	fprintf(f,
		"{\"kind\":\"blob\",\"size\":%" PRIu64
		",\"required_mask\":%" PRIu64 ",\"planes_bytes\":%" PRIu64
		",\"storage_kind\":%" PRIu32 ",\"pid\":%" PRIu32
		",\"fence_fd\":%" PRId32 ",\"dtype\":%" PRIu32
		",\"quant_axis\":%" PRId32 ",\"ndim\":%" PRIu32
		",\"plane_count\":%" PRIu32 ",\"strings_bytes\":%" PRIu32
		",\"strides_len\":%" PRIu32,
		v->size, v->required_mask, v->planes_bytes, v->storage_kind,
		v->pid, v->fence_fd, v->dtype, v->quant_axis, v->ndim,
		v->plane_count, v->strings_bytes, v->strides_len);
	fprintf(f, ",\"quant_scales_len\":%" PRIu32
		   ",\"quant_zero_points_len\":%" PRIu32,
		v->quant_scales_len, v->quant_zero_points_len);
	fprintf(f, ",\"shape\":[");
	for (uint32_t i = 0; i < v->ndim; i++)
		fprintf(f, "%s%" PRIu64, i ? "," : "", td_blob_shape(v, i));
	fprintf(f, "],\"strides\":[");
	for (uint32_t i = 0; i < v->strides_len; i++)
		fprintf(f, "%s%" PRId64, i ? "," : "", td_blob_stride(v, i));
	fprintf(f, "],\"quant_scales\":[");
	for (uint32_t i = 0; i < v->quant_scales_len; i++) {
		fprintf(f, "%s", i ? "," : "");
		/* %.9g round-trips every binary32 value */
		float s = td_blob_quant_scale(v, i);
		if (s != s || s - s != 0)
			fputs("null", f);
		else
			fprintf(f, "%.9g", (double)s);
	}
	fprintf(f, "],\"quant_zero_points\":[");
	for (uint32_t i = 0; i < v->quant_zero_points_len; i++)
		fprintf(f, "%s%" PRId32, i ? "," : "",
			td_blob_quant_zero_point(v, i));
	fprintf(f, "]");
	for (unsigned i = 0; i < TD_BLOB_STRING_COUNT; i++) {
		fprintf(f, ",\"%s\":", td_blob_string_name(i));
		td_json_str(f, v->strings[i].ptr, v->strings[i].len);
	}
	fprintf(f, ",\"planes\":[");
	for (int first = 1; td_blob_plane_next(v, &c, &p) == 0; first = 0)
		fprintf(f,
			"%s{\"handle\":%" PRId64 ",\"offset\":%" PRIu64
			",\"stride\":%" PRIu64 ",\"size\":%" PRIu64
			",\"used\":%" PRIu64 ",\"modifier\":%" PRIu64
			",\"handle_bytes_len\":%" PRIu32
			",\"data_len\":%" PRIu32 "}",
			first ? "" : ",", p.handle, p.offset, p.stride, p.size,
			p.used, p.modifier, p.handle_bytes_len, p.data_len);
	fprintf(f, "]}\n");
}

static void print_table(const struct td_blob_view *v)
{
	struct td_blob_cursor c = TD_BLOB_CURSOR_INIT;
	struct td_blob_plane p;
	const char *dt = td_dtype_name(v->dtype);
	const char *sk = td_storage_kind_name(v->storage_kind);

	printf("tensor blob, %" PRIu64 " bytes\n", v->size);
	printf("  %-22s 0x%016" PRIx64 "\n", "required_mask",
	       v->required_mask);
	printf("  %-22s %u (%s)\n", "storage_kind", v->storage_kind,
	       sk ? sk : "?");
	printf("  %-22s %u%s\n", "pid", v->pid, v->pid ? "" : " (inline)");
	printf("  %-22s %d%s\n", "fence_fd", v->fence_fd,
	       v->fence_fd == -1 ? " (none)" : " (fd-table index)");
	printf("  %-22s %u (%s)\n", "dtype", v->dtype, dt ? dt : "?");
	printf("  %-22s %d\n", "quant_axis", v->quant_axis);
	printf("  %-22s [", "shape");
	for (uint32_t i = 0; i < v->ndim; i++)
		printf("%s%" PRIu64, i ? ", " : "", td_blob_shape(v, i));
	printf("]\n  %-22s ", "strides (bytes)");
	if (!v->strides_len)
		printf("dense C order\n");
	else {
		printf("[");
		for (uint32_t i = 0; i < v->strides_len; i++)
			printf("%s%" PRId64, i ? ", " : "",
			       td_blob_stride(v, i));
		printf("]\n");
	}
	printf("  %-22s [", "quant_scales");
	for (uint32_t i = 0; i < v->quant_scales_len; i++)
		printf("%s%.9g", i ? ", " : "",
		       (double)td_blob_quant_scale(v, i));
	printf("]\n  %-22s [", "quant_zero_points");
	for (uint32_t i = 0; i < v->quant_zero_points_len; i++)
		printf("%s%" PRId32, i ? ", " : "",
		       td_blob_quant_zero_point(v, i));
	printf("]\n");
	for (unsigned i = 0; i < TD_BLOB_STRING_COUNT; i++) {
		/* the file's text: escaped, it cannot drive the terminal */
		printf("  %-22s \"", td_blob_string_name(i));
		tctl_text_escaped(stdout, v->strings[i].ptr, v->strings[i].len);
		printf("\"\n");
	}
	printf("regions: shape @%" PRIu64 ", strides @%" PRIu64
	       ", scales @%" PRIu64 ", zero points @%" PRIu64
	       ", strings @%" PRIu64 " (%u bytes), planes @%" PRIu64
	       " (%" PRIu64 " bytes), end @%" PRIu64 "\n",
	       v->r_shape, v->r_strides, v->r_scales, v->r_zps, v->r_strings,
	       v->strings_bytes, v->r_planes, v->planes_bytes, v->r_end);
	printf("planes: %u\n", v->plane_count);
	printf("  %3s %7s %10s %10s %10s %10s %10s %5s %8s\n", "#", "handle",
	       "offset", "stride", "size", "used", "modifier", "hbl",
	       "data_len");
	for (unsigned i = 0; td_blob_plane_next(v, &c, &p) == 0; i++)
		printf("  %3u %7" PRId64 " %10" PRIu64 " %10" PRIu64
		       " %10" PRIu64 " %10" PRIu64 " %10" PRIu64 " %5u %8u\n",
		       i, p.handle, p.offset, p.stride, p.size, p.used,
		       p.modifier, p.handle_bytes_len, p.data_len);
}

int inspect_blob(const char *path, const uint8_t *buf, size_t len, int json)
{
	struct td_blob_view v;
	struct td_err e;

	/* parse, then the import checks that need no fd table */
	if (td_blob_decode(buf, len, &v, &e) < 0 ||
	    td_blob_check(&v, TD_BLOB_NO_FD_TABLE, &e) < 0) {
		tctl_print_td_err(&e, json, path);
		return TCTL_REFUSED;
	}
	if (json)
		print_json(&v);
	else
		print_table(&v);
	return TCTL_OK;
}
