#!/usr/bin/env bash
# The example pipeline, end to end (examples/README.md):
#   examples/run.sh [DATA_DIR] [MOUNTPOINT] [KAFKA_PORT]
# ingest with `echo >>`, aggregate with Spark (topic orders -> topic totals), and show the
# results with `tail -f` and kcat. Needs `walfs`, `kcat` and the venv's python on PATH
# (after `make install`: PATH=$PWD/.venv/bin:$PATH).
set -euo pipefail
DATA=${1:-/var/lib/walfs/example}
MNT=${2:-/mnt/walfs-example}
PORT=${3:-9092}
HERE=$(cd "$(dirname "$0")" && pwd)

mkdir -p "$MNT"
walfs mount "$DATA" "$MNT" --kafka-listen "127.0.0.1:$PORT"
trap 'kill "$TAIL" 2>/dev/null || true; walfs umount "$MNT"' EXIT

# 1. Ingest: one line, one durable record.
for i in $(seq 1 20); do
    if [ $((i % 4)) = 0 ]; then status=refunded; else status=paid; fi
    echo "order $i $status" >> "$MNT/orders"
done
# Counts are per 5-second window, written once the window closes: a later record closes it.
sleep 6
echo "order 21 paid" >> "$MNT/orders"

# 2. Follow the results as they arrive (tail -F: the topic appears with its first record).
tail -n +1 -F "$MNT/totals" 2>/dev/null > >(sed -u 's/^/tail: /') &
TAIL=$!

# 3. The streaming aggregation, through the mount's Kafka listener. --available-now
#    processes what is there and stops; without it, it runs until Ctrl-C.
python "$HERE/order_totals.py" --bootstrap "127.0.0.1:$PORT" --checkpoint "$DATA.checkpoint" --available-now

# 4. The same results for Kafka clients.
kcat -b "127.0.0.1:$PORT" -C -t totals -e -q -f 'kcat: %s\n'
sleep 3  # let tail -F (which polls a FUSE file once a second) print what it has
