//! The `jobrelay:plugin/lifecycle` interface: tells `init` whether it runs at load time.
//!
//! `init` runs on every fresh instance, so it must stay cheap; one-time setup (creating a
//! table) belongs in the single `init` the host runs when it loads a version. This lets a
//! plugin tell the two apart. Always granted: it reveals nothing outside the plugin.

use wasmtime::component::{HasSelf, Linker};

use super::{CallScope, Capability, GrantProblem, StoreSetup};
use jobrelay_bindings::jobrelay::plugin::lifecycle as wit;
use jobrelay_bindings::v0_1::jobrelay::plugin::lifecycle as older;

/// The lifecycle capability.
pub struct Lifecycle;

impl Capability for Lifecycle {
    fn name(&self) -> &'static str {
        "lifecycle"
    }

    fn configure(&self, call: &CallScope<'_>, setup: &mut StoreSetup) -> Result<(), GrantProblem> {
        // Only the load-time call runs without an event.
        setup.state.lifecycle = Stage {
            loading: call.event.is_none(),
        };
        Ok(())
    }
}

/// Which call this is.
#[derive(Debug, Default)]
pub struct Stage {
    loading: bool,
}

/// Links the interface (both served versions) into a linker whose store data gives the
/// call's [`Stage`] through `get`.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut Stage,
) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, HasSelf<Stage>>(linker, get)?;
    older::add_to_linker::<T, HasSelf<Stage>>(linker, get)
}

impl wit::Host for Stage {
    async fn loading(&mut self) -> bool {
        self.loading
    }
}

impl older::Host for Stage {
    async fn loading(&mut self) -> bool {
        self.loading
    }
}
