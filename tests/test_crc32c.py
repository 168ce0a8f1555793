"""The core's CRC-32C against an independent implementation (the crc32c package): long
buffers are cut in four quarters whose CRCs run interleaved and are then joined
(csrc/crc32c.c); every length around the cut (quarters not a multiple of 8, a tail, the
threshold itself) and a non-zero starting CRC must give the same value as one pass."""

from __future__ import annotations

import os

import pytest
from crc32c import crc32c
from walfs._core import lib

SPLIT_FROM = 32 * 1024  # csrc/crc32c.c CRC_SPLIT_FROM


@pytest.mark.parametrize(
    "n",
    [0, 1, 7, 8, 63, SPLIT_FROM - 1, SPLIT_FROM, SPLIT_FROM + 1, SPLIT_FROM + 7, SPLIT_FROM + 31,
     65536 + 5, 1 << 20, (1 << 20) + 3, 3_000_001],
)
@pytest.mark.parametrize("seed", [0, 0x12345678, 0xFFFFFFFF])
def test_core_crc_matches_a_one_pass_crc(n: int, seed: int) -> None:
    data = os.urandom(n)
    assert lib.walfs_crc32c(seed, data, n) == crc32c(data, seed)


def test_a_flipped_bit_in_any_quarter_changes_the_crc() -> None:
    data = bytearray(os.urandom((1 << 20) + 13))
    good = lib.walfs_crc32c(0, bytes(data), len(data))
    for at in (0, len(data) // 4 + 1, len(data) // 2 + 3, 3 * len(data) // 4 + 5, len(data) - 1):
        data[at] ^= 0x10
        assert lib.walfs_crc32c(0, bytes(data), len(data)) != good
        data[at] ^= 0x10
