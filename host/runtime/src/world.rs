//! The plugin worlds this host serves, and which one a component was built for.
//!
//! A component targets one version of the `plugin` world: 0.2.2 (`wit/plugin.wit`, current),
//! 0.2.1 (`wit/0.2.1/plugin.wit`), 0.2.0 (`wit/0.2.0/plugin.wit`) or 0.1.0
//! (`wit/0.1.0/plugin.wit`). All of them export `init` and `handle` and import the same
//! capability interfaces. 0.2.2 gave `phase` the cases `queued` and `preempted`: a plugin of an
//! older world gets `pending` and `suspended` for them
//! ([`Phase::before_0_2_2`](jobrelay_contract::event::Phase::before_0_2_2)), its `job-event`
//! otherwise field for field. 0.2.1 added the `handle-fleet` export (fleet events), which 0.2.0
//! lacks. 0.1.0's event record lacks `transition-key` too. The version is found by type-checking the component's exports against each world,
//! newest first, so a plugin needs no declaration of its own; the rest of the runtime sees one
//! [`WorldPre`] and one [`WorldInstance`] and passes the host's event.

use wasmtime::Store;
use wasmtime::component::InstancePre;

use super::HostState;
use jobrelay_bindings::{self as bindings, HandlerError, v0_1, v0_2, v0_2_1};
use jobrelay_contract::event::JobEvent;
use jobrelay_contract::fleet::{self, FleetEvent};

/// The world packages this host serves, newest first.
pub const SERVED: [&str; 4] = [
    "jobrelay:plugin@0.2.2",
    "jobrelay:plugin@0.2.1",
    "jobrelay:plugin@0.2.0",
    "jobrelay:plugin@0.1.0",
];

/// Why a component is not a plugin of a world this host serves. wasmtime's errors are kept as
/// text with their whole chain of causes (they are not standard errors that could be sources).
#[derive(Debug, Clone, thiserror::Error)]
pub enum WorldError {
    /// It lacks `init` or `handle`.
    #[error(
        "it does not export {missing} (it exports {found}); build it against world `plugin` \
         of {served}",
        served = SERVED[0]
    )]
    MissingExports {
        /// The exports it lacks, quoted and joined for the message (`` `init` and `handle` ``).
        missing: String,
        /// What it does export, quoted and joined, or `nothing`.
        found: String,
    },
    /// An import the host does not provide; wasmtime's linking error.
    #[error("it imports something this host does not provide: {0}")]
    Imports(String),
    /// Its exports match no served world; the mismatch with the current one.
    #[error("its exports have the wrong types for {served}: {0}", served = SERVED[0])]
    WrongTypes(String),
}

/// A component pre-instantiated against the world it was built for.
pub enum WorldPre {
    /// `jobrelay:plugin@0.2.2`, the current world.
    V0_2_2(bindings::PluginPre<HostState>),
    /// `jobrelay:plugin@0.2.1`: no `queued` and `preempted` phases.
    V0_2_1(v0_2_1::PluginPre<HostState>),
    /// `jobrelay:plugin@0.2.0`: as 0.2.1, and no `handle-fleet`.
    V0_2_0(v0_2::PluginPre<HostState>),
    /// `jobrelay:plugin@0.1.0`: no `handle-fleet`, and a job event without `transition-key`.
    V0_1_0(v0_1::PluginPre<HostState>),
}

/// One instance of a plugin, in its world.
pub enum WorldInstance {
    /// Of a `jobrelay:plugin@0.2.2` component.
    V0_2_2(bindings::Plugin),
    /// Of a `jobrelay:plugin@0.2.1` component.
    V0_2_1(v0_2_1::Plugin),
    /// Of a `jobrelay:plugin@0.2.0` component.
    V0_2_0(v0_2::Plugin),
    /// Of a `jobrelay:plugin@0.1.0` component.
    V0_1_0(v0_1::Plugin),
}

