//! The login phase (RFC 7143 §6.3, §11.12–11.13): security negotiation (CHAP or none),
//! operational negotiation, and the move to full-feature phase.
//!
//! [`LoginState`] is a pure state machine: one Login Request in, one Login Response out
//! (or the session's outcome), so the fuzz target drives it without sockets. Text spread
//! over continuation PDUs (C bit) is gathered up to `text::MAX_TEXT_BYTES`.
//!
//! Trade-off: one connection per session (MaxConnections=1, ERL 0). A login naming an
//! existing session (TSIH ≠ 0) is refused with "session does not exist"; a new login
//! with the same initiator and ISID reinstates (the server closes the old connection).

use crate::chap;
use crate::pdu::{self, Pdu, OP_LOGIN_REQ, OP_LOGIN_RESP};
use crate::scsi::Nexus;
use crate::targets::{Chap, Target, TargetTable};
use crate::text::{self, Answer, Params, OUR_MAX_RECV};
use std::net::IpAddr;
use std::sync::Arc;

pub const STAGE_SECURITY: u8 = 0;
pub const STAGE_OPERATIONAL: u8 = 1;
pub const STAGE_FULL_FEATURE: u8 = 3;

/// Login status (class << 8 | detail), §11.13.5.
pub const ST_INITIATOR_ERROR: u16 = 0x0200;
pub const ST_AUTH_FAILED: u16 = 0x0201;
pub const ST_FORBIDDEN: u16 = 0x0202;
pub const ST_NOT_FOUND: u16 = 0x0203;
pub const ST_UNSUPPORTED_VERSION: u16 = 0x0205;
pub const ST_MISSING_PARAMETER: u16 = 0x0207;
pub const ST_SESSION_TYPE: u16 = 0x0209;
pub const ST_NO_SESSION: u16 = 0x020a;
pub const ST_INVALID_REQUEST: u16 = 0x020b;

/// What the login decides about the session.
pub enum SessionKind {
    Discovery,
    Normal(Arc<Target>),
}

pub struct LoginOutcome {
    pub params: Params,
    pub kind: SessionKind,
    pub nexus: Nexus,
    pub exp_cmdsn: u32,
    /// The StatSN of the next response after the final Login Response.
    pub statsn: u32,
}

pub enum Step {
    /// Send this response and read the next request.
    Reply(Pdu),
    /// Send this final response; the session enters full-feature phase.
    Done(Pdu, Box<LoginOutcome>),
    /// Send this failure response and close.
    Fail(Pdu),
}

/// Who is logging in, from where, and what they may see.
pub struct LoginEnv<'a> {
    pub targets: &'a TargetTable,
    pub discovery_chap: Option<&'a Chap>,
    pub peer: IpAddr,
    pub window: u32,
    /// TSIH to hand out if the login succeeds.
    pub tsih: u16,
}

enum Auth {
    /// Not yet started (or not required).
    Start,
    /// Waiting for CHAP_A.
    WantAlgorithm,
    /// Challenge sent: (identifier, challenge).
    Challenged(u8, Vec<u8>),
    Done,
}

pub struct LoginState {
    first: bool,
    isid: [u8; 6],
    itt: u32,
    cmdsn: u32,
    statsn: u32,
    stage: u8,
    initiator: Option<String>,
    kind: Option<SessionKind>,
    chap: Option<Chap>,
    auth: Auth,
    params: Params,
    declared_mrdsl: bool,
    text: Vec<u8>,
    refusal: Option<&'static str>,
}

impl Default for LoginState {
    fn default() -> Self {
        LoginState {
            first: true,
            isid: [0; 6],
            itt: 0,
            cmdsn: 0,
            statsn: 1,
            stage: STAGE_SECURITY,
            initiator: None,
            kind: None,
            chap: None,
            auth: Auth::Start,
            params: Params::default(),
            declared_mrdsl: false,
            text: Vec::new(),
            refusal: None,
        }
    }
}

impl LoginState {
    fn response(&mut self, req: &Pdu, transit: bool, nsg: u8, status: u16, pairs: &[(String, String)]) -> Pdu {
        let mut p = Pdu::new(OP_LOGIN_RESP);
        let csg = (req.flags() >> 2) & 3;
        p.bhs[1] = if transit { 0x80 | (csg << 2) | nsg } else { csg << 2 };
        p.bhs[8..14].copy_from_slice(&self.isid);
        p.bhs[14..16].copy_from_slice(&req.bhs[14..16]);
        p.set32(16, req.itt());
        p.set32(24, self.statsn);
        self.statsn = self.statsn.wrapping_add(1);
        p.set32(28, self.cmdsn);
        p.set32(32, self.cmdsn);
        p.bhs[36] = (status >> 8) as u8;
        p.bhs[37] = status as u8;
        p.data = text::encode(pairs);
        p
    }

