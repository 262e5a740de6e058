/* SPDX-License-Identifier: MIT */
/*
 * Replay driver: runs a fuzz target without libFuzzer, so that every build
 * (gcc, the ASan/UBSan and valgrind setups) exercises it as an ordinary test.
 *
 *   fuzz_<target>_replay [-n ITERATIONS] [-t SECONDS] [-s SEED] [-m MAX_LEN] PATH...
 *
 * Each PATH is a corpus directory (every regular file in it, in name order)
 * or a single file. Every input is run once; then ITERATIONS mutants are
 * derived from them with a fixed-seed PRNG (bit flips, interesting integers,
 * inserted, erased and spliced ranges: the cheap half of libFuzzer's
 * mutations, without its coverage feedback). The stream of mutants depends
 * only on the seed and the corpus, so a failure reproduces on any machine;
 * SECONDS caps the run as a safety net (the test passes, saying how far it
 * got, if the cap is reached first). Defaults: 20000 mutants, 20 s, seed 1;
 * the environment variables SHOAL_FUZZ_ITERATIONS, SHOAL_FUZZ_SECONDS and
 * SHOAL_FUZZ_SEED override them (the options override those).
 *
 * When the target aborts or (without a sanitizer) faults, the driver names
 * the corpus file that did it, or writes the mutant to $TMPDIR (or /tmp) as
 * shoal-fuzz-<program>-<pid>.crash; both this driver and the libFuzzer build
 * take it as an argument.
 *
 * Exit status: 0 when every input ran, 1 on a usage or I/O error; a failing
 * input aborts.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tests/fuzz/fuzz.h"

/* Optional hooks: the target's initialiser, the sanitizers' death callback. */
extern int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));
extern void __sanitizer_set_death_callback(void (*cb)(void)) __attribute__((weak));

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

struct input {
	uint8_t *p;
	size_t len;
	char *name;
};

static struct input *corpus;
static size_t n_corpus, cap_corpus;

/* The input being run, for the crash handler. */
static const uint8_t *volatile cur_p;
static volatile size_t cur_len;
static volatile uint64_t cur_iter;   /* 0: a corpus file; i: mutant i */
static const char *volatile cur_name; /* the corpus file, when cur_iter is 0 */
static char crash_path[512];

static uint64_t rng;

static uint64_t rnd(void)
{
	uint64_t x = rng;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	rng = x;
	return x * 0x2545F4914F6CDD1Dull;
}

