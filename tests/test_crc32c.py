"""The core's CRC-32C against an independent implementation (the crc32c package): long
buffers are cut in chunks of four stripes whose CRCs run interleaved and are then joined
(csrc/crc32c.c); every length around the cut (the threshold itself, whole chunks and a
tail, a 16 KiB record body) and a non-zero starting CRC must give the same value as one
pass."""

from __future__ import annotations

import os

import pytest
from crc32c import crc32c
from walfs._core import lib

CHUNK = 4 * 1024  # csrc/crc32c.c: 4 * STRIPE
LONG_CHUNK = 4 * 16 * 1024  # 4 * LONG_STRIPE


@pytest.mark.parametrize(
    "n",
    [0, 1, 7, 8, 63, CHUNK - 1, CHUNK, CHUNK + 1, CHUNK + 7, 2 * CHUNK + 31, 16384 + 14,
     LONG_CHUNK - 1, LONG_CHUNK, LONG_CHUNK + CHUNK + 7, 65536 + 5, 1 << 20, (1 << 20) + 3, 3_000_001],
)
@pytest.mark.parametrize("seed", [0, 0x12345678, 0xFFFFFFFF])
def test_core_crc_matches_a_one_pass_crc(n: int, seed: int) -> None:
    data = os.urandom(n)
    assert lib.walfs_crc32c(seed, data, n) == crc32c(data, seed)


@pytest.mark.parametrize("chunk", [CHUNK, LONG_CHUNK])
def test_a_flipped_bit_in_any_stripe_changes_the_crc(chunk: int) -> None:
    data = bytearray(os.urandom(chunk + 2 * CHUNK + 13))
    good = lib.walfs_crc32c(0, bytes(data), len(data))
    for at in (0, chunk // 4 + 1, chunk // 2 + 3, 3 * chunk // 4 + 5, chunk + CHUNK + 1, len(data) - 1):
        data[at] ^= 0x10
        assert lib.walfs_crc32c(0, bytes(data), len(data)) != good
        data[at] ^= 0x10
