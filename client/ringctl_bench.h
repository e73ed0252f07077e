/*
 * ringctl_bench.h - ringctl's collective commands (ringctl_bench.c):
 * allreduce, broadcast, allgather, reduce_scatter and barrier, and gather,
 * scatter and alltoall, each run as one rank, verified and timed.
 */
#ifndef RINGD_CLIENT_RINGCTL_BENCH_H
#define RINGD_CLIENT_RINGCTL_BENCH_H

/* One collective command: its name, options, defaults and help. */
typedef struct bench_cmd bench_cmd;

/* The collective command called name ("allreduce", ...), or NULL. */
const bench_cmd *bench_find(const char *name);

/* Runs cmd against the daemon at path (a --socket after the command
 * overrides it), with argv[0] the command's name and its options after it;
 * returns an exit status. */
int bench_command(const bench_cmd *cmd, const char *path, int argc, char **argv);

#endif /* RINGD_CLIENT_RINGCTL_BENCH_H */
