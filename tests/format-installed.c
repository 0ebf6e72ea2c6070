/* SPDX-License-Identifier: MIT */
/*
 * A program that knows tensord only through the installed <tensord/blob.h>
 * and <tensord/tgm.h> (tests/installed.sh builds it with pkg-config):
 * a blob encoded, decoded, checked and walked; a refused blob file with
 * its kind and offset; a .tgm message's header and frames, and the same
 * message damaged, where the iterator yields every intact frame and then
 * reports the damage through itself.
 *
 *   format-installed NEGATIVE_BLOB.bin FILE.tgm
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensord/blob.h>
#include <tensord/tgm.h>

#define CHECK(c)                                                              \
	do {                                                                  \
		if (!(c)) {                                                   \
			fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__,    \
				#c);                                          \
			exit(1);                                              \
		}                                                             \
	} while (0)

static unsigned char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	CHECK(f);
	unsigned char *buf = malloc(1 << 20);
	CHECK(buf);
	*len = fread(buf, 1, 1 << 20, f);
	fclose(f);
	return buf;
}

static void blob(const char *negative)
{
	uint64_t shape[2] = {2, 3};
	float data[6] = {1, 2, 3, 4, 5, 6};
	struct td_blob_plane pl = {.handle = -1, .size = sizeof(data),
				   .used = sizeof(data),
				   .data_len = sizeof(data),
				   .data = (const uint8_t *)data};
	struct td_blob_desc d = {.storage_kind = TD_STORAGE_MEM,
				 .fence_fd = -1, .dtype = TD_DTYPE_F32,
				 .quant_axis = TD_QUANT_NONE, .ndim = 2,
				 .shape = shape, .plane_count = 1,
				 .planes = &pl};
	uint8_t buf[512];
	struct td_err e = {0};
	uint64_t need;

	CHECK(td_blob_encoded_len(&d, &need, &e) == 0);
	int64_t n = td_blob_encode(&d, buf, sizeof(buf), &e);
	CHECK(n > 0 && (uint64_t)n == need);
	CHECK(td_blob_encode(&d, buf, 8, NULL) == -ENOBUFS);

	struct td_blob_view v;
	CHECK(td_blob_decode(buf, (size_t)n, &v, &e) == 0);
	CHECK(td_blob_check(&v, TD_BLOB_NO_FD_TABLE, &e) == 0);
	CHECK(v.ndim == 2 && td_blob_shape(&v, 1) == 3);
	CHECK(!strcmp(td_dtype_name(v.dtype), "f32"));
	struct td_blob_cursor cur = TD_BLOB_CURSOR_INIT;
	struct td_blob_plane got;
	CHECK(td_blob_plane_next(&v, &cur, &got) == 0);
	CHECK(got.data_len == sizeof(data) &&
	      !memcmp(got.data, data, sizeof(data)));
	CHECK(td_blob_plane_next(&v, &cur, &got) == -ENOENT);
	/* one byte short: refused as truncated, never read past */
	CHECK(td_blob_decode(buf, (size_t)n - 1, &v, &e) == -ENODATA);
	CHECK(e.kind == TD_ERR_TRUNCATED);

	size_t len;
	unsigned char *bad = slurp(negative, &len);
	int rc = td_blob_decode(bad, len, &v, &e);
	CHECK(rc < 0 && rc == td_err_kind_errno(e.kind));
	printf("blob: refused %s: %s at offset %llu\n",
	       td_err_kind_name(e.kind), e.reason,
	       (unsigned long long)e.offset);
	free(bad);
}

/* Walk the message at msg; returns the frames, the error in *rc. */
static unsigned walk(const unsigned char *msg, size_t len,
		     struct td_tgm_frame *frames, unsigned cap, int *rc,
		     struct td_err *e)
{
	struct td_tgm_frame_iter *it;
	unsigned n = 0;

	CHECK(td_tgm_frame_iter_create(msg, len, &it, e) == 0);
	while (n < cap && td_tgm_frame_iter_next(it, &frames[n]))
		n++;
	CHECK(!td_tgm_frame_iter_next(it, &frames[cap - 1]));
	*rc = td_tgm_frame_iter_error(it, e);
	td_tgm_frame_iter_free(it);
	return n;
}

static void tgm(const char *path)
{
	size_t len;
	unsigned char *buf = slurp(path, &len);
	struct td_tgm_span spans[8];
	struct td_tgm_header h;
	struct td_tgm_frame fr[32], again[32];
	struct td_err e = {0};
	int rc;

	size_t nmsg = td_tgm_scan_all(buf, len, spans, 8);
	CHECK(nmsg >= 1 && nmsg <= 8);
	const unsigned char *msg = buf + spans[0].offset;
	size_t mlen = (size_t)spans[0].length;
	CHECK(td_tgm_message_header(msg, mlen, &h, &e) == 0);
	CHECK(h.version == TD_TGM_VERSION);
	CHECK(td_tgm_message_header(msg, 10, &h, &e) == -ENODATA);

	unsigned n = walk(msg, mlen, fr, 32, &rc, &e);
	CHECK(rc == 0 && n >= 2);
	unsigned hashed = 0, data = 0;
	for (unsigned i = 0; i < n; i++) {
		CHECK(td_tgm_frame_has_hash(&fr[i]) ==
		      ((fr[i].flags & TD_TGM_FRAME_HASH_PRESENT) != 0));
		CHECK(!strcmp(fr[i].name, td_tgm_frame_type_name(fr[i].type)));
		data += fr[i].type == TD_TGM_NTENSOR_FRAME;
		if (td_tgm_frame_has_hash(&fr[i])) {
			CHECK(td_tgm_frame_verify(&fr[i], NULL, &e) == 0);
			hashed++;
		} else {
			CHECK(td_tgm_frame_verify(&fr[i], NULL, &e) ==
			      -EINVAL);
		}
	}
	printf("tgm: %zu message(s), the first %llu bytes: %u frames, %u "
	       "data, %u hashed\n",
	       nmsg, (unsigned long long)mlen, n, data, hashed);

	/* break the last frame's ENDF: the frames before it, then -EBADMSG */
	unsigned char *bad = malloc(mlen);
	CHECK(bad);
	memcpy(bad, msg, mlen);
	const struct td_tgm_frame *last = &fr[n - 1];
	bad[last->offset + last->length - 1] ^= 0xff;
	unsigned m = walk(bad, mlen, again, 32, &rc, &e);
	CHECK(m == n - 1);
	CHECK(rc == -EBADMSG && e.kind == TD_ERR_MALFORMED);
	CHECK(e.offset >= last->offset);
	for (unsigned i = 0; i < m; i++)
		CHECK(again[i].offset == fr[i].offset &&
		      again[i].type == fr[i].type);
	printf("tgm: damaged: %u frames, then %s at offset %llu\n", m,
	       td_err_kind_name(e.kind), (unsigned long long)e.offset);
	free(bad);
	free(buf);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s NEGATIVE_BLOB.bin FILE.tgm\n",
			argv[0]);
		return 2;
	}
	blob(argv[1]);
	tgm(argv[2]);
	puts("ok");
	return 0;
}
