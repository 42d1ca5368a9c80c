//! The `jobrelay:plugin/pod-logs` interface: logs of the job's own pods, and nothing else.
//!
//! A call's scope is the job of the event it handles. "The job's pods" are found the way the
//! job's controller marks them: in the job's namespace, carrying the kind's pod label
//! (`pod_label` of the kind, e.g. `volcano.sh/job-name`) with the job's name, and owned by the
//! job's uid. The label alone is not enough: a job deleted and re-created under the same name
//! labels its pods the same way, and its logs are not this event's. Any pod or container
//! outside that set is refused.
//!
//! Logs are streamed from the API server in chunks the plugin pulls, so a large log never sits
//! whole in host or plugin memory, and each container log is cut at the grant's cap.
//!
//! Its parts, one concept a file: `directory` (the watched clusters' clients and each kind's
//! pod label, so a call finds its job), `pods` (listing the job's own pods), `reader` (a
//! container log streamed and cut at the cap), `taped` (pod-logs calls on a tape), `interface`
//! (the calls as plugins make them now) and `v0_1` (the same calls for 0.1.0 plugins). This
//! file keeps what ties them together: the grant and the per-call state.

mod directory;
mod interface;
mod pods;
mod reader;
mod taped;
mod v0_1;

use wasmtime::component::{HasSelf, Linker};

use serde::{Deserialize, Serialize};

use super::handles::Handles;
use super::tape::CallTape;
use super::{CallScope, Capability, GrantProblem, StoreSetup};
use jobrelay_bindings::jobrelay::plugin::pod_logs as wit;
use jobrelay_bindings::v0_1::jobrelay::plugin::pod_logs as older;

use self::directory::{JobScope, NoScope};
use self::pods::list_pods;
use wit::{Error as LogError, Pod as WitPod};

pub use self::directory::ClusterDirectory;
pub use self::reader::{LogReader, MAX_READ_BYTES};

/// Default cap of one container log.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// Container logs one call may have open at once, each an HTTP stream from the API server.
pub const MAX_OPEN_LOGS: usize = 16;

/// The pod-logs capability.
pub struct PodLogs;

impl Capability for PodLogs {
    fn name(&self) -> &'static str {
        "pod-logs"
    }

    fn configure(&self, call: &CallScope<'_>, setup: &mut StoreSetup) -> Result<(), GrantProblem> {
        let Some(grant) = &call.grants.pod_logs else {
            return Ok(());
        };
        let scope = match call.event {
            Some(event) if jobrelay_contract::fleet::is_fleet(event) => Err(NoScope::FleetEvent),
            Some(event) => call.services.clusters.scope(event),
            None => Err(NoScope::OutsideHandle),
        };
        setup.state.pod_logs = PodLogAccess {
            granted: true,
            max_bytes: grant.max_bytes_per_container.unwrap_or(DEFAULT_MAX_BYTES),
            scope,
            pods: None,
            logs: Handles::new(MAX_OPEN_LOGS),
            tape: call.tape(),
        };
        Ok(())
    }
}

/// Pod logs a plugin may read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodLogsGrant {
    /// Bytes read at most from one container log; the rest is cut and the log is marked
    /// truncated (default 64 MiB).
    #[serde(default)]
    pub max_bytes_per_container: Option<u64>,
}

/// The pod-logs state of one call.
pub struct PodLogAccess {
    granted: bool,
    max_bytes: u64,
    scope: Result<JobScope, NoScope>,
    /// The job's pods, listed on first use and kept for the call.
    pods: Option<Vec<WitPod>>,
    /// The logs the call has open.
    logs: Handles<LogReader>,
    /// The run's tape, if calls are recorded or replayed.
    tape: Option<CallTape>,
}

/// Links the interface (both served versions) into a linker whose store data gives the
/// call's [`PodLogAccess`] through `get`.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut PodLogAccess,
) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, HasSelf<PodLogAccess>>(linker, get)?;
    older::add_to_linker::<T, HasSelf<PodLogAccess>>(linker, get)
}

impl Default for PodLogAccess {
    fn default() -> Self {
        PodLogAccess {
            granted: false,
            max_bytes: DEFAULT_MAX_BYTES,
            scope: Err(NoScope::NotGranted),
            pods: None,
            logs: Handles::new(MAX_OPEN_LOGS),
            tape: None,
        }
    }
}

impl PodLogAccess {
    fn scope(&self) -> Result<&JobScope, LogError> {
        if !self.granted {
            return Err(LogError::Denied(NoScope::NotGranted.to_string()));
        }
        self.scope.as_ref().map_err(|why| match why {
            // A cluster not connected yet (the daemon starting, a take-over, a restart of the
            // cluster's supervisor) is a passing state: the plugin may try again.
            NoScope::NotConnected(_) => LogError::Unavailable(why.to_string()),
            _ => LogError::Denied(why.to_string()),
        })
    }

    async fn pods(&mut self) -> Result<&[WitPod], LogError> {
        if self.pods.is_none() {
            let scope = self.scope()?;
            let listed = list_pods(scope).await?;
            self.pods = Some(listed);
        }
        Ok(self.pods.as_deref().unwrap_or_default())
    }

    /// Refuses every call of a plugin without the grant, tape or not.
    fn check_granted(&self) -> Result<(), LogError> {
        if self.granted {
            Ok(())
        } else {
            Err(LogError::Denied(
                "pod logs are not granted to this plugin (grants.pod_logs)".into(),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(scope: NoScope) -> PodLogAccess {
        PodLogAccess {
            granted: true,
            scope: Err(scope),
            ..PodLogAccess::default()
        }
    }

    /// A cluster not connected yet is a passing state the plugin may retry; a job the plugin
    /// may never read is a denial.
    #[test]
    fn a_cluster_not_connected_yet_is_unavailable_and_a_missing_grant_denied() {
        let not_yet = access(NoScope::NotConnected("beta".into())).scope().err();
        assert!(
            matches!(&not_yet, Some(LogError::Unavailable(why)) if why.contains("beta")),
            "{not_yet:?}"
        );
        let no_label = access(NoScope::NoPodLabel {
            api_version: "v1".into(),
            kind: "Job".into(),
        })
        .scope()
        .err();
        assert!(
            matches!(no_label, Some(LogError::Denied(_))),
            "{no_label:?}"
        );
        let fleet = access(NoScope::FleetEvent).scope().err();
        assert!(
            matches!(&fleet, Some(LogError::Denied(why)) if why.contains("fleet event")),
            "{fleet:?}"
        );
        let ungranted = PodLogAccess::default().scope().err();
        assert!(
            matches!(ungranted, Some(LogError::Denied(_))),
            "{ungranted:?}"
        );
    }
}
