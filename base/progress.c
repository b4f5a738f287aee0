/* One-line terminal progress bar; see progress.h. */
#include "base/progress.h"

#include <unistd.h>

#include "base/clock.h"

#define ETA_MAX_S (99.0 * 86400) /* shown as 142560m00s at most */
#define REDRAW_S 0.25

void segd_progress_init(segd_progress_t *p, FILE *f, const char *unit, uint64_t total,
                        int force_off)
{
    p->out = !force_off && f && isatty(fileno(f)) ? f : NULL;
    p->unit = unit;
    p->total = total;
    p->t0 = p->last = segd_mono_s();
    p->drawn = 0;
}

/* "1.2M" style: six characters at most, so the line keeps its width. */
static void human(char *out, size_t n, double v)
{
    static const char suffix[] = " kMGTP";
    int i = 0;
    while (v >= 1000.0 && i < 5) {
        v /= 1000.0;
        i++;
    }
    snprintf(out, n, i ? "%.1f%c" : "%.0f", v, suffix[i]);
}

void segd_progress_update(segd_progress_t *p, uint64_t done, uint64_t messages,
                          uint64_t segments)
{
    if (!p->out)
        return;
    double now = segd_mono_s();
    if (p->drawn && now - p->last < REDRAW_S)
        return;
    p->last = now;
    double dt = now - p->t0;
    char msg[16], seg[16], rate[16], eta[32] = "";
    human(msg, sizeof(msg), (double)messages);
    human(seg, sizeof(seg), (double)segments);
    human(rate, sizeof(rate), dt > 0 ? (double)segments / dt : 0.0);
    if (p->total && done > 0 && done <= p->total && dt > 0) {
        double left = dt * (double)(p->total - done) / (double)done;
        /* a first slow message can make the estimate absurd; beyond INT_MAX
         * seconds the int conversions below would be undefined */
        if (left > ETA_MAX_S)
            left = ETA_MAX_S;
        snprintf(eta, sizeof(eta), " %3.0f%% ETA %dm%02ds", 100.0 * (double)done / (double)p->total,
                 (int)(left / 60), (int)left % 60);
    }
    fprintf(p->out, "\r\033[K%s messages, %s segments, %s seg/s, %.0f s%s", msg, seg, rate, dt,
            eta);
    fflush(p->out);
    p->drawn = 1;
}

void segd_progress_end(segd_progress_t *p)
{
    if (p->out && p->drawn) {
        fprintf(p->out, "\r\033[K");
        fflush(p->out);
    }
    p->drawn = 0;
}
