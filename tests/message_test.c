/* SPDX-License-Identifier: MIT */
/*
 * The typed payload and reply checks of shoal/message.h and shoal/group.h:
 * a copy only when both the type and the exact length match.
 */
#include <string.h>

#include <shoal/group.h>
#include <shoal/message.h>

#include "tests/testutil.h"

enum { T_WORK = 3, T_OTHER = 4 };

struct work {
	uint64_t key;
	uint32_t seq;
	uint32_t pad;
};

static const struct work sample = { .key = 0x1122334455667788u, .seq = 9 };

/* A message as a worker hands it over, with its payload `bytes` long. */
static struct shoal_msg msg_of(uint32_t type, const void *data, uint32_t bytes)
{
	struct shoal_msg m = { NULL, data, bytes, type };

	return m;
}

static void msg_get_copies_a_matching_payload(void **state)
{
	struct shoal_msg m = msg_of(T_WORK, &sample, sizeof(sample));
	struct work w = { 0 };

	(void)state;
	assert_true(SHOAL_MSG_GET(&m, T_WORK, &w));
	assert_memory_equal(&w, &sample, sizeof(w));
}

/* Table of mismatches: each leaves the destination untouched. */
static const struct {
	const char *what;
	uint32_t type;
	uint32_t len;
} mismatches[] = {
	{ "wrong type", T_OTHER, sizeof(struct work) },
	{ "shorter", T_WORK, sizeof(struct work) - 1 },
	{ "longer", T_WORK, sizeof(struct work) + 1 },
	{ "empty", T_WORK, 0 },
};

static void msg_get_refuses_wrong_type_or_length(void **state)
{
	unsigned char payload[sizeof(struct work) + 1];

	(void)state;
	memset(payload, 0xab, sizeof(payload));
	for (size_t i = 0; i < sizeof(mismatches) / sizeof(mismatches[0]); i++) {
		struct shoal_msg m = msg_of(mismatches[i].type, payload, mismatches[i].len);
		struct work w = sample;

		if (SHOAL_MSG_GET(&m, T_WORK, &w))
			fail_msg("%s: accepted", mismatches[i].what);
		assert_memory_equal(&w, &sample, sizeof(w));
	}
}

/* The payload of a message handled after a request waited is only 4-byte
 * aligned; the copy does not care. */
static void msg_get_reads_a_misaligned_payload(void **state)
{
	_Alignas(8) unsigned char buf[sizeof(struct work) + 4];
	struct shoal_msg m = msg_of(T_WORK, buf + 4, sizeof(struct work));
	struct work w = { 0 };

	(void)state;
	memcpy(buf + 4, &sample, sizeof(sample));
	assert_true(SHOAL_MSG_GET(&m, T_WORK, &w));
	assert_int_equal(w.key, sample.key);
	assert_int_equal(w.seq, sample.seq);
}

static void reply_is_checks_type_and_exact_length(void **state)
{
	struct work back;
	struct shoal_reply r = { .type = T_WORK, .len = sizeof(back), .buf = &back,
				 .cap = sizeof(back) };

	(void)state;
	assert_true(SHOAL_REPLY_IS(&r, T_WORK, back));
	assert_false(SHOAL_REPLY_IS(&r, T_OTHER, back));
	r.len = sizeof(back) - 4;   /* a shorter reply leaves the end of back stale */
	assert_false(SHOAL_REPLY_IS(&r, T_WORK, back));
	assert_true(shoal_reply_is(&r, T_WORK, sizeof(back) - 4));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(msg_get_copies_a_matching_payload),
		cmocka_unit_test(msg_get_refuses_wrong_type_or_length),
		cmocka_unit_test(msg_get_reads_a_misaligned_payload),
		cmocka_unit_test(reply_is_checks_type_and_exact_length),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
