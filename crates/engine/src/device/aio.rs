//! Member I/O of a set submitted together from the caller's thread (Linux AIO: `io_submit`,
//! then one `io_getevents` for all of them), for members opened with O_DIRECT.
//!
//! Why: a healthy mirror's intent-log write on two loop devices went through a helper
//! thread (fan_out.rs) woken for the second member — on this machine's two vCPUs, with the
//! database using most of them, ~5 more context switches and ~110 µs more CPU per pgbench
//! transaction than a single device, which is what bounded the mirror's TPS (docs/
//! benchmarks/redundancy.md). One `io_submit` of both members' writes from the caller's
//! thread needs no second thread; a durable write is one RWF_DSYNC write per member (FUA
//! where the device has it), no separate flush.
//!
//! Every operation submitted is waited for before `run` returns — the kernel reads the
//! caller's buffer until then. If the wait itself fails (it should not), the context is
//! destroyed, which blocks until everything in flight has completed, and the operations
//! whose results were not collected are left to the caller to do again synchronously.
//!
//! Under the simulator (`--cfg strata_sim`) only `AioOp` is built: simulated disks have no
//! descriptors, and every set's member I/O goes through `FanOut::map`.

#[cfg(not(strata_sim))]
use std::io;
#[cfg(not(strata_sim))]
use std::os::fd::RawFd;

#[cfg(not(strata_sim))]
const IOCB_CMD_PWRITE: u16 = 1;
#[cfg(not(strata_sim))]
const IOCB_CMD_FDSYNC: u16 = 3;

/// What every descriptor of one `run` gets.
#[derive(Clone, Copy)]
#[cfg_attr(strata_sim, allow(dead_code))]
pub(crate) enum AioOp<'a> {
    /// Write all of `buf` (aligned for O_DIRECT) at `offset`; with `dsync`, durable on return.
    Write { buf: &'a [u8], offset: u64, dsync: bool },
    /// `fdatasync`.
    Fdsync,
}

/// The kernel's `struct io_event`.
#[cfg(not(strata_sim))]
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IoEvent {
    data: u64,
    obj: u64,
    res: i64,
    res2: i64,
}

/// One AIO context; `run` takes `&mut self`: one caller at a time (its events are its own).
#[cfg(not(strata_sim))]
pub(crate) struct Aio {
    ctx: libc::c_ulong,
    depth: usize,
}

#[cfg(not(strata_sim))]
impl Aio {
    /// A context for up to `depth` operations at once.
    pub(crate) fn new(depth: usize) -> io::Result<Aio> {
        let mut ctx: libc::c_ulong = 0;
        // SAFETY: io_setup writes the new context's id to `ctx`, which outlives the call.
        let r = unsafe { libc::syscall(libc::SYS_io_setup, depth as libc::c_long, &mut ctx as *mut libc::c_ulong) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Aio { ctx, depth })
    }

    /// `op` on every descriptor of `fds` at once. Per descriptor: `Some(Ok(bytes))` (0 for
    /// a flush), `Some(Err)` (the device's error), or `None`: not done here (not submitted,
    /// or its result lost with the context) — the caller does that one itself.
    pub(crate) fn run(&mut self, fds: &[RawFd], op: AioOp<'_>) -> Vec<Option<io::Result<usize>>> {
        let mut out: Vec<Option<io::Result<usize>>> = (0..fds.len()).map(|_| None).collect();
        if self.ctx == 0 || fds.len() > self.depth {
            return out;
        }
        let mut iocbs: Vec<libc::iocb> = fds
            .iter()
            .enumerate()
            .map(|(i, &fd)| {
                // SAFETY: iocb is plain data; all-zero is its "no flags" value.
                let mut cb: libc::iocb = unsafe { std::mem::zeroed() };
                cb.aio_data = i as u64;
                cb.aio_fildes = fd as u32;
                match op {
                    AioOp::Write { buf, offset, dsync } => {
                        cb.aio_lio_opcode = IOCB_CMD_PWRITE;
                        cb.aio_buf = buf.as_ptr() as u64;
                        cb.aio_nbytes = buf.len() as u64;
                        cb.aio_offset = offset as i64;
                        cb.aio_rw_flags = if dsync { libc::RWF_DSYNC } else { 0 };
                    }
                    AioOp::Fdsync => cb.aio_lio_opcode = IOCB_CMD_FDSYNC,
                }
                cb
            })
            .collect();
        let mut ptrs: Vec<*mut libc::iocb> = iocbs.iter_mut().map(|cb| cb as *mut libc::iocb).collect();
        // `next`: the first iocb not yet handed over; `submitted`: how many are in flight.
        let (mut next, mut submitted) = (0usize, 0usize);
        while next < ptrs.len() {
            // SAFETY: the iocbs and the buffer they point to stay alive and unmoved until
            // their events are collected below (or the context is destroyed, which waits).
            let r = unsafe {
                libc::syscall(
                    libc::SYS_io_submit,
                    self.ctx,
                    (ptrs.len() - next) as libc::c_long,
                    ptrs[next..].as_mut_ptr(),
                )
            };
            if r > 0 {
                next += r as usize;
                submitted += r as usize;
                continue;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) if r < 0 => continue,
                // Out of resources, or an operation this kernel cannot queue (RWF_DSYNC
                // before 4.13, FDSYNC before 4.18): the rest is the caller's.
                Some(libc::EAGAIN | libc::ENOMEM | libc::ENOSYS | libc::EINVAL | libc::EOPNOTSUPP) => break,
                _ if r == 0 => break,
                // The first iocb left was refused (EBADF, EFAULT, ...): that descriptor's
                // error; the others go on.
                _ => {
                    out[next] = Some(Err(e));
                    next += 1;
                }
            }
        }
        let mut events = vec![IoEvent::default(); submitted];
        let mut got = 0usize;
        while got < submitted {
            let want = (submitted - got) as libc::c_long;
            // SAFETY: `events[got..]` has room for `want` events.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_io_getevents,
                    self.ctx,
                    want,
                    want,
                    events[got..].as_mut_ptr(),
                    std::ptr::null_mut::<libc::timespec>(),
                )
            };
            if r < 0 {
                if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                // Waits for what is in flight; those results are lost (None: redone).
                self.destroy();
                break;
            }
            got += r as usize;
        }
        for ev in &events[..got] {
            debug_assert!(ev.data < fds.len() as u64);
            if let Some(slot) = out.get_mut(ev.data as usize) {
                *slot = Some(if ev.res < 0 {
                    Err(io::Error::from_raw_os_error((-ev.res) as i32))
                } else {
                    Ok(ev.res as usize)
                });
            }
        }
        drop(iocbs);
        out
    }

    /// Whether the context still works (it is destroyed after a failed wait).
    pub(crate) fn usable(&self) -> bool {
        self.ctx != 0
    }

    fn destroy(&mut self) {
        if self.ctx != 0 {
            // SAFETY: a context of ours; io_destroy cancels or waits for every operation
            // in flight before it returns.
            unsafe { libc::syscall(libc::SYS_io_destroy, self.ctx) };
            self.ctx = 0;
        }
    }
}

