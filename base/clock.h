/* Time, in one place: the wall clock (event and expiry time), a monotonic
 * clock (deadlines, rates) and sleeping. A fixed "now" (tests, --now) is
 * injected by passing it in; 0 means the wall clock. No state. */
#ifndef SEGD_CLOCK_H
#define SEGD_CLOCK_H

#include <stdint.h>

int64_t segd_wall_ms(void);
int64_t segd_mono_ms(void);
double segd_mono_s(void);
/* The CLOCK_REALTIME time ms milliseconds from now (ms >= 0), as
 * pthread_cond_timedwait takes its deadline. */
struct timespec;
void segd_realtime_after(struct timespec *ts, int64_t ms);
/* Sleeps ms milliseconds, returning at once when ms <= 0. A signal ends the
 * sleep early, so a stop request is not held up. */
void segd_sleep_ms(int64_t ms);
/* fixed_ms when non-zero, else the wall clock: the injectable now. */
static inline int64_t segd_now_ms(int64_t fixed_ms) { return fixed_ms ? fixed_ms : segd_wall_ms(); }

#endif