    fn fail(&mut self, req: &Pdu, status: u16, why: &'static str) -> Step {
        self.refusal = Some(why);
        Step::Fail(self.response(req, false, 0, status, &[]))
    }

    /// Why the login was refused (after [`Step::Fail`]), and by whom, for the log.
    pub fn refusal(&self) -> Option<(&'static str, Option<&str>)> {
        self.refusal.map(|why| (why, self.initiator.as_deref()))
    }

    /// Handle one PDU of the login phase.
    pub fn handle(&mut self, req: &Pdu, env: &LoginEnv) -> Step {
        if req.opcode() != OP_LOGIN_REQ {
            return self.fail(req, ST_INVALID_REQUEST, "a non-login PDU during login");
        }
        let (transit, cont) = (req.flags() & 0x80 != 0, req.flags() & 0x40 != 0);
        let (csg, nsg) = ((req.flags() >> 2) & 3, req.flags() & 3);
        if self.first {
            self.first = false;
            self.isid.copy_from_slice(&req.bhs[8..14]);
            self.itt = req.itt();
            self.cmdsn = req.field32(24);
            if req.bhs[3] > 0 {
                return self.fail(req, ST_UNSUPPORTED_VERSION, "version-min above 0");
            }
            if pdu::be16(&req.bhs, 14) != 0 {
                return self.fail(req, ST_NO_SESSION, "adding a connection to a session (MaxConnections=1)");
            }
            self.stage = csg;
        }
        if csg != self.stage || csg == 2 || csg == STAGE_FULL_FEATURE || (transit && cont) {
            return self.fail(req, ST_INITIATOR_ERROR, "an out-of-sequence login stage");
        }
        if transit && (nsg <= csg || nsg == 2) {
            return self.fail(req, ST_INITIATOR_ERROR, "an invalid next stage");
        }
        if self.text.len() + req.data.len() > text::MAX_TEXT_BYTES {
            return self.fail(req, ST_INITIATOR_ERROR, "login text too long");
        }
        self.text.extend_from_slice(&req.data);
        if cont {
            // More text follows: acknowledge with an empty response.
            return Step::Reply(self.response(req, false, 0, 0, &[]));
        }
        let Some(pairs) = text::parse(&std::mem::take(&mut self.text)) else {
            return self.fail(req, ST_INITIATOR_ERROR, "malformed login text");
        };
        let mut out: Vec<(String, String)> = Vec::new();
        if self.kind.is_none() {
            if let Err(step) = self.identify(req, &pairs, env, &mut out) {
                return step;
            }
        }
        let mut chap_keys = Vec::new();
        for (k, v) in &pairs {
            match text::negotiate(&mut self.params, k, v) {
                Answer::Reply(a) => out.push((k.clone(), a)),
                Answer::Silent => {}
                Answer::NotOperational if k.starts_with("CHAP_") || k == "AuthMethod" => {
                    chap_keys.push((k.as_str(), v.as_str()))
                }
                Answer::NotOperational => {}
            }
            if k == "MaxRecvDataSegmentLength" && !self.declared_mrdsl {
                out.push((k.clone(), OUR_MAX_RECV.to_string()));
                self.declared_mrdsl = true;
            }
        }
        if csg == STAGE_SECURITY {
            if let Err(step) = self.security(req, &chap_keys, &mut out) {
                return step;
            }
        } else if !chap_keys.is_empty() {
            return self.fail(req, ST_INITIATOR_ERROR, "security keys in the operational stage");
        }
        let mut transit = transit;
        if transit && self.chap.is_some() && !matches!(self.auth, Auth::Done) {
            if csg == STAGE_SECURITY && !matches!(self.auth, Auth::Start) {
                // CHAP still under way: stay in the security stage.
                transit = false;
            } else {
                return self.fail(req, ST_AUTH_FAILED, "leaving security without authenticating");
            }
        }
        if transit && nsg == STAGE_FULL_FEATURE {
            if !self.declared_mrdsl {
                out.push(("MaxRecvDataSegmentLength".into(), OUR_MAX_RECV.to_string()));
            }
            let mut params = self.params.clone();
            params.max_recv_data_segment = OUR_MAX_RECV;
            let mut resp = self.response(req, true, nsg, 0, &out);
            resp.bhs[14..16].copy_from_slice(&env.tsih.to_be_bytes());
            resp.set32(32, self.cmdsn.wrapping_add(env.window.max(1) - 1));
            let kind = self.kind.take().unwrap_or(SessionKind::Discovery);
            let nexus = Nexus { initiator: self.initiator.clone().unwrap_or_default(), isid: self.isid };
            let outcome = LoginOutcome { params, kind, nexus, exp_cmdsn: self.cmdsn, statsn: self.statsn };
            return Step::Done(resp, Box::new(outcome));
        }
        if transit {
            self.stage = nsg;
        }
        Step::Reply(self.response(req, transit, nsg, 0, &out))
    }

