/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the request headers the HTTP store parses itself
 * (daemon/http-hdr.c): Range, If-None-Match, If-Match and If-Range,
 * whatever a client sends (the If-None-Match text stands for all three).
 * Input: 8 bytes of body length (little-endian; fewer: the input's size),
 * then the Range text, a NUL, the If-None-Match text, a NUL, an entity
 * tag's inside. A range taken must lie inside the body and not be empty;
 * "*" and the tag itself, alone, weak, or after another tag, must match
 * If-None-Match; If-Match the same but weak; If-Range the tag alone.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http-hdr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_range(const char *h, uint64_t len)
{
	uint64_t a = UINT64_MAX, n = UINT64_MAX;
	int rc = td__http_range_parse(h, len, &a, &n);

	if (rc != -1 && rc != 1)
		abort();
	if (rc == 1 && (n == 0 || a >= len || n > len - a))
		abort();
	if (td__http_range_parse(NULL, len, &a, &n) != 0)
		abort();
}

/* inside: the tag's text between its quotes (quotes dropped) */
static void check_etag(const char *inm, const char *inside)
{
	size_t l = strlen(inside);
	char *tag = malloc(l + 3), *list = malloc(2 * l + 16);
	size_t k = 0;

	if (!tag || !list)
		abort();
	tag[k++] = '"';
	for (size_t i = 0; i < l; i++)
		if (inside[i] != '"')
			tag[k++] = inside[i];
	tag[k++] = '"';
	tag[k] = 0;
	(void)td__http_etag_matches(inm, tag);
	if (td__http_etag_matches(NULL, tag) ||
	    !td__http_etag_matches("*", tag) ||
	    !td__http_etag_matches(tag, tag))
		abort();
	(void)td__http_if_match(inm, tag);
	(void)td__http_if_match(inm, NULL);
	(void)td__http_if_range(inm, tag);
	if (!td__http_if_match(NULL, tag) || !td__http_if_match("*", tag) ||
	    !td__http_if_match(tag, tag) || !td__http_if_range(NULL, tag) ||
	    !td__http_if_range(tag, tag) || td__http_if_range(tag, NULL))
		abort();
	strcpy(list, "W/");
	strcat(list, tag);
	if (!td__http_etag_matches(list, tag) || td__http_if_match(list, tag) ||
	    td__http_if_range(list, tag))
		abort();
	strcpy(list, "\"other\" ,\t");
	strcat(list, tag);
	if (strcmp(tag, "\"other\"") && (!td__http_etag_matches(list, tag) ||
	                                  !td__http_if_match(list, tag)))
		abort();
	free(tag);
	free(list);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t len = size;
	char *s, *inm, *inside;

	if (size >= 8) {
		len = 0;
		for (int i = 7; i >= 0; i--)
			len = len << 8 | data[i];
		data += 8;
		size -= 8;
	}
	s = malloc(size + 3);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = s[size + 1] = s[size + 2] = 0;
	inm = s + strlen(s) + 1;
	inside = inm + strlen(inm) + 1;
	if (inm > s + size + 1)
		inm = s + size + 1;
	if (inside > s + size + 2)
		inside = s + size + 2;
	check_range(s, len);
	check_etag(inm, inside);
	free(s);
	return 0;
}
