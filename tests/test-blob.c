/* SPDX-License-Identifier: MIT */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "blob.h"
#include "testutil.h"

Test(blob, header_is_72_bytes)
{
	cr_assert_eq(TD_BLOB_HEADER_LEN, 72);
}
