/* SPDX-License-Identifier: MIT */
/*
 * proto/npy: the .npy header reader over crafted headers (each refusal
 * with its -errno and field), fed one byte at a time, and the writer
 * against headers np.save() of numpy 1.24 wrote (transcribed below, not
 * computed by the code under test).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blob.h"
#include "npy.h"
#include "testutil.h"

TestSuite(npy, .timeout = TU_TEST_TIMEOUT_S);

/* "\x93NUMPY" v1.0, its 2-byte length, then the dict text as given (the
 * caller pads it and ends it with '\n' when it wants a valid one) */
static size_t v1(uint8_t *buf, const char *dict)
{
	size_t n = strlen(dict);

	memcpy(buf, "\x93NUMPY\x01\x00", 8);
	buf[8] = (uint8_t)n;
	buf[9] = (uint8_t)(n >> 8);
	memcpy(buf + 10, dict, n);
	return 10 + n;
}

/* The same as version major.0 with a 4-byte length (2.0, 3.0). */
static size_t v2(uint8_t *buf, uint8_t major, const char *dict)
{
	size_t n = strlen(dict);

	memcpy(buf, "\x93NUMPY", 6);
	buf[6] = major;
	buf[7] = 0;
	for (int k = 0; k < 4; k++)
		buf[8 + k] = (uint8_t)(n >> (8 * k));
	memcpy(buf + 12, dict, n);
	return 12 + n;
}

static int decode(const char *dict, struct td_npy_header *h,
		  struct td_err *e)
{
	uint8_t buf[1024];
	size_t n = v1(buf, dict);

	memset(e, 0, sizeof(*e));
	return td_npy_decode(buf, n, h, e);
}

#define F4_2X3 "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
/* np.save(f, np.zeros((2, 3), '<f4')): 128 bytes, data at 128 */
static const char numpy_f4_2x3[] =
	"\x93NUMPY\x01\x00v\x00" F4_2X3
	"                                                          \n";
/* np.save(f, np.uint8(7)): a 0-d array */
static const char numpy_u1_0d[] =
	"\x93NUMPY\x01\x00v\x00{'descr': '|u1', 'fortran_order': False, "
	"'shape': (), }                                                  "
	"            \n";

Test(npy, numpy_headers_decode)
{
	struct td_npy_header h;
	struct td_err e = {0};

	cr_assert_eq(sizeof(numpy_f4_2x3) - 1, 128);
	cr_assert_eq(td_npy_decode((const uint8_t *)numpy_f4_2x3, 128, &h, &e),
		     0, "%s", e.reason);
	cr_expect_eq(h.major, 1);
	cr_expect_eq(h.dtype, TD_DTYPE_F32);
	cr_expect_eq(h.order, TD_NPY_ORDER_LITTLE);
	cr_expect_eq(h.ndim, 2);
	cr_expect(h.shape[0] == 2 && h.shape[1] == 3);
	cr_expect_eq(h.data_offset, 128);
	cr_expect_eq(h.data_len, 24);
	cr_assert_eq(sizeof(numpy_u1_0d) - 1, 128);
	cr_assert_eq(td_npy_decode((const uint8_t *)numpy_u1_0d, 128, &h, &e),
		     0, "%s", e.reason);
	cr_expect_eq(h.dtype, TD_DTYPE_U8);
	cr_expect_eq(h.order, TD_NPY_ORDER_NONE);
	cr_expect_eq(h.ndim, 0);
	cr_expect_eq(h.data_len, 1);
}

Test(npy, writer_matches_numpy_byte_for_byte)
{
	uint8_t buf[TD_NPY_ENCODE_MAX];
	uint64_t shape[2] = {2, 3};
	size_t n;

	cr_assert_eq(td_npy_encode(TD_DTYPE_F32, 2, shape, buf, sizeof(buf),
				   &n, NULL),
		     0);
	cr_expect(n == 128 && !memcmp(buf, numpy_f4_2x3, n), "%.*s", (int)n,
		  buf);
	cr_assert_eq(td_npy_encode(TD_DTYPE_U8, 0, NULL, buf, sizeof(buf), &n,
				   NULL),
		     0);
	cr_expect(n == 128 && !memcmp(buf, numpy_u1_0d, n), "%.*s", (int)n,
		  buf);
	cr_expect_eq(td_npy_encode(TD_DTYPE_U8, 0, NULL, buf, 127, &n, NULL),
		     -EINVAL);
	cr_expect_eq(td_npy_encode(99, 0, NULL, buf, sizeof(buf), &n, NULL),
		     -EINVAL);
}

