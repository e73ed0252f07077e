/*
 * ringctl_report.h - `ringctl report` (ringctl_report.c): where every rank
 * of the ring spent its time, as a table, JSON, a Chrome trace or an SVG
 * chart.
 */
#ifndef RINGD_CLIENT_RINGCTL_REPORT_H
#define RINGD_CLIENT_RINGCTL_REPORT_H

/* Runs `ringctl report` against the daemon at path (a --socket after the
 * command overrides it), with argv[0] "report" and its options after it;
 * returns an exit status. */
int report_command(const char *path, int argc, char **argv);

#endif /* RINGD_CLIENT_RINGCTL_REPORT_H */
