//! Persistent reservations (SPC-4 §5.13): registrations per I_T nexus, one reservation
//! of the six types, and the access check every command passes first.
//!
//! Kept in memory per LUN (`LunSlot::pr`): a daemon restart forgets them, and APTPL
//! (persist through power loss) is refused as unsupported, so no initiator relies on it.
//! The SPC-2 RESERVE/RELEASE (6 and 10) reservation lives beside them: one holder,
//! released by RELEASE, by the holder's logout or lost connection, and by resets.

use super::{Cdb, Cmd, Outcome, Request};
use crate::sense;
use crate::targets::LunSlot;

pub const WRITE_EXCLUSIVE: u8 = 1;
pub const EXCLUSIVE_ACCESS: u8 = 3;
pub const WE_REGISTRANTS_ONLY: u8 = 5;
pub const EA_REGISTRANTS_ONLY: u8 = 6;
pub const WE_ALL_REGISTRANTS: u8 = 7;
pub const EA_ALL_REGISTRANTS: u8 = 8;

#[derive(Default, Debug)]
pub struct PrState {
    pub generation: u32,
    /// (nexus id, reservation key), in registration order.
    pub registrations: Vec<(String, u64)>,
    /// (holder nexus id, type); for the all-registrants types every registrant holds it.
    pub reservation: Option<(String, u8)>,
    /// The SPC-2 (RESERVE 6/10) holder.
    pub spc2: Option<String>,
}

impl PrState {
    fn key_of(&self, nexus: &str) -> Option<u64> {
        self.registrations.iter().find(|r| r.0 == nexus).map(|r| r.1)
    }

    fn all_registrants(&self) -> bool {
        matches!(self.reservation, Some((_, WE_ALL_REGISTRANTS | EA_ALL_REGISTRANTS)))
    }

    fn holds(&self, nexus: &str) -> bool {
        match &self.reservation {
            Some((h, t)) if matches!(*t, WE_ALL_REGISTRANTS | EA_ALL_REGISTRANTS) => {
                self.key_of(nexus).is_some() || h == nexus
            }
            Some((h, _)) => h == nexus,
            None => false,
        }
    }

    fn unregister(&mut self, nexus: &str) {
        self.registrations.retain(|r| r.0 != nexus);
        let release = match &self.reservation {
            Some((_, WE_ALL_REGISTRANTS | EA_ALL_REGISTRANTS)) => self.registrations.is_empty(),
            Some((h, _)) => h == nexus,
            None => false,
        };
        if release {
            self.reservation = None;
        }
    }
}

/// RESERVATION CONFLICT for a command the nexus may not run under the LUN's reservation.
pub fn check_access(req: &Request, slot: &LunSlot) -> Option<Outcome> {
    let op = req.cdb[0];
    {
        // SPC-2: everything but INQUIRY, REQUEST SENSE, REPORT LUNS and RELEASE
        // conflicts for other nexuses (SPC-2 §5.5.1).
        let pr = slot.pr.lock().expect("pr state");
        if let Some(holder) = &pr.spc2 {
            if *holder != req.nexus.id() && !matches!(op, 0x12 | 0x03 | 0xa0 | 0x17 | 0x57) {
                return Some(Outcome::conflict());
            }
        }
    }
    let writes = matches!(
        op,
        0x0a | 0x2a | 0xaa | 0x8a | 0x8b | 0x2e | 0xae | 0x8e | 0x41 | 0x93 | 0x42 | 0x89 | 0x35 | 0x91 | 0x15 | 0x55
    );
    let reads = matches!(op, 0x08 | 0x28 | 0xa8 | 0x88 | 0x2f | 0xaf | 0x8f | 0x34 | 0x90 | 0x1a | 0x5a);
    if !writes && !reads {
        return None;
    }
    let pr = slot.pr.lock().expect("pr state");
    let (_, ty) = pr.reservation.as_ref()?;
    let me = req.nexus.id();
    if pr.holds(&me) {
        return None;
    }
    let registered = pr.key_of(&me).is_some();
    let allowed = match *ty {
        WRITE_EXCLUSIVE => !writes,
        EXCLUSIVE_ACCESS => false,
        WE_REGISTRANTS_ONLY | WE_ALL_REGISTRANTS => registered || !writes,
        EA_REGISTRANTS_ONLY | EA_ALL_REGISTRANTS => registered,
        _ => true,
    };
    (!allowed).then(Outcome::conflict)
}

