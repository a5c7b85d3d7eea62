//! The fixed newstyle handshake: greeting, client flags, option haggling.
//!
//! Only fixed newstyle is spoken (no oldstyle; a client that does not set
//! NBD_FLAG_C_FIXED_NEWSTYLE, or sets a flag we did not offer, is disconnected). Options
//! are read whole into memory, so each is bounded ([`MAX_OPTION_BYTES`]) and so is their
//! number ([`MAX_OPTIONS`]); past either bound the connection is closed. TLS modes
//! (proto.md "TLS support"): no TLS configured → NOTLS (STARTTLS answered
//! NBD_REP_ERR_POLICY); TLS configured and required → FORCEDTLS (every option but STARTTLS
//! and ABORT answered NBD_REP_ERR_TLS_REQD, EXPORT_NAME disconnected); TLS configured but
//! optional → SELECTIVETLS with no TLS-only export. After STARTTLS the negotiation state
//! starts afresh, as the spec requires: [`haggle`] returns and is called again over TLS.
//! Generic over `Read`/`Write` so the fuzz target drives it over memory.

use crate::exports::{ExportEntry, ExportTable};
use crate::proto::*;
use std::io::{self, Read, Write};
use std::net::IpAddr;
use std::sync::Arc;

/// Options a client may send before it has to pick an export. `nbdinfo --list` sends
/// about three per export; 256 covers dozens of exports and bounds a client that loops.
pub const MAX_OPTIONS: usize = 256;

/// Why a handshake or a transmission ended.
#[derive(Debug)]
pub(crate) enum Ended {
    /// The connection failed or the peer went away.
    Io(io::Error),
    /// The peer broke the protocol (logged as a warning).
    Protocol(String),
    /// The peer asked to end (NBD_OPT_ABORT, NBD_CMD_DISC).
    Client,
}

impl From<io::Error> for Ended {
    fn from(e: io::Error) -> Ended {
        Ended::Io(e)
    }
}

#[derive(Clone, Copy)]
pub(crate) struct TlsPolicy {
    pub available: bool,
    pub required: bool,
}

/// What a connection agreed to for the transmission phase.
pub(crate) struct Negotiated {
    pub entry: Arc<ExportEntry>,
    pub structured: bool,
    pub base_allocation: bool,
    pub read_only: bool,
    pub flags: u16,
}

pub(crate) enum Outcome {
    Transmit(Negotiated),
    /// STARTTLS was acknowledged: upgrade the link, then haggle again.
    StartTls,
}

/// Negotiation state that survives across options (and is dropped at STARTTLS).
pub(crate) struct Session {
    pub options_seen: usize,
    pub no_zeroes: bool,
    structured: bool,
    /// The last SET_META_CONTEXT: its export name and whether base:allocation was chosen.
    meta: Option<(Vec<u8>, bool)>,
}

impl Session {
    pub fn new(no_zeroes: bool) -> Session {
        Session { options_seen: 0, no_zeroes, structured: false, meta: None }
    }

    /// Forget what was negotiated before TLS (the counts stay).
    pub fn reset_for_tls(&mut self) {
        self.structured = false;
        self.meta = None;
    }
}

/// Send the greeting and read the client flags; the session to haggle in.
pub(crate) fn greet<R: Read, W: Write>(r: &mut R, w: &mut W) -> Result<Session, Ended> {
    let mut g = Vec::with_capacity(18);
    g.extend_from_slice(&NBDMAGIC.to_be_bytes());
    g.extend_from_slice(&IHAVEOPT.to_be_bytes());
    g.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    w.write_all(&g)?;
    let mut f = [0u8; 4];
    r.read_exact(&mut f)?;
    let flags = u32::from_be_bytes(f);
    if flags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Err(Ended::Protocol(format!("unknown client flags {flags:#x}")));
    }
    if flags & FLAG_C_FIXED_NEWSTYLE == 0 {
        return Err(Ended::Protocol("client does not speak fixed newstyle (only that is served)".into()));
    }
    Ok(Session::new(flags & FLAG_C_NO_ZEROES != 0))
}

