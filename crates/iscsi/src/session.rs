//! The full-feature phase of one connection (= one session: MaxConnections=1, ERL 0).
//!
//! The connection's reader thread reads PDUs, keeps the command window
//! (ExpCmdSN/MaxCmdSN), gathers each write's Data-Out (immediate data, unsolicited
//! Data-Out up to FirstBurstLength, then one R2T at a time of at most MaxBurstLength) and
//! queues complete commands to the server's worker pool. Workers run the SCSI command
//! and write Data-In and the SCSI Response themselves, under the connection's write lock,
//! which also assigns StatSN — so responses go out in completion order.
//!
//! Bounds: at most `window` commands are queued, running or gathering data per session
//! (the reader stops reading at the limit and MaxCmdSN never grants more), each at most
//! `scsi::MAX_TRANSFER_BYTES` of Data-Out; a PDU's data segment is at most our declared
//! MaxRecvDataSegmentLength. A protocol violation that leaves the stream in doubt ends the
//! connection; a malformed but delimited PDU is answered with a Reject.
//!
//! Locks of a connection, each taken alone (none is held while taking another, so there
//! is no order to keep): `writer` (the socket's sending side and StatSN: one PDU train at
//! a time), `in_flight` (commands in the pool and Data-Out bytes held, with the `done`
//! condvar the reader waits on), `resets_seen`. The SCSI layer's per-LUN locks
//! (targets.rs) are taken only inside `scsi::execute`, with none of these held.

use crate::login::SessionKind;
use crate::pdu::{self, Pdu, PduError, ScsiCommand, RESERVED_TAG};
use crate::scsi::{self, Nexus, Outcome};
use crate::sense;
use crate::server::Shared;
use crate::targets::Target;
use crate::text::{self, Params};
use std::collections::{HashMap, HashSet};
use std::io::BufReader;
use std::net::TcpStream;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use strata_lun::work::Sender;

/// A command ready to run, for the worker pool.
pub struct Job {
    pub conn: Arc<Conn>,
    pub cmd: ScsiCommand,
    pub data_out: Vec<u8>,
}

pub struct Writer {
    pub stream: TcpStream,
    pub statsn: u32,
}

/// The connection state the reader and the workers share.
pub struct Conn {
    pub writer: Mutex<Writer>,
    pub params: Params,
    pub exp_cmdsn: AtomicU32,
    pub window: u32,
    pub target: Option<Arc<Target>>,
    pub nexus: Nexus,
    in_flight: Mutex<Flight>,
    done: Condvar,
    /// Per LUN of the target, (reset count, size in bytes) this session has been told
    /// about: a unit attention reports each newer reset, and a changed size, once.
    resets_seen: Mutex<Vec<(u64, u64)>>,
}

/// What a session holds in the worker pool and in write buffers.
#[derive(Default)]
struct Flight {
    /// Commands queued or running, by ITT.
    itts: HashSet<u32>,
    /// Data-Out bytes held: writes gathering data plus queued or running commands'.
    bytes: u64,
}

/// Most Data-Out bytes a session holds at once (see [`Reader::hold`]): two of the largest
/// transfers, so one write can gather while another runs.
pub const SESSION_BUFFER_BYTES: u64 = 2 * scsi::MAX_TRANSFER_BYTES;

/// Serial-number comparison (RFC 1982) of 32-bit sequence numbers: a < b.
pub fn sn_lt(a: u32, b: u32) -> bool {
    a != b && b.wrapping_sub(a) < 1 << 31
}

impl Conn {
    pub fn new(
        stream: TcpStream,
        params: Params,
        statsn: u32,
        exp_cmdsn: u32,
        window: u32,
        kind: SessionKind,
        nexus: Nexus,
    ) -> Conn {
        let target = match kind {
            SessionKind::Normal(t) => Some(t),
            SessionKind::Discovery => None,
        };
        let resets_seen = target
            .as_ref()
            .map(|t| t.luns.iter().map(|l| (l.resets.load(Ordering::SeqCst), l.lun.size())).collect())
            .unwrap_or_default();
        Conn {
            resets_seen: Mutex::new(resets_seen),
            writer: Mutex::new(Writer { stream, statsn }),
            params,
            exp_cmdsn: AtomicU32::new(exp_cmdsn),
            window,
            target,
            nexus,
            in_flight: Mutex::new(Flight::default()),
            done: Condvar::new(),
        }
    }

