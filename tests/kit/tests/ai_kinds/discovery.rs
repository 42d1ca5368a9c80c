//! The three CRDs are served like the other built-in CRDs, and a test can uninstall and
//! reinstall one.

use jobrelay_testkit::{Flavor, Gvr, ResourceKind, SimCluster};
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kube::discovery::{Discovery, Scope};

use crate::common::{client_for, resource_of};

#[tokio::test]
async fn ai_kinds_are_discovered_like_the_other_crds() {
    let sim = SimCluster::start("ai-discovery").await.unwrap();
    let client = client_for(&sim).await;
    let legacy = Discovery::new(client.clone()).run().await.unwrap();
    let aggregated = Discovery::new(client.clone())
        .run_aggregated()
        .await
        .unwrap();
    let expected = [
        (
            Gvr::TRAIN_JOB,
            "trainer.kubeflow.org",
            "v1alpha1",
            "TrainJob",
            "trainjobs",
        ),
        (
            Gvr::JOBSET,
            "jobset.x-k8s.io",
            "v1alpha2",
            "JobSet",
            "jobsets",
        ),
        (Gvr::RAY_JOB, "ray.io", "v1", "RayJob", "rayjobs"),
    ];
    for ((gvr, group, version, kind, plural), flavor) in expected.into_iter().zip(Flavor::AI_KINDS)
    {
        assert_eq!(flavor.gvr(), gvr);
        assert_eq!(flavor.kind(), kind);
        assert_eq!((gvr.group.as_ref(), gvr.version.as_ref()), (group, version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (ar, caps) = legacy.resolve_gvk(&gvk).expect("discovered");
        assert_eq!(ar.plural, plural);
        assert_eq!(caps.scope, Scope::Namespaced);
        assert!(
            caps.subresources
                .iter()
                .any(|(r, _)| r.plural.ends_with("status")),
            "{kind} has a status subresource"
        );
        assert!(aggregated.resolve_gvk(&gvk).is_some(), "{kind} aggregated");
        assert_eq!(
            legacy.get(group).unwrap().preferred_version_or_latest(),
            version
        );
    }
    // The original four are still what ALL means.
    assert_eq!(
        Flavor::ALL,
        [Flavor::Batch, Flavor::Volcano, Flavor::PyTorch, Flavor::Mpi]
    );
    assert!(Flavor::AI_KINDS.iter().all(|f| f.is_ai_kind()));
    assert!(!Flavor::ALL.iter().any(|f| f.is_ai_kind()));
}

#[tokio::test]
async fn an_ai_kind_can_be_uninstalled_and_installed_again() {
    let sim = SimCluster::start("ai-uninstall").await.unwrap();
    let client = client_for(&sim).await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "ml", &resource_of(Flavor::RayJob));
    assert!(api.list(&ListParams::default()).await.is_ok());

    assert!(sim.unregister_kind(&Gvr::RAY_JOB));
    assert!(!sim.unregister_kind(&Gvr::RAY_JOB));
    match api.list(&ListParams::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 404),
        other => panic!("expected a 404, got {other:?}"),
    }
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    assert!(discovery.get("ray.io").is_none());
    assert!(
        jobrelay_testkit::JobDriver::create(&sim, Flavor::RayJob, "ml", "nowhere").is_err(),
        "no RayJob without its CRD"
    );

    sim.register_kind(ResourceKind::new("ray.io", "v1", "RayJob", "rayjobs", true));
    assert!(api.list(&ListParams::default()).await.is_ok());
    let discovery = Discovery::new(client).run().await.unwrap();
    assert!(discovery.get("ray.io").is_some());
}