pub fn pr_in(req: &Request, slot: &LunSlot) -> Cmd {
    let c = Cdb(req.cdb);
    let (sa, alloc) = (c.b(1) & 0x1f, c.u16(7) as usize);
    let pr = slot.pr.lock().expect("pr state");
    let mut d = Vec::new();
    d.extend_from_slice(&pr.generation.to_be_bytes());
    match sa {
        0 => {
            d.extend_from_slice(&((pr.registrations.len() * 8) as u32).to_be_bytes());
            for (_, k) in &pr.registrations {
                d.extend_from_slice(&k.to_be_bytes());
            }
        }
        1 => match &pr.reservation {
            Some((h, t)) => {
                d.extend_from_slice(&16u32.to_be_bytes());
                let key = if pr.all_registrants() { 0 } else { pr.key_of(h).unwrap_or(0) };
                d.extend_from_slice(&key.to_be_bytes());
                d.extend_from_slice(&[0, 0, 0, 0, 0, *t & 0x0f, 0, 0]);
            }
            None => d.extend_from_slice(&0u32.to_be_bytes()),
        },
        3 => {
            // READ FULL STATUS: one descriptor per registration, with its TransportID
            // (iSCSI, with ISID: "name,i,0xISID", NUL-padded to a multiple of 4).
            let mut body = Vec::new();
            for (nexus, k) in &pr.registrations {
                let mut tid = nexus.as_bytes().to_vec();
                tid.push(0);
                while !tid.len().is_multiple_of(4) {
                    tid.push(0);
                }
                let holder = pr.holds(nexus);
                let mut e = vec![0u8; 24];
                e[..8].copy_from_slice(&k.to_be_bytes());
                e[12] = if holder { 0x01 } else { 0 };
                e[13] = if holder { pr.reservation.as_ref().map(|r| r.1 & 0x0f).unwrap_or(0) } else { 0 };
                e[18..20].copy_from_slice(&1u16.to_be_bytes());
                e[20..24].copy_from_slice(&((tid.len() + 4) as u32).to_be_bytes());
                e.extend_from_slice(&[0x45, 0]);
                e.extend_from_slice(&(tid.len() as u16).to_be_bytes());
                e.extend(tid);
                body.extend(e);
            }
            d.extend_from_slice(&(body.len() as u32).to_be_bytes());
            d.extend(body);
        }
        2 => {
            // Length 8; CRH; TMV with the allow-commands field 0; the six types.
            d = vec![0, 8, 0x10, 0x80, 0x80 | 0x40 | 0x20 | 0x08 | 0x02, 0x01, 0, 0];
        }
        _ => return Err(sense::INVALID_FIELD_IN_CDB),
    }
    Ok(Outcome::data(d, alloc))
}