    /// Fill StatSN (if `statsn`), ExpCmdSN and MaxCmdSN and send, under the write lock.
    fn send_all(&self, pdus: &mut [Pdu], statsn_at: &[bool]) {
        let mut w = self.writer.lock().expect("connection writer");
        let exp = self.exp_cmdsn.load(Ordering::SeqCst);
        let mut buf = Vec::new();
        for (p, &with_sn) in pdus.iter_mut().zip(statsn_at) {
            if with_sn {
                p.set32(24, w.statsn);
                w.statsn = w.statsn.wrapping_add(1);
            } else if p.opcode() == pdu::OP_R2T {
                p.set32(24, w.statsn);
            }
            p.set32(28, exp);
            p.set32(32, exp.wrapping_add(self.window - 1));
            buf.extend(p.encode(self.params.header_digest, self.params.data_digest));
        }
        if let Err(e) = std::io::Write::write_all(&mut w.stream, &buf) {
            tracing::debug!("iSCSI send: {e}");
            let _ = w.stream.shutdown(std::net::Shutdown::Both);
        }
    }

    fn send(&self, mut p: Pdu, statsn: bool) {
        self.send_all(std::slice::from_mut(&mut p), &[statsn]);
    }

    fn reject(&self, bad: &Pdu, reason: u8) {
        let mut p = Pdu::new(pdu::OP_REJECT);
        p.bhs[1] = 0x80;
        p.bhs[2] = reason;
        p.set32(16, RESERVED_TAG);
        p.data = bad.bhs.to_vec();
        self.send(p, true);
    }

    /// A worker panicked running one of our commands: end the connection and release the
    /// command's place in the window, so the reader does not wait for it forever.
    pub fn failed(&self) {
        if let Ok(w) = self.writer.lock() {
            let _ = w.stream.shutdown(std::net::Shutdown::Both);
        }
        self.finished(u32::MAX, u64::MAX);
    }

    fn finished(&self, itt: u32, bytes: u64) {
        let mut f = self.in_flight.lock().expect("in flight");
        if itt == u32::MAX {
            f.itts.clear();
            f.bytes = 0;
        } else {
            f.itts.remove(&itt);
            f.bytes = f.bytes.saturating_sub(bytes);
        }
        self.done.notify_all();
    }

    /// A unit attention still to be reported to this session for the addressed LUN: a
    /// reset (29/00) or a new size (CAPACITY DATA HAS CHANGED, 2A/09: initiators then
    /// re-read the capacity of a grown LUN). Each is reported once, to any command but
    /// INQUIRY, REPORT LUNS and REQUEST SENSE.
    fn unit_attention(&self, t: &Target, lun: Option<u16>, opcode: u8) -> Option<sense::Sense> {
        let slot = t.lun(lun?)?;
        if matches!(opcode, 0x12 | 0xa0 | 0x03) {
            return None;
        }
        let (resets, size) = (slot.resets.load(Ordering::SeqCst), slot.lun.size());
        let mut seen = self.resets_seen.lock().expect("resets seen");
        let s = seen.get_mut(lun? as usize)?;
        if s.0 < resets {
            // A reset's attention also covers a size change seen with it.
            *s = (resets, size);
            return Some(sense::RESET_OCCURRED);
        }
        if s.1 != size {
            s.1 = size;
            return Some(sense::CAPACITY_CHANGED);
        }
        None
    }

