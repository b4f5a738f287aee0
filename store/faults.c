/* The store's fault injection points (store.h). A test makes calls nth to
 * nth + times - 1 at a point fail, as SQLite's tests do. The points are
 * always compiled in, because an unset point costs one relaxed atomic load.
 * The store's writes and offset reads and the applier (consumer/apply.c)
 * count their calls here, and only tests set a point. */
#include <stdatomic.h>

#include "store/store.h"
#include "store/store_impl.h"

void segd_store_fault_set(segd_store_t *s, segd_store_fault_t point, uint64_t nth,
                          uint64_t times)
{
    atomic_store(&s->fault[point].nth, 0); /* off while the counters move */
    atomic_store(&s->fault[point].calls, 0);
    atomic_store(&s->fault[point].times, times);
    atomic_store(&s->fault[point].nth, nth);
}

int segd_store_fault_hit(segd_store_t *s, segd_store_fault_t point)
{
    uint64_t nth = atomic_load_explicit(&s->fault[point].nth, memory_order_relaxed);
    if (!nth)
        return 0;
    uint64_t call = atomic_fetch_add(&s->fault[point].calls, 1) + 1;
    uint64_t times = atomic_load(&s->fault[point].times);
    return call >= nth && call - nth < times;
}
