//! Logs of the job's own pods (`grants.pod_logs`): the raw interface, and a log as a
//! `std::io::Read`.

pub use crate::bindings::jobrelay::plugin::pod_logs::*;

use std::io;

/// How much one `read` asks the host for.
const CHUNK: u32 = 256 * 1024;

impl io::Read for Log {
    /// Reads the next chunk; `Ok(0)` at the end (or where the grant's cap cut the log: see
    /// [`Log::truncated`]).
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = u32::try_from(buf.len()).unwrap_or(CHUNK).min(CHUNK);
        let chunk = Log::read(self, want).map_err(|e| io::Error::other(format!("{e:?}")))?;
        let n = chunk.len().min(buf.len());
        buf[..n].copy_from_slice(&chunk[..n]);
        Ok(n)
    }
}

/// The whole log of one container (up to the grant's cap) and whether it was cut there.
pub fn read_all(pod: &str, container: &str, previous: bool) -> Result<(Vec<u8>, bool), Error> {
    let log = open(pod, container, previous)?;
    let mut bytes = Vec::new();
    loop {
        let chunk = log.read(CHUNK)?;
        if chunk.is_empty() {
            break;
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok((bytes, log.truncated()))
}
