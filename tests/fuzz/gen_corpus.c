/* SPDX-License-Identifier: MIT */
/*
 * Writes the seed corpus of the fuzz targets: real segments made by the
 * library (rings with pending records, a wrapped ring with a pad record,
 * indices about to wrap 2^32, a doorbell), peer-write scripts that leave the
 * creator's allocator sound, one valid packet of each control op, filter
 * sets of the shapes the route index treats specially, system files, and
 * link frames of each kind.
 *
 *   fuzz_gen_corpus OUTDIR     (writes OUTDIR/{segment,seg_alloc,ctl,route,config,frame}/<name>)
 *
 * The files with names under tests/fuzz/corpus/ come from this program; run
 * it again when a layout changes (`ninja -C build tests/fuzz/fuzz_gen_corpus`,
 * then `build/tests/fuzz/fuzz_gen_corpus tests/fuzz/corpus`). The files named
 * by a SHA-1 are what libFuzzer runs added, reduced with -merge=1
 * -use_counters=0 to the inputs that each reach a new edge.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <shoal/doorbell.h>
#include <shoal/filter.h>
#include <shoal/ring.h>
#include <shoal/segment.h>

#include "runtime/bridge/frame.h"
#include "runtime/control/proto.h"
#include "shm/ring_layout.h"
#include "shm/segment_layout.h"
#include "tests/fuzz/fuzz.h"

static const char *outdir;
static char tmpdir[256];

static void put(const char *sub, const char *name, const void *p, size_t len)
{
	char path[1024];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", outdir, sub);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%s/%s", outdir, sub, name);
	f = fopen(path, "wb");
	FUZZ_CHECK(f != NULL);
	FUZZ_CHECK(fwrite(p, 1, len, f) == len);
	FUZZ_CHECK(fclose(f) == 0);
}

/* ---- segments ------------------------------------------------------------ */

static void seg_new(struct shoal_seg *seg, const char *name)
{
	struct shoal_seg_opts o = { .numa_node = -1, .dir_cap = 4, .dir = tmpdir };
	struct shoal_err err;

	if (shoal_seg_create(seg, name, 4096, &o, &err) != 0) {
		fprintf(stderr, "create %s: %s\n", name, err.msg);
		abort();
	}
}

static void seg_put(struct shoal_seg *seg, const char *name)
{
	struct shoal__seg_hdr *h = seg->base;
	unsigned char *file = malloc(seg->size + 2);

	/* Same bytes on every run: a fixed creator and creation time. */
	h->creator_pid = 4242;
	h->creator_uid = 0;
	h->ctime_ns = UINT64_C(1700000000000000000);
	FUZZ_CHECK(file != NULL);
	memcpy(file, seg->base, seg->size);
	/* The empty patch script (see fuzz_segment.c). */
	file[seg->size] = 0;
	file[seg->size + 1] = 0;
	put("segment", name, file, seg->size + 2);
	free(file);
	unlink(seg->path);
	shoal_seg_detach(seg);
}

static void *ring_new(struct shoal_seg *seg, const char *name, uint32_t cap)
{
	uint64_t off, len = shoal_ring_size(cap);

	FUZZ_CHECK(shoal_seg_alloc(seg, SHOAL_SEG_KIND_RING, name, len, 0, &off) == 0);
	FUZZ_CHECK(shoal_ring_init(shoal_seg_ptr(seg, off, len, 128), len, cap, 0) == 0);
	return shoal_seg_ptr(seg, off, len, 128);
}

