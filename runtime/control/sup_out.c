/* SPDX-License-Identifier: MIT */
/*
 * The supervisor's output: its events, the status line, and the lines its
 * groups print, each group's to its log file (--log-dir) or to our output
 * after the group's name.
 *
 * Our own output (events, status, the groups' lines) goes through a bounded
 * queue to a writer thread of its own, so that a reader of `shoal run`'s
 * output that stops reading blocks that thread only, never the loop that
 * restarts groups and acts on signals. A line that finds the queue full is
 * dropped and counted; once the writer has emptied half of it, a line says
 * how many were dropped (room for it is kept), and lines are taken again.
 * A regular file never makes its writer wait for a reader: it is written at
 * once, in order, and nothing is dropped. At the end, the count of lines
 * still dropped is told, and the writer is given OUT_DRAIN_NS without
 * progress before what it still holds is given up.
 *
 * The queue is a byte ring: head and tail count bytes ever queued and ever
 * written. The loop appends at head, the writer writes from tail, both under
 * `lock`; the writer writes [tail, head) without the lock, as the loop only
 * ever writes past head, and tail moves on only after the write.
 *
 * A group's log file is written by the supervisor's thread itself: a file
 * never waits for a reader.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <shoal/router.h>

#include "runtime/control/config.h"
#include "runtime/control/sup_impl.h"
#include "shm/util.h"

#define OUTQ_CAP (1024 * 1024)
#define OUT_NOTICE_MAX 160           /* kept free for the line that counts drops */
#define OUT_DRAIN_NS (5 * UINT64_C(1000000000))

/* ---- our output ------------------------------------------------------------------- */

/* Write all of buf to fd. Returns 0, or the errno of the write that failed.
 * Async-signal-safe (a forked child uses it). */
int shoal__sup_write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? errno : EIO;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* The line that says o->out failed with `err`; its length. */
static int closed_line(char *buf, size_t len, int err)
{
	int n = snprintf(buf, len, "shoal run: standard output is closed (%s); events go to "
			 "standard error from here\n", strerror(err));

	return n < (int)len ? n : (int)len - 1;
}

/*
 * A write to `fd` failed with `err` (EPIPE: its reader went away, SIGPIPE
 * being ignored): from standard output, go on on standard error, so that
 * why the system stops, and how, is still told; from standard error, give
 * up writing. Called with q->lock held; returns with it held.
 */
static void out_failed(struct outq *q, int fd, int err)
{
	char line[256];
	int n;

	if (fd != q->fd)
		return;   /* already left */
	if (fd != STDERR_FILENO) {
		q->fd = STDERR_FILENO;
		atomic_store_explicit(&q->gone, true, memory_order_relaxed);
		n = closed_line(line, sizeof(line), err);
		pthread_mutex_unlock(&q->lock);
		err = shoal__sup_write_all(STDERR_FILENO, line, (size_t)n);
		pthread_mutex_lock(&q->lock);
	}
	if (err != 0)
		q->fd = -1;
}

/*
 * The writer thread. It may block in write() for as long as the reader
 * likes; shoal__sup_out_stop() cancels it there (the only place
 * cancellation is enabled, and it holds no lock there).
 */
