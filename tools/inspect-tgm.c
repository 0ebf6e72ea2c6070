/* SPDX-License-Identifier: MIT */
/*
 * tensorctl inspect for Tensogram .tgm files (../shared/specs/tensogram.md):
 * the scan, then every message's header and frame walk. --json prints the
 * structure of ../shared/vectors/tgm/expected.json, type-9 descriptors
 * (as JSON) and data ranges included.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "input.h"
#include "td-json.h"
#include "tensorctl.h"
#include "tgm-desc.h"
#include "tgm-file.h"
#include "tgm.h"

/* A file whose first message starts this far in is still a .tgm file
 * (junk before the first message, spec §12); beyond it, not sniffed. */
#define SNIFF_WINDOW 4096

int inspect_tgm_sniff_src(struct tgm_src *s)
{
	struct tgm_scan sc;
	struct td_tgm_span span;
	uint8_t magic[8];

	if (s->size >= 8 && tgm_src_read(s, 0, magic, 8) == 0 &&
	    !memcmp(magic, "TENSOGRM", 8))
		return 1;
	/* a message starting beyond the window would not count: the scan
	 * does not look for one, a file of any size is read this far */
	tgm_scan_init(&sc, s, SNIFF_WINDOW - 1);
	return tgm_scan_next(&sc, &span) == 1 && span.offset < SNIFF_WINDOW;
}

/* Summary of one message, for the exit status. */
struct msg_result {
	int walk_rc;  /* < 0: walk init or step failed */
	int hash_bad; /* frames whose present hash did not verify */
	int desc_bad; /* type-9 frames whose descriptor does not decode */
};

static void print_err_text(FILE *f, const struct td_err *e)
{
	char text[160];

	snprintf(text, sizeof(text), "%s at offset %" PRIu64,
		 e->reason ? e->reason : "error", e->offset);
	td_json_cstr(f, text);
}

/* tgm_object_read() with a reason for a failed allocation too. */
static int object_read(struct tgm_src *s, uint64_t base,
		       const struct td_tgm_frame *fr, struct td_tgm_object *o,
		       uint8_t **cbor, struct td_err *e)
{
	int rc = tgm_object_read(s, base, fr, o, cbor, e);

	if (rc == -ENOMEM)
		*e = (struct td_err){.kind = TD_ERR_UNSUPPORTED_REQUIREMENT,
				     .reason = "out of memory",
				     .offset = fr->offset};
	return rc;
}

/*
 * The descriptor (all its keys, as JSON) and the data range of a type-9
 * frame; a descriptor that does not decode is printed as
 * "descriptor_error" instead. Returns 1 when it did not decode.
 */
static int json_object_desc(FILE *f, struct tgm_src *s, uint64_t base,
			    const struct td_tgm_frame *fr)
{
	struct td_tgm_object o;
	struct td_err e = {0};
	char *json = NULL;
	uint8_t *cbor;

	if (object_read(s, base, fr, &o, &cbor, &e) < 0 ||
	    td_json_from_cbor(o.cbor, o.cbor_len, &json, NULL, &e) < 0) {
		free(cbor);
		if (s->io_err)
			return 0;
		fprintf(f, ",\"descriptor_error\":");
		print_err_text(f, &e);
		return 1;
	}
	free(cbor);
	fprintf(f,
		",\"descriptor\":%s,\"data_range_in_msg\":[%" PRIu64
		",%" PRIu64 "]",
		json, o.data_offset, o.data_offset + o.data_len);
	free(json);
	return 0;
}

/* lead, then w (text from the file) escaped for a terminal */
static void word(FILE *f, const char *lead, const char *w)
{
	fputs(lead, f);
	tctl_text_escaped(f, w, strlen(w));
}