impl WorldPre {
    /// Finds the world whose exports the component has, newest first; the error is the current
    /// world's mismatch (what a plugin author should build against).
    pub fn new(pre: InstancePre<HostState>) -> Result<WorldPre, WorldError> {
        let current_error = match bindings::PluginPre::new(pre.clone()) {
            Ok(current) => return Ok(WorldPre::V0_2_2(current)),
            Err(e) => e,
        };
        if let Ok(older) = v0_2_1::PluginPre::new(pre.clone()) {
            return Ok(WorldPre::V0_2_1(older));
        }
        if let Ok(older) = v0_2::PluginPre::new(pre.clone()) {
            return Ok(WorldPre::V0_2_0(older));
        }
        match v0_1::PluginPre::new(pre) {
            Ok(oldest) => Ok(WorldPre::V0_1_0(oldest)),
            Err(_) => Err(WorldError::WrongTypes(format!("{current_error:#}"))),
        }
    }

    /// The package of the world the component targets.
    pub fn package(&self) -> &'static str {
        match self {
            WorldPre::V0_2_2(_) => SERVED[0],
            WorldPre::V0_2_1(_) => SERVED[1],
            WorldPre::V0_2_0(_) => SERVED[2],
            WorldPre::V0_1_0(_) => SERVED[3],
        }
    }

    /// Whether the component exports `handle-fleet` (it targets 0.2.1 or later): the host
    /// routes fleet events only to such a plugin.
    pub fn takes_fleet_events(&self) -> bool {
        match self {
            WorldPre::V0_2_2(_) | WorldPre::V0_2_1(_) => true,
            WorldPre::V0_2_0(_) | WorldPre::V0_1_0(_) => false,
        }
    }

    /// The engine the component was compiled with, which every store for it must use.
    pub fn engine(&self) -> &wasmtime::Engine {
        match self {
            WorldPre::V0_2_2(pre) => pre.engine(),
            WorldPre::V0_2_1(pre) => pre.engine(),
            WorldPre::V0_2_0(pre) => pre.engine(),
            WorldPre::V0_1_0(pre) => pre.engine(),
        }
    }

    /// A new instance of the component in `store`, its imports linked as pre-instantiated.
    pub async fn instantiate_async(
        &self,
        store: &mut Store<HostState>,
    ) -> wasmtime::Result<WorldInstance> {
        Ok(match self {
            WorldPre::V0_2_2(pre) => WorldInstance::V0_2_2(pre.instantiate_async(store).await?),
            WorldPre::V0_2_1(pre) => WorldInstance::V0_2_1(pre.instantiate_async(store).await?),
            WorldPre::V0_2_0(pre) => WorldInstance::V0_2_0(pre.instantiate_async(store).await?),
            WorldPre::V0_1_0(pre) => WorldInstance::V0_1_0(pre.instantiate_async(store).await?),
        })
    }
}

