/*
 * report_render.c - the report as a Chrome trace and as an SVG chart; see
 * report_render.h.
 *
 * Rows of different hosts are placed by each host's clock (summaries carry
 * Unix times): with clocks apart by more than a call takes, their calls
 * look shifted against each other. NTP keeps them within a millisecond or
 * so on a LAN.
 */
#include "report_render.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

/* ---- the trace ---- */

/* Colours of the trace viewers' reserved names (Catapult's color scheme). */
#define CNAME_COMPUTE "good"
#define CNAME_WAIT "grey"
#define CNAME_FAILED "terrible"

static void event(FILE *f, int *first, const char *name, const char *cat, double ts, double dur,
                  int pid, int tid, const char *cname)
{
    fprintf(f,
            "%s\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.0f, \"dur\": %.0f, "
            "\"pid\": %d, \"tid\": %d",
            *first ? "" : ",", name, cat, ts, dur, pid, tid);
    if (cname) fprintf(f, ", \"cname\": \"%s\"", cname);
    fputs("}", f);
    *first = 0;
}

/* Names are [A-Za-z0-9._-] by the configuration's rules; anything else
 * becomes '_' so that no name can break the JSON. */
static void safe_name(const char *in, char *out, size_t len)
{
    size_t i = 0;
    for (; in[i] && i + 1 < len; i++) {
        char c = in[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-' || c == '#';
        out[i] = ok ? c : '_';
    }
    out[i] = '\0';
}

int report_write_trace(const report_view *v, FILE *f)
{
    /* Times from the first call shown, so that the viewer starts at 0. */
    uint64_t t0 = UINT64_MAX;
    for (int i = 0; i < v->n_ranks; i++)
        if (v->ranks[i].n_spans && v->ranks[i].spans[0].start_us < t0)
            t0 = v->ranks[i].spans[0].start_us;
    if (t0 == UINT64_MAX) t0 = v->now_us;
    char cluster[2 * MSG_MAX_NAME], host[2 * MSG_MAX_NAME];
    safe_name(v->cluster, cluster, sizeof cluster);
    fprintf(f,
            "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"cluster\": \"%s\", "
            "\"start_unix_us\": %" PRIu64 "}, \"traceEvents\": [",
            cluster, t0);
    int first = 1;
    for (int h = 0; h < v->n_hosts; h++) {
        safe_name(v->hosts[h].name, host, sizeof host);
        fprintf(f,
                "%s\n{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, "
                "\"args\": {\"name\": \"host %s\"}},"
                "\n{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, "
                "\"args\": {\"sort_index\": %d}}",
                first ? "" : ",", h + 1, host, h + 1, h);
        first = 0;
    }
    for (int i = 0; i < v->n_ranks; i++) {
        const report_rank *r = &v->ranks[i];
        int pid = r->host + 1, tid = r->rank;
        fprintf(f,
                ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                "\"args\": {\"name\": \"rank %d\"}},"
                "\n{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                "\"args\": {\"sort_index\": %d}}",
                pid, tid, r->rank, pid, tid, r->rank);
        for (int s = 0; s < r->n_spans; s++) {
            const summary_span *sp = &r->spans[s];
            double ts = (double)(sp->start_us - t0);
            int failed = sp->flags & SUMMARY_SPAN_FAILED;
            /* Between two calls the rank computed, or after a failure it
             * was recovering (the report counts that as failure). */
            if (s > 0) {
                const summary_span *prev = &r->spans[s - 1];
                uint64_t end = prev->start_us + prev->dur_us;
                if (sp->start_us > end) {
                    int recovering = prev->flags & SUMMARY_SPAN_FAILED;
                    event(f, &first, recovering ? "recovering" : "compute",
                          recovering ? "failure" : "compute", (double)(end - t0),
                          (double)(sp->start_us - end), pid, tid,
                          recovering ? CNAME_FAILED : CNAME_COMPUTE);
                }
            }
            char name[48];
            snprintf(name, sizeof name, "%s%s", report_kind_name(sp->kind),
                     failed ? " (failed)" : "");
            event(f, &first, name, failed ? "failure" : "call", ts, sp->dur_us, pid, tid,
                  failed ? CNAME_FAILED : NULL);
            /* The wait, as a slice inside the call: shaded grey. */
            if (!failed && sp->wait_us > 0)
                event(f, &first, "wait", "wait", ts, sp->wait_us, pid, tid, CNAME_WAIT);
        }
    }
    fputs("\n]}\n", f);
    return ferror(f) ? -1 : 0;
}

/* ---- the chart ---- */

#define SVG_WIDTH 960
#define SVG_LEFT 170  /* labels */
#define SVG_RIGHT 110 /* totals */
#define SVG_TOP 96
#define SVG_ROW 26
#define SVG_BAR 18

static const struct {
    const char *name, *colour;
} parts[4] = {
    {"compute", "#4e9a3f"}, {"wait", "#e8a33d"}, {"transfer", "#3b78c2"}, {"failure", "#c0392b"}};

/* Text for XML: &, <, > and " escaped, control characters dropped. */
static void put_xml(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default:
            if ((unsigned char)*s >= 0x20 && *s != 0x7f) fputc(*s, f);
        }
    }
}

