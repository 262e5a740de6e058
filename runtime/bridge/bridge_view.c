/* SPDX-License-Identifier: MIT */
/*
 * The bridge's links for the tools and the log (bridge_impl.h): the link
 * view (view.h), a row of counters a link, stored every turn of the loop; and
 * each link's news (up, down, refusals, losses) said on the bridge's output.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/bridge/bridge_impl.h"
#include "shm/util.h"

/* The system's name, as the group attached to it. */
static const char *system_name(const struct bridge *b)
{
	const char *env = getenv("SHOAL_SYSTEM");

	return b->o->system ? b->o->system : env ? env : b->cfg->system;
}

static int view_init(void *mem, uint64_t len, void *arg)
{
	const struct bridge *b = arg;
	struct shoal__links_hdr *h = mem;
	struct shoal__links_row *rows = (struct shoal__links_row *)(h + 1);

	(void)len;
	h->version = SHOAL__LINKS_VERSION;
	snprintf(h->system, sizeof(h->system), "%s", system_name(b));
	snprintf(h->host, sizeof(h->host), "%s", b->cfg->hosts[b->host].name);
	h->bridge_pid = (int32_t)getpid();
	h->n_links = b->n_peers;
	for (uint32_t i = 0; i < b->n_peers; i++) {
		const struct peer *p = &b->peers[i];

		snprintf(rows[i].peer, sizeof(rows[i].peer), "%s", p->h->name);
		snprintf(rows[i].addr, sizeof(rows[i].addr), "%s", p->role == SHOAL__LINK_CONNECT ?
			 p->h->reach : b->cfg->hosts[b->host].listen);
		rows[i].role = (uint32_t)p->role;
		shoal_store_relaxed(&rows[i].state, SHOAL__LINK_DOWN);
	}
	/* R1: pairs with A1 in shoal__links_view_take(): names before magic. */
	shoal_store_release(&h->magic, SHOAL__LINKS_MAGIC);
	return 0;
}

/* Create shoal.S.links, replacing one whose bridge is dead. Said and
 * skipped when it cannot be made: the links work without their view. */
void shoal__bridge_view_open(struct bridge *b)
{
	struct shoal_seg_opts so = { .mode = b->cfg->mode, .numa_node = -1,
				     .dir_cap = SHOAL__LINKS_DIR_CAP };
	char name[SHOAL_SEG_NAME_MAX];
	uint64_t size = shoal__links_size(b->n_peers), off;
	uint64_t file = shoal__links_file_size(b->n_peers);
	struct shoal_err err;
	int ret = shoal__name_links(name, system_name(b));

	if (ret == 0) {
		ret = shoal_seg_create(&b->view_seg, name, file, &so, &err);
		if (ret == -EEXIST && shoal_seg_probe(name, NULL) == 0) {
			shoal_seg_unlink(name);
			ret = shoal_seg_create(&b->view_seg, name, file, &so, &err);
		}
	} else {
		snprintf(err.msg, sizeof(err.msg), "system name too long");
	}
	if (ret == 0) {
		ret = shoal_seg_alloc_init(&b->view_seg, SHOAL__KIND_LINKS, "links", NULL, size, 64,
					   view_init, b, &off);
		if (ret < 0) {
			snprintf(err.msg, sizeof(err.msg), "%s", strerror(-ret));
			shoal_seg_detach(&b->view_seg);
			shoal_seg_unlink(name);
		}
	}
	if (ret < 0) {
		fprintf(b->o->log, "no link view for the tools (%s): %s\n", name, err.msg);
		fflush(b->o->log);
		return;
	}
	b->view = shoal_seg_ptr(&b->view_seg, off, size, 64);
	for (uint32_t i = 0; i < b->n_peers; i++)
		b->peers[i].row = (struct shoal__links_row *)(b->view + 1) + i;
}

