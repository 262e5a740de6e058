/* SPDX-License-Identifier: MIT */
/*
 * Rings across real processes: a producer and a consumer process stream
 * millions of records, each carrying a sequence number and a checksum of its
 * payload, through a ring in a real shared-memory segment. The consumer
 * checks order, checksums and completeness. A second case kills the consumer
 * with SIGKILL at random moments and checks that each successor resumes
 * exactly after the last released record: nothing lost, nothing released
 * delivered twice.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <shoal/doorbell.h>
#include <shoal/ring.h>
#include <shoal/segment.h>

#include "tests/testutil.h"

#define RING_CAP (64u * 1024)
#define MAX_PAYLOAD 200u

/* Progress shared with the parent (a user region of the segment). */
struct progress {
	_Atomic int64_t verified;   /* last sequence number checked by the consumer */
	_Atomic int64_t released;   /* last sequence number released */
	_Atomic int64_t first_seen; /* first sequence number the current consumer saw */
};

struct shared {
	struct shoal_seg seg;
	void *ring;
	uint64_t ring_len;
	struct shoal_doorbell *db;
	struct progress *prog;
	uint64_t records;
};

/* Record payload: seq (8 bytes), checksum of the rest (4), filler. */
static uint32_t payload_len(uint64_t seq)
{
	return 12 + (uint32_t)((seq * 2654435761u) % (MAX_PAYLOAD - 12));
}

static void fill_payload(unsigned char *p, uint64_t seq, uint32_t len)
{
	uint32_t sum;

	memcpy(p, &seq, 8);
	for (uint32_t i = 12; i < len; i++)
		p[i] = (unsigned char)(seq + i);
	sum = test_checksum(p + 12, len - 12);
	memcpy(p + 8, &sum, 4);
}

static int check_payload(const unsigned char *p, uint32_t len, uint64_t *seq)
{
	uint32_t sum;

	if (len < 12)
		return 0;
	memcpy(seq, p, 8);
	memcpy(&sum, p + 8, 4);
	return len == payload_len(*seq) && sum == test_checksum(p + 12, len - 12);
}

static void setup_shared(struct shared *sh, const char *name, uint64_t records)
{
	struct shoal_seg_region r;
	uint64_t off;

	test_shm_dir_make(name);
	assert_int_equal(shoal_seg_create(&sh->seg, name, 1 << 20, NULL, NULL), 0);
	sh->ring_len = shoal_ring_size(RING_CAP);
	assert_int_equal(shoal_seg_alloc(&sh->seg, SHOAL_SEG_KIND_RING, "stream", sh->ring_len, 0,
					 &off), 0);
	assert_int_equal(shoal_ring_init(shoal_seg_ptr(&sh->seg, off, sh->ring_len, 128),
					 sh->ring_len, RING_CAP, 0), 0);
	assert_int_equal(shoal_seg_alloc(&sh->seg, SHOAL_SEG_KIND_DOORBELL, "stream", 64, 64,
					 &off), 0);
	shoal_doorbell_init(shoal_seg_ptr(&sh->seg, off, 64, 64));
	assert_int_equal(shoal_seg_alloc(&sh->seg, SHOAL_SEG_KIND_USER, "progress",
					 sizeof(struct progress), 64, &off), 0);
	/* Look everything up again by name, as another process would. */
	assert_int_equal(shoal_seg_find(&sh->seg, SHOAL_SEG_KIND_RING, "stream", &r), 0);
	sh->ring = shoal_seg_ptr(&sh->seg, r.off, r.len, 128);
	assert_int_equal(shoal_seg_find(&sh->seg, SHOAL_SEG_KIND_DOORBELL, "stream", &r), 0);
	sh->db = shoal_seg_ptr(&sh->seg, r.off, sizeof(*sh->db), 64);
	sh->prog = shoal_seg_ptr(&sh->seg, off, sizeof(*sh->prog), 64);
	atomic_store(&sh->prog->verified, -1);
	atomic_store(&sh->prog->released, -1);
	sh->records = records;
}

static void teardown_shared(struct shared *sh)
{
	shoal_seg_detach(&sh->seg);
	test_shm_dir_remove();
}

static int producer(void *arg)
{
	struct shared *sh = arg;
	struct shoal_ring_prod p;
	uint64_t seed = 7, seq = 0;

	test_pin(0);
	CHILD_CHECK(shoal_ring_prod_attach(&p, sh->ring, sh->ring_len, NULL) == 0);
	while (seq < sh->records) {
		unsigned batch = 1 + (unsigned)(test_rand(&seed) % 32), n = 0;

		for (; n < batch && seq < sh->records; n++, seq++) {
			uint32_t len = payload_len(seq);
			unsigned char *dst = shoal_ring_reserve(&p, len, (uint16_t)seq);

			if (dst == NULL)
				break;
			fill_payload(dst, seq, len);
		}
		CHILD_CHECK(shoal_ring_prod_error(&p) == 0);
		shoal_ring_commit(&p);
		shoal_doorbell_notify(sh->db);
		if (n == 0)
			sched_yield();   /* full: let the consumer run on a shared core */
	}
	return 0;
}