/* The smallest tick step of 1, 2 or 5 x 10^k that gives at most 8 ticks
 * up to max (> 0). */
static double tick_step(double max)
{
    static const double mult[] = {0.1, 0.2, 0.5, 1, 2, 5};
    double p = pow(10, floor(log10(max)));
    for (size_t i = 0; i < sizeof mult / sizeof mult[0]; i++)
        if (max / (p * mult[i]) <= 8) return p * mult[i];
    return p * 10;
}

int report_write_svg(const report_view *v, int window, FILE *f)
{
    const report_totals_view *t = window ? &v->window : &v->life;
    int rows = v->n_ranks ? v->n_ranks : 1;
    int height = SVG_TOP + rows * SVG_ROW + 50;
    double bar_w = SVG_WIDTH - SVG_LEFT - SVG_RIGHT;
    double max = t->wall_s > 0 ? t->wall_s : 1;
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n",
            SVG_WIDTH, height, SVG_WIDTH, height);
    fputs("<text x=\"16\" y=\"24\" font-size=\"16\" font-weight=\"bold\">Where the time went: ", f);
    put_xml(f, v->cluster);
    fprintf(f, ", %d rank%s%s</text>\n", v->n_ranks, v->n_ranks == 1 ? "" : "s",
            window ? ", the last minute" : "");
    fprintf(f,
            "<text x=\"16\" y=\"44\">useful work %.1f s in %.1f s of wall time: speedup %.2f of "
            "%d, efficiency %.0f%%",
            t->useful_s, t->wall_s, t->speedup, v->n_ranks, t->efficiency * 100);
    if (!window && v->waited_most >= 0) {
        const report_rank *r = &v->ranks[v->waited_most];
        fprintf(f, "; the others waited most for rank %d (", r->rank);
        put_xml(f, v->hosts[r->host].name);
        fprintf(f, ", last to %" PRIu64 " calls)", r->late_calls);
    }
    fputs("</text>\n", f);
    /* The legend. */
    for (int k = 0; k < 4; k++) {
        double x = 16 + k * 110;
        fprintf(f,
                "<rect x=\"%.0f\" y=\"58\" width=\"14\" height=\"14\" fill=\"%s\"/>"
                "<text x=\"%.0f\" y=\"70\">%s</text>\n",
                x, parts[k].colour, x + 20, parts[k].name);
    }
    /* The axis: seconds. */
    double step = tick_step(max), y_axis = SVG_TOP + rows * SVG_ROW + 6;
    for (double s = 0; s <= max * 1.0001; s += step) {
        double x = SVG_LEFT + s / max * bar_w;
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#dddddd\"/>"
                "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\" fill=\"#555555\">%g s</text>\n",
                x, SVG_TOP - 6, x, y_axis, x, y_axis + 16, s);
    }
    if (!v->n_ranks)
        fprintf(f, "<text x=\"%d\" y=\"%d\">no rank has reported yet</text>\n", SVG_LEFT,
                SVG_TOP + 14);
    for (int i = 0; i < v->n_ranks; i++) {
        const report_rank *r = &v->ranks[i];
        const summary_times *tm = window ? &r->window : &r->life;
        double secs[4] = {(double)tm->compute_us / 1e6, (double)tm->wait_us / 1e6,
                          (double)tm->transfer_us / 1e6, (double)tm->failure_us / 1e6};
        double y = SVG_TOP + i * SVG_ROW, x = SVG_LEFT, sum = 0;
        fprintf(f, "<text x=\"%d\" y=\"%.0f\" text-anchor=\"end\">rank %d (", SVG_LEFT - 8,
                y + SVG_BAR - 5, r->rank);
        put_xml(f, v->hosts[r->host].name);
        fputs(")</text>\n", f);
        for (int k = 0; k < 4; k++) {
            double w = secs[k] / max * bar_w;
            sum += secs[k];
            if (w <= 0) continue;
            fprintf(f,
                    "<rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"%d\" fill=\"%s\">"
                    "<title>rank %d %s: %.3f s</title></rect>\n",
                    x, y, w, SVG_BAR, parts[k].colour, r->rank, parts[k].name, secs[k]);
            x += w;
        }
        fprintf(f, "<text x=\"%.1f\" y=\"%.0f\">%.1f s</text>\n", x + 6, y + SVG_BAR - 5, sum);
    }
    fputs("</svg>\n", f);
    return ferror(f) ? -1 : 0;
}
