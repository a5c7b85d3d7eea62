//! Member I/O at the same time: `FanOut::map` runs one call per member, the first on the
//! caller's thread and the others on helper threads the set keeps, and returns when every
//! call has returned.
//!
//! Why not `thread::scope`: a scoped thread is started and joined for every write, flush and
//! intent-log write of a set — 30–50 µs of a database commit's few hundred on this
//! machine's virtual CPUs. The helpers are started once (as many as the set's concurrent
//! calls have needed, at most `HELPERS_MAX`) and woken through a condition variable.
//!
//! The calls borrow the caller's data (buffers, the member list), which the helpers, being
//! long-lived, cannot express: a task's lifetime is erased, and `map` does not return — not
//! even by a panic, which the tasks and the inline call catch — before every task it handed
//! out has finished (`Batch::wait`). That is the whole safety argument; it is what
//! `thread::scope` guarantees by construction.
//!
//! `map_io` does the members' writes and flushes without the helpers when every member
//! has a direct descriptor (a file or block device opened with O_DIRECT): one `io_submit`
//! of all of them from the caller's thread, one wait (device/aio.rs). A member whose
//! operation was not done that way (not submitted, short) is done on the caller's thread.
//!
//! Under the simulator (`--cfg strata_sim`) the helpers would be OS threads the seeded
//! scheduler cannot see: there `map` is `thread::scope`, as before, and `map_io` is `map`.

#[cfg(not(strata_sim))]
use crate::sync::{Condvar, Mutex, PoisonError};
#[cfg(not(strata_sim))]
use std::collections::VecDeque;
#[cfg(not(strata_sim))]
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::{io, sync::Arc};

use crate::device::aio::AioOp;
use crate::device::BlockDevice;
#[cfg(not(strata_sim))]
use crate::device::{aio::Aio, AlignedBuf};

/// Operations one `io_submit` may carry (a set has at most 16 members).
#[cfg(not(strata_sim))]
const AIO_DEPTH: usize = 32;

/// The largest unaligned buffer copied into the kept aligned one (intent-log blocks);
/// larger ones go through the helpers.
#[cfg(not(strata_sim))]
const AIO_COPY_MAX: usize = 4 << 20;

/// Helper threads a set may keep (a 16-member parity2 set writes to 15 others at once;
/// concurrent callers share them and queue beyond that).
#[cfg(not(strata_sim))]
const HELPERS_MAX: usize = 24;

pub(crate) struct FanOut {
    #[cfg(not(strata_sim))]
    shared: Arc<Shared>,
    #[cfg(not(strata_sim))]
    aio: Mutex<AioSlot>,
}

/// The set's AIO context, made when first needed; `Off` once it could not be (never tried
/// again), and then every call goes through the helpers.
#[cfg(not(strata_sim))]
enum AioSlot {
    Untried,
    Ready {
        aio: Aio,
        /// An aligned copy of the last unaligned buffer written (O_DIRECT needs one).
        copy: Option<AlignedBuf>,
    },
    Off,
}

#[cfg(not(strata_sim))]
type Task = Box<dyn FnOnce() + Send + 'static>;

#[cfg(not(strata_sim))]
struct Shared {
    state: Mutex<State>,
    work: Condvar,
}

#[cfg(not(strata_sim))]
#[derive(Default)]
struct State {
    queue: VecDeque<Task>,
    /// Helpers started, and those inside a task (until the task has put its result: a
    /// helper past that point takes the next queued task before it sleeps).
    threads: usize,
    running: usize,
    closing: bool,
}

/// The results of one `map` call's tasks, and how many are still running.
#[cfg(not(strata_sim))]
struct Batch<R> {
    slots: Mutex<(Vec<Option<R>>, usize)>,
    done: Condvar,
}

#[cfg(not(strata_sim))]
impl<R> Batch<R> {
    fn put(&self, i: usize, r: R) {
        let mut g = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        g.0[i] = Some(r);
        g.1 -= 1;
        if g.1 == 0 {
            self.done.notify_all();
        }
    }

    /// Wait until every task has put its result; the results in order.
    fn wait(&self) -> Vec<Option<R>> {
        let mut g = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        while g.1 > 0 {
            g = self.done.wait(g).unwrap_or_else(PoisonError::into_inner);
        }
        std::mem::take(&mut g.0)
    }
}

impl FanOut {
    pub(crate) fn new() -> FanOut {
        FanOut {
            #[cfg(not(strata_sim))]
            shared: Arc::new(Shared { state: Mutex::new(State::default()), work: Condvar::new() }),
            #[cfg(not(strata_sim))]
            aio: Mutex::new(AioSlot::Untried),
        }
    }

