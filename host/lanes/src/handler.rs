//! What a lane calls for each event: normally a loaded plugin version, but any [`Handler`]
//! will do (a native handler, for benchmarks and tests, or a wrapper that measures calls).

use jobrelay_contract::event::JobEvent;
use jobrelay_runtime::{CallError, PluginVersion};

/// One handler of a lane's events. Called for one event at a time per job; calls for
/// different jobs may run concurrently (up to the lane's concurrency).
#[async_trait::async_trait]
pub trait Handler: Send + Sync {
    /// The plugin name, for logs.
    fn name(&self) -> &str;
    /// The version handling calls now, for logs.
    fn version(&self) -> &str;
    /// Handle one event; retryable errors are retried by the lane.
    async fn handle(&self, event: &JobEvent) -> Result<(), CallError>;
    /// The most memory one call has used, in bytes, where the handler knows it.
    fn memory_high_water_bytes(&self) -> Option<u64> {
        None
    }
    /// The longest one call may take, where the handler has a limit.
    fn timeout(&self) -> Option<std::time::Duration> {
        None
    }
}

#[async_trait::async_trait]
impl Handler for PluginVersion {
    fn name(&self) -> &str {
        PluginVersion::name(self)
    }

    fn version(&self) -> &str {
        PluginVersion::version(self)
    }

    async fn handle(&self, event: &JobEvent) -> Result<(), CallError> {
        PluginVersion::handle(self, event).await
    }

    fn memory_high_water_bytes(&self) -> Option<u64> {
        Some(PluginVersion::memory_high_water_bytes(self))
    }

    fn timeout(&self) -> Option<std::time::Duration> {
        Some(PluginVersion::timeout(self))
    }
}
