"""Region snapshots on the meta topic: a region's stream maps (StreamState.to_json of each
stream) at a region position, so that opening replays only the log after the newest one.
Their record both ways (`take` writes one, the replay hands each one it meets to `apply`,
and the open decodes the newest of each region with `load`), and when one is due.

    b"n" u32 region  -> zlib(JSON {"upto": region position, "streams": [StreamState...]})

Only the newest snapshot of each region is kept (as stored, decoded when used), so an open
that meets many older snapshots in the meta topic parses only the last.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from walfs.cluster.layout import Target, stream_key_bytes
from walfs.cluster.producing import Writer
from walfs.cluster.state import ClusterState, StreamState
from walfs.errors import WalCorruptError

KIND = b"n"  # the meta keys' first byte that is this module's
# The cleaner snapshots a region once its replay has passed this many Kafka records since
# the region's newest snapshot, so opening replays at most about this many per region
# (plus what came in since the last cleaner run); a snapshot costs O(chunks the region
# holds), so not after every record (docs/cluster.md, "Snapshots and the cleaner").
SNAPSHOT_EVERY = 10_000


class Snapshots:
    """The newest snapshot of each region, and where it stands."""

    def __init__(self, t: Target, state: ClusterState, writer: Writer) -> None:
        self.t = t
        self.state = state
        self.writer = writer
        self.blobs: dict[int, bytes] = {}  # region -> its newest snapshot as stored (zlib(JSON))
        self.upto: dict[int, int] = {}  # region -> position of its newest snapshot

    def apply(self, rest: bytes, value: bytes | None) -> None:
        """One meta record of KIND (`rest`: the key after its first byte); under the
        state's lock, by the replay. Checked when the open decodes it (`load`)."""
        if len(rest) != 4 or value is None:
            return
        r = int.from_bytes(rest, "little")
        if r < self.t.regions:
            self.blobs[r] = value

    def load(self, region: int) -> int:
        """The region's newest snapshot into the state (at open, before the region's
        replay starts); returns the region position it covers (0: none)."""
        blob = self.blobs.get(region)
        if blob is None:
            return 0
        try:
            snap = json.loads(zlib.decompress(blob))
            start = int(snap["upto"])
            self.upto[region] = start
            for d in snap["streams"]:
                s = StreamState.from_json(d, region)
                self.state.add_stream(stream_key_bytes(s.org, s.topic, s.partition), s)
        except (KeyError, TypeError, ValueError, zlib.error) as e:
            raise WalCorruptError(
                f"{self.t.meta_topic}: snapshot of region {region} unreadable: {e}"
            ) from None
        return start

    def take(self, region: int, write: bool = True) -> dict[str, Any]:
        """The region's stream maps at its replay position; written to the meta topic."""
        with self.state.lock:
            upto = self.state.pos.get(region, 0)
            snap = {
                "upto": upto,
                "streams": [s.to_json() for s in self.state.streams.values() if s.region == region],
            }
        if write:
            blob = zlib.compress(json.dumps(snap, separators=(",", ":")).encode())
            self.writer.meta(KIND + region.to_bytes(4, "little"), blob)
            self.upto[region] = max(self.upto.get(region, 0), upto)
        return snap

    def due(self, every: int) -> int:
        """Snapshots every region whose replay passed `every` Kafka records since its newest
        snapshot; returns how many it wrote."""
        done = 0
        for r in range(self.t.regions):
            if self.state.pos.get(r, 0) - self.upto.get(r, 0) >= every:
                self.take(r)
                done += 1
        return done
