/* SPDX-License-Identifier: MIT */
/*
 * What every fuzz target and the replay driver share.
 *
 * A target is one file defining LLVMFuzzerTestOneInput() (and optionally
 * LLVMFuzzerInitialize()). It links either with libFuzzer (meson -Dfuzz=true,
 * clang, -fsanitize=fuzzer) or with tests/fuzz/replay.c, which runs the
 * committed corpus and a fixed-seed stream of mutants of it as an ordinary
 * `meson test` in suite 'fault' with any compiler.
 *
 * A target reports a broken property with FUZZ_CHECK, which aborts: libFuzzer
 * saves the input as a crash; the replay driver names the input (or saves
 * the mutant under $TMPDIR) and the test fails.
 */
#ifndef SHOAL_TESTS_FUZZ_H
#define SHOAL_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A property of the code under test does not hold: say which and abort. */
#define FUZZ_CHECK(cond)                                                             \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "%s:%d: %s: fuzz check failed: %s\n",        \
				__FILE__, __LINE__, __func__, #cond);                \
			abort();                                                     \
		}                                                                    \
	} while (0)

/*
 * The input in a heap buffer of exactly its size (1 byte for an empty one),
 * so that ASan catches any read past its end; free() it after.
 */
static inline void *fuzz_exact_copy(const uint8_t *data, size_t size)
{
	void *buf = malloc(size ? size : 1);

	FUZZ_CHECK(buf != NULL);
	if (size)
		memcpy(buf, data, size);
	return buf;
}

/* A little-endian cursor over the fuzzer's bytes; reads past the end yield 0. */
struct fuzz_in {
	const uint8_t *p;
	size_t left;
};

static inline uint64_t fuzz_take(struct fuzz_in *in, unsigned bytes)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < bytes && in->left > 0; i++, in->p++, in->left--)
		v |= (uint64_t)in->p[0] << (8 * i);
	return v;
}

#endif