    /// A member operation on every target at once: `op` as the kernel's asynchronous I/O
    /// when every target has a direct descriptor and no other call holds the set's AIO
    /// context, else `f` per target through `map`. The results in the targets' order.
    pub(crate) fn map_io(
        &self,
        targets: &[(usize, Arc<dyn BlockDevice>)],
        op: AioOp<'_>,
        f: impl Fn(&dyn BlockDevice) -> io::Result<()> + Sync,
    ) -> Vec<io::Result<()>> {
        let panicked = || Err(io::Error::other("a member's I/O panicked"));
        #[cfg(not(strata_sim))]
        if targets.len() > 1 {
            if let Some(out) = self.submit(targets, op, &f) {
                return out;
            }
        }
        #[cfg(strata_sim)]
        let _ = op;
        self.map(targets, |(_, d)| f(d.as_ref()), panicked)
    }

    /// `map_io` through the AIO context; None: not possible now (use the helpers).
    #[cfg(not(strata_sim))]
    fn submit(
        &self,
        targets: &[(usize, Arc<dyn BlockDevice>)],
        op: AioOp<'_>,
        f: &(impl Fn(&dyn BlockDevice) -> io::Result<()> + Sync),
    ) -> Option<Vec<io::Result<()>>> {
        let fds: Vec<std::os::fd::RawFd> = targets.iter().map(|(_, d)| d.direct_fd()).collect::<Option<_>>()?;
        let mut slot = match self.aio.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::WouldBlock) => return None,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        };
        if matches!(*slot, AioSlot::Untried) {
            *slot = Aio::new(AIO_DEPTH).map_or(AioSlot::Off, |aio| AioSlot::Ready { aio, copy: None });
        }
        let AioSlot::Ready { aio, copy } = &mut *slot else { return None };
        if !aio.usable() || fds.len() > AIO_DEPTH {
            return None;
        }
        let op = match op {
            AioOp::Write { buf, offset, dsync } if !AlignedBuf::is_aligned(buf) => {
                // Copied once for all members (as FileDevice would, per member).
                let len = AlignedBuf::padded_len(buf.len());
                if buf.is_empty() || len > AIO_COPY_MAX {
                    return None;
                }
                if copy.as_ref().is_none_or(|c| c.len() < len) {
                    *copy = Some(AlignedBuf::zeroed(len));
                }
                AioOp::Write { buf: copy.as_mut()?.fill_padded(buf)?, offset, dsync }
            }
            op => op,
        };
        let want = match op {
            AioOp::Write { buf, .. } => buf.len(),
            AioOp::Fdsync => 0,
        };
        let done = aio.run(&fds, op);
        let out = targets
            .iter()
            .zip(done)
            .map(|((_, d), r)| match r {
                Some(Ok(n)) if n == want => Ok(()),
                Some(Err(e)) => Err(e),
                // Short, or not done: this member's call, here.
                _ => catch_unwind(AssertUnwindSafe(|| f(d.as_ref())))
                    .unwrap_or_else(|_| Err(io::Error::other("a member's I/O panicked"))),
            })
            .collect();
        Some(out)
    }

    /// `f(item)` for every item, at the same time; the results in the items' order. A call
    /// on a helper that panics gives `panicked()` instead (the set treats it as that
    /// member's I/O error); a panic of the first call, made on this thread, is this call's
    /// panic (after the others have finished), as with `thread::scope`.
    pub(crate) fn map<T: Sync, R: Send>(
        &self,
        items: &[T],
        f: impl Fn(&T) -> R + Sync,
        panicked: impl Fn() -> R,
    ) -> Vec<R> {
        let Some((first, rest)) = items.split_first() else { return Vec::new() };
        if rest.is_empty() {
            return vec![f(first)];
        }
        self.map_many(first, rest, &f, &panicked)
    }

    #[cfg(strata_sim)]
    fn map_many<T: Sync, R: Send>(
        &self,
        first: &T,
        rest: &[T],
        f: &(impl Fn(&T) -> R + Sync),
        panicked: &impl Fn() -> R,
    ) -> Vec<R> {
        crate::sync::thread::scope(|s| {
            let handles: Vec<_> = rest.iter().map(|item| s.spawn(move || f(item))).collect();
            let mut out = vec![f(first)];
            out.extend(handles.into_iter().map(|h| h.join().unwrap_or_else(|_| panicked())));
            out
        })
    }

    #[cfg(not(strata_sim))]
    fn map_many<T: Sync, R: Send>(
        &self,
        first: &T,
        rest: &[T],
        f: &(impl Fn(&T) -> R + Sync),
        panicked: &impl Fn() -> R,
    ) -> Vec<R> {
        let batch: Arc<Batch<Option<R>>> = Arc::new(Batch {
            slots: Mutex::new(((0..rest.len()).map(|_| None).collect(), rest.len())),
            done: Condvar::new(),
        });
        {
            let mut st = self.shared.state.lock().unwrap_or_else(PoisonError::into_inner);
            for (i, item) in rest.iter().enumerate() {
                let (b, shared) = (Arc::clone(&batch), Arc::clone(&self.shared));
                let task: Box<dyn FnOnce() + Send + '_> = Box::new(move || {
                    let r = catch_unwind(AssertUnwindSafe(|| f(item))).ok();
                    shared.state.lock().unwrap_or_else(PoisonError::into_inner).running -= 1;
                    b.put(i, r);
                });
                // SAFETY: the task borrows `f` and `item`, which outlive this call; this call
                // does not return (nor unwind: the inline call below is caught) before
                // `batch.wait()` has seen every task put its result, after which no task
                // touches a borrow again (dropping the box drops references only).
                let task: Task = unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + '_>, Task>(task) };
                st.queue.push_back(task);
            }
            let free = st.threads - st.running;
            let start = st.queue.len().saturating_sub(free).min(HELPERS_MAX.saturating_sub(st.threads));
            for _ in 0..start {
                let shared = Arc::clone(&self.shared);
                // A helper that cannot be started leaves the work to those that run (and to
                // this thread, below); with none at all, this thread runs the queue itself.
                if std::thread::Builder::new().name("strata-member-io".into()).spawn(move || helper(shared)).is_ok() {
                    st.threads += 1;
                }
            }
            for _ in 0..rest.len().min(free) {
                self.shared.work.notify_one();
            }
        }
        let mine = catch_unwind(AssertUnwindSafe(|| f(first)));
        // Help with what no helper has taken yet (no helper could be started, or all busy):
        // the caller never waits on an empty pool.
        loop {
            let task = {
                let mut st = self.shared.state.lock().unwrap_or_else(PoisonError::into_inner);
                let t = st.queue.pop_front();
                if t.is_some() {
                    st.running += 1;
                }
                t
            };
            match task {
                Some(t) => t(),
                None => break,
            }
        }
        let others = batch.wait();
        let mine = mine.unwrap_or_else(|p| std::panic::resume_unwind(p));
        let mut out = vec![mine];
        out.extend(others.into_iter().map(|r| r.flatten().unwrap_or_else(panicked)));
        out
    }
}

