//! Argo CD cluster Secrets for simulated clusters: what Argo CD keeps per cluster in its
//! namespace (keys `name`, `server`, `config`, label `argocd.argoproj.io/secret-type=cluster`),
//! so a test can put a simulated cluster into an inventory on another simulated cluster, the
//! home cluster, and edit or delete it there as a platform team would.

use base64::Engine as _;
use serde_json::{Value, json};

use crate::sim::{Gvr, SimCluster, SimError};

/// The label Argo CD gives its cluster Secrets.
pub const CLUSTER_LABEL: (&str, &str) = ("argocd.argoproj.io/secret-type", "cluster");

/// A cluster Secret `namespace/secret` naming `cluster` at `server`, with `config` (the JSON
/// text Argo CD reads: `bearerToken`, `tlsClientConfig`, …) as written.
pub fn cluster_secret(
    namespace: &str,
    secret: &str,
    cluster: &str,
    server: &str,
    config: &str,
) -> Value {
    let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret,
            "namespace": namespace,
            "labels": { CLUSTER_LABEL.0: CLUSTER_LABEL.1 },
        },
        "type": "Opaque",
        "data": { "name": b64(cluster), "server": b64(server), "config": b64(config) },
    })
}

/// The `config` of a cluster reached with a bearer token.
pub fn token_config(token: &str) -> String {
    json!({ "bearerToken": token, "tlsClientConfig": { "insecure": false } }).to_string()
}

/// Creates or replaces the cluster Secret of `target` on `home` (the token it is reached with
/// is `token`), as `kubectl apply` would.
pub fn put_cluster(
    home: &SimCluster,
    namespace: &str,
    secret: &str,
    cluster: &str,
    target: &SimCluster,
    token: &str,
) -> Result<Value, SimError> {
    let object = cluster_secret(
        namespace,
        secret,
        cluster,
        &target.url(),
        &token_config(token),
    );
    put(home, object)
}

/// Creates `object` (a Secret), or replaces the one of that name.
pub fn put(home: &SimCluster, object: Value) -> Result<Value, SimError> {
    let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    match home.get(&Gvr::SECRET, namespace, name) {
        Ok(current) => {
            let mut next = object.clone();
            next["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
            home.replace(&Gvr::SECRET, next)
        }
        Err(_) => home.create(&Gvr::SECRET, object),
    }
}
