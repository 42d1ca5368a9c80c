//! Host-side bindings of the `plugin` world in `wit/plugin.wit` (`jobrelay:plugin@0.2.1`); the
//! older worlds the host still serves are submodules ([`v0_2`] for 0.2.0, [`v0_1`] for 0.1.0).
//!
//! - Exports (`init`, `handle`, `handle-fleet`) are async, so a call runs on a fiber that can
//!   yield to tokio at every epoch tick and be dropped when the wall-clock backstop fires.
//! - Imports are async (SQL, pod logs and archive writes wait on the network) and never trap:
//!   every failure is a value the plugin sees, and a plugin that logs too much is throttled,
//!   not killed. A resource is only a handle number here: the capability that hands it out
//!   keeps the host object behind it (`capabilities::handles`), so these bindings name no
//!   capability type.
//! - Arguments are borrowed (`JobEvent<'a>` and `FleetEvent<'a>` hold `&str`), so the event's
//!   object JSON, shared by every lane, is lowered straight into the guest without a copy per
//!   call.
// The generated `add_to_linker` of the type-only `types` and `fleet` interfaces has unused
// parameters.
#![allow(unused_variables)]

pub mod v0_1;
pub mod v0_2;

wasmtime::component::bindgen!({
    world: "plugin",
    path: "../../wit",
    imports: { default: async },
    exports: { default: async },
    ownership: Borrowing { duplicate_if_necessary: true },
});

pub use self::jobrelay::plugin::fleet::FleetEventKind;
pub use self::jobrelay::plugin::log::Level;
pub use self::jobrelay::plugin::types::Phase;

impl From<jobrelay_contract::event::Phase> for Phase {
    fn from(phase: jobrelay_contract::event::Phase) -> Phase {
        use jobrelay_contract::event::Phase as Host;
        match phase {
            Host::Pending => Phase::Pending,
            Host::Running => Phase::Running,
            Host::Restarting => Phase::Restarting,
            Host::Suspended => Phase::Suspended,
            Host::Succeeded => Phase::Succeeded,
            Host::Failed => Phase::Failed,
            Host::Terminating => Phase::Terminating,
            Host::Deleted => Phase::Deleted,
            Host::Unknown => Phase::Unknown,
        }
    }
}

impl From<jobrelay_contract::fleet::FleetEventKind> for FleetEventKind {
    fn from(kind: jobrelay_contract::fleet::FleetEventKind) -> FleetEventKind {
        use jobrelay_contract::fleet::FleetEventKind as Host;
        match kind {
            Host::ClusterOffline => FleetEventKind::ClusterOffline,
            Host::ClusterOnline => FleetEventKind::ClusterOnline,
            Host::RuleFiring => FleetEventKind::RuleFiring,
            Host::RuleResolved => FleetEventKind::RuleResolved,
        }
    }
}

/// The record `handle-fleet` takes, borrowing the host's event: its text is lowered into the
/// guest without a copy.
impl<'a> From<&'a jobrelay_contract::fleet::FleetEvent> for FleetEvent<'a> {
    fn from(event: &'a jobrelay_contract::fleet::FleetEvent) -> FleetEvent<'a> {
        FleetEvent {
            id: &event.id,
            kind: event.kind.into(),
            cluster: &event.cluster,
            rule: event.rule.as_deref(),
            value: event.value,
            threshold: event.threshold,
            since: &event.since,
            time: &event.time,
            summary: &event.summary,
        }
    }
}
