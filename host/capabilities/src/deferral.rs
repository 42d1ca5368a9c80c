//! The `jobrelay:plugin/deferral` interface: a plugin asks for its event back later without
//! failing it (a notifier's digest window, quiet hours).
//!
//! The capability only records the request for the call; the runtime reads it when `handle`
//! returns `retry` and reports a deferral instead of a failure, and the lane waits it out
//! without spending the retry budget. Always granted: it holds nothing of the host but one
//! number per call, and the lane bounds what a deferring plugin can hold back (see
//! `docs/delivery.md`).

use std::time::Duration;

use wasmtime::component::{HasSelf, Linker};

use super::{CallScope, Capability, GrantProblem, StoreSetup};
use jobrelay_bindings::jobrelay::plugin::deferral as wit;

/// The longest one deferral may ask for: a day.
pub const MAX_SECONDS: u32 = 86_400;

/// The deferral capability.
pub struct Deferral;

impl Capability for Deferral {
    fn name(&self) -> &'static str {
        "deferral"
    }

    fn configure(&self, _call: &CallScope<'_>, setup: &mut StoreSetup) -> Result<(), GrantProblem> {
        setup.state.deferral = Requested::default();
        Ok(())
    }
}

/// What this call asked for.
#[derive(Debug, Default)]
pub struct Requested {
    after: Option<Duration>,
}

impl Requested {
    /// The wait asked for by the call's last `defer`, if any.
    pub fn after(&self) -> Option<Duration> {
        self.after
    }
}

/// Links the interface into a linker whose store data gives the call's [`Requested`] through
/// `get`. Only the current world has it: 0.1.0 plugins never import it.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut Requested,
) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, HasSelf<Requested>>(linker, get)
}

impl wit::Host for Requested {
    async fn defer(&mut self, seconds: u32) {
        self.after = Some(Duration::from_secs(u64::from(
            seconds.clamp(1, MAX_SECONDS),
        )));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wit::Host as _;

    #[tokio::test]
    async fn the_last_request_counts_and_is_clamped() {
        let mut requested = Requested::default();
        assert_eq!(requested.after(), None);
        requested.defer(30).await;
        requested.defer(0).await;
        assert_eq!(requested.after(), Some(Duration::from_secs(1)));
        requested.defer(u32::MAX).await;
        assert_eq!(
            requested.after(),
            Some(Duration::from_secs(u64::from(MAX_SECONDS)))
        );
    }
}
