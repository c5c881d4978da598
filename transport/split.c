/* Transfer splitting: pure arithmetic, shared by the posting path and tests. */
#include "transport/transport.h"

size_t shs__chunk_size(size_t max_chunk, size_t max_msg_sz)
{
    size_t c = max_msg_sz;
    if (max_chunk != 0 && (c == 0 || max_chunk < c))
        c = max_chunk;
    /* an unknown limit and no knob: 1 GiB keeps lengths within the 32-bit sge */
    if (c == 0 || c > (1u << 30))
        c = 1u << 30;
    return c;
}

size_t shs__read_chunk_size(size_t read_chunk, size_t chunk, uint64_t read_budget)
{
    size_t c = read_chunk != 0 && read_chunk < chunk ? read_chunk : chunk;
    if (read_budget != 0 && c > read_budget / 2)
        c = (size_t)(read_budget / 2);
    return c > 0 ? c : 1;
}

size_t shs__split_count(size_t len, size_t chunk)
{
    return len / chunk + (len % chunk != 0);
}

void shs__split_piece(size_t len, size_t chunk, size_t i, size_t *off_p, size_t *len_p)
{
    size_t off = i * chunk;
    *off_p = off;
    *len_p = len - off < chunk ? len - off : chunk;
}

bool shs__range_ok(size_t off, size_t len, size_t region_len)
{
    return off <= region_len && len <= region_len - off;
}
