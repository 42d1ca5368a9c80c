//! The same calls for plugins built against `jobrelay:plugin@0.1.0`: each forwards to the
//! current interface (a writer is the same handle number in both), so grants, limits and tapes
//! exist once.
//!
//! Apart so that the older version is kept, and one day dropped, in one place (with its line
//! in `add_to_linker`).

use wasmtime::component::Resource;

use super::ArchiveAccess;
use jobrelay_bindings::jobrelay::plugin::archive as wit;
use jobrelay_bindings::v0_1::jobrelay::plugin::archive as older;

impl older::Host for ArchiveAccess {
    async fn create(&mut self, key: String) -> Result<Resource<older::Writer>, older::Error> {
        wit::Host::create(self, key)
            .await
            .map(|writer| Resource::new_own(writer.rep()))
            .map_err(Into::into)
    }

    async fn put(&mut self, key: String, bytes: Vec<u8>) -> Result<(), older::Error> {
        wit::Host::put(self, key, bytes).await.map_err(Into::into)
    }
}

impl older::HostWriter for ArchiveAccess {
    async fn write(
        &mut self,
        writer: Resource<older::Writer>,
        bytes: Vec<u8>,
    ) -> Result<(), older::Error> {
        let writer = Resource::new_borrow(writer.rep());
        wit::HostWriter::write(self, writer, bytes)
            .await
            .map_err(Into::into)
    }

    async fn finish(&mut self, writer: Resource<older::Writer>) -> Result<u64, older::Error> {
        let writer = Resource::new_borrow(writer.rep());
        wit::HostWriter::finish(self, writer)
            .await
            .map_err(Into::into)
    }

    async fn drop(&mut self, writer: Resource<older::Writer>) -> wasmtime::Result<()> {
        wit::HostWriter::drop(self, Resource::new_own(writer.rep())).await
    }
}
