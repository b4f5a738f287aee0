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

size_t segd_markers_join(segd_marker_t *dst, const segd_marker_t *a, size_t na,
                         const segd_marker_t *b, size_t nb)
{
    size_t w = 0, i = 0, j = 0;
    while (i < na || j < nb) {
        segd_marker_t m;
        if (j == nb || (i < na && a[i].key < b[j].key))
            m = a[i++];
        else
            m = b[j++];
        if (m.before_ms < 0)
            m.before_ms = 0;
        if (w && dst[w - 1].key == m.key) {
            if (m.before_ms > dst[w - 1].before_ms)
                dst[w - 1].before_ms = m.before_ms;
        } else {
            dst[w++] = m;
        }
    }
    return w;
}
