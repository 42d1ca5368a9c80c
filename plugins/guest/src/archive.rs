//! Writes under the plugin's prefix of the archive store (`grants.archive`): the raw
//! interface, and a writer as a `std::io::Write` (so `flate2`, `serde_json::to_writer` and
//! `io::copy` write straight into the archive).

pub use crate::bindings::jobrelay::plugin::archive::*;

use std::io;

impl io::Write for Writer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Writer::write(self, buf).map_err(|e| io::Error::other(format!("{e:?}")))?;
        Ok(buf.len())
    }

    /// Bytes go to the host at each `write`; there is nothing to flush. The object exists
    /// once [`Writer::finish`] returns.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
