/*
 * test_rates.c - payload rates over the last few one-second samples.
 */
#include <criterion/criterion.h>

#include "daemon/rates.h"

Test(rates, are_zero_until_two_samples)
{
    rates r = {0};
    uint64_t in, out;
    rates_get(&r, &in, &out);
    cr_assert_eq(in + out, 0);
    rates_add(&r, 1000, 5000, 7000);
    rates_get(&r, &in, &out);
    cr_assert_eq(in + out, 0);
}

Test(rates, are_bytes_per_second_over_the_window_only)
{
    rates r = {0};
    uint64_t in, out;
    /* 1 MB/s in for 10 s, then nothing for the whole window. */
    for (uint64_t s = 0; s <= 10; s++)
        rates_add(&r, s * 1000, s * 1000000, s * 500000);
    rates_get(&r, &in, &out);
    cr_assert_eq(in, 1000000);
    cr_assert_eq(out, 500000);
    for (uint64_t s = 11; s <= 10 + RATES_SAMPLES; s++)
        rates_add(&r, s * 1000, 10000000, 5000000);
    rates_get(&r, &in, &out);
    cr_assert_eq(in, 0);
    cr_assert_eq(out, 0);
}

Test(rates, restart_when_the_counters_go_back)
{
    rates r = {0};
    uint64_t in, out;
    rates_add(&r, 0, 0, 0);
    rates_add(&r, 1000, 9000000, 9000000);
    rates_add(&r, 2000, 1000, 2000); /* a new ring after a reload */
    rates_get(&r, &in, &out);
    cr_assert_eq(in + out, 0);
    rates_add(&r, 3000, 3000, 2000);
    rates_get(&r, &in, &out);
    cr_assert_eq(in, 2000);
    cr_assert_eq(out, 0);
}
