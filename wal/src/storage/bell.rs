//! The bell the I/O thread sleeps on (see [`Bell`]).
//!
//! Model-checked with loom, with the wake-up protocol of the I/O thread and of a caller that
//! runs a round itself (`AsyncWal::append_wait`):
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p wal --lib --release bell`.

#[cfg(loom)]
use loom::sync::{Condvar, Mutex, MutexGuard};
use std::io;
use std::sync::OnceLock;
#[cfg(not(loom))]
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Poisoned only if a thread panicked holding it; a few flags stay consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Wakes a thread that sleeps for work and completions together (the I/O thread): rung by
/// whoever hands it work, and by a backend when a completion is ready. Ringing a bell that is
/// already rung costs one uncontended lock; a sleeper on the condition variable is notified,
/// and one asleep in the kernel (an io_uring wait) is woken by a byte on a pipe the ring polls.
/// A ring is never lost: it stays set until the sleeper's next wait consumes it.
#[derive(Debug, Default)]
pub struct Bell {
    st: Mutex<BellState>,
    cv: Condvar,
    pipe: OnceLock<Option<(std::io::PipeReader, std::io::PipeWriter)>>,
}

#[derive(Debug, Default)]
struct BellState {
    rung: bool,
    asleep: bool,
    in_kernel: bool,
    /// Bytes written to the pipe and not yet read back.
    unread: usize,
}

impl Bell {
    pub fn new() -> Bell {
        Bell::default()
    }

    /// Wakes the sleeper, or makes its next wait return at once.
    pub fn ring(&self) {
        let mut s = lock(&self.st);
        if s.rung {
            return;
        }
        s.rung = true;
        if s.asleep {
            self.cv.notify_one();
        }
        if s.in_kernel {
            // One byte wakes it; later rings find `rung` set and write nothing.
            use std::io::Write;
            if let Some(Some((_, w))) = self.pipe.get() {
                if (&*w).write(&[1]).is_ok_and(|n| n == 1) {
                    s.unread += 1;
                }
            }
        }
    }

    /// Sleeps on the condition variable until rung (or `timeout`), and consumes the ring.
    pub fn wait(&self, timeout: Option<Duration>) {
        let mut s = lock(&self.st);
        if !s.rung {
            s.asleep = true;
            match timeout {
                None => {
                    while !s.rung {
                        s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
                    }
                }
                Some(t) => {
                    let deadline = std::time::Instant::now() + t;
                    while !s.rung {
                        let left = deadline.saturating_duration_since(std::time::Instant::now());
                        if left.is_zero() {
                            break;
                        }
                        s = self.cv.wait_timeout(s, left).unwrap_or_else(|e| e.into_inner()).0;
                    }
                }
            }
            s.asleep = false;
        }
        s.rung = false;
    }

    /// A descriptor that becomes readable when the bell rings during a kernel wait (for a
    /// backend that sleeps in its ring).
    #[cfg(target_os = "linux")]
    pub(crate) fn pipe_fd(&self) -> io::Result<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        match self.pipe.get_or_init(|| std::io::pipe().ok()) {
            Some((r, _)) => Ok(r.as_raw_fd()),
            None => Err(io::Error::other("no pipe for the I/O thread's bell")),
        }
    }

    /// Before a kernel wait: false (and the ring consumed) when already rung, so do not sleep.
    #[cfg(target_os = "linux")]
    pub(crate) fn enter_kernel(&self) -> bool {
        let mut s = lock(&self.st);
        if s.rung {
            s.rung = false;
            return false;
        }
        s.in_kernel = true;
        true
    }

    /// After a kernel wait: consumes the ring and reads back what was written to the pipe
    /// (it is there: it was written under the same lock).
    #[cfg(target_os = "linux")]
    pub(crate) fn leave_kernel(&self) {
        use std::io::Read;
        let mut s = lock(&self.st);
        s.in_kernel = false;
        s.rung = false;
        let n = std::mem::take(&mut s.unread);
        if n > 0 {
            if let Some(Some((r, _))) = self.pipe.get() {
                let mut buf = vec![0u8; n];
                let _ = (&*r).read_exact(&mut buf);
            }
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::Bell;
    use loom::sync::{Arc, Mutex};
    use loom::thread;

    /// Work handed over and rung twice, by another thread, while the sleeper takes what is
    /// there and sleeps when nothing is: every ring wakes it or makes its next wait return
    /// (a lost ring leaves it asleep forever, which loom reports as a deadlock).
    #[test]
    fn a_ring_is_never_lost() {
        loom::model(|| {
            let bell = Arc::new(Bell::new());
            let work = Arc::new(Mutex::new(0usize));
            let (b, w) = (bell.clone(), work.clone());
            let producer = thread::spawn(move || {
                for _ in 0..2 {
                    *w.lock().unwrap() += 1;
                    b.ring();
                }
            });
            let mut taken = 0;
            while taken < 2 {
                let n = std::mem::take(&mut *work.lock().unwrap());
                taken += n;
                if n == 0 {
                    bell.wait(None);
                }
            }
            producer.join().unwrap();
        });
    }

    /// The submit side's state (`io_thread::queue::Submit`): the queue and the `quiet` flag.
    #[derive(Default)]
    struct Submit {
        queue: Vec<u32>,
        quiet: bool,
    }

    /// The I/O thread's state under the engine lock: a sync in flight whose completion the
    /// device delivers, and what was processed.
    struct Engine {
        syncing: bool,
        processed: Vec<u32>,
    }

    /// One round: take the queue, collect a completed sync. Returns whether anything happened.
    fn round(e: &mut Engine, submit: &Mutex<Submit>, completed: &Mutex<bool>) -> bool {
        let taken = std::mem::take(&mut submit.lock().unwrap().queue);
        let mut progress = !taken.is_empty();
        e.processed.extend(taken);
        if e.syncing && std::mem::take(&mut *completed.lock().unwrap()) {
            e.syncing = false;
            progress = true;
        }
        progress
    }

    /// The wake-up protocol of `io_thread/`, as a model over the real [`Bell`]: the I/O
    /// thread sleeps (engine lock released) with `quiet` set only while a sync is in flight,
    /// whose completion rings the bell (`Ready::finish`); an append rings unless `quiet`
    /// (`AsyncWal::enqueue`); a caller of `append_wait` that takes the free engine lock
    /// enqueues without ringing, clears `quiet`, runs a round and rings on leaving if anything
    /// is left, and one that does not get the lock appends as usual. Every entry gets processed
    /// and the I/O thread never sleeps forever, in every interleaving.
    #[test]
    fn no_append_is_stranded_by_a_caller_running_a_round() {
        loom::model(|| {
            let bell = Arc::new(Bell::new());
            let submit = Arc::new(Mutex::new(Submit::default()));
            let engine = Arc::new(Mutex::new(Engine { syncing: true, processed: Vec::new() }));
            let completed = Arc::new(Mutex::new(false));

            // The device: the sync in flight completes and rings (a sync thread's `finish`).
            let (b, c) = (bell.clone(), completed.clone());
            let device = thread::spawn(move || {
                *c.lock().unwrap() = true;
                b.ring();
            });
            // A plain append: rings unless the I/O thread sleeps quiet (waiting for a sync).
            let (b, s) = (bell.clone(), submit.clone());
            let appender = thread::spawn(move || {
                let mut st = s.lock().unwrap();
                st.queue.push(1);
                if !st.quiet {
                    b.ring();
                }
            });
            // append_wait.
            let (b, s, e, c) = (bell.clone(), submit.clone(), engine.clone(), completed.clone());
            let waiter = thread::spawn(move || {
                let Ok(mut eng) = e.try_lock() else {
                    let mut st = s.lock().unwrap();
                    st.queue.push(2);
                    if !st.quiet {
                        b.ring();
                    }
                    return;
                };
                {
                    let mut st = s.lock().unwrap();
                    st.queue.push(2);
                    st.quiet = false;
                }
                round(&mut eng, &s, &c);
                let busy = eng.syncing || !s.lock().unwrap().queue.is_empty();
                // Model only: the real I/O thread may sleep idle forever once the work is done;
                // the model's exits when all is processed, so it is told. This ring fires only
                // when nothing is left, so it cannot hide a stranded entry.
                let done = eng.processed.len() == 2 && !eng.syncing;
                drop(eng);
                if busy || done {
                    b.ring();
                }
            });
            // The I/O thread, until both entries are processed and no sync is in flight.
            loop {
                let mut eng = engine.lock().unwrap();
                let progress = round(&mut eng, &submit, &completed);
                if eng.processed.len() == 2 && !eng.syncing {
                    break;
                }
                if progress {
                    continue;
                }
                let quiet = eng.syncing;
                if quiet {
                    submit.lock().unwrap().quiet = true;
                }
                drop(eng);
                bell.wait(None);
                if quiet {
                    submit.lock().unwrap().quiet = false;
                }
            }
            for t in [device, appender, waiter] {
                t.join().unwrap();
            }
            let mut got = engine.lock().unwrap().processed.clone();
            got.sort_unstable();
            assert_eq!(got, vec![1, 2]);
        });
    }
}