/* np.save of a (3,) '<i2' and of 16 dims of 10**19 */
Test(npy, writer_one_dim_and_the_longest_header)
{
	uint8_t buf[TD_NPY_ENCODE_MAX];
	uint64_t shape[16];
	struct td_npy_header h;
	size_t n;
	static const char want[] =
		"\x93NUMPY\x01\x00v\x00{'descr': '<i2', 'fortran_order': "
		"False, 'shape': (3,), }";

	shape[0] = 3;
	cr_assert_eq(td_npy_encode(TD_DTYPE_I16, 1, shape, buf, sizeof(buf),
				   &n, NULL),
		     0);
	cr_expect(n == 128 && !memcmp(buf, want, sizeof(want) - 1));
	for (size_t k = sizeof(want) - 1; k < 127; k++)
		cr_expect_eq(buf[k], ' ');
	for (int k = 0; k < 16; k++)
		shape[k] = 10000000000000000000ull;
	cr_assert_eq(td_npy_encode(TD_DTYPE_F64, 16, shape, buf, sizeof(buf),
				   &n, NULL),
		     0);
	cr_expect_eq(n, 448);
	/* the shape's bytes overflow: a header numpy writes, refused */
	cr_expect_eq(td_npy_decode(buf, n, &h, NULL), -EOVERFLOW);
	/* unless a dimension is 0, wherever it stands: no bytes (the one
	 * at the end was refused, the one in front taken) */
	for (int at = 0; at < 3; at++) {
		for (int k = 0; k < 3; k++)
			shape[k] = k == at ? 0 : 4294967296ull;
		cr_assert_eq(td_npy_encode(TD_DTYPE_F64, 3, shape, buf,
					   sizeof(buf), &n, NULL),
			     0);
		cr_expect_eq(td_npy_decode(buf, n, &h, NULL), 0, "0 at %d",
			     at);
		cr_expect_eq(h.data_len, 0, "0 at %d", at);
	}
}

Test(npy, any_key_order_either_quote_and_versions_2_and_3)
{
	struct td_npy_header h;
	struct td_err e;
	uint8_t buf[256];
	size_t n;

	cr_assert_eq(decode("{\"shape\":(4,5,),\"fortran_order\":False,"
			    "\"descr\":\">u2\"}\n",
			    &h, &e),
		     0, "%s", e.reason);
	cr_expect_eq(h.dtype, TD_DTYPE_U16);
	cr_expect_eq(h.order, TD_NPY_ORDER_BIG);
	cr_expect(h.ndim == 2 && h.shape[0] == 4 && h.shape[1] == 5);
	cr_expect_eq(h.data_len, 40);
	cr_assert_eq(decode("{'descr': '>u1', 'fortran_order': False, "
			    "'shape': (0,)}   \n",
			    &h, &e),
		     0, "%s", e.reason);
	cr_expect_eq(h.order, TD_NPY_ORDER_NONE);
	cr_expect_eq(h.data_len, 0);
	/* '=' is the native order, which np.load() reads as the host's (it
	 * was refused as "no tensord equivalent") */
	cr_assert_eq(decode("{'descr': '=f4', 'fortran_order': False, "
			    "'shape': (3,), }\n",
			    &h, &e),
		     0, "%s", e.reason);
	cr_expect_eq(h.dtype, TD_DTYPE_F32);
	cr_expect_eq(h.order, __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
				      ? TD_NPY_ORDER_LITTLE
				      : TD_NPY_ORDER_BIG);
	cr_expect_eq(h.data_len, 12);
	cr_assert_eq(decode("{'descr': '=u1', 'fortran_order': False, "
			    "'shape': (), }\n",
			    &h, &e),
		     0, "%s", e.reason);
	cr_expect_eq(h.order, TD_NPY_ORDER_NONE);
	/* Python 2's numpy wrote longs: (3L, 4L), which np.load() reads */
	cr_assert_eq(decode("{'descr': '<i8', 'fortran_order': False, "
			    "'shape': (3L, 4L), }\n",
			    &h, &e),
		     0, "%s", e.reason);
	cr_expect(h.ndim == 2 && h.shape[0] == 3 && h.shape[1] == 4);
	cr_expect_eq(decode("{'descr': '<i8', 'fortran_order': False, "
			    "'shape': (3LL,), }\n",
			    &h, &e),
		     -EBADMSG);
	for (uint8_t major = 2; major <= 3; major++) {
		n = v2(buf, major, F4_2X3 "   \n");
		cr_assert_eq(td_npy_decode(buf, n, &h, &e), 0, "%s", e.reason);
		cr_expect_eq(h.major, major);
		cr_expect_eq(h.data_offset, n);
		cr_expect_eq(h.data_len, 24);
	}
}