    /// The first PDU's identity keys: who the initiator is and what it logs in to.
    fn identify(
        &mut self,
        req: &Pdu,
        pairs: &[(String, String)],
        env: &LoginEnv,
        out: &mut Vec<(String, String)>,
    ) -> Result<(), Step> {
        let get = |k: &str| pairs.iter().find(|p| p.0 == k).map(|p| p.1.clone());
        let Some(initiator) = get("InitiatorName") else {
            return Err(self.fail(req, ST_MISSING_PARAMETER, "no InitiatorName"));
        };
        self.initiator = Some(initiator.clone());
        match get("SessionType").as_deref() {
            Some("Discovery") => {
                self.chap = env.discovery_chap.cloned();
                self.kind = Some(SessionKind::Discovery);
            }
            None | Some("Normal") => {
                let Some(name) = get("TargetName") else {
                    return Err(self.fail(req, ST_MISSING_PARAMETER, "no TargetName"));
                };
                // A target the client may not reach is reported as absent, not forbidden.
                let target = match env.targets.get(&name) {
                    Some(t) if t.client_allowed(env.peer) => t,
                    _ => return Err(self.fail(req, ST_NOT_FOUND, "no such target for this client")),
                };
                if !target.initiator_allowed(&initiator) {
                    return Err(self.fail(req, ST_FORBIDDEN, "initiator not allowed"));
                }
                self.chap = target.config.chap.clone();
                self.kind = Some(SessionKind::Normal(target));
                out.push(("TargetPortalGroupTag".into(), "1".into()));
            }
            Some(_) => return Err(self.fail(req, ST_SESSION_TYPE, "unknown SessionType")),
        }
        Ok(())
    }

