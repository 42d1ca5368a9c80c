//! The cursor: what a lane last delivered for one job.

use jobrelay_contract::event::{JobEvent, Phase};

/// Per (plugin, cluster, uid): the last delivered version and phase of a job.
///
/// After a restart a lane compares the initial list against its cursors: a version it already
/// delivered is skipped, a newer one is delivered with `phase` as the previous phase, and a
/// job missing from the list while its cursor is not `deleted` is delivered as deleted.
/// The identity fields (api version, kind, namespace, name) are kept so that such a synthetic
/// deletion can be described without the object, which is gone by then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// The plugin (lane) this cursor belongs to; cursors are never shared between plugins.
    pub plugin: String,
    /// The job's cluster, as events name it.
    pub cluster: String,
    /// The job's `metadata.uid`; with the cluster, the job.
    pub uid: String,
    /// The job's `apiVersion`, for a synthetic deletion's event.
    pub api_version: String,
    /// The job's `kind`, for a synthetic deletion's event.
    pub kind: String,
    /// The job's namespace, for a synthetic deletion's event.
    pub namespace: String,
    /// The job's name, for a synthetic deletion's event.
    pub name: String,
    /// The last delivered resourceVersion. Opaque: compared for equality only, as Kubernetes
    /// requires.
    pub resource_version: String,
    /// The phase of the last delivered version.
    pub phase: Phase,
    /// RFC 3339 time of that phase's transition.
    pub transition_time: String,
    /// The job's deletion was delivered. Kept (rather than removing the cursor at once) so a
    /// re-list that still shows the object during its finalisation does not deliver it again.
    pub deleted: bool,
}

impl Cursor {
    /// The cursor that records `event` as delivered to `plugin`.
    pub fn from_event(plugin: &str, event: &JobEvent) -> Cursor {
        Cursor {
            plugin: plugin.to_owned(),
            cluster: event.cluster.clone(),
            uid: event.uid.clone(),
            api_version: event.api_version.clone(),
            kind: event.kind.clone(),
            namespace: event.namespace.clone(),
            name: event.name.clone(),
            resource_version: event.resource_version.clone(),
            phase: event.phase,
            transition_time: event.transition_time.clone(),
            deleted: event.phase == Phase::Deleted,
        }
    }

    /// Like [`Cursor::from_event`], using the event up: its strings move into the cursor
    /// instead of being copied. Returns the event's id beside it, for reports.
    pub fn taking(plugin: &str, event: JobEvent) -> (Cursor, String) {
        let cursor = Cursor {
            plugin: plugin.to_owned(),
            cluster: event.cluster,
            uid: event.uid,
            api_version: event.api_version,
            kind: event.kind,
            namespace: event.namespace,
            name: event.name,
            resource_version: event.resource_version,
            phase: event.phase,
            transition_time: event.transition_time,
            deleted: event.phase == Phase::Deleted,
        };
        (cursor, event.id)
    }
}
