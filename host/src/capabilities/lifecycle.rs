//! The `jobrelay:plugin/lifecycle` interface: tells `init` whether it runs at load time.
//!
//! `init` runs on every fresh instance, so it must stay cheap; one-time setup (creating a
//! table) belongs in the single `init` the host runs when it loads a version. This lets a
//! plugin tell the two apart. Always granted: it reveals nothing outside the plugin.

use wasmtime::component::{HasSelf, Linker};

use super::Capability;
use crate::runtime::HostState;
use crate::runtime::bindings::jobrelay::plugin::lifecycle as wit;

/// The lifecycle capability.
pub struct Lifecycle;

impl Capability for Lifecycle {
    fn name(&self) -> &'static str {
        "lifecycle"
    }

    fn add_to_linker(&self, linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
        wit::add_to_linker::<HostState, HasSelf<HostState>>(linker, |state| state)
    }
}

impl wit::Host for HostState {
    async fn loading(&mut self) -> bool {
        // Only the load-time call runs without an event.
        self.labels.event.is_none()
    }
}