    /// Run one command and send its result (a worker's job).
    pub fn run(&self, cmd: &ScsiCommand, data_out: &[u8]) {
        let lun = pdu::lun_number(cmd.lun);
        let opcode = cmd.cdb.first().copied().unwrap_or(0);
        let outcome = match &self.target {
            Some(t) => match self.unit_attention(t, lun, opcode) {
                Some(ua) => Outcome::check(ua),
                None => scsi::execute(&scsi::Request {
                    cdb: &cmd.cdb,
                    data_out,
                    edtl: if cmd.read { cmd.edtl } else { 0 }.max(if cmd.write { cmd.edtl } else { 0 }),
                    target: t,
                    lun,
                    nexus: &self.nexus,
                }),
            },
            None => Outcome::check(sense::INVALID_OPCODE),
        };
        self.respond(cmd, outcome);
        self.finished(cmd.itt, data_out.len() as u64);
    }

    fn respond(&self, cmd: &ScsiCommand, o: Outcome) {
        let edtl = cmd.edtl as u64;
        let mut pdus = Vec::new();
        let mut with_sn = Vec::new();
        let (mut flags, mut residual) = (0u8, 0u64);
        let data: &[u8] = if cmd.read { &o.data } else { &[] };
        let sent = (data.len() as u64).min(edtl);
        if cmd.read {
            let wanted = o.wanted_in.map(|w| w as u64).unwrap_or(data.len() as u64).max(data.len() as u64);
            if wanted > edtl {
                (flags, residual) = (0x04, wanted - edtl);
            } else if sent < edtl && o.status == sense::GOOD {
                (flags, residual) = (0x02, edtl - sent);
            }
        } else if let (true, Some(w)) = (cmd.write, o.wanted_out) {
            let w = w as u64;
            if w > edtl {
                (flags, residual) = (0x04, w - edtl);
            } else if w < edtl {
                (flags, residual) = (0x02, edtl - w);
            }
        } else if !cmd.read && !cmd.write && edtl > 0 {
            (flags, residual) = (0x02, edtl);
        }
        let residual = residual.min(u32::MAX as u64) as u32;
        let good_with_data = o.status == sense::GOOD && sent > 0;
        let (mss, burst) = (self.params.max_xmit_data_segment.max(512) as u64, self.params.max_burst.max(512) as u64);
        let mut off = 0u64;
        let mut datasn = 0u32;
        while off < sent {
            let n = mss.min(sent - off).min(burst - off % burst);
            let mut p = Pdu::new(pdu::OP_DATA_IN);
            let last = off + n == sent;
            let mut f = 0u8;
            if last || (off + n).is_multiple_of(burst) {
                f |= 0x80;
            }
            if last && good_with_data {
                f |= 0x01 | flags;
                p.bhs[3] = o.status;
                p.set32(44, residual);
            }
            p.bhs[1] = f;
            p.bhs[8..16].copy_from_slice(&cmd.lun.to_be_bytes());
            p.set32(16, cmd.itt);
            p.set32(20, RESERVED_TAG);
            p.set32(36, datasn);
            p.set32(40, off as u32);
            p.data = data[off as usize..(off + n) as usize].to_vec();
            with_sn.push(last && good_with_data);
            pdus.push(p);
            datasn += 1;
            off += n;
        }
        if !good_with_data {
            let mut p = Pdu::new(pdu::OP_SCSI_RESP);
            p.bhs[1] = 0x80 | flags;
            p.bhs[2] = 0; // command completed at target
            p.bhs[3] = o.status;
            p.set32(16, cmd.itt);
            p.set32(36, datasn);
            p.set32(44, residual);
            if let Some(s) = o.sense {
                let s = s.encode();
                p.data = (s.len() as u16).to_be_bytes().to_vec();
                p.data.extend(s);
            }
            with_sn.push(true);
            pdus.push(p);
        }
        self.send_all(&mut pdus, &with_sn);
    }
}

/// A write gathering its Data-Out.
struct Gathering {
    cmd: ScsiCommand,
    data: Vec<u8>,
    /// Data-Out bytes received (immediate data included).
    received: u64,
    /// Where the current R2T (or the unsolicited burst) ends.
    until: u64,
    /// How much of the transfer we keep (the rest of a too-long transfer is dropped).
    keep: u64,
    r2tsn: u32,
    ttt: u32,
    /// The DataSN the next Data-Out must carry (0 at each R2T and for unsolicited data).
    datasn: u32,
}