/// A helper: run queued tasks until the set closes.
#[cfg(not(strata_sim))]
fn helper(shared: Arc<Shared>) {
    let mut st = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        if let Some(task) = st.queue.pop_front() {
            st.running += 1;
            drop(st);
            task();
            st = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
            continue;
        }
        if st.closing {
            st.threads -= 1;
            return;
        }
        st = shared.work.wait(st).unwrap_or_else(PoisonError::into_inner);
    }
}

impl Drop for FanOut {
    fn drop(&mut self) {
        #[cfg(not(strata_sim))]
        {
            self.shared.state.lock().unwrap_or_else(PoisonError::into_inner).closing = true;
            self.shared.work.notify_all();
        }
    }
}

#[cfg(all(test, not(strata_sim)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_item_is_mapped_in_order_and_the_calls_run_at_once() {
        let fan = FanOut::new();
        let items: Vec<usize> = (0..6).collect();
        for round in 0..50 {
            // Every call waits (at most 2 s) until all six have started: only calls running
            // at the same time all see six.
            let started = AtomicUsize::new(0);
            let out = fan.map(
                &items,
                |&i| {
                    started.fetch_add(1, Ordering::SeqCst);
                    let t = std::time::Instant::now();
                    while started.load(Ordering::SeqCst) < 6 && t.elapsed() < std::time::Duration::from_secs(2) {
                        std::thread::yield_now();
                    }
                    (i * 10, started.load(Ordering::SeqCst))
                },
                || (usize::MAX, 0),
            );
            assert_eq!(out.iter().map(|r| r.0).collect::<Vec<_>>(), [0, 10, 20, 30, 40, 50]);
            assert!(out.iter().all(|r| r.1 == 6), "round {round}: the calls ran one after another: {out:?}");
        }
        assert!(fan.shared.state.lock().unwrap().threads <= 5, "helpers are reused, not started per call");
    }

    #[test]
    fn a_call_that_panics_gives_its_error_and_the_others_their_results() {
        let fan = FanOut::new();
        let out = fan.map(&[1, 2, 3], |&i| if i == 2 { panic!("member 2") } else { i }, || 0);
        assert_eq!(out, [1, 0, 3]);
        // The first call's panic is the caller's, once the others are done.
        let done = AtomicUsize::new(0);
        let r = catch_unwind(AssertUnwindSafe(|| {
            fan.map(
                &[1, 2, 3],
                |&i| {
                    if i == 1 {
                        panic!("member 1")
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    done.fetch_add(1, Ordering::SeqCst);
                    i
                },
                || 0,
            )
        }));
        assert!(r.is_err());
        assert_eq!(done.load(Ordering::SeqCst), 2, "the panic waited for the helpers' calls");
    }

    /// Members on O_DIRECT files: writes (an unaligned buffer among them), durable writes
    /// and flushes go through one submission and land on every member; a member without a
    /// direct descriptor sends the call through the helpers, with the same result.
    #[test]
    fn member_io_through_one_submission_lands_on_every_member() {
        use crate::device::{FileDevice, FileDeviceOptions};
        use std::os::unix::fs::FileExt;
        let dir = std::env::temp_dir().join(format!("strata-fanout-aio-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let open = |i: usize, direct: bool| -> Arc<dyn BlockDevice> {
            let opts = FileDeviceOptions { direct, create_size: Some(1 << 20) };
            Arc::new(FileDevice::open(&dir.join(format!("m{i}.img")), &opts).unwrap())
        };
        let targets: Vec<(usize, Arc<dyn BlockDevice>)> = (0..3).map(|i| (i, open(i, true))).collect();
        assert!(targets.iter().all(|(_, d)| d.direct_fd().is_some()), "O_DIRECT files on {}", dir.display());
        let fan = FanOut::new();
        let data: Vec<u8> = (0..8193u32).map(|i| (i % 199) as u8 + 1).collect();
        let unaligned = &data[1..]; // 8 KiB, not aligned in memory
        let at = 3 * 4096;
        let out = fan.map_io(&targets, AioOp::Write { buf: unaligned, offset: at, dsync: true }, |_| {
            panic!("done by the submission, not by the member's call")
        });
        assert!(out.iter().all(|r| r.is_ok()), "{out:?}");
        assert!(
            matches!(&*fan.aio.lock().unwrap(), AioSlot::Ready { copy: Some(_), .. }),
            "the unaligned buffer was copied for the submission"
        );
        let aligned = {
            let mut b = AlignedBuf::zeroed(4096);
            b.fill(0xA5);
            b
        };
        let out = fan.map_io(&targets, AioOp::Write { buf: &aligned, offset: 0, dsync: false }, |_| unreachable!());
        assert!(out.iter().all(|r| r.is_ok()), "{out:?}");
        let out = fan.map_io(&targets, AioOp::Fdsync, |_| unreachable!());
        assert!(out.iter().all(|r| r.is_ok()), "{out:?}");
        for i in 0..3 {
            let back = std::fs::read(dir.join(format!("m{i}.img"))).unwrap();
            assert_eq!(&back[at as usize..at as usize + 8192], unaligned, "member {i}");
            assert!(back[..4096].iter().all(|b| *b == 0xA5), "member {i}");
        }
        // One member without a direct descriptor: every member through its own call.
        let mut mixed = targets.clone();
        mixed[2] = (2, open(3, false));
        let calls = AtomicUsize::new(0);
        let out = fan.map_io(&mixed, AioOp::Write { buf: &aligned, offset: 8192, dsync: true }, |d| {
            calls.fetch_add(1, Ordering::SeqCst);
            d.write_durable(&aligned, 8192)
        });
        assert!(out.iter().all(|r| r.is_ok()), "{out:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        let f = std::fs::File::open(dir.join("m3.img")).unwrap();
        let mut back = [0u8; 4096];
        f.read_exact_at(&mut back, 8192).unwrap();
        assert!(back.iter().all(|b| *b == 0xA5));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn concurrent_callers_share_the_helpers() {
        let fan = FanOut::new();
        let calls = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for t in 0..4 {
                let (fan, calls) = (&fan, &calls);
                s.spawn(move || {
                    for n in 0..200 {
                        let items = [t, n, t + n];
                        let buf = [t as u8; 64];
                        let out = fan.map(
                            &items,
                            |&i| {
                                calls.fetch_add(1, Ordering::Relaxed);
                                i + buf.len()
                            },
                            || 0,
                        );
                        assert_eq!(out, [t + 64, n + 64, t + n + 64]);
                    }
                });
            }
        });
        assert_eq!(calls.load(Ordering::Relaxed), 4 * 200 * 3);
        assert!(fan.shared.state.lock().unwrap().threads <= HELPERS_MAX);
    }
}
