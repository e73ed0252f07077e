/*
 * test_metrics.c - the Prometheus text of a snapshot (the HTTP side is
 * tested end to end in tests/service).
 */
#include <criterion/criterion.h>
#include <string.h>

#include "daemon/metrics.h"

static status_snapshot sample(void)
{
    status_snapshot s;
    memset(&s, 0, sizeof s);
    s.cluster = "c";
    s.host = "a";
    s.left = "z";
    s.right = "b";
    s.eng.jobs.by_kind[RINGD_COLL_ALLREDUCE][JOB_OK] = 7;
    s.eng.jobs.by_kind[RINGD_COLL_BARRIER][JOB_TIMEOUT] = 2;
    s.eng.jobs.latency[0] = 3;                   /* <= 0.5 ms */
    s.eng.jobs.latency[2] = 4;                   /* <= 2.5 ms */
    s.eng.jobs.latency[JOB_LATENCY_BUCKETS] = 2; /* over 60 s */
    s.eng.jobs.latency_sum_s = 130.5;
    s.eng.net.bytes_in = 1234;
    s.left_up = 1;
    s.eng.left.state = LINK_UP;
    s.last_error_age_ms = MSG_NO_AGE;
    return s;
}

Test(metrics, render_counts_by_kind_and_outcome_and_labels_the_links)
{
    status_snapshot s = sample();
    static char buf[65536];
    cr_assert_gt(metrics_render(&s, buf, sizeof buf), 0);
    cr_assert_not_null(
        strstr(buf, "ringd_collectives_total{kind=\"allreduce\",outcome=\"ok\"} 7\n"));
    cr_assert_not_null(
        strstr(buf, "ringd_collectives_total{kind=\"barrier\",outcome=\"timeout\"} 2\n"));
    cr_assert_not_null(
        strstr(buf, "ringd_link_bytes_total{link=\"left\",peer=\"z\",direction=\"in\"} 1234\n"));
    cr_assert_not_null(strstr(buf, "ringd_link_up{link=\"left\",peer=\"z\"} 1\n"));
    cr_assert_not_null(strstr(buf, "# TYPE ringd_collectives_total counter\n"));
}

Test(metrics, each_link_is_in_one_state_for_so_long_and_hosts_show_their_place)
{
    status_snapshot s = sample();
    s.eng.right.state = LINK_DOWN;
    s.eng.right.refused = 1;
    s.right_age_ms = 2500;
    s.eng.next_seq = 42;
    static char buf[65536];
    cr_assert_gt(metrics_render(&s, buf, sizeof buf), 0);
    cr_assert_not_null(strstr(buf, "ringd_link_state{link=\"left\",peer=\"z\",state=\"up\"} 1\n"));
    cr_assert_not_null(
        strstr(buf, "ringd_link_state{link=\"left\",peer=\"z\",state=\"down\"} 0\n"));
    cr_assert_not_null(
        strstr(buf, "ringd_link_state{link=\"right\",peer=\"b\",state=\"refused\"} 1\n"));
    cr_assert_not_null(
        strstr(buf, "ringd_link_state{link=\"right\",peer=\"b\",state=\"down\"} 0\n"));
    cr_assert_not_null(strstr(buf, "ringd_link_state_seconds{link=\"right\",peer=\"b\"} 2.500\n"));
    cr_assert_not_null(strstr(buf, "ringd_next_collective 42\n"));
    /* No failure yet: no age of one. */
    cr_assert_null(strstr(buf, "ringd_last_failure_seconds"));
    s.last_error_age_ms = 61000;
    cr_assert_gt(metrics_render(&s, buf, sizeof buf), 0);
    cr_assert_not_null(strstr(buf, "ringd_last_failure_seconds 61.000\n"));
}

Test(metrics, the_latency_histogram_is_cumulative_up_to_inf)
{
    status_snapshot s = sample();
    static char buf[65536];
    cr_assert_gt(metrics_render(&s, buf, sizeof buf), 0);
    cr_assert_not_null(strstr(buf, "ringd_collective_duration_seconds_bucket{le=\"0.0005\"} 3\n"));
    cr_assert_not_null(strstr(buf, "ringd_collective_duration_seconds_bucket{le=\"0.001\"} 3\n"));
    cr_assert_not_null(strstr(buf, "ringd_collective_duration_seconds_bucket{le=\"0.0025\"} 7\n"));
    cr_assert_not_null(strstr(buf, "ringd_collective_duration_seconds_bucket{le=\"60\"} 7\n"));
    cr_assert_not_null(strstr(buf, "ringd_collective_duration_seconds_bucket{le=\"+Inf\"} 9\n"));
    cr_assert_not_null(strstr(buf, "ringd_collective_duration_seconds_count 9\n"));
    cr_assert_not_null(strstr(buf, "ringd_collective_duration_seconds_sum 130.500000\n"));
}

Test(metrics, render_refuses_a_buffer_too_small)
{
    status_snapshot s = sample();
    char buf[256];
    cr_assert_eq(metrics_render(&s, buf, sizeof buf), -1);
}

