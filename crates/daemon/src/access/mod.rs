//! Who is calling, and what they may do.
//!
//! - On the Unix socket (`/run/strata/strata.sock`, mode 0660, owner root, group
//!   `strata`), the caller is the peer's uid from SO_PEERCRED: root and members of the
//!   socket's group are administrators (like Docker's socket: that group is root-equivalent,
//!   since an administrator formats devices). Anyone else cannot even connect (the mode);
//!   if the mode is loosened by hand, the daemon still refuses them.
//! - On TCP (only when configured), every request carries `Authorization: Bearer TOKEN`; the
//!   token's role decides (tokens.rs). Off loopback, TCP is TLS only (crate::http::server).
//!
//! Every change is recorded with its caller (audit.rs).

pub(crate) mod audit;
pub(crate) mod tokens;

use strata_api::Role;

/// A caller the daemon has identified.
#[derive(Debug, Clone)]
pub struct Caller {
    /// For the audit log: `uid 0 (root)`, `token ci (operator)`.
    pub name: String,
    pub role: Role,
}

/// The group whose members administer the daemon over its socket, as a gid.
pub(crate) fn group_gid(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: getgrnam returns a pointer into static storage or NULL; read at once. Called
    // while no other thread of ours calls getgr* (start-up and a mutex-held path).
    let g = unsafe { libc::getgrnam(c.as_ptr()) };
    if g.is_null() {
        None
    } else {
        // SAFETY: non-null result of getgrnam.
        Some(unsafe { (*g).gr_gid })
    }
}

/// The user name of `uid`, if it has one.
pub(crate) fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r with a buffer we own; `out` is null or points at `pwd`.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr().cast(), buf.len(), &mut out) };
    if rc != 0 || out.is_null() {
        return None;
    }
    // SAFETY: pw_name points into `buf`, NUL-terminated.
    let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
    Some(name.to_string_lossy().into_owned())
}

/// Is process `pid` (the socket's peer) a member of group `gid` (its real, effective or
/// supplementary groups)? Read from /proc at connect time.
pub(crate) fn process_in_group(pid: i32, gid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { return false };
    status.lines().any(|l| {
        let ids = |rest: &str| rest.split_whitespace().filter_map(|x| x.parse::<u32>().ok()).any(|g| g == gid);
        l.strip_prefix("Gid:").is_some_and(ids) || l.strip_prefix("Groups:").is_some_and(ids)
    })
}

/// The caller behind a Unix-socket connection, or why it is refused.
pub(crate) fn unix_caller(uid: u32, gid: u32, pid: Option<i32>, admin_gid: Option<u32>) -> Result<Caller, String> {
    let who = match user_name(uid) {
        Some(n) => format!("uid {uid} ({n})"),
        None => format!("uid {uid}"),
    };
    let member = admin_gid.is_some_and(|g| gid == g || pid.is_some_and(|p| process_in_group(p, g)));
    if uid == 0 || member {
        Ok(Caller { name: who, role: Role::Admin })
    } else {
        Err(format!("{who} is neither root nor a member of the daemon's group"))
    }
}