pub struct Reader<'a> {
    pub conn: Arc<Conn>,
    pub shared: &'a Shared,
    pub jobs: Sender<Job>,
    gathering: HashMap<u32, Gathering>,
    next_ttt: u32,
    /// A text response longer than the initiator takes in one PDU: (ITT, TTT, the rest),
    /// sent on as the initiator asks for it with empty Text requests (§6.2.1).
    text_rest: Option<(u32, u32, Vec<u8>)>,
}

enum Flow {
    Continue,
    Close,
}

impl<'a> Reader<'a> {
    pub fn new(conn: Arc<Conn>, shared: &'a Shared, jobs: Sender<Job>) -> Reader<'a> {
        Reader { conn, shared, jobs, gathering: HashMap::new(), next_ttt: 1, text_rest: None }
    }

    /// Read and handle PDUs until the connection ends.
    pub fn run(&mut self, stream: TcpStream) {
        let mut input = BufReader::with_capacity(64 << 10, stream);
        let p = self.conn.params.clone();
        loop {
            let pdu = match Pdu::read(&mut input, p.header_digest, p.data_digest, p.max_recv_data_segment as usize) {
                Ok(pdu) => pdu,
                Err(PduError::DataDigest(bad)) => {
                    // ERL 0: reject and drop the connection (the initiator recovers by login).
                    self.conn.reject(&bad, pdu::REJECT_DATA_DIGEST);
                    break;
                }
                Err(PduError::Io(_)) => break,
                Err(e) => {
                    tracing::warn!(initiator = %self.conn.nexus.initiator, "iSCSI connection closed: {e}");
                    break;
                }
            };
            if self.shared.stopping() || self.conn.target.as_ref().is_some_and(|t| t.removed()) {
                break;
            }
            if let Flow::Close = self.handle(pdu) {
                break;
            }
        }
        self.wait_idle();
        // The I_T nexus is gone: so is its SPC-2 reservation.
        if let Some(t) = &self.conn.target {
            let me = self.conn.nexus.id();
            for slot in &t.luns {
                scsi::pr::release_spc2(slot, Some(&me));
            }
        }
    }

    fn wait_idle(&self) {
        let mut f = self.conn.in_flight.lock().expect("in flight");
        while !f.itts.is_empty() {
            f = self.conn.done.wait(f).expect("in flight");
        }
    }

    /// Wait until the command `itt` is no longer queued or running.
    fn wait_for(&self, itt: u32) {
        let mut f = self.conn.in_flight.lock().expect("in flight");
        while f.itts.contains(&itt) {
            f = self.conn.done.wait(f).expect("in flight");
        }
    }

    /// Account `n` more Data-Out bytes held, first waiting for running commands to free
    /// room; false if the gathering writes alone exceed [`SESSION_BUFFER_BYTES`] (the
    /// connection is then closed: no initiator keeping to MaxBurstLength does that).
    fn hold(&self, n: u64) -> bool {
        let mut f = self.conn.in_flight.lock().expect("in flight");
        while f.bytes + n > SESSION_BUFFER_BYTES && !f.itts.is_empty() {
            f = self.conn.done.wait(f).expect("in flight");
        }
        if f.bytes + n > SESSION_BUFFER_BYTES {
            return false;
        }
        f.bytes += n;
        true
    }

    fn release(&self, n: u64) {
        let mut f = self.conn.in_flight.lock().expect("in flight");
        f.bytes = f.bytes.saturating_sub(n);
    }

    /// Check a non-immediate CmdSN against the window and advance ExpCmdSN; false: drop
    /// the PDU (§4.2.2.1: outside the window it is silently ignored).
    fn take_cmdsn(&self, cmdsn: u32, immediate: bool) -> bool {
        let exp = self.conn.exp_cmdsn.load(Ordering::SeqCst);
        if immediate {
            return true;
        }
        let max = exp.wrapping_add(self.conn.window - 1);
        if sn_lt(cmdsn, exp) || sn_lt(max, cmdsn) {
            tracing::debug!(cmdsn, exp, "iSCSI command outside the window ignored");
            return false;
        }
        self.conn.exp_cmdsn.store(cmdsn.wrapping_add(1), Ordering::SeqCst);
        true
    }

    fn handle(&mut self, p: Pdu) -> Flow {
        tracing::trace!(
            opcode = p.opcode(),
            itt = p.itt(),
            flags = p.flags(),
            len = p.data.len(),
            f36 = p.field32(36),
            f40 = p.field32(40),
            "iSCSI PDU"
        );
        match p.opcode() {
            pdu::OP_NOP_OUT => {
                if !self.take_cmdsn(p.field32(24), p.immediate() || p.itt() == RESERVED_TAG) {
                    return Flow::Continue;
                }
                if p.itt() != RESERVED_TAG {
                    let mut r = Pdu::new(pdu::OP_NOP_IN);
                    r.bhs[1] = 0x80;
                    r.bhs[8..16].copy_from_slice(&p.bhs[8..16]);
                    r.set32(16, p.itt());
                    r.set32(20, RESERVED_TAG);
                    r.data = p.data;
                    self.conn.send(r, true);
                }
            }
            pdu::OP_SCSI_CMD => return self.command(p),
            pdu::OP_DATA_OUT => return self.data_out(p),
            pdu::OP_TEXT_REQ => {
                if self.take_cmdsn(p.field32(24), p.immediate()) {
                    self.text(&p);
                }
            }
            pdu::OP_TMF_REQ => {
                if !self.take_cmdsn(p.field32(24), p.immediate()) {
                    return Flow::Continue;
                }
                let function = p.flags() & 0x7f;
                let response = match function {
                    1 => {
                        // ABORT TASK: a write still gathering data is dropped (no response
                        // for it); a queued or running one completes and its response
                        // goes first, so ours says the task no longer exists.
                        let rtt = p.field32(20);
                        if let Some(g) = self.gathering.remove(&rtt) {
                            self.release(g.data.len() as u64);
                            0
                        } else {
                            self.wait_for(rtt);
                            1
                        }
                    }
                    2 | 4 | 5 | 6 | 7 => {
                        if let Some(t) = &self.conn.target {
                            // LUN RESET and TARGET WARM/COLD RESET: a unit attention for
                            // every session of the LUN(s), this one included (SAM-5 §6.3),
                            // and SPC-2 reservations are released. A cold reset is served
                            // as a warm one (sessions are kept).
                            let lun = pdu::lun_number(p.lun());
                            for (i, slot) in t.luns.iter().enumerate() {
                                if function >= 6 || (function == 5 && lun == Some(i as u16)) {
                                    slot.resets.fetch_add(1, Ordering::SeqCst);
                                    scsi::pr::release_spc2(slot, None);
                                }
                            }
                        }
                        let held: u64 = self.gathering.drain().map(|(_, g)| g.data.len() as u64).sum();
                        self.release(held);
                        self.wait_idle();
                        0
                    }
                    3 | 8 => 5, // CLEAR ACA, TASK REASSIGN: not supported
                    _ => 255,
                };
                let mut r = Pdu::new(pdu::OP_TMF_RESP);
                r.bhs[1] = 0x80;
                r.bhs[2] = response;
                r.set32(16, p.itt());
                self.conn.send(r, true);
            }
            pdu::OP_LOGOUT_REQ => {
                self.take_cmdsn(p.field32(24), p.immediate());
                self.wait_idle();
                let reason = p.flags() & 0x7f;
                let mut r = Pdu::new(pdu::OP_LOGOUT_RESP);
                r.bhs[1] = 0x80;
                r.bhs[2] = if reason == 2 { 2 } else { 0 };
                r.set32(16, p.itt());
                self.conn.send(r, true);
                return Flow::Close;
            }
            pdu::OP_LOGIN_REQ => {
                self.conn.reject(&p, pdu::REJECT_PROTOCOL_ERROR);
                return Flow::Close;
            }
            pdu::OP_SNACK => self.conn.reject(&p, pdu::REJECT_NOT_SUPPORTED),
            _ => {
                self.conn.reject(&p, pdu::REJECT_NOT_SUPPORTED);
            }
        }
        Flow::Continue
    }

    fn dispatch(&mut self, cmd: ScsiCommand, data_out: Vec<u8>) -> Flow {
        {
            let mut f = self.conn.in_flight.lock().expect("in flight");
            while f.itts.len() >= self.conn.window as usize {
                f = self.conn.done.wait(f).expect("in flight");
            }
            f.itts.insert(cmd.itt);
        }
        let job = Job { conn: self.conn.clone(), cmd, data_out };
        if self.jobs.send(job).is_err() {
            return Flow::Close;
        }
        Flow::Continue
    }

    fn command(&mut self, p: Pdu) -> Flow {
        let Some(cmd) = ScsiCommand::parse(&p) else {
            self.conn.reject(&p, pdu::REJECT_INVALID_FIELD);
            return Flow::Continue;
        };
        if !self.take_cmdsn(cmd.cmdsn, cmd.immediate) {
            return Flow::Continue;
        }
        let params = &self.conn.params;
        let immediate = p.data.len() as u64;
        if !cmd.write || cmd.edtl == 0 {
            if immediate > 0 && !cmd.write {
                self.conn.reject(&p, pdu::REJECT_PROTOCOL_ERROR);
                return Flow::Continue;
            }
            return self.dispatch(cmd, p.data);
        }
        let edtl = cmd.edtl as u64;
        if (immediate > 0 && !params.immediate_data) || immediate > params.first_burst as u64 || immediate > edtl {
            self.conn.reject(&p, pdu::REJECT_PROTOCOL_ERROR);
            return Flow::Close;
        }
        let keep = edtl.min(scsi::MAX_TRANSFER_BYTES + 4096);
        let mut data = p.data;
        data.truncate(keep as usize);
        if !self.hold(data.len() as u64) {
            return Flow::Close;
        }
        let until = if params.initial_r2t { immediate } else { edtl.min(params.first_burst as u64) };
        let until = until.max(immediate);
        let mut g = Gathering { cmd, data, received: immediate, until, keep, r2tsn: 0, ttt: RESERVED_TAG, datasn: 0 };
        if immediate == edtl {
            let Gathering { cmd, data, .. } = g;
            return self.dispatch(cmd, data);
        }
        if self.gathering.len() >= self.conn.window as usize {
            self.conn.reject(&Pdu { bhs: p.bhs, ahs: Vec::new(), data: Vec::new() }, pdu::REJECT_PROTOCOL_ERROR);
            return Flow::Close;
        }
        let itt = g.cmd.itt;
        if immediate == g.until {
            self.r2t(&mut g, immediate);
        }
        self.gathering.insert(itt, g);
        Flow::Continue
    }

    /// Ask for the next burst from `at`.
    fn r2t(&mut self, g: &mut Gathering, at: u64) {
        let edtl = g.cmd.edtl as u64;
        let n = (self.conn.params.max_burst as u64).min(edtl - at);
        g.until = at + n;
        g.ttt = self.new_ttt();
        g.datasn = 0;
        let mut r = Pdu::new(pdu::OP_R2T);
        r.bhs[1] = 0x80;
        r.bhs[8..16].copy_from_slice(&g.cmd.lun.to_be_bytes());
        r.set32(16, g.cmd.itt);
        r.set32(20, g.ttt);
        r.set32(36, g.r2tsn);
        r.set32(40, at as u32);
        r.set32(44, n as u32);
        g.r2tsn += 1;
        self.conn.send(r, false);
    }

    fn data_out(&mut self, p: Pdu) -> Flow {
        let itt = p.itt();
        let Some(mut g) = self.gathering.remove(&itt) else {
            // Data for a task we dropped (aborted) or never had: ignore (§11.7).
            return Flow::Continue;
        };
        let (offset, len) = (p.field32(40) as u64, p.data.len() as u64);
        if offset != g.received || offset + len > g.until || p.field32(36) != g.datasn {
            // Reject the PDU and end the task with a data phase error; the session lives
            // on (later Data-Out for the task is ignored).
            tracing::warn!(
                itt,
                offset,
                len,
                datasn = p.field32(36),
                "iSCSI Data-Out out of order, past its burst or with a wrong DataSN"
            );
            self.conn.reject(&p, pdu::REJECT_PROTOCOL_ERROR);
            self.release(g.data.len() as u64);
            self.conn.respond(&g.cmd, Outcome::check(sense::DATA_PHASE_ERROR));
            return Flow::Continue;
        }
        // Keep at most `keep` bytes; the rest of an over-long transfer only advances.
        g.datasn = g.datasn.wrapping_add(1);
        let room = g.keep.saturating_sub(g.data.len() as u64).min(len) as usize;
        if !self.hold(room as u64) {
            tracing::warn!(itt, "iSCSI session holds too much write data; closing");
            return Flow::Close;
        }
        g.data.extend_from_slice(&p.data[..room]);
        g.received += len;
        if g.received == g.cmd.edtl as u64 {
            let Gathering { cmd, data, .. } = g;
            return self.dispatch(cmd, data);
        }
        if g.received == g.until && p.final_bit() {
            let at = g.received;
            self.r2t(&mut g, at);
        }
        self.gathering.insert(itt, g);
        Flow::Continue
    }

    /// Text requests: SendTargets (discovery) and key negotiation we decline.
    fn text(&mut self, p: &Pdu) {
        let data = match self.text_rest.take() {
            Some((itt, ttt, rest)) if itt == p.itt() && ttt == p.field32(20) => rest,
            _ => self.text_answer(p),
        };
        let mut r = Pdu::new(pdu::OP_TEXT_RESP);
        r.bhs[8..16].copy_from_slice(&p.bhs[8..16]);
        r.set32(16, p.itt());
        let max = self.conn.params.max_xmit_data_segment as usize;
        if data.len() > max {
            // More than one PDU: this part with C set and a TTT to ask for the rest by.
            let ttt = self.new_ttt();
            r.bhs[1] = 0x40;
            r.set32(20, ttt);
            r.data = data[..max].to_vec();
            self.text_rest = Some((p.itt(), ttt, data[max..].to_vec()));
        } else {
            r.bhs[1] = 0x80;
            r.set32(20, RESERVED_TAG);
            r.data = data;
        }
        self.conn.send(r, true);
    }

    fn new_ttt(&mut self) -> u32 {
        let t = self.next_ttt;
        self.next_ttt = match self.next_ttt.wrapping_add(1) {
            0 | RESERVED_TAG => 1,
            n => n,
        };
        t
    }

    /// The answer to a Text request's keys: SendTargets, and NotUnderstood for the rest.
    fn text_answer(&self, p: &Pdu) -> Vec<u8> {
        let mut out: Vec<(String, String)> = Vec::new();
        let pairs = text::parse(&p.data).unwrap_or_default();
        for (k, v) in &pairs {
            if k == "SendTargets" {
                let local = self.conn.writer.lock().expect("connection writer").stream.local_addr().ok();
                let peer = self.conn.writer.lock().expect("connection writer").stream.peer_addr().ok();
                for t in self.shared.targets.all() {
                    let visible = match (&self.conn.target, v.as_str()) {
                        (Some(mine), _) => Arc::ptr_eq(mine, &t),
                        (None, "All") => true,
                        (None, name) => t.config.name.eq_ignore_ascii_case(name),
                    };
                    let allowed = peer.is_some_and(|a| t.client_allowed(a.ip()))
                        && t.initiator_allowed(&self.conn.nexus.initiator);
                    if visible && allowed {
                        out.push(("TargetName".into(), t.config.name.clone()));
                        if let Some(a) = local {
                            out.push(("TargetAddress".into(), format!("{a},1")));
                        }
                    }
                }
            } else {
                out.push((k.clone(), "NotUnderstood".into()));
            }
        }
        text::encode(&out)
    }
}
