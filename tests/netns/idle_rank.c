/*
 * idle_rank.c - a training process that joins the ring and submits
 * nothing: its host's rank is there (the ring is ready), but a collective
 * of the others waits for it. Says "connected" on stdout, then stays until
 * stdin closes or a signal ends it.
 *
 *   idle_rank SOCKET
 */
#include <stdio.h>
#include <unistd.h>

#include "ringd.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: idle_rank SOCKET\n");
        return 2;
    }
    ringd_client *c;
    if (ringd_connect(argv[1], &c) < 0) {
        fprintf(stderr, "idle_rank: %s\n", ringd_last_error(NULL));
        return 1;
    }
    printf("connected as rank %d\n", ringd_rank(c));
    fflush(stdout);
    char b;
    while (read(0, &b, 1) > 0)
        ;
    ringd_close(c);
    return 0;
}