struct refusal {
	const char *dict;
	int rc;
	const char *field; /* NULL: none */
	const char *reason; /* a part of it */
};

static const struct refusal refusals[] = {
	{"{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }\n",
	 -ENOTSUP, "fortran_order", "np.ascontiguousarray"},
	{"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (), }\n",
	 -ENOTSUP, "descr", "structured"},
	{"{'descr': '|O', 'fortran_order': False, 'shape': (), }\n", -ENOTSUP,
	 "descr", "object"},
	{"{'descr': '|b1', 'fortran_order': False, 'shape': (), }\n",
	 -ENOTSUP, "descr", "no tensord"},
	{"{'descr': '<c8', 'fortran_order': False, 'shape': (), }\n",
	 -ENOTSUP, "descr", "no tensord"},
	{"{'descr': '|f4', 'fortran_order': False, 'shape': (), }\n",
	 -EBADMSG, "descr", "byte order"},
	{"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}\n",
	 -EBADMSG, "key", "unknown key"},
	{"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
	 "'shape': (2,), }\n",
	 -EBADMSG, "key", "twice"},
	{"{'descr': '<f4', 'shape': (2,), }\n", -EBADMSG, "fortran_order",
	 "missing"},
	{"{'descr': '<f4', 'fortran_order': False}\n", -EBADMSG, "shape",
	 "missing"},
	{"{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }\n",
	 -EBADMSG, "shape", "negative"},
	{"{'descr': '<f4', 'fortran_order': False, 'shape': (2.5,), }\n",
	 -EBADMSG, "shape", "not an integer"},
	{"{'descr': '<f4', 'fortran_order': False, 'shape': ('2',), }\n",
	 -EBADMSG, "shape", "not an integer"},
	{"{'descr': '<f4', 'fortran_order': False, 'shape': (3), }\n",
	 -EBADMSG, "shape", "no tuple"},
	{"{'descr': '<f4', 'fortran_order': False, 'shape': [3], }\n",
	 -EBADMSG, "shape", "tuple"},
	{"{'descr': '<f4', 'fortran_order': False, 'shape': (3 4), }\n",
	 -EBADMSG, "shape", "','"},
	{"{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,"
	 "1,1,1,1,1,1,1,1,1), }\n",
	 -ENOTSUP, "shape", "16"},
	{"{'descr': '<f4', 'fortran_order': False, "
	 "'shape': (18446744073709551616,), }\n",
	 -EOVERFLOW, "shape", "64 bits"},
	{"{'descr': '<f4', 'fortran_order': False, "
	 "'shape': (4294967296, 1073741824), }\n",
	 -EOVERFLOW, "shape", "overflow"},
	{"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } x\n",
	 -EBADMSG, NULL, "after the dict"},
	{"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), },\n",
	 -EBADMSG, NULL, "after the dict"},
	{"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }   ",
	 -EBADMSG, NULL, "'\\n'"},
	{"{'descr': '<f4' 'fortran_order': False, 'shape': (2,), }\n",
	 -EBADMSG, NULL, "expected ','"},
	{"{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }\n", -EBADMSG,
	 "fortran_order", "True or False"},
	{"{'descr': '<f4\\n', 'fortran_order': False, 'shape': (2,), }\n",
	 -EBADMSG, "descr", "escapes"},
	{"{'descr': '<f4, 'fortran_order': False, 'shape': (2,), }\n",
	 -ENOTSUP, "descr", "no tensord"},
	{"['descr', '<f4']\n", -EBADMSG, NULL, "no dict"},
	{"", -EBADMSG, NULL, "'\\n'"},
};