static void fill(void *mem, uint32_t cap, unsigned n, uint32_t len, unsigned drain)
{
	struct shoal_ring_prod p;
	struct shoal_ring_cons c;
	unsigned char buf[512], out[512];
	uint64_t rlen = shoal_ring_size(cap);

	memset(buf, 0xab, sizeof(buf));
	FUZZ_CHECK(shoal_ring_prod_attach(&p, mem, rlen, NULL) == 0);
	FUZZ_CHECK(shoal_ring_cons_attach(&c, mem, rlen, NULL) == 0);
	for (unsigned i = 0; i < n; i++) {
		FUZZ_CHECK(shoal_ring_enqueue(&p, buf, len + i % 3, (uint16_t)i) == 0);
		if (i < drain)
			FUZZ_CHECK(shoal_ring_dequeue(&c, out, sizeof(out), NULL) >= 0);
	}
	/* Same bytes on every run: fixed pids. */
	shoal_store_relaxed(&((struct shoal__ring *)mem)->producer_pid, 4242);
	shoal_store_relaxed(&((struct shoal__ring *)mem)->consumer_pid, 4243);
}

static void segments(void)
{
	struct shoal_seg seg;
	struct shoal__ring *r;
	uint64_t off;
	void *mem;

	seg_new(&seg, "empty");
	seg_put(&seg, "empty");

	seg_new(&seg, "ring-pending");
	mem = ring_new(&seg, "in.0", 1024);
	fill(mem, 1024, 3, 20, 0);
	seg_put(&seg, "ring-pending");

	/* Capacity 64, 24-byte records: the third one wraps behind a 16-byte pad. */
	seg_new(&seg, "ring-pad");
	mem = ring_new(&seg, "small", 64);
	fill(mem, 64, 4, 10, 2);
	seg_put(&seg, "ring-pad");

	seg_new(&seg, "mixed");
	mem = ring_new(&seg, "a", 256);
	fill(mem, 256, 9, 30, 5);
	FUZZ_CHECK(shoal_seg_alloc(&seg, SHOAL_SEG_KIND_DOORBELL, "bell",
				   sizeof(struct shoal_doorbell), 64, &off) == 0);
	shoal_doorbell_init(shoal_seg_ptr(&seg, off, sizeof(struct shoal_doorbell), 64));
	mem = ring_new(&seg, "b", 256);
	fill(mem, 256, 2, 100, 0);
	FUZZ_CHECK(shoal_seg_alloc(&seg, SHOAL_SEG_KIND_USER, "blob", 100, 8, &off) == 0);
	seg_put(&seg, "mixed");

	/* A long-lived ring: indices about to wrap 2^32. */
	seg_new(&seg, "ring-wrap32");
	mem = ring_new(&seg, "old", 512);
	r = mem;
	shoal_store_relaxed(&r->head, UINT32_C(0xffffff00));
	shoal_store_relaxed(&r->tail, UINT32_C(0xffffff00));
	fill(mem, 512, 7, 40, 2);
	seg_put(&seg, "ring-wrap32");
}

/* ---- control packets ----------------------------------------------------- */

static struct shoal_filter filter(uint32_t type, uint8_t op, uint32_t offset, uint8_t width,
				  uint64_t a, uint64_t b)
{
	struct shoal_filter f;

	memset(&f, 0, sizeof(f));
	f.types[0] = type;
	f.n_types = 1;
	f.key.op = op;
	f.key.offset = offset;
	f.key.width = width;
	f.key.a = a;
	f.key.b = b;
	return f;
}

