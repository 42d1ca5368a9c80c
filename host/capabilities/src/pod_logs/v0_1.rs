//! The same calls for plugins built against `jobrelay:plugin@0.1.0`: each forwards to the
//! current interface (a log is the same handle number in both), so grants, limits and tapes
//! exist once.
//!
//! Apart so that the older version is kept, and one day dropped, in one place (with its line
//! in `add_to_linker`).

use wasmtime::component::Resource;

use super::PodLogAccess;
use jobrelay_bindings::jobrelay::plugin::pod_logs as wit;
use jobrelay_bindings::v0_1::jobrelay::plugin::pod_logs as older;

impl older::Host for PodLogAccess {
    async fn pods(&mut self) -> Result<Vec<older::Pod>, older::Error> {
        wit::Host::pods(self)
            .await
            .map(|pods| pods.into_iter().map(Into::into).collect())
            .map_err(Into::into)
    }

    async fn open(
        &mut self,
        pod: String,
        container: String,
        previous: bool,
    ) -> Result<Resource<older::Log>, older::Error> {
        wit::Host::open(self, pod, container, previous)
            .await
            .map(|log| Resource::new_own(log.rep()))
            .map_err(Into::into)
    }
}

impl older::HostLog for PodLogAccess {
    async fn read(
        &mut self,
        log: Resource<older::Log>,
        max_bytes: u32,
    ) -> Result<Vec<u8>, older::Error> {
        let log = Resource::new_borrow(log.rep());
        wit::HostLog::read(self, log, max_bytes)
            .await
            .map_err(Into::into)
    }

    async fn truncated(&mut self, log: Resource<older::Log>) -> bool {
        wit::HostLog::truncated(self, Resource::new_borrow(log.rep())).await
    }

    async fn drop(&mut self, log: Resource<older::Log>) -> wasmtime::Result<()> {
        wit::HostLog::drop(self, Resource::new_own(log.rep())).await
    }
}