Test(npy, each_refusal_with_its_errno_and_field)
{
	struct td_npy_header h;
	struct td_err e;

	for (size_t i = 0; i < sizeof(refusals) / sizeof(refusals[0]); i++) {
		const struct refusal *r = &refusals[i];
		int rc = decode(r->dict, &h, &e);

		cr_expect_eq(rc, r->rc, "%s: %d, not %d (%s)", r->dict, rc,
			     r->rc, e.reason ? e.reason : "");
		if (rc >= 0)
			continue;
		cr_expect(r->field ? e.field && !strcmp(e.field, r->field)
				   : !e.field,
			  "%s: field %s", r->dict, e.field ? e.field : "NULL");
		cr_expect(e.reason && strstr(e.reason, r->reason),
			  "%s: reason '%s' lacks '%s'", r->dict, e.reason,
			  r->reason);
	}
}

Test(npy, bad_magic_unknown_version_and_forged_length)
{
	uint8_t buf[256];
	uint64_t off;
	struct td_err e = {0};
	struct td_npy_header h;
	size_t n = v1(buf, F4_2X3 "\n");

	buf[1] = 'n';
	cr_expect_eq(td_npy_decode(buf, n, &h, &e), -EBADMSG);
	cr_expect_str_eq(e.field, "magic");
	cr_expect_eq(td_npy_header_len((const uint8_t *)"PK\x03\x04", 4, &off,
				       &e),
		     -EBADMSG);
	buf[1] = 'N';
	buf[6] = 4;
	cr_expect_eq(td_npy_decode(buf, n, &h, &e), -ENOTSUP);
	cr_expect_str_eq(e.field, "version");
	cr_expect_eq(e.value, 0x400);
	buf[6] = 1;
	buf[7] = 1;
	cr_expect_eq(td_npy_decode(buf, n, &h, &e), -ENOTSUP);
	n = v2(buf, 2, "");
	buf[11] = 0x80; /* 2 GiB of header */
	cr_expect_eq(td_npy_header_len(buf, n, &off, &e), -EOVERFLOW);
	cr_expect_str_eq(e.field, "header_len");
	buf[11] = 0;
	buf[10] = 0x10; /* exactly 1 MiB: taken, and then missing */
	cr_expect_eq(td_npy_header_len(buf, n, &off, &e), 0);
	cr_expect_eq(off, 12 + (1u << 20));
	cr_expect_eq(td_npy_decode(buf, n, &h, &e), -ENODATA);
	cr_expect_eq(e.need, off);
}

/* Every strict prefix of a header is TRUNCATED (or, before the magic is
 * whole, still taken as a possible start), never MALFORMED. */
Test(npy, fed_one_byte_at_a_time)
{
	const uint8_t *full = (const uint8_t *)numpy_f4_2x3;
	struct td_npy_header h;
	struct td_err e;
	uint64_t off;
	uint8_t *p;

	for (size_t n = 0; n < 128; n++) {
		p = malloc(n ? n : 1);
		cr_assert(p);
		memcpy(p, full, n);
		memset(&e, 0, sizeof(e));
		cr_expect_eq(td_npy_decode(p, n, &h, &e), -ENODATA,
			     "prefix of %zu bytes", n);
		cr_expect_eq(e.kind, TD_ERR_TRUNCATED);
		if (n >= 10) {
			cr_expect_eq(td_npy_header_len(p, n, &off, NULL), 0);
			cr_expect_eq(off, 128);
		}
		free(p);
	}
	cr_expect_eq(td_npy_decode(full, 128, &h, NULL), 0);
}
