/* crc32c.c: CRC32C (Castagnoli). SSE4.2 instructions where the CPU has them, a
 * slicing-by-8 table otherwise. The table is immutable once built (pthread_once). */
#include "internal.h"

#include <string.h>

#define POLY 0x82f63b78u

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_build(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 1; k < 8; k++) table[k][n] = (table[k - 1][n] >> 8) ^ table[0][table[k - 1][n] & 0xff];
}

static uint32_t crc_sw(uint32_t crc, const uint8_t *p, size_t len)
{
    pthread_once(&table_once, table_build);
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc;
        crc = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
              table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^ table[2][(w >> 40) & 0xff] ^
              table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
        p += 8;
        len -= 8;
    }
    while (len--) crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
    return crc;
}

#if defined(__x86_64__)
#include <nmmintrin.h>
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const uint8_t *p, size_t len)
{
    uint64_t c = crc;
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
        p += 8;
        len -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (len--) c32 = _mm_crc32_u8(c32, *p++);
    return c32;
}
#endif

#if defined(__x86_64__)
/* Four independent CRCs in one loop. The crc32 instruction takes 3 cycles but the CPU
 * starts one per cycle: a single CRC waits on itself, four interleaved ones do not. */
__attribute__((target("sse4.2"))) static void crc_hw_x4(uint32_t seed, const uint8_t *const *p, const size_t *len,
                                                       uint32_t *out)
{
    uint64_t c0 = ~seed, c1 = ~seed, c2 = ~seed, c3 = ~seed;
    size_t common = len[0];
    for (int k = 1; k < 4; k++)
        if (len[k] < common) common = len[k];
    common &= ~(size_t)7;
    for (size_t i = 0; i < common; i += 8) {
        uint64_t w0, w1, w2, w3;
        memcpy(&w0, p[0] + i, 8);
        memcpy(&w1, p[1] + i, 8);
        memcpy(&w2, p[2] + i, 8);
        memcpy(&w3, p[3] + i, 8);
        c0 = _mm_crc32_u64(c0, w0);
        c1 = _mm_crc32_u64(c1, w1);
        c2 = _mm_crc32_u64(c2, w2);
        c3 = _mm_crc32_u64(c3, w3);
    }
    out[0] = ~crc_hw((uint32_t)c0, p[0] + common, len[0] - common);
    out[1] = ~crc_hw((uint32_t)c1, p[1] + common, len[1] - common);
    out[2] = ~crc_hw((uint32_t)c2, p[2] + common, len[2] - common);
    out[3] = ~crc_hw((uint32_t)c3, p[3] + common, len[3] - common);
}
#endif

void crc32c_x4(uint32_t crc, const uint8_t *const *bufs, const size_t *lens, uint32_t *out)
{
#if defined(__x86_64__)
    if (__builtin_cpu_supports("sse4.2")) {
        crc_hw_x4(crc, bufs, lens, out);
        return;
    }
#endif
    for (int k = 0; k < 4; k++) out[k] = crc32c(crc, bufs[k], lens[k]);
}

uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    crc = ~crc;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("sse4.2")) return ~crc_hw(crc, p, len);
#endif
    return ~crc_sw(crc, p, len);
}
