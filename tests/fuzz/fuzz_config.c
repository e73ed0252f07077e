/*
 * fuzz_config.c - the configuration parser (config/config.h) on arbitrary
 * bytes: every input is accepted or refused with one line naming a place in
 * the file, and an accepted one obeys the documented invariants.
 */
#include <stdio.h>

#include "config/config.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = (char *)fuzz_copy(data, size);
    char err[512];
    cfg c;
    if (!text) return 0;
    if (cfg_parse("fuzz.yaml", text, size, &c, err, sizeof err) == 0) {
        if (c.n_hosts < 1 || c.n_hosts > CFG_MAX_HOSTS || !c.cluster || !c.socket) abort();
        if (c.socket_mode > 0777 || c.allowed_uids.n > CFG_MAX_IDS) abort();
        for (size_t i = 0; i < c.n_hosts; i++) {
            const cfg_host *h = &c.hosts[i];
            if (!h->name || !h->address || !h->node || !h->socket || h->port == 0) abort();
            if (h->local_clients < 1 || cfg_host_index(&c, h->name) != (int)i) abort();
        }
        cfg_total_ranks(&c);
        cfg_free(&c);
    } else {
        if (strncmp(err, "fuzz.yaml", 9) != 0 || strchr(err, '\n') ||
            !memchr(err, '\0', sizeof err))
            abort();
    }
    free(text);
    return 0;
}