/* One line under a type-9 frame: what its descriptor says. */
static int text_object_desc(FILE *f, struct tgm_src *s, uint64_t base,
			    const struct td_tgm_frame *fr)
{
	static const char *const order[] = {"native", "big", "little"};
	struct td_tgm_object o;
	struct td_err e = {0};
	uint8_t *cbor;
	int rc = object_read(s, base, fr, &o, &cbor, &e);

	free(cbor); /* o.desc is a copy; o.cbor is not used below */
	if (rc < 0 && s->io_err)
		return 0;
	if (rc < 0) {
		fprintf(f, "       descriptor: REFUSED: %s%s%s at offset %" PRIu64
			"\n", e.field ? e.field : "", e.field ? ": " : "",
			e.reason, e.offset);
		return 1;
	}
	/* the descriptor's words are the file's text: escaped */
	fputs("       ", f);
	word(f, "", o.desc.type);
	word(f, " ", o.desc.dtype_name);
	fputs(" (", f);
	for (uint32_t i = 0; i < o.desc.shape_count; i++)
		fprintf(f, "%s%" PRIu64, i ? "," : "", o.desc.shape[i]);
	fprintf(f, ") %s-endian", order[o.desc.byte_order]);
	word(f, ", encoding ", o.desc.encoding);
	word(f, ", filter ", o.desc.filter);
	word(f, ", compression ", o.desc.compression);
	fprintf(f, "%s, data %" PRIu64 "..%" PRIu64 "\n",
		o.desc.has_masks ? ", masks" : "", o.data_offset,
		o.data_offset + o.data_len);
	return 0;
}

/* A metadata frame's payload is printed up to TGM_META_MAX; a bigger
 * one is said, not read (inspect's memory stays a few MiB, as for
 * descriptors; load refuses it). */

/*
 * A metadata frame's CBOR as JSON text (*json, malloc'ed): 0; 1 when it
 * is over TGM_META_MAX (*why says so, not a refusal); -1 when it does not
 * decode (*e; a refusal, as a descriptor's); -EIO (s->io_err).
 */
static int meta_read(struct tgm_src *s, uint64_t base,
		     const struct td_tgm_frame *fr, char **json,
		     struct td_err *e)
{
	uint8_t *cbor;
	int rc;

	*json = NULL;
	if (fr->payload_len > TGM_META_MAX)
		return 1;
	rc = tgm_frame_payload(s, base, fr, &cbor);
	if (rc == -EIO)
		return rc;
	if (rc < 0) {
		*e = (struct td_err){.reason = "out of memory",
				     .offset = fr->offset};
		return -1;
	}
	rc = td_json_from_cbor(cbor, fr->payload_len, json, NULL, e);
	free(cbor);
	if (rc < 0 && !e->reason)
		*e = (struct td_err){.reason = strerror(-rc),
				     .offset = fr->offset};
	return rc < 0 ? -1 : 0;
}

/*
 * JSON text on a terminal: what JSON leaves raw and a terminal would act
 * on (DEL, C1 controls such as U+009B, CSI) as \u00NN, which keeps it
 * JSON; the rest as it is.
 */
static void print_terminal_safe(FILE *f, const char *t)
{
	for (const unsigned char *p = (const unsigned char *)t; *p; p++) {
		if (*p == 0x7f) {
			fputs("\\u007f", f);
		} else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
			fprintf(f, "\\u00%02x", p[1]);
			p++;
		} else {
			fputc(*p, f);
		}
	}
}

/*
 * A metadata frame's CBOR as JSON: ,"metadata":{...} (or
 * "metadata_error") with json, else a line under the frame. 1 when it
 * did not decode.
 */
static int print_meta(FILE *f, struct tgm_src *s, uint64_t base,
		      const struct td_tgm_frame *fr, bool json)
{
	struct td_err e = {0};
	char *text = NULL;
	int rc = meta_read(s, base, fr, &text, &e);

	if (rc == -EIO)
		return 0;
	if (rc == 1) {
		fputs(json ? ",\"metadata\":null,\"metadata_error\":"
			     "\"larger than 16 MiB: not printed\""
			   : "       metadata: larger than 16 MiB, not "
			     "printed\n",
		      f);
		return 0;
	}
	if (rc < 0 && json) {
		fprintf(f, ",\"metadata_error\":");
		print_err_text(f, &e);
	} else if (rc < 0) {
		fprintf(f, "       metadata: REFUSED: %s at offset %" PRIu64 "\n",
			e.reason, e.offset);
	} else if (json) {
		fprintf(f, ",\"metadata\":%s", text);
	} else {
		fprintf(f, "       metadata: ");
		print_terminal_safe(f, text);
		fprintf(f, "\n");
	}
	free(text);
	return rc < 0;
}

