//! The job queue between a block server's connection readers and its workers (NBD and
//! iSCSI): bounded, many senders and many receivers, one wake-up per job.
//!
//! Why not `std::sync::mpsc` behind a mutex: its receiver cannot be shared, so the workers
//! queued on a mutex around it — the holder slept in `recv` while the others slept on the
//! mutex, and every job woke two threads (the holder, then the next in line for the
//! mutex). At 1 MiB writes, queue depth 4, on two vCPUs, most of the workers' context
//! switches were in that mutex and in `recv` (`perf record -e sched:sched_switch --call-graph
//! dwarf`, docs/benchmarks/block-luns.md).
//! Here a job wakes at most one idle worker, and none when a worker is already awake to
//! take it.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

struct State<T> {
    jobs: VecDeque<T>,
    senders: usize,
    receivers: usize,
    /// Receivers asleep in `recv` (a send wakes one only if there is one).
    idle: usize,
    /// Senders asleep in `send` on a full queue.
    blocked: usize,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    has_jobs: Condvar,
    has_room: Condvar,
    capacity: usize,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A panic never happens while the lock is held (only queue operations run under
        // it), but a poisoned queue is still a consistent one.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The sending side; clones share the queue. When every sender is gone, receivers get
/// `None` once the queue is empty.
pub struct Sender<T>(Arc<Shared<T>>);

/// The receiving side; clones share the queue (one per worker).
pub struct Receiver<T>(Arc<Shared<T>>);

/// A queue of at most `capacity` jobs (at least one).
pub fn queue<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State { jobs: VecDeque::new(), senders: 1, receivers: 1, idle: 0, blocked: 0 }),
        has_jobs: Condvar::new(),
        has_room: Condvar::new(),
        capacity: capacity.max(1),
    });
    (Sender(shared.clone()), Receiver(shared))
}

impl<T> Sender<T> {
    /// Queue `job`, waiting while the queue is full. Gives the job back when no receiver
    /// is left to run it.
    pub fn send(&self, job: T) -> Result<(), T> {
        let s = &self.0;
        let mut st = s.lock();
        while st.receivers > 0 && st.jobs.len() >= s.capacity {
            st.blocked += 1;
            st = s.has_room.wait(st).unwrap_or_else(|p| p.into_inner());
            st.blocked -= 1;
        }
        if st.receivers == 0 {
            return Err(job);
        }
        st.jobs.push_back(job);
        let wake = st.idle > 0;
        drop(st);
        if wake {
            s.has_jobs.notify_one();
        }
        Ok(())
    }
}

impl<T> Receiver<T> {
    /// The next job, waiting for one; `None` when the queue is empty and every sender is
    /// gone.
    pub fn recv(&self) -> Option<T> {
        let s = &self.0;
        let mut st = s.lock();
        loop {
            if let Some(job) = st.jobs.pop_front() {
                let wake = st.blocked > 0;
                drop(st);
                if wake {
                    s.has_room.notify_one();
                }
                return Some(job);
            }
            if st.senders == 0 {
                return None;
            }
            st.idle += 1;
            st = s.has_jobs.wait(st).unwrap_or_else(|p| p.into_inner());
            st.idle -= 1;
        }
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.0.lock().senders += 1;
        Sender(self.0.clone())
    }
}

impl<T> Clone for Receiver<T> {
    fn clone(&self) -> Self {
        self.0.lock().receivers += 1;
        Receiver(self.0.clone())
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let last = {
            let mut st = self.0.lock();
            st.senders -= 1;
            st.senders == 0
        };
        if last {
            self.0.has_jobs.notify_all();
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let last = {
            let mut st = self.0.lock();
            st.receivers -= 1;
            st.receivers == 0
        };
        if last {
            self.0.has_room.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn every_job_is_received_once_by_many_workers() {
        let (tx, rx) = queue::<u64>(4);
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let rx = rx.clone();
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    while let Some(j) = rx.recv() {
                        got.push(j);
                    }
                    got
                })
            })
            .collect();
        drop(rx);
        let senders: Vec<_> = (0..3u64)
            .map(|k| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in 0..1000 {
                        tx.send(k * 1000 + i).expect("workers are running");
                    }
                })
            })
            .collect();
        drop(tx);
        for s in senders {
            s.join().expect("sender");
        }
        let mut all: Vec<u64> = workers.into_iter().flat_map(|w| w.join().expect("worker")).collect();
        all.sort_unstable();
        assert_eq!(all, (0..3000).collect::<Vec<_>>(), "each job exactly once, and workers end when senders do");
    }

    #[test]
    fn a_full_queue_holds_the_sender_until_a_job_is_taken() {
        let (tx, rx) = queue::<u32>(2);
        tx.send(1).expect("room");
        tx.send(2).expect("room");
        let t = std::thread::spawn(move || tx.send(3));
        std::thread::sleep(Duration::from_millis(50));
        assert!(!t.is_finished(), "a third job waits for room");
        assert_eq!(rx.recv(), Some(1));
        t.join().expect("sender").expect("sent once there was room");
        assert_eq!((rx.recv(), rx.recv(), rx.recv()), (Some(2), Some(3), None));
    }

    #[test]
    fn a_send_without_receivers_gives_the_job_back() {
        let (tx, rx) = queue::<u32>(1);
        tx.send(1).expect("room");
        let t = std::thread::spawn({
            let tx = tx.clone();
            move || tx.send(2)
        });
        std::thread::sleep(Duration::from_millis(50));
        drop(rx);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !t.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(t.is_finished(), "a sender blocked on a full queue stays blocked after the last worker left");
        assert_eq!(t.join().expect("sender"), Err(2), "a blocked sender is released when the workers are gone");
        assert_eq!(tx.send(3), Err(3));
    }
}
