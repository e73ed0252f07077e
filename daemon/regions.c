/*
 * regions.c - shared memory regions of local sessions; see regions.h.
 */
#include "regions.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ringd.h"

void region_ref(region *r)
{
    r->refs++;
}

void region_unref(region *r)
{
    if (--r->refs > 0) return;
    munmap(r->base, r->size);
    free(r);
}

region *regions_find(const region_set *set, uint32_t id)
{
    for (region *r = set->head; r; r = r->next)
        if (r->id == id) return r;
    return NULL;
}

/* Why fd cannot be a region of size bytes, or NULL. */
static const char *unfit(const region_set *set, uint32_t id, uint64_t size, int fd)
{
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);
    if (regions_find(set, id)) return "region number already in use";
    if (set->n >= REGIONS_MAX) return "too many regions";
    if (size == 0 || size > SIZE_MAX / 2) return "bad size";
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) return "not a memory file";
    if ((uint64_t)st.st_size != size) return "size differs from the file's";
    /* An unsealed file could shrink under us and turn our reads into SIGBUS. */
    if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
        return "file is not sealed against shrinking and growing";
    return NULL;
}

int regions_add(region_set *set, uint32_t id, uint64_t size, int fd, char *why, size_t whylen)
{
    if (fd < 0) {
        snprintf(why, whylen, "register region %u: no file descriptor came with it", id);
        return RINGD_ESHM;
    }
    const char *bad = unfit(set, id, size, fd);
    if (bad) {
        close(fd);
        snprintf(why, whylen, "register region %u (%llu bytes): %s", id, (unsigned long long)size,
                 bad);
        return RINGD_ESHM;
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd);
    region *r = p == MAP_FAILED ? NULL : calloc(1, sizeof *r);
    if (!r) {
        if (p != MAP_FAILED) munmap(p, size);
        snprintf(why, whylen, "register region %u: cannot map %llu bytes: %s", id,
                 (unsigned long long)size, strerror(p == MAP_FAILED ? err : ENOMEM));
        return RINGD_ESHM;
    }
    r->id = id;
    r->base = p;
    r->size = size;
    r->refs = 1;
    r->next = set->head;
    set->head = r;
    set->n++;
    return 0;
}

int regions_remove(region_set *set, uint32_t id)
{
    for (region **p = &set->head; *p; p = &(*p)->next) {
        if ((*p)->id == id) {
            region *r = *p;
            *p = r->next;
            set->n--;
            region_unref(r);
            return 0;
        }
    }
    return RINGD_EINVAL;
}

void regions_clear(region_set *set)
{
    while (set->head) {
        region *r = set->head;
        set->head = r->next;
        region_unref(r);
    }
    set->n = 0;
}