static void packets(void)
{
	_Alignas(16) unsigned char buf[4096];
	struct shoal__ctl_hello *h = (void *)buf;
	struct shoal__ctl_type *t;
	struct shoal_filter *f;
	size_t len;

	memset(buf, 0, sizeof(buf));
	len = shoal__ctl_hello_size(2, 2);
	shoal__ctl_init(&h->h, SHOAL__CTL_HELLO, (uint32_t)len);
	snprintf(h->group, sizeof(h->group), "workers");
	h->pid = 1234;
	h->n_workers = 2;
	h->n_actors = 8;
	h->node = -1;
	h->n_types = 2;
	h->n_subs = 2;
	t = (struct shoal__ctl_type *)(h + 1);
	t[0] = (struct shoal__ctl_type){ .id = 7, .max_size = 64 };
	snprintf(t[0].name, sizeof(t[0].name), "tick");
	t[1] = (struct shoal__ctl_type){ .id = 9, .max_size = 4096 };
	snprintf(t[1].name, sizeof(t[1].name), "order");
	f = (void *)(t + 2);   /* 72 + 2 x 40 bytes: 8-aligned */
	f[0] = filter(7, SHOAL_KEY_ANY, 0, 0, 0, 0);
	f[1] = filter(9, SHOAL_KEY_MOD, 8, 4, 4, 1);
	f[1].mode = SHOAL_ROUTE_UNICAST;
	put("ctl", "hello", buf, len);

	memset(buf, 0, sizeof(buf));
	len = shoal__ctl_hello_size(0, 0);
	shoal__ctl_init(&h->h, SHOAL__CTL_HELLO, (uint32_t)len);
	snprintf(h->group, sizeof(h->group), "g");
	put("ctl", "hello-empty", buf, len);

	{
		struct shoal__ctl_welcome w;

		memset(&w, 0, sizeof(w));
		shoal__ctl_init(&w.h, SHOAL__CTL_WELCOME, sizeof(w));
		w.gen = 3;
		snprintf(w.registry, sizeof(w.registry), "shoal.registry");
		snprintf(w.bell, sizeof(w.bell), "shoal.bell");
		snprintf(w.mailbox, sizeof(w.mailbox), "shoal.mbx.1");
		put("ctl", "welcome", &w, sizeof(w));
	}
	{
		struct shoal__ctl_error e;

		memset(&e, 0, sizeof(e));
		shoal__ctl_init(&e.h, SHOAL__CTL_ERROR, sizeof(e));
		e.err = -EINVAL;
		snprintf(e.msg, sizeof(e.msg), "bad filter");
		put("ctl", "error", &e, sizeof(e));
		/* And refusals that take many mutations to reach. */
		memset(e.msg, 'x', sizeof(e.msg));
		put("ctl", "error-unterminated", &e, sizeof(e));
	}
	{
		struct shoal__ctl_ok o;

		memset(&o, 0, sizeof(o));
		shoal__ctl_init(&o.h, SHOAL__CTL_OK, sizeof(o));
		o.id = 5;
		put("ctl", "ok", &o, sizeof(o));
	}
	{
		struct shoal__ctl_sub s;

		memset(&s, 0, sizeof(s));
		shoal__ctl_init(&s.h, SHOAL__CTL_SUB, sizeof(s));
		s.f = filter(3, SHOAL_KEY_IN, 0, 2, 0, 0);
		s.f.key.n_set = 3;
		s.f.key.set[0] = 1;
		s.f.key.set[1] = 10;
		s.f.key.set[2] = 100;
		put("ctl", "sub", &s, sizeof(s));
	}
	{
		struct shoal__ctl_unsub u;

		memset(&u, 0, sizeof(u));
		shoal__ctl_init(&u.h, SHOAL__CTL_UNSUB, sizeof(u));
		u.id = 5;
		put("ctl", "unsub", &u, sizeof(u));
	}
	{
		struct shoal__ctl_open_direct o;

		memset(&o, 0, sizeof(o));
		shoal__ctl_init(&o.h, SHOAL__CTL_OPEN_DIRECT, sizeof(o));
		o.dst_group = 1;
		put("ctl", "open-direct", &o, sizeof(o));
	}
	{
		struct shoal__ctl_direct d;

		memset(&d, 0, sizeof(d));
		shoal__ctl_init(&d.h, SHOAL__CTL_DIRECT, sizeof(d));
		snprintf(d.ring, sizeof(d.ring), "direct.0.1");
		put("ctl", "direct", &d, sizeof(d));
		memset(d.ring, 'r', sizeof(d.ring));
		put("ctl", "direct-unterminated", &d, sizeof(d));
	}
	{
		struct shoal__ctl_hdr b;

		shoal__ctl_init(&b, SHOAL__CTL_BYE, sizeof(b));
		put("ctl", "bye", &b, sizeof(b));
	}
}

/* ---- route inputs (see fuzz_route.c for the layout) ---------------------- */