static bool ring_ready(void *arg)
{
	return !shoal_ring_empty(arg);
}

/*
 * Consume until all records are seen. `verified` is stored before each
 * release and `released` after it, so that at any kill point the successor's
 * first record must satisfy released + 1 <= first <= verified + 1.
 */
static int consumer(void *arg)
{
	struct shared *sh = arg;
	struct shoal_ring_cons c;
	struct shoal_rec rec;
	uint64_t seed = (uint64_t)getpid(), seq;
	int64_t expect = -1;

	test_pin(1);
	CHILD_CHECK(shoal_ring_cons_attach(&c, sh->ring, sh->ring_len, NULL) == 0);
	atomic_store(&sh->prog->first_seen, -1);
	while (atomic_load(&sh->prog->released) < (int64_t)sh->records - 1) {
		unsigned batch = 1 + (unsigned)(test_rand(&seed) % 16), n = 0;

		if (shoal_doorbell_poll_wait(sh->db, 2000, ring_ready, &c, 5000000000) != 0)
			CHILD_CHECK(!"no record for 5 s: producer wedged or wake-up lost");
		while (n < batch && shoal_ring_peek(&c, &rec)) {
			CHILD_CHECK(check_payload(rec.data, rec.len, &seq));
			CHILD_CHECK(rec.tag == (uint16_t)seq);
			if (expect == -1) {
				atomic_store(&sh->prog->first_seen, (int64_t)seq);
			} else if ((int64_t)seq != expect + 1) {
				fprintf(stderr, "consumer: got seq %llu after %lld\n",
					(unsigned long long)seq, (long long)expect);
				return 1;
			}
			expect = (int64_t)seq;
			atomic_store(&sh->prog->verified, expect);
			n++;
		}
		CHILD_CHECK(shoal_ring_cons_error(&c) == 0);
		shoal_ring_release(&c);
		atomic_store(&sh->prog->released, expect);
	}
	return 0;
}

static void ring_xproc_stream_arrives_complete_and_in_order(void **state)
{
	struct shared sh;
	struct shoal_ring_stats st;
	pid_t prod, cons;

	(void)state;
	setup_shared(&sh, "xstream", test_scale(2000000));
	cons = test_spawn(consumer, &sh, sizeof(sh));
	prod = test_spawn(producer, &sh, sizeof(sh));
	test_assert_exited(test_wait_pid(prod, 60000), 0);
	test_assert_exited(test_wait_pid(cons, 60000), 0);
	assert_int_equal(atomic_load(&sh.prog->released), (int64_t)sh.records - 1);
	assert_int_equal(shoal_ring_check(sh.ring, sh.ring_len, &st, NULL), 0);
	assert_int_equal(st.records_in, sh.records);
	assert_int_equal(st.records_out, sh.records);
	assert_int_equal(st.used, 0);
	teardown_shared(&sh);
}

static void ring_xproc_killed_consumer_successor_resumes_at_release(void **state)
{
	struct shared sh;
	pid_t prod, cons;
	uint64_t seed = 99;
	int kills = 6;

	(void)state;
	setup_shared(&sh, "xkill", test_scale(3000000));
	prod = test_spawn(producer, &sh, sizeof(sh));
	for (int k = 0; k <= kills; k++) {
		int64_t verified = atomic_load(&sh.prog->verified);
		int64_t released = atomic_load(&sh.prog->released);
		int64_t first;

		cons = test_spawn(consumer, &sh, sizeof(sh));
		if (k == kills) {
			test_assert_exited(test_wait_pid(cons, 60000), 0);
			break;
		}
		/* Kill after a random amount of progress, so that every kill lands
		 * mid-stream whatever the speed of this build. */
		int64_t target = verified + 1 +
				 (int64_t)(test_rand(&seed) % (sh.records / (2 * (uint64_t)kills)));
		for (int waited = 0; atomic_load(&sh.prog->verified) < target; waited++) {
			assert_true(waited < 100000);   /* 10 s */
			usleep(100);
		}
		kill(cons, SIGKILL);
		assert_int_not_equal(test_wait_pid(cons, 10000), -1);
		first = atomic_load(&sh.prog->first_seen);
		if (first < released + 1 || first > verified + 1)
			fail_msg("successor %d started at %lld; predecessor released %lld, "
				 "verified %lld", k, (long long)first, (long long)released,
				 (long long)verified);
		print_message("kill %d: successor started at %lld (released %lld, verified %lld)\n",
			      k, (long long)first, (long long)released, (long long)verified);
	}
	test_assert_exited(test_wait_pid(prod, 60000), 0);
	assert_int_equal(atomic_load(&sh.prog->released), (int64_t)sh.records - 1);
	teardown_shared(&sh);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(ring_xproc_stream_arrives_complete_and_in_order),
		cmocka_unit_test(ring_xproc_killed_consumer_successor_resumes_at_release),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
