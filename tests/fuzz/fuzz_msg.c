/*
 * fuzz_msg.c - the client message decoders (proto/msg.h) on arbitrary bytes.
 *
 * As in fuzz_frame.c, the input is read as a stream of messages, the way the
 * daemon's process_input() reads a session, and as one body handed to every
 * decoder under a header claiming the input's length: each decoder must take
 * exactly its layout's bytes and refuse the rest. Whatever decodes must
 * encode again.
 */
#include "proto/msg.h"
#include "tests/fuzz/fuzz.h"

#define OUT_CAP (MSG_HEADER_SIZE + MSG_MAX_BODY)

static void decode_body(const msg_header *h, const uint8_t *p)
{
    uint8_t *body = fuzz_copy(p, h->length);
    uint8_t out[OUT_CAP];
    if (!body) return;
    union {
        msg_hello hello;
        msg_welcome welcome;
        msg_error error;
        msg_register reg;
        msg_unregister unreg;
        msg_collective coll;
        msg_result result;
        msg_status_req status_req;
        msg_status status;
        msg_leave_req leave;
        msg_balance balance;
        msg_report_req report_req;
        msg_report report;
    } m;
    int n = 0;
    switch (h->type) {
    case MSG_HELLO:
        if (msg_decode_hello(h, body, &m.hello) == MSG_OK)
            n = msg_encode_hello(out, sizeof out, &m.hello);
        break;
    case MSG_WELCOME:
        if (msg_decode_welcome(h, body, &m.welcome) == MSG_OK) {
            FUZZ_CHECK_STRING(m.welcome.host);
            n = msg_encode_welcome(out, sizeof out, &m.welcome);
        }
        break;
    case MSG_ERROR:
        if (msg_decode_error(h, body, &m.error) == MSG_OK) {
            FUZZ_CHECK_STRING(m.error.text);
            n = msg_encode_error(out, sizeof out, &m.error);
        }
        break;
    case MSG_REGISTER:
        if (msg_decode_register(h, body, &m.reg) == MSG_OK)
            n = msg_encode_register(out, sizeof out, &m.reg);
        break;
    case MSG_UNREGISTER:
        if (msg_decode_unregister(h, body, &m.unreg) == MSG_OK)
            n = msg_encode_unregister(out, sizeof out, &m.unreg);
        break;
    case MSG_COLLECTIVE:
        if (msg_decode_collective(h, body, &m.coll) == MSG_OK) {
            FUZZ_CHECK_STRING(m.coll.name);
            n = msg_encode_collective(out, sizeof out, &m.coll);
        }
        break;
    case MSG_RESULT:
        if (msg_decode_result(h, body, &m.result) == MSG_OK) {
            FUZZ_CHECK_STRING(m.result.text);
            n = msg_encode_result(out, sizeof out, &m.result);
        }
        break;
    case MSG_STATUS_REQ:
        if (msg_decode_status_req(h, body, &m.status_req) == MSG_OK)
            n = msg_encode_status_req(out, sizeof out, &m.status_req);
        break;
    case MSG_STATUS:
        if (msg_decode_status(h, body, &m.status) == MSG_OK) {
            FUZZ_CHECK_STRING(m.status.cluster);
            FUZZ_CHECK_STRING(m.status.last_error);
            FUZZ_CHECK_STRING(m.status.resize_why);
            FUZZ_CHECK_STRING(m.status.hosts);
            n = msg_encode_status(out, sizeof out, &m.status);
        }
        break;
    case MSG_LEAVE_REQ:
        if (msg_decode_leave_req(h, body, &m.leave) == MSG_OK)
            n = msg_encode_leave_req(out, sizeof out, &m.leave);
        break;
    case MSG_BALANCE:
        if (msg_decode_balance(h, body, &m.balance) == MSG_OK)
            n = msg_encode_balance(out, sizeof out, &m.balance);
        break;
    case MSG_REPORT_REQ:
        if (msg_decode_report_req(h, body, &m.report_req) == MSG_OK)
            n = msg_encode_report_req(out, sizeof out, &m.report_req);
        break;
    case MSG_REPORT:
        if (msg_decode_report(h, body, &m.report) == MSG_OK) {
            char why[256];
            FUZZ_CHECK_STRING(m.report.cluster);
            FUZZ_CHECK_STRING(m.report.host);
            (void)summary_check(&m.report.part, why, sizeof why);
            n = msg_encode_report(out, sizeof out, &m.report);
        }
        break;
    default:
        break;
    }
    if (n < 0) abort(); /* a decoded message always fits a message again */
    if (n > 0) {
        /* ... and what we encode, we decode. */
        msg_header h2;
        if (msg_decode_header(out, (size_t)n, &h2) != MSG_OK || h2.type != h->type ||
            MSG_HEADER_SIZE + h2.length != (uint32_t)n)
            abort();
    }
    free(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t pos = 0;
    for (int msgs = 0; msgs < 64; msgs++) {
        msg_header h;
        int rc = msg_decode_header(data + pos, size - pos, &h);
        msg_strerror(rc);
        msg_type_name(h.type);
        if (rc != MSG_OK) break;
        if (h.length > MSG_MAX_BODY) abort(); /* the daemon's input buffer relies on it */
        if (size - pos - MSG_HEADER_SIZE < h.length) break;
        decode_body(&h, data + pos + MSG_HEADER_SIZE);
        pos += MSG_HEADER_SIZE + h.length;
    }

    if (size <= MSG_MAX_BODY) {
        for (int t = MSG_HELLO; t <= MSG_REPORT; t++) {
            msg_header h = {.version = MSG_VERSION, .type = (uint8_t)t, .length = (uint32_t)size};
            decode_body(&h, data);
        }
    }
    return 0;
}