struct route_in {
	unsigned char b[8192];
	size_t len;
};

static void rt_begin(struct route_in *in, uint8_t flags, uint8_t extra,
		     const struct shoal_filter *f, uint8_t n)
{
	in->len = 0;
	in->b[in->len++] = flags;
	in->b[in->len++] = extra;
	in->b[in->len++] = n;
	memcpy(in->b + in->len, f, n * sizeof(*f));
	in->len += n * sizeof(*f);
}

/* A message whose type is filter fi's first type, with a u32 key at 0 and 8. */
static void rt_msg(struct route_in *in, uint8_t fi, uint32_t key, bool trunc)
{
	in->b[in->len++] = (uint8_t)(0x80 | (trunc ? 0x40 : 0) | fi);
	in->b[in->len++] = 0;
	in->b[in->len++] = 16;
	memset(in->b + in->len, 0, 16);
	memcpy(in->b + in->len, &key, 4);
	memcpy(in->b + in->len + 8, &key, 4);
	in->len += 16;
	if (trunc)
		in->b[in->len++] = 1;
}

static void routes(void)
{
	struct shoal_filter f[20];
	struct route_in in;

	/* One of each predicate on one type, folded; raw validation on. */
	f[0] = filter(4, SHOAL_KEY_EQ, 0, 4, 5, 0);
	f[1] = filter(4, SHOAL_KEY_MOD, 0, 4, 3, 2);
	f[2] = filter(4, SHOAL_KEY_ANY, 0, 0, 0, 0);
	f[3] = filter(4, SHOAL_KEY_RANGE, 8, 1, 2, 9);
	f[4] = filter(4, SHOAL_KEY_IN, 0, 2, 0, 0);
	f[4].key.n_set = 2;
	f[4].key.set[0] = 5;
	f[4].key.set[1] = 6;
	f[4].types[1] = 5;
	f[4].n_types = 2;
	rt_begin(&in, 3, 0, f, 5);
	for (uint32_t k = 0; k < 8; k++)
		rt_msg(&in, 0, k, k == 5);
	put("route", "each-op", in.b, in.len);

	/* The fan-out: key % 100 == i for i < 100, a bucket table. */
	f[0] = filter(9, SHOAL_KEY_MOD, 0, 4, 100, 0);
	rt_begin(&in, 0, 99, f, 1);
	for (uint32_t k = 0; k < 12; k++)
		rt_msg(&in, 0, k * 37, k == 3);
	put("route", "fanout-mod", in.b, in.len);

	/* A sparse large modulus: a hashed residue map. */
	f[0] = filter(9, SHOAL_KEY_MOD, 0, 8, 1000003, 17);
	rt_begin(&in, 0, 40, f, 1);
	for (uint32_t k = 0; k < 6; k++)
		rt_msg(&in, 0, 17 + k * 1000003u, false);
	put("route", "sparse-mod", in.b, in.len);

	/* EQ on many values, plus IN sets repeating values. */
	f[0] = filter(2, SHOAL_KEY_EQ, 4, 2, 1, 0);
	f[1] = filter(2, SHOAL_KEY_IN, 4, 2, 0, 0);
	f[1].key.n_set = 3;
	f[1].key.set[0] = 1;
	f[1].key.set[1] = 1;
	f[1].key.set[2] = 3;
	rt_begin(&in, 0, 30, f, 2);
	for (uint32_t k = 0; k < 6; k++)
		rt_msg(&in, 1, k << 16 | k, false);
	put("route", "eq-in", in.b, in.len);

	/* 17 key specs with two filters each: more partitions than the index keeps. */
	for (int i = 0; i < 17; i++)
		f[i] = filter(6, SHOAL_KEY_EQ, (uint32_t)i, 1, 0, 0);
	rt_begin(&in, 0, 17, f, 17);
	for (uint32_t k = 0; k < 4; k++)
		rt_msg(&in, 0, k * 0x01010101u, k == 1);
	put("route", "many-groups", in.b, in.len);

	/* No filters at all. */
	rt_begin(&in, 2, 0, f, 0);
	in.b[in.len++] = 0;
	memcpy(in.b + in.len, "\x01\0\0\0\x04" "abcd", 9);
	in.len += 9;
	put("route", "empty", in.b, in.len);
}