static void *out_writer(void *arg)
{
	struct outq *q = arg;

	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
	pthread_mutex_lock(&q->lock);
	for (;;) {
		size_t off = (size_t)(q->tail % OUTQ_CAP), n;
		ssize_t w;
		int fd = q->fd, err;

		if (q->head == q->tail) {
			if (q->stop)
				break;
			pthread_cond_wait(&q->more, &q->lock);
			continue;
		}
		n = (size_t)(q->head - q->tail);
		if (n > OUTQ_CAP - off)
			n = OUTQ_CAP - off;
		pthread_mutex_unlock(&q->lock);
		pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
		w = fd < 0 ? (ssize_t)n : write(fd, q->buf + off, n);
		err = errno;
		/* A description made non-blocking by someone we share it with. */
		if (w < 0 && err == EAGAIN)
			(void)poll(&(struct pollfd){ .fd = fd, .events = POLLOUT }, 1, -1);
		pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
		pthread_mutex_lock(&q->lock);
		if (w > 0) {
			q->tail += (uint64_t)w;
			pthread_cond_broadcast(&q->progress);
		} else if (w == 0 || (err != EINTR && err != EAGAIN)) {
			out_failed(q, fd, w == 0 ? EIO : err);
		}
	}
	pthread_cond_broadcast(&q->progress);
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

/* Append buf to the ring; the caller made sure it fits. */
static void out_append(struct outq *q, const char *buf, size_t len)
{
	size_t off = (size_t)(q->head % OUTQ_CAP), first = len < OUTQ_CAP - off ? len :
							   OUTQ_CAP - off;

	memcpy(q->buf + off, buf, first);
	memcpy(q->buf, buf + first, len - first);
	q->head += len;
}

/* Queue the line that counts the lines dropped, and take lines again. Called
 * with q->lock held, while q->dropping. */
static void out_notice(struct sup *s)
{
	struct outq *q = &s->q;
	char line[OUT_NOTICE_MAX];
	int n = snprintf(line, sizeof(line), "[%8.3f] %llu line%s of output dropped: the reader "
			 "of shoal run's output is too slow\n",
			 (double)(shoal__now_ns() - s->start_ns) / 1e9,
			 (unsigned long long)q->dropped, q->dropped == 1 ? "" : "s");

	out_append(q, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
	q->dropping = false;
	q->dropped = 0;
}

/*
 * Queue len bytes of our output (whole lines, or the status line in
 * place), or write them at once to a regular file. Never blocks for a
 * reader.
 */
static void out_put(struct sup *s, const char *buf, size_t len)
{
	struct outq *q = &s->q;
	char line[256];
	int n, err;

	if (q->direct) {
		err = shoal__sup_write_all(q->fd, buf, len);
		if (err == 0)
			return;
		/* Standard error may be a pipe: through the writer from here. */
		pthread_mutex_lock(&q->lock);
		q->direct = false;
		q->fd = STDERR_FILENO;
		atomic_store_explicit(&q->gone, true, memory_order_relaxed);
		n = closed_line(line, sizeof(line), err);
		out_append(q, line, (size_t)n);
		pthread_mutex_unlock(&q->lock);
		out_put(s, buf, len);
		return;
	}
	pthread_mutex_lock(&q->lock);
	if (q->dropping && q->head - q->tail <= OUTQ_CAP / 2)
		out_notice(s);
	if (q->dropping || OUTQ_CAP - OUT_NOTICE_MAX - (q->head - q->tail) < len) {
		q->dropping = true;
		q->dropped++;
	} else {
		out_append(q, buf, len);
	}
	pthread_cond_signal(&q->more);
	pthread_mutex_unlock(&q->lock);
}

__attribute__((format(printf, 2, 3)))
static void out_printf(struct sup *s, const char *fmt, ...)
{
	char line[SHOAL__SUP_LINE_MAX + 256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line)) {   /* cut, still a line */
		n = (int)sizeof(line) - 1;
		line[n - 1] = '\n';
	}
	out_put(s, line, (size_t)n);
}

/*
 * Start writing our output to o->out's descriptor (anything stdio holds
 * for it is flushed first). Returns 0 or a negative errno.
 */
int shoal__sup_out_start(struct sup *s)
{
	struct outq *q = &s->q;
	pthread_condattr_t ca;
	struct stat st;
	int ret;

	fflush(s->o->out);
	atomic_init(&q->gone, false);
	q->fd = fileno(s->o->out);
	q->direct = fstat(q->fd, &st) == 0 && S_ISREG(st.st_mode);
	q->buf = malloc(OUTQ_CAP);
	if (q->buf == NULL)
		return -ENOMEM;
	pthread_mutex_init(&q->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&q->more, NULL);
	pthread_cond_init(&q->progress, &ca);
	pthread_condattr_destroy(&ca);
	ret = -pthread_create(&q->thread, NULL, out_writer, q);
	q->started = ret == 0;
	if (ret == 0)
		pthread_setname_np(q->thread, "shoal-out");   /* for ps, top, a debugger */
	if (ret < 0) {
		pthread_cond_destroy(&q->more);
		pthread_cond_destroy(&q->progress);
		pthread_mutex_destroy(&q->lock);
	}
	return ret;
}

/*
 * Let the writer write what it holds, for as long as it makes progress
 * within OUT_DRAIN_NS each time, then end it (cancelled in its write if
 * the reader stalls) and free the queue.
 */
void shoal__sup_out_stop(struct sup *s)
{
	struct outq *q = &s->q;
	uint64_t last, deadline;
	bool stuck;

	if (!q->started) {
		free(q->buf);
		return;
	}
	pthread_mutex_lock(&q->lock);
	if (q->dropping)
		out_notice(s);
	q->stop = true;
	pthread_cond_signal(&q->more);
	last = q->tail;
	deadline = shoal__now_ns() + OUT_DRAIN_NS;
	while (q->head != q->tail && shoal__now_ns() < deadline) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(&q->progress, &q->lock, &ts);
		if (q->tail != last) {
			last = q->tail;
			deadline = shoal__now_ns() + OUT_DRAIN_NS;
		}
	}
	stuck = q->head != q->tail;
	pthread_mutex_unlock(&q->lock);
	if (stuck)
		pthread_cancel(q->thread);
	pthread_join(q->thread, NULL);
	pthread_cond_destroy(&q->more);
	pthread_cond_destroy(&q->progress);
	pthread_mutex_destroy(&q->lock);
	free(q->buf);
}

