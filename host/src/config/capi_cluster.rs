//! What a Cluster API `Cluster` object says of its control plane, for the cluster the
//! source made of its kubeconfig Secret ([`super::capi_secret`]): one of the same name in the
//! same namespace.
//!
//! Cluster API writes the kubeconfig Secret as soon as the control plane has an endpoint,
//! before the control plane is initialised: for that while the cluster's health checks fail,
//! as expected of a cluster being built. So a Cluster whose control plane is not initialised
//! yet makes its cluster *provisioning* ([`Source::Provisioning`]): `connecting`, no outage
//! told. Initialised is read from `status.initialization.controlPlaneInitialized` (v1beta2,
//! the version read), or, as older objects converted by the API server may still show it,
//! `status.controlPlaneReady` or a `ControlPlaneInitialized` condition that is `True`. Once
//! initialised, the control plane stays so for Cluster API (the field is never set back), and
//! the Cluster says nothing against it.

use serde_json::Value;

use super::inventory::{Readiness, clipped};
use jobrelay_fleet::availability::Source;

/// The API group of Cluster API's Clusters.
pub const GROUP: &str = "cluster.x-k8s.io";

/// The version read.
pub const VERSION: &str = "v1beta2";

/// What the Cluster `key` (`namespace/name`) says against its control plane: provisioning
/// until it is initialised.
pub fn readiness(key: &str, object: &Value) -> Option<Readiness> {
    let status = &object["status"];
    let initialised = status["initialization"]["controlPlaneInitialized"] == true
        || status["controlPlaneReady"] == true
        || status["conditions"].as_array().is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == "ControlPlaneInitialized" && c["status"] == "True")
        });
    if initialised {
        return None;
    }
    let mut detail = format!("Cluster API Cluster {key}: control plane not initialised yet");
    if let Some(phase) = status["phase"].as_str().filter(|p| !p.is_empty()) {
        detail.push_str(&format!(" (phase {})", clipped(phase)));
    }
    Some(Readiness {
        state: Source::Provisioning,
        detail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Initialised by any of the fields Cluster API has kept it in, and then nothing is
    /// said against it; otherwise provisioning, with the phase where there is one.
    #[test]
    fn a_control_plane_not_initialised_is_provisioning() {
        let said = |status: Value| readiness("fleet/east", &json!({ "status": status }));
        let provisioning = said(json!({ "phase": "Provisioning",
            "initialization": { "controlPlaneInitialized": false } }))
        .expect("provisioning");
        assert_eq!(provisioning.state, Source::Provisioning);
        assert_eq!(
            provisioning.detail,
            "Cluster API Cluster fleet/east: control plane not initialised yet (phase \
             Provisioning)"
        );
        assert!(said(json!({})).is_some(), "no status yet: being built");
        assert!(
            said(json!({ "conditions": [{ "type": "ControlPlaneInitialized",
                                          "status": "False" }] }))
            .is_some()
        );
        for initialised in [
            json!({ "initialization": { "controlPlaneInitialized": true } }),
            json!({ "controlPlaneReady": true }),
            json!({ "conditions": [{ "type": "ControlPlaneInitialized", "status": "True" }] }),
        ] {
            assert_eq!(said(initialised.clone()), None, "{initialised}");
        }
    }
}