Test(metrics, an_elastic_ring_shows_its_hosts_in_and_out_and_its_resizes)
{
    status_snapshot s = sample();
    cfg_host hosts[3] = {{.name = "a"}, {.name = "b"}, {.name = "c"}};
    cfg view = {.hosts = hosts, .n_hosts = 2};
    s.hosts = hosts;
    s.n_hosts = 3;
    s.view.hosts = &view;
    s.members.elastic = 1;
    s.members.members = 0x3; /* c is out */
    s.members.resizes = 2;
    static char buf[65536];
    cr_assert_gt(metrics_render(&s, buf, sizeof buf), 0);
    cr_assert_not_null(strstr(buf, "ringd_hosts_live 2\n"));
    cr_assert_not_null(strstr(buf, "ringd_hosts_configured 3\n"));
    cr_assert_not_null(strstr(buf, "ringd_host_in_ring{host=\"b\"} 1\n"));
    cr_assert_not_null(strstr(buf, "ringd_host_in_ring{host=\"c\"} 0\n"));
    cr_assert_not_null(strstr(buf, "ringd_resizes_total 2\n"));
}

Test(metrics, a_refused_reload_shows_as_an_unsuccessful_last_reload)
{
    status_snapshot s = sample();
    static char buf[65536];
    cr_assert_gt(metrics_render(&s, buf, sizeof buf), 0);
    cr_assert_not_null(strstr(buf, "ringd_config_reloads_total 0\n"));
    cr_assert_not_null(strstr(buf, "ringd_config_last_reload_successful 1\n"),
                       "none yet: no failure");
    s.reload = (status_reload){.count = 3, .refused = 1};
    cr_assert_gt(metrics_render(&s, buf, sizeof buf), 0);
    cr_assert_not_null(strstr(buf, "ringd_config_reloads_total 3\n"));
    cr_assert_not_null(strstr(buf, "ringd_config_last_reload_successful 0\n"));
}

Test(metrics, a_balanced_jobs_split_shows_each_ranks_rows_and_speed_only_when_reported)
{
    status_snapshot s = sample();
    static char buf[65536];
    cr_assert_gt(metrics_render(&s, buf, sizeof buf), 0);
    cr_assert_null(strstr(buf, "ringd_balance_rows"));
    s.balance.split =
        (msg_split){.global_batch = 60, .n_ranks = 2, .shares = {{40, 2000.25}, {20, 0}}};
    cr_assert_gt(metrics_render(&s, buf, sizeof buf), 0);
    cr_assert_not_null(strstr(buf, "ringd_balance_rows{rank=\"0\"} 40\n"));
    cr_assert_not_null(strstr(buf, "ringd_balance_rows{rank=\"1\"} 20\n"));
    cr_assert_not_null(strstr(buf, "ringd_balance_rows_per_second{rank=\"0\"} 2000.250\n"));
    cr_assert_not_null(strstr(buf, "ringd_balance_rows_per_second{rank=\"1\"} 0.000\n"));
}

Test(metrics, each_local_rank_counts_where_its_time_went_and_the_host_its_energy)
{
    status_snapshot s = sample();
    report_rank_total ranks[2] = {
        {.rank = 4, .compute_s = 10.5, .wait_s = 2, .transfer_s = 0.25, .calls = 9, .failed = 1},
        {.rank = 5, .failure_s = 3}};
    s.totals = (report_totals){.n = 2,
                               .ranks = ranks,
                               .energy = SUMMARY_ENERGY_ESTIMATED,
                               .energy_j = 123.5,
                               .daemon_cpu_s = 1.5,
                               .ranks_cpu_s = 20};
    static char buf[65536];
    cr_assert_gt(metrics_render(&s, buf, sizeof buf), 0);
    cr_assert_not_null(strstr(buf, "# TYPE ringd_rank_compute_seconds_total counter\n"));
    cr_assert_not_null(strstr(buf, "ringd_rank_compute_seconds_total{rank=\"4\"} 10.500000\n"));
    cr_assert_not_null(strstr(buf, "ringd_rank_wait_seconds_total{rank=\"4\"} 2.000000\n"));
    cr_assert_not_null(strstr(buf, "ringd_rank_transfer_seconds_total{rank=\"4\"} 0.250000\n"));
    cr_assert_not_null(strstr(buf, "ringd_rank_failure_seconds_total{rank=\"5\"} 3.000000\n"));
    cr_assert_not_null(strstr(buf, "ringd_rank_calls_total{rank=\"4\",outcome=\"failed\"} 1\n"));
    cr_assert_not_null(strstr(buf, "ringd_rank_calls_total{rank=\"4\",outcome=\"ok\"} 8\n"));
    cr_assert_not_null(strstr(buf, "ringd_energy_joules_total{source=\"estimated\"} 123.500\n"));
    cr_assert_not_null(strstr(buf, "ringd_cpu_seconds_total{process=\"ranks\"} 20.000000\n"));
    /* Without an estimate or RAPL there is no energy series at all. */
    s.totals.energy = SUMMARY_ENERGY_NONE;
    cr_assert_gt(metrics_render(&s, buf, sizeof buf), 0);
    cr_assert_null(strstr(buf, "ringd_energy_joules_total"));
}
