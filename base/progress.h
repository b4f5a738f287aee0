/* A one-line progress bar for long CLI jobs (replay, backfill, bulk load):
 * drawn on stderr only when stderr is a terminal, at most 4 times a second,
 * with a rate and an ETA when the total is known. The caller owns the
 * struct; no hidden state, no threads (call update from one thread). */
#ifndef SEGD_PROGRESS_H
#define SEGD_PROGRESS_H

#include <stdint.h>
#include <stdio.h>

typedef struct segd_progress {
    FILE *out;        /* NULL: drawing is off (not a terminal) */
    const char *unit; /* what `done` and `total` count ("bytes", "messages") */
    uint64_t total;   /* 0 = unknown: no ETA, no percentage */
    double t0, last;  /* monotonic seconds: start, last draw */
    int drawn;        /* a line is on screen (end() clears it) */
} segd_progress_t;

/* Draws on f only if it is a terminal (isatty) and force_off is 0. unit is
 * borrowed and must outlive the bar. */
void segd_progress_init(segd_progress_t *p, FILE *f, const char *unit, uint64_t total,
                        int force_off);
/* done is the units so far, from which the percentage and ETA are drawn;
 * messages and segments are shown with a segments/s rate. The call is cheap
 * when the bar is not drawing. */
void segd_progress_update(segd_progress_t *p, uint64_t done, uint64_t messages,
                          uint64_t segments);
/* Clears the line so that the caller's summary starts on a clean one. */
void segd_progress_end(segd_progress_t *p);

#endif