impl WorldInstance {
    /// The package of the world the instance's component targets.
    fn package(&self) -> &'static str {
        match self {
            WorldInstance::V0_2_2(_) => SERVED[0],
            WorldInstance::V0_2_1(_) => SERVED[1],
            WorldInstance::V0_2_0(_) => SERVED[2],
            WorldInstance::V0_1_0(_) => SERVED[3],
        }
    }

    /// Calls `init` with the plugin's configuration: the outer error is a trap, the inner one
    /// the text `init` refused with.
    pub async fn call_init(
        &self,
        store: &mut Store<HostState>,
        config: &[(&str, &str)],
    ) -> wasmtime::Result<Result<(), String>> {
        match self {
            WorldInstance::V0_2_2(plugin) => plugin.call_init(store, config).await,
            WorldInstance::V0_2_1(plugin) => plugin.call_init(store, config).await,
            WorldInstance::V0_2_0(plugin) => plugin.call_init(store, config).await,
            WorldInstance::V0_1_0(plugin) => plugin.call_init(store, config).await,
        }
    }

    /// Calls the plugin with the host's event, lowered into the world's record without copying
    /// its text: `handle` with a job event, `handle-fleet` with the fleet event a carrier holds
    /// (see `jobrelay_contract::fleet`). A carrier that holds no readable fleet event, or one
    /// given to a plugin whose world has no `handle-fleet`, is the plugin's `give-up` answer
    /// without calling it: retrying could not change either, and the lanes dead-letter it
    /// naming the event.
    pub async fn call_handle(
        &self,
        store: &mut Store<HostState>,
        event: &JobEvent,
    ) -> wasmtime::Result<Result<(), HandlerError>> {
        if fleet::is_fleet(event) {
            return self.call_handle_fleet(store, event).await;
        }
        let labels = pairs(&event.labels);
        let annotations = pairs(&event.annotations);
        // The worlds' records differ only by the fields after `object_json`.
        macro_rules! record {
            ($($field:ident: $value:expr),*) => {
                Record {
                    id: &event.id,
                    cluster: &event.cluster,
                    api_version: &event.api_version,
                    kind: &event.kind,
                    namespace: &event.namespace,
                    name: &event.name,
                    uid: &event.uid,
                    resource_version: &event.resource_version,
                    generation: event.generation,
                    phase: WorldPhase::from(event.phase),
                    raw_phase: &event.raw_phase,
                    reason: event.reason.as_deref(),
                    message: event.message.as_deref(),
                    previous_phase: event
                        .previous_phase
                        .map(WorldPhase::from),
                    transition_time: &event.transition_time,
                    labels: &labels,
                    annotations: &annotations,
                    object_json: &event.object_json,
                    synthetic: event.synthetic,
                    $($field: $value,)*
                }
            };
        }
        match self {
            WorldInstance::V0_2_2(plugin) => {
                use bindings::{JobEvent as Record, Phase as WorldPhase};
                let key = event.transition_key();
                plugin
                    .call_handle(store, record!(transition_key: &key))
                    .await
            }
            WorldInstance::V0_2_1(plugin) => {
                use v0_2_1::jobrelay::plugin::types::{JobEvent as Record, Phase as WorldPhase};
                let key = event.transition_key();
                let handled = plugin
                    .call_handle(store, record!(transition_key: &key))
                    .await?;
                Ok(handled.map_err(Into::into))
            }
            // 0.2.0's `job-event` is 0.2.1's: the bindings share the type.
            WorldInstance::V0_2_0(plugin) => {
                use v0_2_1::jobrelay::plugin::types::{JobEvent as Record, Phase as WorldPhase};
                let key = event.transition_key();
                let handled = plugin
                    .call_handle(store, record!(transition_key: &key))
                    .await?;
                Ok(handled.map_err(Into::into))
            }
            WorldInstance::V0_1_0(plugin) => {
                use v0_1::jobrelay::plugin::types::{JobEvent as Record, Phase as WorldPhase};
                let handled = plugin.call_handle(store, record!()).await?;
                Ok(handled.map_err(Into::into))
            }
        }
    }

    /// `handle-fleet` with the fleet event the carrier `event` holds.
    async fn call_handle_fleet(
        &self,
        store: &mut Store<HostState>,
        event: &JobEvent,
    ) -> wasmtime::Result<Result<(), HandlerError>> {
        let fleet_event = match FleetEvent::of(event) {
            Ok(fleet_event) => fleet_event,
            Err(unreadable) => return Ok(Err(HandlerError::GiveUp(unreadable.to_string()))),
        };
        // 0.2.1's `fleet-event` is 0.2.2's: its bindings share the type.
        let record = bindings::FleetEvent::from(&fleet_event);
        match self {
            WorldInstance::V0_2_2(plugin) => plugin.call_handle_fleet(store, record).await,
            WorldInstance::V0_2_1(plugin) => {
                let handled = plugin.call_handle_fleet(store, record).await?;
                Ok(handled.map_err(Into::into))
            }
            // The host routes fleet events only to plugins that take them
            // (`PluginVersion::takes_fleet_events`); this is the answer if one got here anyway.
            WorldInstance::V0_2_0(_) | WorldInstance::V0_1_0(_) => {
                Ok(Err(HandlerError::GiveUp(format!(
                    "fleet event {}: the plugin is built against {}, which has no handle-fleet; \
                     only a plugin built against {} or later takes fleet events",
                    event.id,
                    self.package(),
                    SERVED[1]
                ))))
            }
        }
    }
}

fn pairs(map: &std::collections::BTreeMap<String, String>) -> Vec<(&str, &str)> {
    map.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}