#[cfg(not(strata_sim))]
impl Drop for Aio {
    fn drop(&mut self) {
        self.destroy();
    }
}

#[cfg(all(test, not(strata_sim)))]
mod tests {
    use super::*;
    use crate::device::AlignedBuf;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{FileExt, OpenOptionsExt};

    fn open_direct(path: &std::path::Path) -> std::fs::File {
        std::fs::OpenOptions::new().read(true).write(true).custom_flags(libc::O_DIRECT).open(path).unwrap()
    }

    #[test]
    fn writes_and_flushes_land_on_every_descriptor_and_errors_are_per_descriptor() {
        let dir = std::env::temp_dir().join(format!("strata-aio-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let paths: Vec<_> = (0..3).map(|i| dir.join(format!("m{i}.img"))).collect();
        for p in &paths {
            std::fs::File::create(p).unwrap().set_len(1 << 20).unwrap();
        }
        let files: Vec<_> = paths.iter().map(|p| open_direct(p)).collect();
        let mut fds: Vec<RawFd> = files.iter().map(|f| f.as_raw_fd()).collect();
        let mut aio = Aio::new(4).unwrap();
        let mut buf = AlignedBuf::zeroed(8192);
        buf.iter_mut().enumerate().for_each(|(i, b)| *b = (i % 241) as u8);
        for (k, dsync) in [(0u64, true), (1, false)] {
            let out = aio.run(&fds, AioOp::Write { buf: &buf, offset: 65536 * (k + 1), dsync });
            assert!(out.iter().all(|r| matches!(r, Some(Ok(8192)))), "{out:?}");
        }
        let out = aio.run(&fds, AioOp::Fdsync);
        assert!(out.iter().all(|r| matches!(r, Some(Ok(0)))), "{out:?}");
        for f in &files {
            let mut back = AlignedBuf::zeroed(8192);
            for k in 0..2u64 {
                f.read_exact_at(&mut back, 65536 * (k + 1)).unwrap();
                assert_eq!(&back[..], &buf[..]);
            }
        }
        // One descriptor that cannot take the write (opened read-only): its error, the
        // others written.
        let ro = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(&paths[1]).unwrap();
        fds[1] = ro.as_raw_fd();
        let out = aio.run(&fds, AioOp::Write { buf: &buf, offset: 0, dsync: true });
        assert!(matches!(out[0], Some(Ok(8192))) && matches!(out[2], Some(Ok(8192))), "{out:?}");
        assert!(matches!(&out[1], Some(Err(e)) if e.raw_os_error() == Some(libc::EBADF)), "{out:?}");
        // More descriptors than the context's depth: none done here.
        let many = [fds[0]; 5];
        assert!(aio.run(&many, AioOp::Fdsync).iter().all(|r| r.is_none()));
        assert!(aio.usable());
        // An operation the kernel cannot queue for a descriptor (a pipe has no fsync: EINVAL
        // at submission, as kernels without FDSYNC or RWF_DSYNC AIO answer): what was
        // submitted before it is done, it and the rest are left to the caller.
        let (pipe_r, pipe_w) = std::io::pipe().unwrap();
        let fds3 = [fds[0], pipe_w.as_raw_fd(), fds[2]];
        let out = aio.run(&fds3, AioOp::Fdsync);
        assert!(matches!(out[0], Some(Ok(0))), "{out:?}");
        assert!(out[1].is_none() && out[2].is_none(), "not submitted: the caller's: {out:?}");
        assert!(aio.usable());
        drop((pipe_r, pipe_w));
        drop(files);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
