/* SPDX-License-Identifier: MIT */
/*
 * A program built only against the INSTALLED <tensord/hrry.h> and
 * libtensord (pkg-config tensord): write a Hurray file with two tensors
 * and a KV entry through the fd transport, read it back through a mapped
 * span, and check every byte. No daemon. Exit 0 on success.
 */
#define _POSIX_C_SOURCE 200809L /* O_CLOEXEC under -std=c11 */

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tensord/hrry.h>

#define CHECK(x)                                                              \
	do {                                                                  \
		if (!(x)) {                                                   \
			fprintf(stderr, "%s:%d: %s failed (%s: %s)\n",        \
				__FILE__, __LINE__, #x,                       \
				td_hrry_error_name(err.kind),                 \
				err.reason ? err.reason : "");                \
			return 1;                                             \
		}                                                             \
	} while (0)

int main(int argc, char **argv)
{
	struct td_hrry_err err = {0};
	struct td_hrry_transport t;
	struct td_hrry_file_writer *w;
	struct td_hrry_file_reader *r;
	struct td_hrry_desc d;
	struct td_hrry_tensor tt;
	float weights[6] = {1, 2, 3, 4, 5, 6};
	const void *bufs[1] = {weights};
	const char *path = argc > 1 ? argv[1] : "installed.hrry";

	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK(fd >= 0);
	CHECK(td_hrry_transport_fd(fd, &t) == 0);
	CHECK(td_hrry_file_writer_new(&t, NULL, &w, &err) == 0);
	CHECK(td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_FLOAT32, 2,
				      (const uint64_t[]){2, 3}) == 0);
	CHECK(td_hrry_file_writer_write_tensor(w, "weights", 7, &d, bufs,
					       &err) == 0);
	struct td_hrry_kv_entry kv = {
		.key = "producer", .key_len = 8,
		.value = {.kind = TD_HRRY_KV_STRING,
			  .data = (const uint8_t *)"installed", .data_len = 9}};
	CHECK(td_hrry_file_writer_finish(w, &kv, 1, &err) == 0);
	td_hrry_file_writer_free(&w);

	CHECK(td_hrry_transport_map_fd(fd, &t) == 0);
	close(fd);
	CHECK(td_hrry_file_reader_new(&t, &r, &err) == 0);
	CHECK(td_hrry_file_reader_read_tensor(r, "weights", 7, &tt, &err) == 0);
	CHECK(tt.desc.rank == 2 && tt.desc.shape[1] == 3);
	CHECK(tt.data_len == sizeof(weights));
	CHECK(memcmp(tt.data, weights, sizeof(weights)) == 0);
	td_hrry_tensor_fini(&tt);
	struct td_hrry_kv_entry got;
	CHECK(td_hrry_file_reader_kv_entry(r, 0, &got) == 0);
	CHECK(got.value.data_len == 9 && !memcmp(got.value.data, "installed", 9));
	td_hrry_file_reader_free(&r);
	unlink(path);
	printf("ok: wrote and read %s through the installed API\n", path);
	return 0;
}