static void json_message(FILE *f, struct tgm_src *s,
			 const struct td_tgm_span *sp, struct msg_result *r)
{
	struct td_tgm_header h;
	struct tgm_walk w;
	struct td_tgm_frame fr;
	struct td_err e = { 0 };
	uint8_t pre[TD_TGM_PREAMBLE_LEN];
	int rc, n = 0;

	fprintf(f, "{\"offset\":%" PRIu64 ",\"length\":%" PRIu64, sp->offset,
		sp->length);
	/* a scan span is >= 32 bytes long and starts with a preamble */
	if (tgm_src_read(s, sp->offset, pre, sizeof(pre)) < 0)
		return;
	if (td_tgm_header_decode(pre, sizeof(pre), &h, &e) == 0) {
		fprintf(f,
			",\"header\":{\"version\":%u,\"flags\":%u,"
			"\"flags_hex\":\"0x%04x\",\"total_length\":%" PRIu64
			",\"predicates\":[",
			h.version, h.flags, h.flags, h.total_length);
		for (unsigned b = 0, k = 0; b < TD_TGM_PREDICATE_COUNT; b++) {
			if (!(h.flags & (1u << b)))
				continue;
			fprintf(f, "%s", k++ ? "," : "");
			td_json_cstr(f, td_tgm_predicate_name(b));
		}
		fprintf(f, "]}");
	} else {
		fprintf(f, ",\"header\":null");
	}
	rc = tgm_walk_open(&w, s, sp->offset, sp->length, &e);
	if (s->io_err)
		return;
	if (rc < 0) {
		r->walk_rc = rc;
		fprintf(f, ",\"postamble\":null,\"frames\":[],\"walk_error\":");
		print_err_text(f, &e);
		fprintf(f, "}");
		return;
	}
	fprintf(f,
		",\"postamble\":{\"offset\":%" PRIu64
		",\"first_footer_offset\":%" PRIu64 ",\"total_length\":%" PRIu64
		"},\"frames\":[",
		w.it.postamble_offset, w.it.first_footer_offset,
		w.it.postamble_total_length);
	while ((rc = tgm_walk_next(&w, &fr, &e)) == 1) {
		fprintf(f,
			"%s{\"type\":%u,\"name\":\"%s\",\"version\":%u,"
			"\"flags\":%u,\"offset\":%" PRIu64
			",\"length\":%" PRIu64 ",\"payload_len\":%" PRIu64
			",\"has_hash\":%s",
			n++ ? "," : "", fr.type, fr.name, fr.version, fr.flags,
			fr.offset, fr.length, fr.payload_len,
			fr.has_hash ? "true" : "false");
		if (fr.has_hash) {
			int ok = tgm_frame_hash_ok(s, sp->offset, &fr);

			if (ok < 0)
				return;
			fprintf(f, ",\"hash_ok\":%s", ok ? "true" : "false");
			r->hash_bad += !ok;
		}
		if (fr.type == TD_TGM_NTENSOR_FRAME) {
			fprintf(f,
				",\"cbor_offset\":%" PRIu64
				",\"cbor_after_payload\":%s",
				fr.cbor_offset,
				fr.cbor_after_payload ? "true" : "false");
			r->desc_bad += json_object_desc(f, s, sp->offset, &fr);
			if (s->io_err)
				return;
		}
		if (tgm_is_meta_frame(fr.type)) {
			r->desc_bad += print_meta(f, s, sp->offset, &fr, true);
			if (s->io_err)
				return;
		}
		fprintf(f, "}");
	}
	if (s->io_err)
		return;
	r->walk_rc = rc;
	fprintf(f, "],\"walk_error\":");
	if (rc < 0)
		print_err_text(f, &e);
	else
		fprintf(f, "null");
	fprintf(f, "}");
}

