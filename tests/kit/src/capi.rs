//! Cluster API kubeconfig Secrets for simulated clusters: what Cluster API keeps per cluster
//! in the Cluster's namespace (a Secret `<cluster>-kubeconfig` of type
//! `cluster.x-k8s.io/secret`, label `cluster.x-k8s.io/cluster-name: <cluster>`, key `value`
//! holding a whole kubeconfig), so a test can put a simulated cluster into that inventory on
//! another simulated cluster, the home cluster, and rotate or delete it there as Cluster API
//! would. [`crate::argocd::put`] creates or replaces any of these Secrets.
//!
//! Beside them, the `Cluster` objects (`cluster.x-k8s.io/v1beta2`, a CRD: [`register`]) whose
//! `status.initialization.controlPlaneInitialized` tells whether the cluster is still being
//! built ([`put_cluster_object`]).

use base64::Engine as _;
use serde_json::{Value, json};

use crate::sim::{Gvr, ResourceKind, SimCluster, SimError};

/// The label Cluster API gives a cluster's Secrets: the cluster's name.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// The type of Cluster API's Secrets.
pub const SECRET_TYPE: &str = "cluster.x-k8s.io/secret";

/// The name Cluster API gives a cluster's kubeconfig Secret.
pub fn secret_name(cluster: &str) -> String {
    format!("{cluster}-kubeconfig")
}

/// A Secret `namespace/<cluster>-kubeconfig` whose `value` is `kubeconfig` as written.
pub fn kubeconfig_secret(namespace: &str, cluster: &str, kubeconfig: &str) -> Value {
    secret(namespace, &secret_name(cluster), cluster, kubeconfig)
}

/// A Secret of Cluster API's type and label named `name` (e.g. `<cluster>-ca`, which Cluster
/// API labels alike), with `value` as written.
pub fn secret(namespace: &str, name: &str, cluster: &str, value: &str) -> Value {
    let value = base64::engine::general_purpose::STANDARD.encode(value);
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": { CLUSTER_NAME_LABEL: cluster },
        },
        "type": SECRET_TYPE,
        "data": { "value": value },
    })
}

/// Creates or replaces the kubeconfig Secret of `target` on `home`, named for `cluster`, its
/// kubeconfig presenting `token` (the cluster, user and context named after `target`, as the
/// kit's kubeconfigs are).
pub fn put_cluster(
    home: &SimCluster,
    namespace: &str,
    cluster: &str,
    target: &SimCluster,
    token: &str,
) -> Result<Value, SimError> {
    let kubeconfig = target.kubeconfig_yaml_with_token(token);
    crate::argocd::put(home, kubeconfig_secret(namespace, cluster, &kubeconfig))
}

/// Makes `home` serve Cluster API's Clusters, as installing its CRDs does.
pub fn register(home: &SimCluster) {
    home.register_kind(ResourceKind::new(
        "cluster.x-k8s.io",
        "v1beta2",
        "Cluster",
        "clusters",
        true,
    ));
}

/// Creates or replaces the Cluster `namespace/name`, its control plane initialised or not
/// (its status written through the status subresource, as Cluster API's controller does).
pub fn put_cluster_object(
    home: &SimCluster,
    namespace: &str,
    name: &str,
    initialised: bool,
) -> Result<Value, SimError> {
    let gvr = Gvr::CAPI_CLUSTER;
    let status = json!({
        "phase": if initialised { "Provisioned" } else { "Provisioning" },
        "initialization": { "controlPlaneInitialized": initialised },
    });
    let object = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": { "name": name, "namespace": namespace },
        "spec": { "controlPlaneRef": { "kind": "KubeadmControlPlane", "name": name } },
    });
    if home.get(&gvr, namespace, name).is_err() {
        home.create(&gvr, object)?;
    }
    home.update_status(&gvr, namespace, name, status)
}