void shoal__sup_clear_status(struct sup *s)
{
	if (s->live && s->status_shown) {
		out_put(s, "\r\033[K", 4);
		s->status_shown = false;
	}
}

/* Once o->out failed, a status line in place (which belongs to a terminal)
 * is no longer drawn. */
static void out_check(struct sup *s)
{
	if (s->live && atomic_load_explicit(&s->q.gone, memory_order_relaxed))
		s->live = false;
}

void shoal__sup_event(struct sup *s, const char *fmt, ...)
{
	char text[SHOAL__SUP_LINE_MAX];
	va_list ap;
	double t = (double)(shoal__now_ns() - s->start_ns) / 1e9;

	shoal__sup_clear_status(s);
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	out_printf(s, "[%8.3f] %s\n", t, text);
	out_check(s);
}

static void human(char *buf, size_t len, double v)
{
	if (v >= 1e6)
		snprintf(buf, len, "%.2fM", v / 1e6);
	else if (v >= 1e3)
		snprintf(buf, len, "%.1fk", v / 1e3);
	else
		snprintf(buf, len, "%.0f", v);
}

void shoal__sup_status(struct sup *s, uint64_t now)
{
	struct shoal_router_stats st;
	char rate[32], damaged[32] = "";
	double dt = (double)(now - s->last_tick_ns) / 1e9;

	shoal_router_stats(s->router, &st);
	if (dt > 0 && s->last_tick_ns != 0)
		s->rate = (double)(st.handled - s->last_handled) / dt;
	s->last_handled = st.handled;
	s->last_tick_ns = now;
	if (s->o->status == SHOAL__STATUS_QUIET)
		return;
	human(rate, sizeof(rate), s->rate);
	/* Damage is rare and loud: said only once there is some. */
	if (st.damaged != 0)
		snprintf(damaged, sizeof(damaged), ", %u damaged", st.damaged);
	if (s->live) {
		out_printf(s, "\r\033[K%s: %u/%u groups up, %s msg/s, %llu handled, %llu "
			   "restarts, %llu dropped, %llu lost, %u failed%s", s->cfg->system,
			   st.running, st.groups, rate, (unsigned long long)st.handled,
			   (unsigned long long)st.restarts, (unsigned long long)st.dropped,
			   (unsigned long long)st.lost, st.failed, damaged);
		s->status_shown = true;
		out_check(s);
		return;
	}
	if (now - s->last_plain_ns < (uint64_t)(s->o->status_period_ns ? s->o->status_period_ns :
						   5000000000))
		return;
	s->last_plain_ns = now;
	shoal__sup_event(s, "status: %u/%u groups up, %s msg/s, %llu handled, %llu restarts, %llu "
			 "dropped, %llu lost, %u failed%s", st.running, st.groups, rate,
			 (unsigned long long)st.handled, (unsigned long long)st.restarts,
			 (unsigned long long)st.dropped, (unsigned long long)st.lost, st.failed,
			 damaged);
}

/* ---- group output ----------------------------------------------------------------- */

void shoal__sup_name_width(struct sup *s)
{
	s->name_w = 0;
	for (uint32_t i = 0; i < s->cfg->n_groups; i++)
		if ((int)strlen(s->cfg->groups[i].name) > s->name_w)
			s->name_w = (int)strlen(s->cfg->groups[i].name);
}

