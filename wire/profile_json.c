/* JSON shape of live entries; see profile_json.h. */
#include "wire/profile_json.h"

json_t *segd_entries_json(const segd_entry_t *e, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(
            arr, json_pack("{s:I,s:I,s:I,s:i,s:i}", "id", (json_int_t)e[i].segment_id,
                           "expires_at", (json_int_t)e[i].expiry_s, "ts_ms",
                           (json_int_t)e[i].ts_ms, "flags", e[i].flags, "partner_id",
                           e[i].partner_id));
    return arr;
}
