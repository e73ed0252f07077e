/*
 * ringctl_checkpoints.h - `ringctl checkpoints DIR` (ringctl_checkpoints.c):
 * the steps that ringd.checkpoint saved in DIR, and which are complete.
 */
#ifndef RINGD_CLIENT_RINGCTL_CHECKPOINTS_H
#define RINGD_CLIENT_RINGCTL_CHECKPOINTS_H

/* Runs `ringctl checkpoints` with argv[0] "checkpoints" and its arguments
 * after it; returns an exit status. Talks to no daemon. */
int ckpt_command(int argc, char **argv);

#endif /* RINGD_CLIENT_RINGCTL_CHECKPOINTS_H */