/* ---- allocator scripts (see fuzz_seg_alloc.c for the layout) ------------ */

struct script {
	unsigned char b[512];
	size_t len;
};

static void sc_write(struct script *sc, uint16_t at, const void *bytes, uint8_t n, bool alloc)
{
	memcpy(sc->b + sc->len, &at, 2);
	sc->b[sc->len + 2] = (uint8_t)(n | (alloc ? 0x80 : 0));
	memcpy(sc->b + sc->len + 3, bytes, n);
	sc->len += 3 + (size_t)n;
}

static void scripts(void)
{
	static const unsigned char junk[16] = "peer was here..";
	uint64_t top = 3000;
	struct script sc = { .len = 0 };

	/* No peer writes: the creator allocates after its first two regions. */
	put("seg_alloc", "quiet", sc.b, 0);

	/* Peers scribble inside the regions they own, between allocations. */
	sc_write(&sc, 512 + 520, junk, sizeof(junk), true);
	sc_write(&sc, 1088 + 10, junk, sizeof(junk), true);
	sc_write(&sc, 512 + 256, junk, 8, false);
	put("seg_alloc", "regions-scribbled", sc.b, sc.len);

	/* A directory entry renamed: the creator's next name may collide. */
	sc.len = 0;
	sc_write(&sc, SHOAL__SEG_HDR_SIZE + 24, "a0", 3, true);
	put("seg_alloc", "entry-renamed", sc.b, sc.len);

	/* The allocation top moved forward: wasteful but harmless. */
	sc.len = 0;
	sc_write(&sc, 72, &top, 8, true);
	put("seg_alloc", "top-forward", sc.b, sc.len);
}

/* ---- system files -------------------------------------------------------- */

/* Every key once; the order of top-level keys and YAML's anchors, aliases,
 * flow and block styles; the limits, just inside and just outside. */
static void configs(void)
{
	static const struct {
		const char *name, *text;
	} seeds[] = {
		{ "every-key",
		  "system: fanout\n"
		  "router:\n  spin: 20us\n  uplink_capacity: 64KiB\n"
		  "  inbound_capacity: 128KiB\n  direct_capacity: 64KiB\n"
		  "types:\n  - { id: 3, name: work, max_size: 64 }\n"
		  "  - { id: 4, name: ping, max_size: 1KiB }\n"
		  "groups:\n  - name: consumer-0\n    program: /bin/true\n"
		  "    args: [--role, consumer]\n    env: { RUST_LOG: info }\n"
		  "    actors: 4\n    workers: 2\n    node: auto\n    cpus: 0\n"
		  "    mailbox: 256KiB\n    overflow: drop\n"
		  "    restart:\n      policy: always\n      backoff: 10ms\n"
		  "      max_backoff: 1s\n      max_retries: unlimited\n"
		  "      on_give_up: stop\n"
		  "    stop: { order: 2, timeout: 1s }\n"
		  "    routes:\n      - types: [work]\n        key: { offset: 0, width: 8 }\n"
		  "        match: { mod: [4, 0] }\n        deliver: unicast\n"
		  "      - { types: ping, match: { in: [1, 2, 3] }, key: { offset: 8, width: 4 } }\n"
		  "      - { types: [4], key: { offset: 0, width: 2 }, match: { range: [1, 9] },"
		  " deliver: broadcast }\n"
		  "      - { types: [3, 4], key: { offset: 0, width: 1 }, match: { eq: 7 },"
		  " deliver: discard }\n"
		  "  - { name: producer, program: /bin/true, restart: { policy: never } }\n" },
		{ "groups-first",
		  "groups:\n  - { name: a, program: /bin/true, routes: [ { types: [work] } ] }\n"
		  "types:\n  - { id: 3, name: work, max_size: 64 }\n"
		  "system: s\n" },
		{ "anchors",
		  "system: s\ntypes: [ &t { id: 1, name: t, max_size: 8 } ]\n"
		  "groups:\n  - &g { name: a, program: /bin/true, routes: &r [ { types: [t] } ] }\n"
		  "  - { name: b, program: /bin/true, routes: *r }\n" },
		{ "minimal", "system: s\ngroups: [ { name: a, program: /bin/true } ]\n" },
		{ "bad-position", "system: s\ngroups:\n  - name: a\n    program: /bin/true\n"
		  "    actors: x\n" },
	};
	char text[16384];
	size_t len;

	for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++)
		put("config", seeds[i].name, seeds[i].text, strlen(seeds[i].text));
	for (unsigned n = 256; n <= 257; n++) {
		len = (size_t)snprintf(text, sizeof(text), "system: s\ngroups:\n");
		for (unsigned g = 0; g < n; g++)
			len += (size_t)snprintf(text + len, sizeof(text) - len,
						"- {name: g%u, program: /bin/true}\n", g);
		FUZZ_CHECK(len < sizeof(text));
		put("config", n == 256 ? "groups-256" : "groups-257", text, len);
	}
}