/*
 * One line a group printed (without its newline), then `mark`: to its log
 * file, after the wall-clock time (UTC), or to our output after its name.
 */
static void out_line(struct sup *s, uint32_t i, const char *text, size_t len, const char *mark)
{
	const struct gout *o = s->procs[i].out;

	if (o->log_fd >= 0) {
		char head[48], line[SHOAL__SUP_LINE_MAX + 128];
		struct timespec ts;
		struct tm tm;
		int n;

		clock_gettime(CLOCK_REALTIME, &ts);
		gmtime_r(&ts.tv_sec, &tm);
		strftime(head, sizeof(head), "%Y-%m-%dT%H:%M:%S", &tm);
		n = snprintf(line, sizeof(line), "%s.%03ldZ %.*s%s\n", head, ts.tv_nsec / 1000000,
			     (int)len, text, mark);
		(void)shoal__sup_write_all(o->log_fd, line,
					   (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
		return;
	}
	shoal__sup_clear_status(s);
	out_printf(s, "%-*s | %.*s%s\n", s->name_w, s->cfg->groups[i].name, (int)len, text, mark);
}

/* Pass on the whole lines held in o->buf; keep a partial one, cut one too long. */
static void out_lines(struct sup *s, uint32_t i)
{
	struct gout *o = s->procs[i].out;
	size_t start = 0;
	char *nl;

	while ((nl = memchr(o->buf + start, '\n', o->len - start)) != NULL) {
		size_t end = (size_t)(nl - o->buf);

		if (!o->cutting)
			out_line(s, i, o->buf + start, end - start, "");
		o->cutting = false;
		start = end + 1;
	}
	memmove(o->buf, o->buf + start, o->len - start);
	o->len -= start;
	if (o->len == sizeof(o->buf)) {
		if (!o->cutting)
			out_line(s, i, o->buf, o->len, " [cut: line longer than "
				 "4096 bytes]");
		o->cutting = true;
		o->len = 0;
	}
}

/* The process's output has ended: pass on a last partial line, close. */
void shoal__sup_out_close(struct sup *s, uint32_t i)
{
	struct gout *o = s->procs[i].out;

	if (o->len > 0 && !o->cutting)
		out_line(s, i, o->buf, o->len, "");
	o->len = 0;
	o->cutting = false;
	if (o->fd >= 0)
		close(o->fd);
	o->fd = -1;
}

/*
 * Read what group i's process printed, up to `budget` bytes, without
 * blocking. At the end of the pipe (every writer gone), or after the process
 * ended (`last`: a child it left behind may hold the pipe open; what it
 * prints after this is lost to it), the pipe is closed.
 */
void shoal__sup_out_read(struct sup *s, uint32_t i, size_t budget, bool last)
{
	struct gout *o = s->procs[i].out;
	bool end = false;

	while (o->fd >= 0 && budget > 0) {
		ssize_t n = read(o->fd, o->buf + o->len, sizeof(o->buf) - o->len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			end = n == 0 || errno != EAGAIN;
			break;
		}
		o->len += (size_t)n;
		budget = (size_t)n < budget ? budget - (size_t)n : 0;
		out_lines(s, i);
	}
	if (end || last)
		shoal__sup_out_close(s, i);
	out_check(s);
}

/*
 * The output of `group`: its log file under `dir` (created 0600, appended
 * to), or none. Returns NULL only for want of memory.
 */
struct gout *shoal__sup_out_new(struct sup *s, const char *group, const char *dir)
{
	struct gout *o = calloc(1, sizeof(*o));
	char path[PATH_MAX];

	if (o == NULL)
		return NULL;
	o->fd = -1;
	o->log_fd = -1;
	if (dir == NULL)
		return o;
	snprintf(path, sizeof(path), "%s/%s.log", dir, group);
	o->log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (o->log_fd < 0)
		shoal__sup_event(s, "group %s: cannot open %s (%s); its output goes here instead",
				 group, path, strerror(errno));
	return o;
}

void shoal__sup_out_free(struct gout *o)
{
	if (o == NULL)
		return;
	if (o->fd >= 0)
		close(o->fd);
	if (o->log_fd >= 0)
		close(o->log_fd);
	free(o);
}
