use std::sync::Arc;
use wal::{AsyncOptions, AsyncWal, Durability, Epoch, Options, Wal};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("wal-quickstart-{}", std::process::id()));

    // Open (or create) the log and start its writer thread.
    let (log, report) = AsyncWal::open(&dir, Options::default(), AsyncOptions::default())?;
    println!("opened: {} (next LSN {})", report.verdict, log.next_lsn());
    let log = Arc::new(log);

    // Four threads append commands; each waits until its entry is durable (fdatasync done).
    // Concurrent appends share one write and one fdatasync.
    let writers: Vec<_> = (0..4)
        .map(|t| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
                for i in 0..100 {
                    let command = format!("thread {t} sets key {i}").into_bytes();
                    // A Vec is moved into the log; a borrowed &[u8] would be copied once.
                    let ticket = log.append(Epoch(0), command, Durability::Durable)?;
                    // Ok(lsn): durable. Err: Rejected (not logged) or Indeterminate (maybe).
                    let lsn = ticket.wait()?;
                    if i == 0 {
                        println!("thread {t}: LSN {lsn} is durable");
                    }
                }
                Ok(())
            })
        })
        .collect();
    for w in writers {
        w.join().expect("writer thread").map_err(|e| e.to_string())?;
    }
    log.close()?; // drain, sync, seal: the next open finds a clean close

    // After a restart: reopen and replay every entry in LSN order.
    let (log, _report) = Wal::open(&dir, Options::default())?;
    let mut count = 0;
    for entry in log.replay()?.entries() {
        let (_lsn, _payload) = entry?;
        count += 1;
    }
    assert_eq!(count, 400);
    println!("replayed {count} entries");
    log.close()?;
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