/* ---- link frames --------------------------------------------------------- */

/* One frame of each kind; DATA with an empty record, a message (envelope and
 * payload), records of every padding, and many small ones. */
static void frames(void)
{
	_Alignas(8) unsigned char buf[4096], msg[sizeof(struct shoal_envelope) + 24];
	struct shoal_envelope env = { .type = 3, .len = 24, .sender = shoal_addr_make(0, 0, 1),
				      .dest = shoal_addr_make(1, SHOAL_SLOT_GROUP, 0) };
	struct shoal__frame_enc e;
	uint32_t len;

	memcpy(msg, &env, sizeof(env));
	memset(msg + sizeof(env), 0x42, 24);
	FUZZ_CHECK(shoal__frame_begin(&e, buf, sizeof(buf), SHOAL__FRAME_HELLO) == 0);
	len = shoal__frame_end(&e, 0x5eed, 10, 20, 1u << 20);
	put("frame", "hello", buf, len);
	FUZZ_CHECK(shoal__frame_begin(&e, buf, sizeof(buf), SHOAL__FRAME_ACK) == 0);
	len = shoal__frame_end(&e, 0x5eed, 12, 21, 1u << 20);
	put("frame", "ack", buf, len);

	FUZZ_CHECK(shoal__frame_begin(&e, buf, sizeof(buf), SHOAL__FRAME_DATA) == 0);
	FUZZ_CHECK(shoal__frame_add(&e, NULL, 0, 0) == 0);
	FUZZ_CHECK(shoal__frame_add(&e, msg, sizeof(msg), 1) == 0);
	for (uint32_t n = 1; n <= 8; n++)
		FUZZ_CHECK(shoal__frame_add(&e, msg + sizeof(env), n, (uint16_t)n) == 0);
	len = shoal__frame_end(&e, 0x5eed, 100, 20, 1u << 20);
	put("frame", "data-mixed", buf, len);

	FUZZ_CHECK(shoal__frame_begin(&e, buf, sizeof(buf), SHOAL__FRAME_DATA) == 0);
	for (uint32_t n = 0; shoal__frame_fits(&e, sizeof(msg)); n++)
		FUZZ_CHECK(shoal__frame_add(&e, msg, sizeof(msg), (uint16_t)n) == 0);
	len = shoal__frame_end(&e, 0x5eed, UINT64_MAX - 100, 0, 0);
	put("frame", "data-full", buf, len);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
		return 1;
	}
	outdir = argv[1];
	mkdir(outdir, 0755);
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/shoal-gen-corpus-XXXXXX");
	FUZZ_CHECK(mkdtemp(tmpdir) != NULL);
	segments();
	packets();
	routes();
	scripts();
	configs();
	frames();
	rmdir(tmpdir);
	return 0;
}