static void text_message(FILE *f, size_t idx, struct tgm_src *s,
			 const struct td_tgm_span *sp, struct msg_result *r)
{
	struct td_tgm_header h;
	struct tgm_walk w;
	struct td_tgm_frame fr;
	struct td_err e = { 0 };
	uint8_t pre[TD_TGM_PREAMBLE_LEN];
	int rc;

	fprintf(f, "message %zu @%" PRIu64 " length %" PRIu64 "\n", idx,
		sp->offset, sp->length);
	/* a scan span is >= 32 bytes long and starts with a preamble */
	if (tgm_src_read(s, sp->offset, pre, sizeof(pre)) < 0)
		return;
	if (td_tgm_header_decode(pre, sizeof(pre), &h, &e) == 0) {
		fprintf(f,
			"  header: version %u flags 0x%04x total_length "
			"%" PRIu64 "\n  predicates:",
			h.version, h.flags, h.total_length);
		for (unsigned b = 0; b < TD_TGM_PREDICATE_COUNT; b++)
			if (h.flags & (1u << b))
				fprintf(f, " %s", td_tgm_predicate_name(b));
		fprintf(f, "\n");
	}
	rc = tgm_walk_open(&w, s, sp->offset, sp->length, &e);
	if (s->io_err)
		return;
	if (rc < 0) {
		r->walk_rc = rc;
		fprintf(f, "  walk: refused: %s at offset %" PRIu64 "\n",
			e.reason, e.offset);
		return;
	}
	fprintf(f,
		"  postamble @%" PRIu64 ": first_footer_offset %" PRIu64
		" total_length %" PRIu64 "\n",
		w.it.postamble_offset, w.it.first_footer_offset,
		w.it.postamble_total_length);
	fprintf(f, "  %4s %-16s %3s %6s %8s %8s %8s %s\n", "type", "name",
		"ver", "flags", "offset", "length", "payload", "hash");
	while ((rc = tgm_walk_next(&w, &fr, &e)) == 1) {
		const char *hash = "-";

		if (fr.has_hash) {
			int ok = tgm_frame_hash_ok(s, sp->offset, &fr);

			if (ok < 0)
				return;
			hash = ok ? "ok" : "MISMATCH";
			r->hash_bad += !ok;
		}
		fprintf(f,
			"  %4u %-16s %3u 0x%04x %8" PRIu64 " %8" PRIu64
			" %8" PRIu64 " %s\n",
			fr.type, fr.name, fr.version, fr.flags, fr.offset,
			fr.length, fr.payload_len, hash);
		if (fr.type == TD_TGM_NTENSOR_FRAME)
			r->desc_bad += text_object_desc(f, s, sp->offset, &fr);
		if (tgm_is_meta_frame(fr.type))
			r->desc_bad += print_meta(f, s, sp->offset, &fr, false);
		if (s->io_err)
			return;
	}
	if (s->io_err)
		return;
	r->walk_rc = rc;
	if (rc < 0)
		fprintf(f, "  end: MALFORMED: %s at offset %" PRIu64 "\n",
			e.reason, e.offset);
	else
		fprintf(f, "  end: clean\n");
}

/* One gap [at, end) between messages, if any, said: 1, else 0. */
static int skip_line(FILE *f, int json, size_t k, uint64_t at, uint64_t end)
{
	if (end > at && json)
		fprintf(f, "%s[%" PRIu64 ",%" PRIu64 "]", k ? "," : "", at,
			end - at);
	else if (end > at)
		fprintf(f, "skipped: %" PRIu64 " bytes at offset %" PRIu64
			", not part of a whole message (junk, or a cut or "
			"damaged message)\n",
			end - at, at);
	return end > at;
}

/*
 * The bytes no whole message covers (spec §12: scan steps over junk, a
 * cut or damaged message, and never reports them): listed, so that a
 * file with a cut last message does not read as clean. Text: one line
 * each; JSON: ,"skipped":[[offset,length],...].
 */
static int skipped(FILE *f, struct tgm_src *s, int json)
{
	struct tgm_scan sc;
	struct td_tgm_span sp;
	uint64_t at = 0;
	size_t k = 0;
	int more = 1;

	if (json)
		fprintf(f, ",\"skipped\":[");
	tgm_scan_init(&sc, s, UINT64_MAX);
	while (more) {
		uint64_t end = s->size;

		more = tgm_scan_next(&sc, &sp);
		if (more < 0)
			return more;
		if (more)
			end = sp.offset;
		k += skip_line(f, json, k, at, end);
		if (more)
			at = sp.offset + sp.length;
	}
	if (json)
		fprintf(f, "]");
	return 0;
}

/* Why the input holds no whole message: its first message's envelope. */
static int no_message(FILE *f, struct tgm_src *s, int json)
{
	struct tgm_walk w;
	struct td_err e = { 0 };

	if (tgm_walk_open(&w, s, 0, s->size, &e) == 0)
		e.reason = "no complete message found", e.offset = 0;
	if (s->io_err)
		return tgm_src_fail(s);
	if (json) {
		fprintf(f, "],\"error\":");
		print_err_text(f, &e);
		fprintf(f, "}\n");
	} else {
		fprintf(f, "no message: %s at offset %" PRIu64 "\n",
			e.reason, e.offset);
	}
	return TCTL_REFUSED;
}