/* Store p's counters in its row: each alone, relaxed (view.h). */
void shoal__bridge_view_write(const struct peer *p)
{
	struct shoal__links_row *r = p->row;
	struct shoal__link_stats st;
	uint64_t c[SHOAL__LC_N], now;

	if (r == NULL)
		return;
	shoal__link_stats(p->link, &st);
	now = shoal__now_ns();
	c[SHOAL__LC_RTT_NS] = st.rtt_ns;
	c[SHOAL__LC_FRAMES_SENT] = st.frames_sent;
	c[SHOAL__LC_FRAMES_RECV] = st.frames_recv;
	c[SHOAL__LC_RECORDS_SENT] = st.records_sent;
	c[SHOAL__LC_RECORDS_RECV] = st.records_recv;
	c[SHOAL__LC_IN_FLIGHT] = st.next_seq - st.acked;
	c[SHOAL__LC_CREDITS] = st.peer_credits > st.unacked_bytes ?
			       st.peer_credits - st.unacked_bytes : 0;
	c[SHOAL__LC_RESENT] = st.resent;
	c[SHOAL__LC_DUPLICATES] = st.duplicates;
	c[SHOAL__LC_GAPS] = st.gaps;
	c[SHOAL__LC_REFUSED] = st.refused;
	c[SHOAL__LC_CONNECTS] = st.connects;
	c[SHOAL__LC_BROKEN] = st.broken;
	c[SHOAL__LC_LOST_LINK] = st.lost_link;
	c[SHOAL__LC_LOST_DOWN] = p->lost_down;
	c[SHOAL__LC_CREDIT_WAITS] = st.credit_waits;
	c[SHOAL__LC_DOWN_NS] = st.state == SHOAL__LINK_UP || now < st.down_since_ns ? 0 :
			       now - st.down_since_ns;
	shoal_store_relaxed(&r->state, st.state);
	shoal_store_relaxed(&r->peer_epoch, st.peer_epoch);
	for (unsigned k = 0; k < SHOAL__LC_N; k++)
		shoal_store_relaxed(&r->c[k], c[k]);
}

void shoal__bridge_view_write_hub(const struct bridge *b)
{
	if (b->view == NULL)
		return;
	shoal_store_relaxed(&b->view->refused_conns, b->hub_seen.refused);
	shoal_store_relaxed(&b->view->ucx_messages,
			    atomic_load_explicit(&b->ucx_said, memory_order_relaxed));
}

void shoal__bridge_view_close(struct bridge *b)
{
	char name[SHOAL_SEG_NAME_MAX];

	if (b->view == NULL)
		return;
	shoal_seg_detach(&b->view_seg);
	if (shoal__name_links(name, system_name(b)) == 0)
		shoal_seg_unlink(name);
	b->view = NULL;
}

/*
 * Tell what changed on p's link since the last time: up, down after up,
 * attempts failing while the peer is away (at 1, 2, 4, 8 ... of them, so
 * that a host away for long does not flood the log), refused frames, and
 * records lost to a peer's restart.
 */
void shoal__bridge_tell(const struct bridge *b, struct peer *p)
{
	struct shoal__link_stats st;
	bool up, was_up = p->seen.state == SHOAL__LINK_UP;

	shoal__link_stats(p->link, &st);
	up = st.state == SHOAL__LINK_UP;
	if (up && !was_up) {
		shoal__bridge_say(b, p, "up (peer epoch %08x, connection %llu)", st.peer_epoch,
				  (unsigned long long)st.connects);
		p->told_failures = 0;
	} else if (!up && was_up) {
		shoal__bridge_say(b, p, "down (%llu connection%s lost so far)",
				  (unsigned long long)st.broken, st.broken == 1 ? "" : "s");
		p->told_failures = st.broken;
	} else if (!up && st.broken > p->seen.broken && st.broken >= 2 * p->told_failures) {
		shoal__bridge_say(b, p, "no connection yet (%llu attempt%s failed); retrying",
				  (unsigned long long)st.broken, st.broken == 1 ? "" : "s");
		p->told_failures = st.broken;
	}
	if (st.refused > p->seen.refused)
		shoal__bridge_say(b, p, "refused %llu frame%s: %s",
				  (unsigned long long)(st.refused - p->seen.refused),
				  st.refused - p->seen.refused == 1 ? "" : "s",
				  st.last_refusal.msg);
	if (st.lost_link > p->seen.lost_link)
		shoal__bridge_say(b, p, "%llu records lost: the peer restarted before "
				  "acknowledging them",
				  (unsigned long long)(st.lost_link - p->seen.lost_link));
	p->seen = st;
}

/* Connections the hub refused: unknown or duplicate peers, misdirected
 * ones, ones that never said who they are. Said at about the 1st, 2nd,
 * 4th ... with the last reason, so that a host that keeps trying does not flood
 * the log. */
void shoal__bridge_tell_hub(struct bridge *b)
{
	struct shoal__link_hub_stats st;

	shoal__link_hub_stats(b->hub, &st);
	if (st.refused > b->hub_seen.refused && st.refused >= 2 * b->told_refused) {
		b->told_refused = st.refused;
		fprintf(b->o->log, "refused %llu connection%s so far, the last: %s\n",
			(unsigned long long)st.refused, st.refused == 1 ? "" : "s",
			st.last_refusal.msg);
		fflush(b->o->log);
	}
	b->hub_seen = st;
}
