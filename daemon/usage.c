/*
 * usage.c - CPU time and energy of a host; see usage.h.
 */
#include "usage.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Reads the first line of a file into buf; 0, or -1. */
static int read_line(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "re");
    if (!f) return -1;
    int ok = fgets(buf, (int)len, f) != NULL;
    fclose(f);
    if (!ok) return -1;
    buf[strcspn(buf, "\n")] = '\0';
    return 0;
}

static int read_u64(const char *path, uint64_t *out)
{
    char buf[64], *end;
    if (read_line(path, buf, sizeof buf) < 0) return -1;
    unsigned long long v = strtoull(buf, &end, 10);
    if (end == buf || *end) return -1;
    *out = v;
    return 0;
}

/* A package domain: intel-rapl:N (not a subzone intel-rapl:N:M, which the
 * package counts already), named package-N (not psys, which spans the
 * platform and overlaps the packages). */
static int is_package(const char *dir, const char *name)
{
    int n = -1;
    if (sscanf(name, "intel-rapl:%d%n", &(int){0}, &n) != 1 || name[n] != '\0') return 0;
    char path[1024], what[64];
    snprintf(path, sizeof path, "%s/%s/name", dir, name);
    return read_line(path, what, sizeof what) == 0 && strncmp(what, "package", 7) == 0;
}

int usage_init(usage *u, const char *root)
{
    memset(u, 0, sizeof *u);
    snprintf(u->root, sizeof u->root, "%s", root ? root : "");
    char dir[512];
    snprintf(dir, sizeof dir, "%s/sys/class/powercap", u->root);
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d)) && u->n_rapl < USAGE_MAX_RAPL) {
        if (!is_package(dir, e->d_name)) continue;
        usage_rapl *r = &u->rapl[u->n_rapl];
        char path[1024];
        snprintf(r->path, sizeof r->path, "%s/%s/energy_uj", dir, e->d_name);
        snprintf(path, sizeof path, "%s/%s/max_energy_range_uj", dir, e->d_name);
        /* Unreadable (root only since Linux 5.10): no measurement. */
        if (read_u64(r->path, &r->last) < 0 || read_u64(path, &r->range) < 0 || !r->range) continue;
        u->n_rapl++;
    }
    closedir(d);
    return u->n_rapl;
}

int usage_pid_cpu(const usage *u, uint32_t pid, uint64_t *us)
{
    char path[512], buf[1024];
    snprintf(path, sizeof path, "%s/proc/%u/stat", u->root, pid);
    if (!pid || read_line(path, buf, sizeof buf) < 0) return -1;
    /* "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
     * the fields count from the last ')'. utime and stime are fields 14 and
     * 15, the 12th and 13th after it. */
    char *p = strrchr(buf, ')');
    if (!p) return -1;
    p++;
    unsigned long long v[13];
    for (int i = 0; i < 13; i++) {
        while (*p == ' ')
            p++;
        if (i == 0) { /* the state, a letter */
            if (!*p) return -1;
            p++;
            v[0] = 0;
            continue;
        }
        char *end;
        v[i] = strtoull(p, &end, 10);
        if (end == p) return -1;
        p = end;
    }
    unsigned long long ut = v[11], st = v[12];
    long hz = sysconf(_SC_CLK_TCK);
    if (hz <= 0) hz = 100;
    *us = (uint64_t)(ut + st) * 1000000u / (uint64_t)hz;
    return 0;
}

uint64_t usage_self_cpu(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) < 0) return 0;
    return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000u +
           (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

void usage_sample(usage *u, uint64_t cpu_us_total, double watts_per_core)
{
    for (int i = 0; i < u->n_rapl; i++) {
        usage_rapl *r = &u->rapl[i];
        uint64_t now;
        if (read_u64(r->path, &now) < 0) continue;
        /* A counter wraps at its range, once at most between two samples a
         * second apart (the smallest range is minutes of full power). */
        u->rapl_uj += now >= r->last ? now - r->last : now + r->range - r->last;
        r->last = now;
    }
    if (cpu_us_total > u->cpu_us) {
        u->estimated_j += (double)(cpu_us_total - u->cpu_us) / 1e6 * watts_per_core;
        u->cpu_us = cpu_us_total;
    }
}

summary_energy usage_source(const usage *u, double w)
{
    if (u->n_rapl) return SUMMARY_ENERGY_RAPL;
    return w > 0 ? SUMMARY_ENERGY_ESTIMATED : SUMMARY_ENERGY_NONE;
}

double usage_joules(const usage *u, double w)
{
    switch (usage_source(u, w)) {
    case SUMMARY_ENERGY_RAPL:
        return (double)u->rapl_uj / 1e6;
    case SUMMARY_ENERGY_ESTIMATED:
        return u->estimated_j;
    default:
        return 0;
    }
}