    fn security(&mut self, req: &Pdu, keys: &[(&str, &str)], out: &mut Vec<(String, String)>) -> Result<(), Step> {
        let get = |k: &str| keys.iter().find(|p| p.0 == k).map(|p| p.1);
        if let Some(methods) = get("AuthMethod") {
            let want = if self.chap.is_some() { "CHAP" } else { "None" };
            if !methods.split(',').any(|m| m == want) {
                return Err(self.fail(req, ST_AUTH_FAILED, "no acceptable AuthMethod"));
            }
            out.push(("AuthMethod".into(), want.into()));
            if self.chap.is_some() {
                self.auth = Auth::WantAlgorithm;
            }
            return Ok(());
        }
        let Some(chap) = self.chap.clone() else { return Ok(()) };
        match std::mem::replace(&mut self.auth, Auth::Start) {
            Auth::WantAlgorithm => {
                let Some(a) = get("CHAP_A") else { return Err(self.fail(req, ST_AUTH_FAILED, "no CHAP_A")) };
                if !a.split(',').any(|x| x == "5") {
                    return Err(self.fail(req, ST_AUTH_FAILED, "CHAP without MD5"));
                }
                let mut r = [0u8; 17];
                chap::random_bytes(&mut r);
                let (id, challenge) = (r[0], r[1..].to_vec());
                out.push(("CHAP_A".into(), "5".into()));
                out.push(("CHAP_I".into(), id.to_string()));
                out.push(("CHAP_C".into(), text::hex(&challenge)));
                self.auth = Auth::Challenged(id, challenge);
            }
            Auth::Challenged(id, challenge) => {
                let (Some(n), Some(r)) = (get("CHAP_N"), get("CHAP_R").and_then(text::unhex)) else {
                    return Err(self.fail(req, ST_AUTH_FAILED, "no CHAP_N/CHAP_R"));
                };
                let expect = chap::response(id, &chap.secret, &challenge);
                if n != chap.user || !chap::same(&r, &expect) {
                    return Err(self.fail(req, ST_AUTH_FAILED, "wrong CHAP user or secret"));
                }
                if let (Some(i), Some(c)) = (get("CHAP_I"), get("CHAP_C").and_then(text::unhex)) {
                    // Mutual CHAP: the initiator challenges us.
                    let Some((user, secret)) = &chap.mutual else {
                        return Err(self.fail(req, ST_AUTH_FAILED, "mutual CHAP asked, none configured"));
                    };
                    let Ok(i) = i.parse::<u8>() else { return Err(self.fail(req, ST_AUTH_FAILED, "bad CHAP_I")) };
                    if chap::same(&c, &challenge) || c.is_empty() {
                        return Err(self.fail(req, ST_AUTH_FAILED, "reflected CHAP challenge"));
                    }
                    out.push(("CHAP_N".into(), user.clone()));
                    out.push(("CHAP_R".into(), text::hex(&chap::response(i, secret, &c))));
                }
                self.auth = Auth::Done;
            }
            other => self.auth = other,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::targets::TargetConfig;

    const T: &str = "iqn.2026-01.org.strata:t";

    fn req(csg: u8, nsg: u8, transit: bool, cont: bool, pairs: &[(&str, &str)]) -> Pdu {
        let mut p = Pdu::new(OP_LOGIN_REQ);
        p.bhs[0] |= 0x40;
        p.bhs[1] = (if transit { 0x80 } else { 0 }) | (if cont { 0x40 } else { 0 }) | (csg << 2) | nsg;
        p.bhs[8..14].copy_from_slice(&[0x80, 0, 0, 0, 0, 1]);
        p.set32(16, 7);
        p.set32(24, 100);
        let owned: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        p.data = text::encode(&owned);
        p
    }

    fn keys(p: &Pdu) -> Vec<(String, String)> {
        text::parse(&p.data).unwrap()
    }

    fn get(p: &Pdu, k: &str) -> Option<String> {
        keys(p).into_iter().find(|x| x.0 == k).map(|x| x.1)
    }

    fn status(p: &Pdu) -> u16 {
        u16::from_be_bytes([p.bhs[36], p.bhs[37]])
    }

    fn table(chap: Option<Chap>) -> TargetTable {
        let t = TargetTable::new();
        let mut c = TargetConfig::new(T, vec![]);
        c.chap = chap;
        t.add(c).unwrap();
        t
    }

    fn env(t: &TargetTable) -> LoginEnv<'_> {
        LoginEnv { targets: t, discovery_chap: None, peer: "127.0.0.1".parse().unwrap(), window: 16, tsih: 9 }
    }

    #[test]
    fn straight_to_full_feature_with_negotiation() {
        let t = table(None);
        let mut s = LoginState::default();
        let first = req(0, 1, true, false, &[("InitiatorName", "iqn.i"), ("TargetName", T), ("AuthMethod", "None")]);
        let Step::Reply(r) = s.handle(&first, &env(&t)) else { panic!("security stage refused") };
        assert_eq!(get(&r, "AuthMethod").as_deref(), Some("None"));
        assert_eq!(get(&r, "TargetPortalGroupTag").as_deref(), Some("1"));
        assert_eq!(r.bhs[1], 0x80 | 1, "transit to operational");
        let op = req(
            1,
            3,
            true,
            false,
            &[("HeaderDigest", "CRC32C,None"), ("MaxRecvDataSegmentLength", "65536"), ("Foo", "1")],
        );
        let Step::Done(r, o) = s.handle(&op, &env(&t)) else { panic!("operational stage refused") };
        assert_eq!(r.bhs[1], 0x80 | (1 << 2) | 3);
        assert_eq!(pdu::be16(&r.bhs, 14), 9, "the TSIH");
        assert_eq!(get(&r, "Foo").as_deref(), Some("NotUnderstood"));
        assert_eq!(get(&r, "MaxRecvDataSegmentLength"), Some(OUR_MAX_RECV.to_string()));
        assert!(o.params.header_digest);
        assert_eq!(o.params.max_xmit_data_segment, 65536);
        assert_eq!(o.exp_cmdsn, 100);
        assert_eq!(r.field32(32), 100 + 15, "MaxCmdSN opens the window");
        assert!(matches!(o.kind, SessionKind::Normal(_)));
    }

    #[test]
    fn refusals() {
        let t = table(None);
        let no_target = req(0, 3, true, false, &[("InitiatorName", "iqn.i"), ("TargetName", "iqn.x:none")]);
        let Step::Fail(r) = LoginState::default().handle(&no_target, &env(&t)) else { panic!() };
        assert_eq!(status(&r), ST_NOT_FOUND);
        let no_name = req(0, 3, true, false, &[("TargetName", T)]);
        let Step::Fail(r) = LoginState::default().handle(&no_name, &env(&t)) else { panic!() };
        assert_eq!(status(&r), ST_MISSING_PARAMETER);
        let mut bad_stage = req(0, 3, true, false, &[("InitiatorName", "iqn.i"), ("TargetName", T)]);
        bad_stage.bhs[1] = 0x80 | (3 << 2) | 3;
        assert!(matches!(LoginState::default().handle(&bad_stage, &env(&t)), Step::Fail(_)));
        let mut tsih = req(0, 3, true, false, &[("InitiatorName", "iqn.i"), ("TargetName", T)]);
        tsih.bhs[15] = 5;
        let Step::Fail(r) = LoginState::default().handle(&tsih, &env(&t)) else { panic!() };
        assert_eq!(status(&r), ST_NO_SESSION);
    }

    #[test]
    fn continued_text_is_gathered() {
        let t = table(None);
        let mut s = LoginState::default();
        let all = text::encode(&[("InitiatorName".into(), "iqn.i".into()), ("TargetName".into(), T.into())]);
        let mut a = req(0, 0, false, true, &[]);
        a.data = all[..10].to_vec();
        assert!(matches!(s.handle(&a, &env(&t)), Step::Reply(_)));
        let mut b = req(0, 3, true, false, &[]);
        b.data = all[10..].to_vec();
        assert!(matches!(s.handle(&b, &env(&t)), Step::Done(..)), "the gathered text names the target");
    }

    fn chap_login(secret: &[u8], mutual: Option<(&str, &[u8])>) -> (Step, u8, Vec<u8>) {
        let t = table(Some(Chap {
            user: "u".into(),
            secret: b"target-secret".to_vec(),
            mutual: Some(("tgt".into(), b"m-secret".to_vec())),
        }));
        let mut s = LoginState::default();
        let first =
            req(0, 1, true, false, &[("InitiatorName", "iqn.i"), ("TargetName", T), ("AuthMethod", "CHAP,None")]);
        let Step::Reply(r) = s.handle(&first, &env(&t)) else { panic!() };
        assert_eq!(get(&r, "AuthMethod").as_deref(), Some("CHAP"));
        assert_eq!(r.bhs[1] & 0x80, 0, "no transit before authenticating");
        let Step::Reply(r) = s.handle(&req(0, 1, true, false, &[("CHAP_A", "7,5")]), &env(&t)) else { panic!() };
        let id: u8 = get(&r, "CHAP_I").unwrap().parse().unwrap();
        let challenge = text::unhex(&get(&r, "CHAP_C").unwrap()).unwrap();
        let resp = text::hex(&chap::response(id, secret, &challenge));
        let mut pairs = vec![("CHAP_N", "u".to_string()), ("CHAP_R", resp)];
        if let Some((i, c)) = mutual {
            pairs.push(("CHAP_I", i.to_string()));
            pairs.push(("CHAP_C", text::hex(c)));
        }
        let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        (s.handle(&req(0, 1, true, false, &pairs), &env(&t)), id, challenge)
    }

    #[test]
    fn chap_accepts_the_secret_and_refuses_others() {
        let (ok, _, _) = chap_login(b"target-secret", None);
        let Step::Reply(r) = ok else { panic!("right secret refused") };
        assert_eq!(r.bhs[1], 0x80 | 1, "authenticated: on to operational");
        let (bad, _, _) = chap_login(b"target-secreT", None);
        let Step::Fail(r) = bad else { panic!("wrong secret accepted") };
        assert_eq!(status(&r), ST_AUTH_FAILED);
        let (mutual, _, _) = chap_login(b"target-secret", Some(("3", b"initiator-challenge")));
        let Step::Reply(r) = mutual else { panic!("mutual refused") };
        assert_eq!(get(&r, "CHAP_N").as_deref(), Some("tgt"));
        let want = text::hex(&chap::response(3, b"m-secret", b"initiator-challenge"));
        assert_eq!(get(&r, "CHAP_R"), Some(want), "the target proves the mutual secret");
    }
}
