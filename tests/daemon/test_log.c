/*
 * test_log.c - rate-limited log lines: the first prints, the repeats within
 * the interval are counted, and the next line says how many there were.
 */
#include <criterion/criterion.h>

#include "daemon/log.h"

Test(log, a_repeated_failure_prints_once_then_once_per_interval_with_the_count)
{
    log_ratelimit rl = {0};
    uint32_t suppressed = 99;
    char buf[96];
    cr_assert(log_ratelimit_ok(&rl, 1000, 30000, &suppressed));
    cr_assert_eq(suppressed, 0);
    cr_assert_str_empty(log_repeated(buf, sizeof buf, suppressed, 30));
    for (uint64_t t = 2000; t < 31000; t += 1000)
        cr_assert_not(log_ratelimit_ok(&rl, t, 30000, &suppressed));
    cr_assert(log_ratelimit_ok(&rl, 31000, 30000, &suppressed));
    cr_assert_eq(suppressed, 29);
    cr_assert_str_eq(log_repeated(buf, sizeof buf, suppressed, 30),
                     " (29 more since the last such line; at most one per 30 s)");
}

Test(log, a_reset_lets_the_next_failure_print_at_once)
{
    log_ratelimit rl = {0};
    uint32_t suppressed;
    cr_assert(log_ratelimit_ok(&rl, 1000, 60000, &suppressed));
    cr_assert_not(log_ratelimit_ok(&rl, 2000, 60000, &suppressed));
    log_ratelimit_reset(&rl);
    cr_assert(log_ratelimit_ok(&rl, 3000, 60000, &suppressed));
    cr_assert_eq(suppressed, 0);
}