pub fn pr_out(req: &Request, slot: &LunSlot) -> Cmd {
    let c = Cdb(req.cdb);
    let (sa, scope, ty, plen) = (c.b(1) & 0x1f, c.b(2) >> 4, c.b(2) & 0x0f, c.u32(5) as usize);
    if plen != 24 {
        return Err(sense::PARAM_LIST_LENGTH_ERROR);
    }
    if req.data_out.len() < 24 {
        return Err(sense::PARAM_LIST_LENGTH_ERROR);
    }
    let p = Cdb(req.data_out);
    let (key, sa_key, flags) = (p.u64(0), p.u64(8), p.b(20));
    if flags & 0x01 != 0 || flags & 0x08 != 0 {
        // APTPL and SPEC_I_PT: not supported.
        return Err(sense::INVALID_FIELD_IN_PARAM);
    }
    let me = req.nexus.id();
    let mut pr = slot.pr.lock().expect("pr state");
    let mine = pr.key_of(&me);
    let valid_type = matches!(ty, 1 | 3 | 5 | 6 | 7 | 8);
    match sa {
        0 | 6 => {
            // REGISTER / REGISTER AND IGNORE EXISTING KEY.
            if sa == 0 {
                match mine {
                    None if key != 0 => return Ok(Outcome::conflict()),
                    Some(k) if k != key => return Ok(Outcome::conflict()),
                    _ => {}
                }
            }
            match (mine, sa_key) {
                (None, 0) => {}
                (None, k) => {
                    pr.registrations.push((me, k));
                    pr.generation = pr.generation.wrapping_add(1);
                }
                (Some(_), 0) => {
                    pr.unregister(&me);
                    pr.generation = pr.generation.wrapping_add(1);
                }
                (Some(_), k) => {
                    if let Some(r) = pr.registrations.iter_mut().find(|r| r.0 == me) {
                        r.1 = k;
                    }
                    pr.generation = pr.generation.wrapping_add(1);
                }
            }
        }
        1 => {
            // RESERVE
            if mine != Some(key) {
                return Ok(Outcome::conflict());
            }
            if scope != 0 || !valid_type {
                return Err(sense::INVALID_FIELD_IN_CDB);
            }
            match &pr.reservation {
                None => pr.reservation = Some((me, ty)),
                Some((_, t)) if pr.holds(&me) && *t == ty => {}
                Some(_) => return Ok(Outcome::conflict()),
            }
        }
        2 => {
            // RELEASE
            if mine != Some(key) {
                return Ok(Outcome::conflict());
            }
            if let Some((_, t)) = pr.reservation.clone() {
                if pr.holds(&me) {
                    if t != ty || scope != 0 {
                        return Err(sense::INVALID_RELEASE);
                    }
                    pr.reservation = None;
                }
            }
        }
        3 => {
            // CLEAR
            if mine != Some(key) {
                return Ok(Outcome::conflict());
            }
            pr.registrations.clear();
            pr.reservation = None;
            pr.generation = pr.generation.wrapping_add(1);
        }
        4 | 5 => {
            // PREEMPT (and PREEMPT AND ABORT: no task to abort outlives its command here).
            if mine != Some(key) {
                return Ok(Outcome::conflict());
            }
            if scope != 0 || !valid_type {
                return Err(sense::INVALID_FIELD_IN_CDB);
            }
            let all_reg = pr.all_registrants();
            let holder_key = pr.reservation.as_ref().and_then(|(h, _)| pr.key_of(h));
            if pr.reservation.is_some() && (all_reg && sa_key == 0 || !all_reg && holder_key == Some(sa_key)) {
                // Preempt the reservation: remove the preempted registrations, take it.
                if all_reg {
                    pr.registrations.retain(|r| r.0 == me);
                } else {
                    pr.registrations.retain(|r| r.1 != sa_key || r.0 == me);
                }
                pr.reservation = Some((me, ty));
            } else {
                if sa_key == 0 {
                    return Err(sense::INVALID_FIELD_IN_PARAM);
                }
                let before = pr.registrations.len();
                pr.registrations.retain(|r| r.1 != sa_key || r.0 == me);
                if pr.registrations.len() == before {
                    return Ok(Outcome::conflict());
                }
                if let Some((h, _)) = pr.reservation.clone() {
                    if pr.key_of(&h).is_none() && !pr.all_registrants() {
                        pr.reservation = None;
                    }
                }
            }
            pr.generation = pr.generation.wrapping_add(1);
        }
        _ => return Err(sense::INVALID_FIELD_IN_CDB),
    }
    Ok(Outcome::good())
}

/// RESERVE(6)/(10) and RELEASE(6)/(10), SPC-2 style.
pub fn reserve_release(req: &Request, slot: &LunSlot) -> Cmd {
    let op = req.cdb[0];
    let me = req.nexus.id();
    let mut pr = slot.pr.lock().expect("pr state");
    if matches!(op, 0x16 | 0x56) {
        // Third-party and extent reservations are not supported.
        if req.cdb.get(1).is_some_and(|b| b & 0x13 != 0) {
            return Err(sense::INVALID_FIELD_IN_CDB);
        }
        if pr.reservation.is_some() || pr.spc2.as_ref().is_some_and(|h| *h != me) {
            return Ok(Outcome::conflict());
        }
        pr.spc2 = Some(me);
    } else if pr.spc2.as_ref() == Some(&me) {
        pr.spc2 = None;
    }
    Ok(Outcome::good())
}

/// Drop the SPC-2 reservation `nexus` holds (its session ended), or any (`None`: reset).
pub fn release_spc2(slot: &LunSlot, nexus: Option<&str>) {
    let mut pr = slot.pr.lock().expect("pr state");
    if nexus.is_none() || pr.spc2.as_deref() == nexus {
        pr.spc2 = None;
    }
}
