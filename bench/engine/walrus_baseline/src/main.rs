//! The seed's crate (walrus-rust 0.2.0) as the baseline of bench/bench_single_append.py:
//! appends N records of SIZE bytes to one topic, one per call (`append_for_topic`) or in
//! batches (`batch_append_for_topic`), and prints one JSON object.
//!
//! Usage: walrus_baseline DATA_DIR MODE SIZE COUNT [BATCH]
//!   MODE: one | batch;  FSYNC env: never (default) | interval (Milliseconds(100)).
use std::time::Instant;
use walrus_rust::{FsyncSchedule, ReadConsistency, Walrus};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 5 {
        eprintln!("usage: walrus_baseline DATA_DIR one|batch SIZE COUNT [BATCH]");
        std::process::exit(2);
    }
    // The crate reads its data directory from the environment at construction.
    std::env::set_var("WALRUS_DATA_DIR", &args[1]);
    std::env::set_var("WALRUS_QUIET", "1");
    let mode = args[2].as_str();
    let size: usize = args[3].parse().expect("SIZE");
    let count: usize = args[4].parse().expect("COUNT");
    let batch: usize = args.get(5).map(|b| b.parse().expect("BATCH")).unwrap_or(2000);
    let fsync = std::env::var("FSYNC").unwrap_or_else(|_| "never".into());
    let schedule = match fsync.as_str() {
        "never" => FsyncSchedule::NoFsync,
        "interval" => FsyncSchedule::Milliseconds(100),
        other => panic!("FSYNC must be never or interval, not {other}"),
    };
    let wal = Walrus::with_consistency_and_schedule(
        ReadConsistency::AtLeastOnce { persist_every: 1000 },
        schedule,
    )
    .expect("open walrus");
    let payload = vec![b'x'; size];
    let start = Instant::now();
    match mode {
        "one" => {
            for _ in 0..count {
                wal.append_for_topic("bench", &payload).expect("append");
            }
        }
        "batch" => {
            let refs: Vec<&[u8]> = (0..batch).map(|_| payload.as_slice()).collect();
            let mut done = 0;
            while done < count {
                let n = batch.min(count - done);
                loop {
                    match wal.batch_append_for_topic("bench", &refs[..n]) {
                        Ok(()) => break,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                        Err(e) => panic!("batch append: {e}"),
                    }
                }
                done += n;
            }
        }
        other => panic!("MODE must be one or batch, not {other}"),
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{{\"engine\": \"walrus-rust 0.2.0\", \"mode\": \"{mode}\", \"size\": {size}, \"count\": {count}, \
         \"batch\": {}, \"fsync\": \"{fsync}\", \"seconds\": {secs:.6}, \"records_per_s\": {:.1}}}",
        if mode == "batch" { batch } else { 1 },
        count as f64 / secs
    );
}
