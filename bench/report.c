/* SPDX-License-Identifier: MIT */
/* The reports' shared lines and outputs (report.h). */
#include <errno.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "bench/report.h"

static void cpu_model(char *buf, size_t len)
{
	FILE *f = fopen("/proc/cpuinfo", "re");
	char line[256];

	snprintf(buf, len, "unknown CPU");
	while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
		char *colon = strchr(line, ':');

		if (strncmp(line, "model name", 10) == 0 && colon != NULL) {
			snprintf(buf, len, "%s", colon + 2);
			buf[strcspn(buf, "\n")] = '\0';
			break;
		}
	}
	if (f != NULL)
		fclose(f);
}

void bench_md_machine(FILE *f)
{
	struct utsname u;
	char model[128];

	cpu_model(model, sizeof(model));
	uname(&u);
	fprintf(f, "- machine: %s, %ld CPUs online, %s %s\n", model, sysconf(_SC_NPROCESSORS_ONLN),
		u.sysname, u.release);
}

const char *bench_fmt_mmm(char *buf, size_t len, struct bench_mmm m, int prec)
{
	snprintf(buf, len, "%.*f [%.*f, %.*f]", prec, m.med, prec, m.min, prec, m.max);
	return buf;
}

int bench_write_outputs(const char *prog, const char *md, const char *csv,
			void (*write_md)(FILE *f, const void *arg),
			int (*write_csv)(const char *path, const void *arg), const void *arg)
{
	int ret = 0;

	write_md(stdout, arg);
	fflush(stdout);
	if (md != NULL) {
		FILE *f = fopen(md, "we");

		if (f == NULL || (write_md(f, arg), fclose(f)) != 0)
			ret = -errno;
		if (ret < 0)
			fprintf(stderr, "%s: writing %s: %s\n", prog, md, strerror(-ret));
	}
	if (csv != NULL) {
		int c = write_csv(csv, arg);

		if (c < 0)
			fprintf(stderr, "%s: writing %s: %s\n", prog, csv, strerror(-c));
		ret = ret < 0 ? ret : c;
	}
	return ret;
}

void bench_md_disturbed_warning(FILE *f, unsigned disturbed, unsigned total, const char *what)
{
	if (total == 0 || 2 * disturbed <= total)
		return;
	fprintf(f, "**Warning: %u of the %u %s kept were disturbed** (other tasks took the "
		"CPUs): the figures and the verdicts below measure the machine's load as much as "
		"Shoal. Run again on a quiet machine.\n\n", disturbed, total, what);
}
