/*
 * test_usage.c - CPU time and energy (daemon/usage.c): /proc/PID/stat
 * read right, RAPL package domains found and read across a wrap, the
 * estimate at watts_per_core where RAPL cannot be read. A fake /proc and
 * /sys live in a directory of the test's own.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/usage.h"

static char root[64];

static void write_file(const char *rel, const char *text)
{
    char path[512], dir[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    /* mkdir -p of its directory */
    snprintf(dir, sizeof dir, "%s", path);
    for (char *p = dir + strlen(root) + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        mkdir(dir, 0755);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

static void setup(void)
{
    snprintf(root, sizeof root, "/tmp/ringd-test-usage-XXXXXX");
    cr_assert_not_null(mkdtemp(root));
}

static void teardown(void)
{
    if (getuid() == 0 && geteuid() != 0) cr_assert_eq(seteuid(0), 0); /* a test read as nobody */
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(usage, .init = setup, .fini = teardown);

Test(usage, reads_user_and_system_time_after_the_name_whatever_it_holds)
{
    usage u;
    usage_init(&u, root);
    long hz = sysconf(_SC_CLK_TCK);
    char stat[512];
    /* A name with a space and a ')' in it; utime 3 s, stime 1 s in ticks. */
    snprintf(stat, sizeof stat,
             "4242 (a b) c) S 1 4242 4242 0 -1 4194560 1000 0 0 0 %ld %ld 0 0 20 0 1 0 100 0 0\n",
             3 * hz, 1 * hz);
    write_file("proc/4242/stat", stat);
    uint64_t us = 0;
    cr_assert_eq(usage_pid_cpu(&u, 4242, &us), 0);
    cr_assert_eq(us, 4000000);
    cr_assert_eq(usage_pid_cpu(&u, 4243, &us), -1, "a process that is gone");
    write_file("proc/4244/stat", "4244 (x) S 1 2\n");
    cr_assert_eq(usage_pid_cpu(&u, 4244, &us), -1, "a line cut short");
}

Test(usage, reads_this_process_from_the_real_proc)
{
    usage u;
    usage_init(&u, "");
    uint64_t us;
    cr_assert_eq(usage_pid_cpu(&u, (uint32_t)getpid(), &us), 0);
    /* getrusage() counts microseconds, /proc clock ticks: about the same. */
    uint64_t self = usage_self_cpu();
    cr_assert(self + 100000 >= us, "getrusage %llu us, /proc %llu us", (unsigned long long)self,
              (unsigned long long)us);
}

Test(usage, measures_the_packages_by_rapl_across_a_wrap)
{
    write_file("sys/class/powercap/intel-rapl:0/name", "package-0\n");
    write_file("sys/class/powercap/intel-rapl:0/energy_uj", "999000000\n");
    write_file("sys/class/powercap/intel-rapl:0/max_energy_range_uj", "1000000000\n");
    write_file("sys/class/powercap/intel-rapl:1/name", "package-1\n");
    write_file("sys/class/powercap/intel-rapl:1/energy_uj", "5000000\n");
    write_file("sys/class/powercap/intel-rapl:1/max_energy_range_uj", "1000000000\n");
    /* Not counted: a subzone (inside its package), the platform (psys,
     * overlapping the packages), the MMIO view of a package. */
    write_file("sys/class/powercap/intel-rapl:0:0/name", "core\n");
    write_file("sys/class/powercap/intel-rapl:0:0/energy_uj", "1\n");
    write_file("sys/class/powercap/intel-rapl:0:0/max_energy_range_uj", "1000000000\n");
    write_file("sys/class/powercap/intel-rapl:2/name", "psys\n");
    write_file("sys/class/powercap/intel-rapl:2/energy_uj", "1\n");
    write_file("sys/class/powercap/intel-rapl:2/max_energy_range_uj", "1000000000\n");
    write_file("sys/class/powercap/intel-rapl-mmio:0/name", "package-0\n");
    write_file("sys/class/powercap/intel-rapl-mmio:0/energy_uj", "1\n");
    write_file("sys/class/powercap/intel-rapl-mmio:0/max_energy_range_uj", "1000000000\n");
    usage u;
    cr_assert_eq(usage_init(&u, root), 2);
    cr_assert_eq(usage_source(&u, 10), SUMMARY_ENERGY_RAPL, "measured wins over the estimate");
    /* Package 0 wraps: 999 J + 2 J to its range of 1000 J; package 1 adds 3 J. */
    write_file("sys/class/powercap/intel-rapl:0/energy_uj", "1000000\n");
    write_file("sys/class/powercap/intel-rapl:1/energy_uj", "8000000\n");
    usage_sample(&u, 0, 10);
    cr_assert_eq(u.rapl_uj, 5000000);
    cr_assert_float_eq(usage_joules(&u, 10), 5.0, 1e-9);
}

Test(usage, a_counter_it_may_not_read_is_no_measurement)
{
    write_file("sys/class/powercap/intel-rapl:0/name", "package-0\n");
    write_file("sys/class/powercap/intel-rapl:0/max_energy_range_uj", "1000000000\n");
    write_file("sys/class/powercap/intel-rapl:0/energy_uj", "7\n");
    char path[512];
    snprintf(path, sizeof path, "%s/sys/class/powercap/intel-rapl:0/energy_uj", root);
    cr_assert_eq(chmod(path, 0), 0);
    /* Root reads every file: read as nobody, as the daemon's own user would
     * be (the counters are root's alone on most kernels since 5.10). */
    if (geteuid() == 0) {
        cr_assert_eq(chmod(root, 0755), 0);
        cr_assert_eq(seteuid(65534), 0, "%s", strerror(errno));
    }
    cr_assert_neq(faccessat(AT_FDCWD, path, R_OK, AT_EACCESS), 0, "the counter is readable");
    usage u;
    cr_assert_eq(usage_init(&u, root), 0);
    cr_assert_eq(usage_source(&u, 10), SUMMARY_ENERGY_ESTIMATED);
}

Test(usage, estimates_from_the_cpu_time_used_since_the_last_sample)
{
    usage u;
    cr_assert_eq(usage_init(&u, root), 0, "no powercap here");
    usage_sample(&u, 2000000, 10); /* 2 CPU seconds at 10 W */
    usage_sample(&u, 2000000, 10);
    usage_sample(&u, 1000000, 10); /* a total that went back counts nothing */
    usage_sample(&u, 3000000, 5);  /* a reload changed the figure */
    cr_assert_float_eq(usage_joules(&u, 5), 25.0, 1e-9);
    cr_assert_eq(usage_source(&u, 5), SUMMARY_ENERGY_ESTIMATED);
    cr_assert_eq(usage_source(&u, 0), SUMMARY_ENERGY_NONE);
    cr_assert_float_eq(usage_joules(&u, 0), 0.0, 1e-9);
}
