/*
 * fuzz_frame.c - the peer frame decoders (proto/frame.h) on arbitrary bytes.
 *
 * The input is read twice: as a stream of frames, the way a ring link reads
 * it (a header, then the body its length announces, then the next header),
 * and as one body handed to every body decoder under a header claiming the
 * input's length, which reaches the decoders' own checks even for bytes
 * whose header would have been refused. Whatever decodes must also survive
 * a round trip through its encoder.
 */
#include "proto/frame.h"
#include "tests/fuzz/fuzz.h"

/* Decodes the body of hdr's type from the hdr->length bytes at p. */
static void decode_body(const frame_header *hdr, const uint8_t *p)
{
    size_t need = hdr->type == FRAME_DATA ? FRAME_DATA_HEADER_SIZE : hdr->length;
    if (hdr->type == FRAME_DATA && hdr->length < FRAME_DATA_HEADER_SIZE) need = hdr->length;
    uint8_t *body = fuzz_copy(p, need);
    static uint8_t out[FRAME_HEADER_SIZE + FRAME_MAX_COMMIT_BODY];
    if (!body) return;
    switch (hdr->type) {
    case FRAME_HELLO: {
        frame_hello h;
        if (frame_decode_hello(hdr, body, &h) == FRAME_OK) {
            FUZZ_CHECK_STRING(h.cluster);
            FUZZ_CHECK_STRING(h.from_name);
            if (frame_encode_hello(out, sizeof out, &h) < 0) abort();
        }
        break;
    }
    case FRAME_WELCOME: {
        frame_welcome w;
        if (frame_decode_welcome(hdr, body, &w) == FRAME_OK) {
            FUZZ_CHECK_STRING(w.reason);
            if (frame_encode_welcome(out, sizeof out, &w) < 0) abort();
        }
        break;
    }
    case FRAME_DATA: {
        frame_data d;
        /* The decoder reads the fixed part only, and only when the header
         * says there is one. */
        if (hdr->length >= FRAME_DATA_HEADER_SIZE && frame_decode_data(hdr, body, &d) == FRAME_OK) {
            if ((uint64_t)d.length + FRAME_DATA_HEADER_SIZE != hdr->length) abort();
            if (frame_encode_data(out, sizeof out, &d) < 0) abort();
        }
        break;
    }
    case FRAME_ABORT: {
        frame_abort a;
        if (frame_decode_abort(hdr, body, &a) == FRAME_OK) {
            FUZZ_CHECK_STRING(a.reason);
            if (frame_encode_abort(out, sizeof out, &a) < 0) abort();
        }
        break;
    }
    case FRAME_EPOCH: {
        frame_epoch e;
        if (frame_decode_epoch(hdr, body, &e) == FRAME_OK) {
            FUZZ_CHECK_STRING(e.reason);
            FUZZ_CHECK_STRING(e.waiting);
            if (frame_encode_epoch(out, sizeof out, &e) < 0) abort();
        }
        break;
    }
    case FRAME_COMMIT: {
        static frame_commit c;
        if (frame_decode_commit(hdr, body, &c) == FRAME_OK) {
            if (c.n == 0 || c.n > FRAME_MAX_COMMIT_HOSTS) abort();
            int n = frame_encode_commit(out, sizeof out, &c);
            /* Canonical: the same bytes come back. */
            if (n < 0 || (uint32_t)n != FRAME_HEADER_SIZE + hdr->length) abort();
            if (memcmp(out + FRAME_HEADER_SIZE, body, hdr->length) != 0) abort();
        }
        break;
    }
    case FRAME_REPORT: {
        static summary_part sp;
        if (frame_decode_report(hdr, body, &sp) == FRAME_OK) {
            char why[256];
            (void)summary_check(&sp, why, sizeof why); /* the rules never crash */
            int n = frame_encode_report(out, sizeof out, &sp);
            if (n < 0 || (uint32_t)n != FRAME_HEADER_SIZE + hdr->length) abort();
            if (memcmp(out + FRAME_HEADER_SIZE, body, hdr->length) != 0) abort();
        }
        break;
    }
    default:
        break;
    }
    free(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* As a stream: stop at the first error or incomplete frame, as a link does. */
    size_t pos = 0;
    for (int frames = 0; frames < 64; frames++) {
        frame_header hdr;
        int rc = frame_decode_header(data + pos, size - pos, &hdr);
        frame_strerror(rc);
        frame_type_name(hdr.type);
        if (rc != FRAME_OK) break;
        if (hdr.length > FRAME_MAX_BODY) abort(); /* the header check is the memory bound */
        size_t body = hdr.type == FRAME_DATA ? FRAME_DATA_HEADER_SIZE : hdr.length;
        if (hdr.type != FRAME_DATA && hdr.type != FRAME_COMMIT && hdr.type != FRAME_REPORT &&
            hdr.length > FRAME_MAX_CONTROL_BODY)
            abort();
        if (hdr.type == FRAME_COMMIT && hdr.length > FRAME_MAX_COMMIT_BODY) abort();
        if (hdr.type == FRAME_REPORT && hdr.length > FRAME_MAX_REPORT_BODY) abort();
        if (size - pos - FRAME_HEADER_SIZE < body) break;
        decode_body(&hdr, data + pos + FRAME_HEADER_SIZE);
        /* A DATA payload follows; a link reads it straight into its buffer. */
        size_t skip = FRAME_HEADER_SIZE + hdr.length;
        if (size - pos < skip) break;
        pos += skip;
    }

    /* As one body of every type. */
    if (size <= FRAME_MAX_COMMIT_BODY) {
        for (int t = FRAME_HELLO; t <= FRAME_REPORT; t++) {
            if (t != FRAME_COMMIT && t != FRAME_REPORT && size > FRAME_MAX_CONTROL_BODY) continue;
            if (t == FRAME_REPORT && size > FRAME_MAX_REPORT_BODY) continue;
            frame_header hdr = {
                .version = FRAME_VERSION, .type = (uint8_t)t, .length = (uint32_t)size};
            decode_body(&hdr, data);
        }
    }
    return 0;
}