/// The transmission flags of `entry` as this session serves it.
pub(crate) fn transmission_flags(entry: &ExportEntry, structured: bool) -> (u16, bool) {
    let read_only = entry.export.effective_read_only();
    let mut flags = FLAG_HAS_FLAGS | FLAG_SEND_FLUSH | FLAG_CAN_MULTI_CONN | FLAG_SEND_CACHE;
    if read_only {
        flags |= FLAG_READ_ONLY;
    } else {
        flags |= FLAG_SEND_FUA | FLAG_SEND_TRIM | FLAG_SEND_WRITE_ZEROES | FLAG_SEND_FAST_ZERO;
    }
    if structured {
        flags |= FLAG_SEND_DF;
    }
    (flags, read_only)
}

struct Ctx<'a, W> {
    w: &'a mut W,
    option: u32,
}

impl<W: Write> Ctx<'_, W> {
    fn reply(&mut self, kind: u32, data: &[u8]) -> io::Result<()> {
        self.w.write_all(&option_reply(self.option, kind, data))
    }

    fn error(&mut self, kind: u32, message: &str) -> io::Result<()> {
        self.reply(kind, message.as_bytes())
    }
}

/// Haggle until the client picks an export, asks for TLS, or leaves.
pub(crate) fn haggle<R: Read, W: Write>(
    r: &mut R,
    w: &mut W,
    s: &mut Session,
    exports: &ExportTable,
    peer: IpAddr,
    tls: TlsPolicy,
    tls_active: bool,
) -> Result<Outcome, Ended> {
    loop {
        s.options_seen += 1;
        if s.options_seen > MAX_OPTIONS {
            return Err(Ended::Protocol(format!("more than {MAX_OPTIONS} options")));
        }
        let mut head = [0u8; 16];
        r.read_exact(&mut head)?;
        let mut d = Decoder::new(&head);
        let (magic, option, len) = match (d.u64(), d.u32(), d.u32()) {
            (Some(m), Some(o), Some(l)) => (m, o, l),
            _ => return Err(Ended::Protocol("short option header".into())),
        };
        if magic != IHAVEOPT {
            return Err(Ended::Protocol(format!("bad option magic {magic:#x}")));
        }
        if len > MAX_OPTION_BYTES {
            return Err(Ended::Protocol(format!(
                "option {option} with {len} bytes of data (at most {MAX_OPTION_BYTES})"
            )));
        }
        let mut data = vec![0u8; len as usize];
        r.read_exact(&mut data)?;
        let mut c = Ctx { w: &mut *w, option };
        let tls_needed = tls.required && !tls_active;
        match option {
            OPT_ABORT => {
                // The spec asks for an ACK; a client that already left does not read it.
                let _ = c.reply(REP_ACK, &[]);
                return Err(Ended::Client);
            }
            OPT_STARTTLS => {
                if !data.is_empty() {
                    c.error(REP_ERR_INVALID, "STARTTLS takes no data")?;
                } else if !tls.available {
                    c.error(REP_ERR_POLICY, "TLS is not configured on this server")?;
                } else if tls_active {
                    c.error(REP_ERR_INVALID, "TLS is already active")?;
                } else {
                    c.reply(REP_ACK, &[])?;
                    return Ok(Outcome::StartTls);
                }
            }
            OPT_EXPORT_NAME => {
                // This option cannot be answered with an error: refusals disconnect.
                if tls_needed {
                    return Err(Ended::Protocol("EXPORT_NAME before STARTTLS on a server that requires TLS".into()));
                }
                let name = std::str::from_utf8(&data).unwrap_or("\u{fffd}");
                let Some(entry) = exports.lookup(name, peer) else {
                    return Err(Ended::Protocol(format!("EXPORT_NAME {name:?}: no such export for this client")));
                };
                let (flags, read_only) = transmission_flags(&entry, s.structured);
                let mut out = entry.export.lun.size().to_be_bytes().to_vec();
                out.extend_from_slice(&flags.to_be_bytes());
                if !s.no_zeroes {
                    out.extend_from_slice(&[0u8; 124]);
                }
                c.w.write_all(&out)?;
                let base_allocation = matches!(&s.meta, Some((n, true)) if n == &data);
                return Ok(Outcome::Transmit(Negotiated {
                    entry,
                    structured: s.structured,
                    base_allocation,
                    read_only,
                    flags,
                }));
            }
            _ if tls_needed => c.error(REP_ERR_TLS_REQD, "this server requires TLS: send STARTTLS first")?,
            OPT_LIST => {
                if !data.is_empty() {
                    c.error(REP_ERR_INVALID, "LIST takes no data")?;
                } else {
                    for e in exports.visible(peer) {
                        c.reply(REP_SERVER, &rep_server(&e.name, &e.export.description))?;
                    }
                    c.reply(REP_ACK, &[])?;
                }
            }
            OPT_STRUCTURED_REPLY => {
                if !data.is_empty() {
                    c.error(REP_ERR_INVALID, "STRUCTURED_REPLY takes no data")?;
                } else if s.structured {
                    c.error(REP_ERR_INVALID, "structured replies are already negotiated")?;
                } else {
                    s.structured = true;
                    c.reply(REP_ACK, &[])?;
                }
            }
            OPT_INFO | OPT_GO => {
                let Some(req) = decode_info_request(&data) else {
                    c.error(REP_ERR_INVALID, "malformed INFO/GO request")?;
                    continue;
                };
                let name = String::from_utf8_lossy(req.name);
                let Some(entry) = exports.lookup(&name, peer) else {
                    c.error(REP_ERR_UNKNOWN, &format!("no export {name:?}"))?;
                    continue;
                };
                let (flags, read_only) = transmission_flags(&entry, s.structured);
                let lun = &entry.export.lun;
                c.reply(REP_INFO, &info_export(lun.size(), flags))?;
                if req.requests.contains(&INFO_NAME) {
                    c.reply(REP_INFO, &info_string(INFO_NAME, &entry.name))?;
                }
                if req.requests.contains(&INFO_DESCRIPTION) && !entry.export.description.is_empty() {
                    c.reply(REP_INFO, &info_string(INFO_DESCRIPTION, &entry.export.description))?;
                }
                // Always sent (as nbdkit does): clients that did not ask ignore it.
                let min = lun.block_size();
                let preferred = lun.preferred_block_size().max(min);
                c.reply(REP_INFO, &info_block_size(min, preferred, MAX_PAYLOAD_BYTES))?;
                c.reply(REP_ACK, &[])?;
                if option == OPT_GO {
                    let base_allocation = matches!(&s.meta, Some((n, true)) if n.as_slice() == req.name);
                    return Ok(Outcome::Transmit(Negotiated {
                        entry,
                        structured: s.structured,
                        base_allocation,
                        read_only,
                        flags,
                    }));
                }
            }
            OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => {
                let set = option == OPT_SET_META_CONTEXT;
                if set {
                    // Replaced even when this one fails (the spec).
                    s.meta = None;
                }
                if !s.structured {
                    c.error(REP_ERR_INVALID, "negotiate structured replies first")?;
                    continue;
                }
                let Some(req) = decode_meta_request(&data) else {
                    c.error(REP_ERR_INVALID, "malformed metadata context request")?;
                    continue;
                };
                let name = String::from_utf8_lossy(req.name);
                if exports.lookup(&name, peer).is_none() {
                    c.error(REP_ERR_UNKNOWN, &format!("no export {name:?}"))?;
                    continue;
                }
                let wanted = if set {
                    req.queries.iter().any(|q| *q == META_BASE_ALLOCATION.as_bytes())
                } else {
                    req.queries.is_empty()
                        || req.queries.iter().any(|q| *q == META_BASE_ALLOCATION.as_bytes() || *q == b"base:")
                };
                if wanted {
                    let id = if set { META_ID_BASE_ALLOCATION } else { 0 };
                    c.reply(REP_META_CONTEXT, &rep_meta_context(id, META_BASE_ALLOCATION))?;
                }
                if set {
                    s.meta = Some((req.name.to_vec(), wanted));
                }
                c.reply(REP_ACK, &[])?;
            }
            _ => c.error(REP_ERR_UNSUP, &format!("option {option} is not supported"))?,
        }
    }
}
