//! The `jobrelay:plugin/archive` calls as plugins built for the current WIT version make them:
//! opening a writer (at most a few per call), writing and finishing it, putting a whole object,
//! each through the run's tape.
//!
//! Apart from the writes so that what a plugin may ask, and what a tape sees of it, reads on
//! its own.

use serde_json::json;
use wasmtime::component::Resource;

use super::writes::ObjectWriter;
use super::{ArchiveAccess, ArchiveError, MAX_OPEN_WRITERS};
use crate::tape;
use jobrelay_bindings::jobrelay::plugin::archive as wit;

use wit::Writer;

impl wit::Host for ArchiveAccess {
    async fn create(&mut self, key: String) -> Result<Resource<Writer>, ArchiveError> {
        self.locate(&key)?;
        if self.writers.len() >= MAX_OPEN_WRITERS {
            return Err(ArchiveError::Unavailable(format!(
                "at most {MAX_OPEN_WRITERS} writers may be open at once; finish one first"
            )));
        }
        let tape = self.tape.clone();
        let args = || json!({ "key": key });
        let writer = match &tape {
            Some(tape) if tape.replaying() => {
                let created: Result<(), ArchiveError> = tape.replay("archive.create", args());
                created.map(|()| ObjectWriter::replayed(key.clone(), self.plugin.clone()))
            }
            _ => {
                let writer = self.create_writer(key.clone()).await;
                if let Some(tape) = &tape {
                    let answer = writer.as_ref().map(|_| ()).map_err(Clone::clone);
                    tape.record("archive.create", args(), &answer);
                }
                writer
            }
        }?;
        self.writers
            .push(writer)
            .map_err(|e| ArchiveError::Unavailable(format!("cannot open another writer: {e}")))
    }

    async fn put(&mut self, key: String, bytes: Vec<u8>) -> Result<(), ArchiveError> {
        let (_, path) = self.locate(&key)?;
        let size = bytes.len() as u64;
        if size > self.max_object_bytes {
            return Err(self.too_large(size));
        }
        let tape = self.tape.clone();
        let args = tape
            .as_ref()
            .map(|_| json!({ "key": key, "bytes": tape::bytes_to_tape(&bytes) }));
        let real = self.put_object(&key, path, bytes);
        tape::through(
            tape.as_ref(),
            "archive.put",
            || args.unwrap_or_default(),
            real,
        )
        .await
    }
}

impl wit::HostWriter for ArchiveAccess {
    async fn write(
        &mut self,
        writer: Resource<Writer>,
        bytes: Vec<u8>,
    ) -> Result<(), ArchiveError> {
        let rep = writer.rep();
        let writer = self
            .writers
            .get_mut(&writer)
            .map_err(|e| ArchiveError::InvalidKey(format!("invalid writer handle: {e}")))?;
        let args = self
            .tape
            .as_ref()
            .map(|_| json!({ "writer": rep, "bytes": tape::bytes_to_tape(&bytes) }));
        let real = writer.write(bytes);
        tape::through(
            self.tape.as_ref(),
            "archive.write",
            || args.unwrap_or_default(),
            real,
        )
        .await
    }

    async fn finish(&mut self, writer: Resource<Writer>) -> Result<u64, ArchiveError> {
        let rep = writer.rep();
        let writer = self
            .writers
            .get_mut(&writer)
            .map_err(|e| ArchiveError::InvalidKey(format!("invalid writer handle: {e}")))?;
        let args = || json!({ "writer": rep });
        tape::through(self.tape.as_ref(), "archive.finish", args, writer.finish()).await
    }

    async fn drop(&mut self, writer: Resource<Writer>) -> wasmtime::Result<()> {
        self.writers.remove(writer)?;
        Ok(())
    }
}
