/* Sorted retirement markers; see markers.h. */
#include "core/markers.h"

const segd_marker_t *segd_markers_find(const segd_marker_t *v, size_t n, int64_t key)
{
    if (!n || key < v[0].key || key > v[n - 1].key)
        return NULL;
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (v[mid].key < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && v[lo].key == key ? &v[lo] : NULL;
}

size_t segd_markers_put(segd_marker_t *dst, const segd_marker_t *src, size_t n, int64_t key,
                        int64_t before_ms)
{
    size_t w = 0, r = 0;
    for (; r < n && src[r].key < key; r++)
        dst[w++] = src[r];
    if (r < n && src[r].key == key && src[r].before_ms > before_ms)
        before_ms = src[r].before_ms;
    if (r < n && src[r].key == key)
        r++;
    dst[w++] = (segd_marker_t){key, before_ms};
    for (; r < n; r++)
        dst[w++] = src[r];
    return w;
}
