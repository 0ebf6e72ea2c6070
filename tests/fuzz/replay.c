/* SPDX-License-Identifier: MIT */
/*
 * Stand-alone driver for the libFuzzer targets: feeds each file named on the
 * command line (or every file of a named folder) to LLVMFuzzerTestOneInput.
 * It lets the default gcc build compile every fuzz target and run it over
 * its seed corpus as a test; the real fuzzing uses clang -fsanitize=fuzzer
 * (meson -Dfuzz=true), see .ci/run.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf;
	long n;

	if (!f) {
		perror(path);
		return 1;
	}
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = malloc(n > 0 ? (size_t)n : 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		fclose(f);
		free(buf);
		return 1;
	}
	fclose(f);
	/* every prefix too: truncation is the commonest malformation */
	for (long k = 0; k <= n; k++)
		LLVMFuzzerTestOneInput(buf, (size_t)k);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	int files = 0, rc = 0;

	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) != 0) {
			perror(argv[i]);
			return 1;
		}
		if (!S_ISDIR(st.st_mode)) {
			rc |= run_file(argv[i]);
			files++;
			continue;
		}
		DIR *d = opendir(argv[i]);
		struct dirent *e;
		while (d && (e = readdir(d))) {
			char p[4096];
			if (e->d_name[0] == '.')
				continue;
			snprintf(p, sizeof(p), "%s/%s", argv[i], e->d_name);
			if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
				rc |= run_file(p);
				files++;
			}
		}
		if (d)
			closedir(d);
	}
	printf("replayed %d inputs\n", files);
	return rc || files == 0;
}
