//! What the core reads from the machine it runs on: random bytes, the host name and the wall
//! clock. Everything else in the core takes these as arguments or calls these functions.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::record::Micros;

/// A new attempt token: 16 random bytes from the OS, as 32 hex digits.
pub fn new_attempt_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| {
        Error::Store(format!(
            "cannot read random bytes for an attempt token: {e}"
        ))
    })?;
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut token = String::with_capacity(32);
    for b in bytes {
        token.push(char::from(HEX[usize::from(b >> 4)]));
        token.push(char::from(HEX[usize::from(b & 15)]));
    }
    Ok(token)
}

/// This process as a holder: `host:pid` (the host name read once, the pid on every call, so a
/// forked child names itself).
pub fn holder() -> String {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let host = HOST.get_or_init(|| {
        host_name()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "unknown-host".to_owned())
    });
    format!("{host}:{}", std::process::id())
}

/// The host's name: `gethostname(2)` on Unix, `COMPUTERNAME` on Windows (std has neither).
#[cfg(unix)]
fn host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length, which is what is passed.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8(buf[..end].to_vec()).ok()
}

#[cfg(not(unix))]
fn host_name() -> Option<String> {
    std::env::var("COMPUTERNAME").ok()
}

/// The wall clock in [`Micros`].
pub fn now_micros() -> Micros {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_micros() as Micros,
        Err(e) => -(e.duration().as_micros() as Micros),
    }
}

/// A random number from the OS (`None` when it cannot give one).
pub fn random_u32() -> Option<u32> {
    getrandom::u32().ok()
}