int inspect_tgm(struct tgm_src *s, int json)
{
	struct tgm_scan sc;
	struct td_tgm_span sp;
	FILE *f = stdout;
	size_t n = 0;
	int bad = 0, rc;

	if (json) {
		fprintf(f, "{\"kind\":\"tgm\",\"size\":%" PRIu64
			",\"scan\":[", s->size);
		tgm_scan_init(&sc, s, UINT64_MAX);
		while ((rc = tgm_scan_next(&sc, &sp)) == 1)
			fprintf(f, "%s[%" PRIu64 ",%" PRIu64 "]",
				n++ ? "," : "", sp.offset, sp.length);
		if (rc < 0)
			return tgm_src_fail(s);
		fprintf(f, "],\"messages\":[");
	} else {
		fprintf(f, "tgm: %" PRIu64 " bytes\n", s->size);
	}
	/* a second pass: scan is cheap and keeps this free of allocation */
	tgm_scan_init(&sc, s, UINT64_MAX);
	for (n = 0; (rc = tgm_scan_next(&sc, &sp)) == 1; n++) {
		struct msg_result r = { 0 };

		if (json) {
			fprintf(f, "%s", n ? "," : "");
			json_message(f, s, &sp, &r);
		} else {
			text_message(f, n, s, &sp, &r);
		}
		if (s->io_err)
			return tgm_src_fail(s);
		bad |= r.walk_rc < 0 || r.hash_bad || r.desc_bad;
	}
	if (rc < 0)
		return tgm_src_fail(s);
	if (n == 0)
		return no_message(f, s, json);
	if (json)
		fprintf(f, "]");
	if (skipped(f, s, json) < 0)
		return tgm_src_fail(s);
	if (json)
		fprintf(f, "}\n");
	else
		fprintf(f, "%zu message(s)\n", n);
	return bad ? TCTL_REFUSED : TCTL_OK;
}

/*
 * The same report of a stream (stdin), its messages one at a time (the
 * first, sp in s, found already): each message's bytes are let go once
 * it is printed; what is printed is held (open_memstream) until the end,
 * whose length the report starts with, and the scan's spans, so that the
 * report is the file's, byte for byte. A read error prints nothing.
 */
int inspect_tgm_stream(struct tgm_stream *st, struct td_tgm_span *sp,
		       struct tgm_src *s, int json)
{
	struct td_tgm_span *spans = NULL;
	char *text = NULL;
	size_t text_len = 0, n = 0, cap = 0, k = 0;
	FILE *m = open_memstream(&text, &text_len), *f = stdout;
	uint64_t total, at = 0;
	int bad = 0, more = sp != NULL, rc = TCTL_OK;

	if (!m)
		return tctl_fail(TCTL_REFUSED, "io", ENOMEM, "out of memory");
	while (more == 1) {
		struct msg_result r = { 0 };

		rc = tctl_room(&spans, n, &cap, sizeof(*spans), 16);
		if (rc)
			break;
		spans[n] = *sp;
		if (json) {
			fprintf(m, "%s", n ? "," : "");
			json_message(m, s, sp, &r);
		} else {
			text_message(m, n, s, sp, &r);
		}
		if (s->io_err) {
			rc = tgm_src_fail(s);
			break;
		}
		bad |= r.walk_rc < 0 || r.hash_bad || r.desc_bad;
		n++;
		more = tgm_stream_next(st, sp, s);
	}
	if (!rc && more < 0)
		rc = -more;
	if (fclose(m) != 0 && !rc)
		rc = tctl_fail(TCTL_REFUSED, "io", ENOMEM, "out of memory");
	total = tgm_stream_total(st);
	if (!rc && json) {
		fprintf(f, "{\"kind\":\"tgm\",\"size\":%" PRIu64 ",\"scan\":[",
			total);
		for (size_t i = 0; i < n; i++)
			fprintf(f, "%s[%" PRIu64 ",%" PRIu64 "]", i ? "," : "",
				spans[i].offset, spans[i].length);
		fprintf(f, "],\"messages\":[");
	} else if (!rc) {
		fprintf(f, "tgm: %" PRIu64 " bytes\n", total);
	}
	if (!rc && n == 0) {
		/* no message: the stream is held whole, from its start */
		struct tgm_src w = { .path = st->in->path, .fd = -1,
				     .buf = st->buf, .size = st->have };

		rc = no_message(f, &w, json);
	} else if (!rc) {
		fwrite(text, 1, text_len, f);
		if (json)
			fprintf(f, "],\"skipped\":[");
		for (size_t i = 0; i <= n; i++) {
			uint64_t end = i < n ? spans[i].offset : total;

			k += skip_line(f, json, k, at, end);
			if (i < n)
				at = spans[i].offset + spans[i].length;
		}
		if (json)
			fprintf(f, "]}\n");
		else
			fprintf(f, "%zu message(s)\n", n);
		rc = bad ? TCTL_REFUSED : TCTL_OK;
	}
	free(text);
	free(spans);
	return rc;
}