static uint64_t below(uint64_t n)
{
	return n ? rnd() % n : 0;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Async-signal-safe: write(2) only. */
static void say(const char *s)
{
	ssize_t r = write(2, s, strlen(s));

	(void)r;
}

static void say_u64(uint64_t v)
{
	char buf[24];
	int i = sizeof(buf) - 1;

	buf[i] = '\0';
	do
		buf[--i] = (char)('0' + v % 10);
	while ((v /= 10) != 0 && i > 0);
	say(buf + i);
}

static void save_input(void)
{
	static volatile sig_atomic_t saved;
	const uint8_t *p = cur_p;
	size_t len = cur_len, done = 0;
	int cfd;

	/* Once: under ASan both the death callback and SIGABRT get here. */
	if (p == NULL || saved)
		return;
	saved = 1;
	if (cur_iter == 0 && cur_name != NULL) {
		/* Already a file: name it rather than copy it. */
		say("replay: the failing input is ");
		say(cur_name);
		say("\n");
		return;
	}
	cfd = open(crash_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (cfd < 0)
		return;
	while (done < len) {
		ssize_t n = write(cfd, p + done, len - done);

		if (n <= 0)
			break;
		done += (size_t)n;
	}
	close(cfd);
	say("replay: the failing input (mutant ");
	say_u64(cur_iter);
	say(", ");
	say_u64(len);
	say(" bytes) is saved in ");
	say(crash_path);
	say("\n");
}

static void on_signal(int sig)
{
	save_input();
	signal(sig, SIG_DFL);
	raise(sig);
}

static void on_death(void)
{
	save_input();
}

static void add_input(uint8_t *p, size_t len, const char *name)
{
	if (n_corpus == cap_corpus) {
		cap_corpus = cap_corpus ? 2 * cap_corpus : 64;
		corpus = realloc(corpus, cap_corpus * sizeof(*corpus));
		FUZZ_CHECK(corpus != NULL);
	}
	corpus[n_corpus].p = p;
	corpus[n_corpus].len = len;
	corpus[n_corpus].name = strdup(name);
	FUZZ_CHECK(corpus[n_corpus].name != NULL);
	n_corpus++;
}

static int load_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *p = NULL;
	size_t len = 0, cap = 0, n;

	if (f == NULL) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	do {
		if (len == cap) {
			cap = cap ? 2 * cap : 4096;
			p = realloc(p, cap);
			FUZZ_CHECK(p != NULL);
		}
		n = fread(p + len, 1, cap - len, f);
		len += n;
	} while (n > 0);
	if (ferror(f)) {
		fprintf(stderr, "replay: reading %s failed\n", path);
		fclose(f);
		free(p);
		return -1;
	}
	fclose(f);
	add_input(p, len, path);
	return 0;
}

static int load(const char *path)
{
	struct dirent **names;
	struct stat st;
	int n, ret = 0;

	if (stat(path, &st) != 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode))
		return load_file(path);
	n = scandir(path, &names, NULL, alphasort);
	if (n < 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	for (int i = 0; i < n; i++) {
		char full[4096];

		snprintf(full, sizeof(full), "%s/%s", path, names[i]->d_name);
		if (names[i]->d_name[0] != '.' && stat(full, &st) == 0 && S_ISREG(st.st_mode) &&
		    load_file(full) < 0)
			ret = -1;
		free(names[i]);
	}
	free(names);
	return ret;
}

/* Run one input from a buffer of exactly its size, as libFuzzer does. */
static void run_one(const uint8_t *p, size_t len, uint64_t iter, const char *name)
{
	uint8_t *copy = malloc(len ? len : 1);

	FUZZ_CHECK(copy != NULL);
	if (len)
		memcpy(copy, p, len);
	cur_p = copy;
	cur_len = len;
	cur_iter = iter;
	cur_name = name;
	LLVMFuzzerTestOneInput(copy, len);
	cur_p = NULL;
	free(copy);
}

static uint64_t interesting(size_t len)
{
	static const uint64_t v[] = {
		0, 1, 2, 7, 8, 16, 63, 64, 127, 128, 255, 256, 511, 512, 4095, 4096, 65535,
		65536, 0x7fffffff, 0x80000000u, 0xffffffffu, 0x100000000ull,
		0x7fffffffffffffffull, 0x8000000000000000ull, UINT64_MAX, UINT64_MAX - 7,
	};
	uint64_t x = rnd();

	switch (x % 4) {
	case 0:
		return (uint64_t)len + (x >> 8) % 17 - 8;
	case 1:
		return (uint64_t)1 << ((x >> 8) % 64);
	default:
		return v[(x >> 8) % (sizeof(v) / sizeof(v[0]))];
	}
}

/* Apply one random mutation to buf[0 .. *len) (room for `max` bytes). */
static void mutate_once(uint8_t *buf, size_t *len, size_t max)
{
	size_t n = *len, pos, k;
	unsigned w;
	uint64_t v;

	switch (below(10)) {
	case 0: /* flip a bit */
		if (n)
			buf[below(n)] ^= (uint8_t)(1u << below(8));
		break;
	case 1: /* a random byte */
		if (n)
			buf[below(n)] = (uint8_t)rnd();
		break;
	case 2: /* an interesting integer, often aligned to its width */
	case 3:
		w = 1u << below(4);
		if (n < w)
			break;
		pos = below(n - w + 1);
		if (below(2))
			pos &= ~(size_t)(w - 1);
		v = interesting(n);
		for (unsigned i = 0; i < w; i++)
			buf[pos + i] = (uint8_t)(v >> (8 * i));
		break;
	case 4: /* add a small delta to an aligned 32-bit word */
		if (n < 4)
			break;
		pos = below(n - 3) & ~(size_t)3;
		v = (uint64_t)buf[pos] | (uint64_t)buf[pos + 1] << 8 |
		    (uint64_t)buf[pos + 2] << 16 | (uint64_t)buf[pos + 3] << 24;
		v += below(33) - 16;
		for (unsigned i = 0; i < 4; i++)
			buf[pos + i] = (uint8_t)(v >> (8 * i));
		break;
	case 5: /* erase a range */
		if (n == 0)
			break;
		pos = below(n);
		k = 1 + below(n - pos < 64 ? n - pos : 64);
		memmove(buf + pos, buf + pos + k, n - pos - k);
		*len = n - k;
		break;
	case 6: /* insert random or repeated bytes */
		k = 1 + below(64);
		if (n + k > max)
			break;
		pos = below(n + 1);
		memmove(buf + pos + k, buf + pos, n - pos);
		for (size_t i = 0; i < k; i++)
			buf[pos + i] = below(2) ? (uint8_t)rnd() : (pos ? buf[pos - 1] : 0);
		*len = n + k;
		break;
	case 7: { /* splice: the same range of another input */
		const struct input *o = &corpus[below(n_corpus)];

		if (n == 0 || o->len == 0)
			break;
		pos = below(n < o->len ? n : o->len);
		k = 1 + below(o->len - pos);
		if (pos + k > max)
			k = max - pos;
		memcpy(buf + pos, o->p + pos, k);
		if (pos + k > n)
			*len = pos + k;
		break;
	}
	case 8: /* truncate */
		if (n)
			*len = below(n + 1);
		break;
	default: /* copy a range within the input */
		if (n < 2)
			break;
		k = 1 + below(n / 2);
		pos = below(n - k + 1);
		memmove(buf + below(n - k + 1), buf + pos, k);
		break;
	}
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
	const char *s = getenv(name);

	return s != NULL && s[0] != '\0' ? strtoull(s, NULL, 0) : dflt;
}

static void usage(const char *prog)
{
	fprintf(stderr, "usage: %s [-n ITERATIONS] [-t SECONDS] [-s SEED] [-m MAX_LEN] "
		"PATH...\n", prog);
}

int main(int argc, char **argv)
{
	uint64_t iters = env_u64("SHOAL_FUZZ_ITERATIONS", 20000);
	uint64_t seconds = env_u64("SHOAL_FUZZ_SECONDS", 20);
	uint64_t seed = env_u64("SHOAL_FUZZ_SEED", 1), done = 0;
	size_t max_len = 0, largest = 0;
	const char *tmp = getenv("TMPDIR"), *prog = strrchr(argv[0], '/');
	uint8_t *buf;
	double start, deadline;
	int opt;

	prog = prog ? prog + 1 : argv[0];
	while ((opt = getopt(argc, argv, "n:t:s:m:h")) != -1) {
		switch (opt) {
		case 'n':
			iters = strtoull(optarg, NULL, 0);
			break;
		case 't':
			seconds = strtoull(optarg, NULL, 0);
			break;
		case 's':
			seed = strtoull(optarg, NULL, 0);
			break;
		case 'm':
			max_len = strtoull(optarg, NULL, 0);
			break;
		default:
			usage(argv[0]);
			return opt == 'h' ? 0 : 1;
		}
	}
	if (optind >= argc) {
		usage(argv[0]);
		return 1;
	}
	snprintf(crash_path, sizeof(crash_path), "%s/shoal-fuzz-%s-%d.crash",
		 tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp", prog, (int)getpid());
	signal(SIGABRT, on_signal);
	if (!UNDER_ASAN) {
		/* Under ASan its own handlers report faults, then abort. */
		signal(SIGSEGV, on_signal);
		signal(SIGBUS, on_signal);
		signal(SIGFPE, on_signal);
		signal(SIGILL, on_signal);
	}
	if (__sanitizer_set_death_callback)
		__sanitizer_set_death_callback(on_death);
	if (LLVMFuzzerInitialize)
		LLVMFuzzerInitialize(&argc, &argv);

	for (int i = optind; i < argc; i++)
		if (load(argv[i]) < 0)
			return 1;
	if (n_corpus == 0) {
		fprintf(stderr, "replay: no input files in the paths given\n");
		return 1;
	}
	start = now_s();
	deadline = start + (double)seconds;
	for (size_t i = 0; i < n_corpus; i++) {
		run_one(corpus[i].p, corpus[i].len, 0, corpus[i].name);
		largest = corpus[i].len > largest ? corpus[i].len : largest;
	}
	if (max_len == 0)
		max_len = largest * 2 > 4096 ? largest * 2 : 4096;

	rng = seed * 0x9E3779B97F4A7C15ull + 1;
	buf = malloc(max_len);
	FUZZ_CHECK(buf != NULL);
	for (uint64_t it = 1; it <= iters; it++) {
		const struct input *base = &corpus[below(n_corpus)];
		size_t len = base->len < max_len ? base->len : max_len;
		unsigned k = 1 + (unsigned)below(6);

		/* Check the clock every 64 runs: cheap, and still a tight cap. */
		if ((it & 63) == 0 && now_s() > deadline) {
			printf("replay: time cap of %llu s reached after %llu of %llu mutants\n",
			       (unsigned long long)seconds, (unsigned long long)done,
			       (unsigned long long)iters);
			break;
		}
		memcpy(buf, base->p, len);
		for (unsigned j = 0; j < k; j++)
			mutate_once(buf, &len, max_len);
		run_one(buf, len, it, NULL);
		done++;
	}
	printf("replay: %zu corpus inputs and %llu mutants (seed %llu) in %.1f s: ok\n",
	       n_corpus, (unsigned long long)done, (unsigned long long)seed, now_s() - start);
	free(buf);
	for (size_t i = 0; i < n_corpus; i++) {
		free(corpus[i].p);
		free(corpus[i].name);
	}
	free(corpus);
	return 0;
}
