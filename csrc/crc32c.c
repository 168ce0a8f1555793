/* crc32c.c: CRC32C (Castagnoli). SSE4.2 instructions where the CPU has them, a
 * slicing-by-8 table otherwise. The tables are immutable once built (pthread_once).
 * Four independent CRCs run interleaved (crc32c_x4: four records; crc_hw_striped: four
 * stripes of one long buffer at a time, joined in GF(2)). */
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

/* ---- one long buffer as interleaved stripes ----
 * A single CRC runs at one crc32 instruction per 3 cycles (it waits on itself); a long
 * buffer is cut in stripes whose CRCs run interleaved, then joined: for the raw register
 * c, crc(c, A || B) = c_A * x^(8|B|) mod P xor crc(0, B),
 * with the multiplication in GF(2) (zlib's crc32_combine, for the Castagnoli
 * polynomial). */

/* a * b mod P, bit-reflected as the register is (bit 31 is x^0). */
static uint32_t multmodp(uint32_t a, uint32_t b)
{
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
    }
    return p;
}

static uint32_t x2n_table[64]; /* x^(2^k) mod P */
static pthread_once_t x2n_once = PTHREAD_ONCE_INIT;

static void x2n_build(void)
{
    uint32_t p = 1u << 30; /* x^1 */
    x2n_table[0] = p;
    for (int k = 1; k < 64; k++) x2n_table[k] = p = multmodp(p, p);
}

/* x^(8 * nbytes) mod P: what shifting the register over nbytes zero bytes multiplies by. */
static uint32_t shift_bytes(uint64_t nbytes)
{
    pthread_once(&x2n_once, x2n_build);
    uint32_t p = 1u << 31; /* x^0 */
    for (int k = 3; nbytes && k < 64; nbytes >>= 1, k++)
        if (nbytes & 1) p = multmodp(x2n_table[k], p);
    return p;
}

/* A buffer of 4 * STRIPE bytes or more is cut in chunks of four stripes whose CRCs run
 * interleaved, each chunk's four joined before the next: the join multiplies by the one
 * constant x^(8 * stripe) mod P, which is linear in the register, so it is four lookups
 * in a table built once (a few cycles, where a general multmodp is a few hundred). A
 * 16 KiB record body, which a single CRC takes ~3 cycles per 8 bytes over, is four
 * chunks of 1 KiB stripes; a 1 MiB fetch batch sixteen of 16 KiB stripes (LONG_STRIPE,
 * fewer joins, each of which the next chunk's first stripe waits for). */
#define STRIPE 1024
#define LONG_STRIPE (16 * 1024)

/* stripe_table[0 or 1][k][b] = (b << 8k) * x^(8 * (STRIPE or LONG_STRIPE)) mod P */
static uint32_t stripe_table[2][4][256];
static pthread_once_t stripe_once = PTHREAD_ONCE_INIT;

static void stripe_build(void)
{
    for (int t = 0; t < 2; t++) {
        uint32_t s = shift_bytes(t ? LONG_STRIPE : STRIPE);
        for (int k = 0; k < 4; k++)
            for (uint32_t b = 0; b < 256; b++) stripe_table[t][k][b] = multmodp(s, b << (8 * k));
    }
}

static inline uint32_t shift_stripe(const uint32_t (*tab)[256], uint32_t c)
{
    return tab[0][c & 0xff] ^ tab[1][(c >> 8) & 0xff] ^ tab[2][(c >> 16) & 0xff] ^ tab[3][c >> 24];
}

#if defined(__x86_64__)
/* The whole chunks of four stripes of `stripe` bytes at the start of p[0..*len), from the
 * raw register c; advances p and len past them. */
__attribute__((target("sse4.2"))) static inline uint32_t crc_hw_chunks(uint32_t c, const uint8_t **pp, size_t *len,
                                                                      size_t stripe, const uint32_t (*tab)[256])
{
    const uint8_t *p = *pp;
    for (; *len >= 4 * stripe; p += 4 * stripe, *len -= 4 * stripe) {
        uint64_t c0 = c, c1 = 0, c2 = 0, c3 = 0;
        for (size_t i = 0; i < stripe; i += 8) {
            uint64_t w0, w1, w2, w3;
            memcpy(&w0, p + i, 8);
            memcpy(&w1, p + stripe + i, 8);
            memcpy(&w2, p + 2 * stripe + i, 8);
            memcpy(&w3, p + 3 * stripe + i, 8);
            c0 = _mm_crc32_u64(c0, w0);
            c1 = _mm_crc32_u64(c1, w1);
            c2 = _mm_crc32_u64(c2, w2);
            c3 = _mm_crc32_u64(c3, w3);
        }
        c = shift_stripe(tab, (uint32_t)c0) ^ (uint32_t)c1;
        c = shift_stripe(tab, c) ^ (uint32_t)c2;
        c = shift_stripe(tab, c) ^ (uint32_t)c3;
    }
    *pp = p;
    return c;
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw_striped(uint32_t crc, const uint8_t *p, size_t len)
{
    pthread_once(&stripe_once, stripe_build);
    uint32_t c = crc_hw_chunks(crc, &p, &len, LONG_STRIPE, stripe_table[1]);
    c = crc_hw_chunks(c, &p, &len, STRIPE, stripe_table[0]);
    return crc_hw(c, p, len);
}
#endif

uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    crc = ~crc;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("sse4.2"))
        return ~(len >= 4 * STRIPE ? crc_hw_striped(crc, p, len) : crc_hw(crc, p, len));
#endif
    return ~crc_sw(crc, p, len);
}

uint32_t walfs_crc32c(uint32_t crc, const uint8_t *buf, uint64_t len)
{
    return crc32c(crc, buf, len);
}
