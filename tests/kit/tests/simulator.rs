//! The simulator against the real kube client: if these pass, the production client code
//! paths (typed and dynamic APIs, `runtime::watcher`, logs, discovery, retries) behave against
//! the simulator as they do against an apiserver.

use std::time::Duration;

use futures::{AsyncReadExt as _, StreamExt as _};
use jobrelay_testkit::{Flavor, Gvr, JobDriver, SimCluster, SimOptions};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, LogParams, Patch, PatchParams,
    PostParams, WatchEvent, WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt as _, watcher as run_watcher};
use kube::{Client, Config, ResourceExt as _};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep, timeout};

/// Generous: CI machines are noisy.
const WAIT: Duration = Duration::from_secs(30);

// ----- helpers -----------------------------------------------------------------------------

async fn config_for(yaml: &str, name: &str) -> Config {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(format!("{name}.yaml"));
    std::fs::write(&path, yaml).expect("write kubeconfig");
    let kubeconfig = Kubeconfig::read_from(&path).expect("read kubeconfig");
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("config from kubeconfig")
}

async fn client_for(sim: &SimCluster) -> Client {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(format!("{}.yaml", sim.name()));
    sim.write_kubeconfig(&path).expect("write kubeconfig");
    let kubeconfig = Kubeconfig::read_from(&path).expect("read kubeconfig");
    assert_eq!(kubeconfig.current_context.as_deref(), Some(sim.name()));
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}

fn job_resource() -> ApiResource {
    ApiResource {
        group: "batch".into(),
        version: "v1".into(),
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        plural: "jobs".into(),
    }
}

fn resource_of(flavor: Flavor) -> ApiResource {
    let gvr = flavor.gvr();
    ApiResource {
        group: gvr.group.to_string(),
        version: gvr.version.to_string(),
        api_version: gvr.api_version(),
        kind: flavor.kind().into(),
        plural: gvr.plural.to_string(),
    }
}

fn jobs(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &job_resource())
}

fn job(name: &str, labels: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": { "name": name, "labels": labels },
        "spec": { "parallelism": 1, "template": { "spec": { "containers": [{ "name": "c", "image": "busybox" }] } } },
    }))
    .expect("job object")
}

fn job_value(ns: &str, name: &str, labels: Value) -> Value {
    json!({
        "metadata": { "name": name, "namespace": ns, "labels": labels },
        "spec": { "parallelism": 1 },
    })
}

fn api_code<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> u16 {
    match result {
        Err(kube::Error::Api(status)) => status.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn rv(obj: &DynamicObject) -> String {
    obj.metadata.resource_version.clone().unwrap_or_default()
}

fn name(obj: &DynamicObject) -> String {
    obj.metadata.name.clone().unwrap_or_default()
}

/// Aborts the task when dropped.
struct Task(tokio::task::JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A `runtime::watcher` running in the background, its events collected.
struct Events {
    rx: mpsc::UnboundedReceiver<Event<DynamicObject>>,
    _task: Task,
}

fn spawn_watcher(api: Api<DynamicObject>, config: watcher::Config) -> Events {
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut stream = run_watcher(api, config).default_backoff().boxed();
        while let Some(item) = stream.next().await {
            if let Ok(event) = item
                && tx.send(event).is_err()
            {
                break;
            }
        }
    });
    Events {
        rx,
        _task: Task(task),
    }
}

fn describe(event: &Event<DynamicObject>) -> String {
    match event {
        Event::Apply(o) => format!("apply {} rv={}", name(o), rv(o)),
        Event::Delete(o) => format!("delete {} rv={}", name(o), rv(o)),
        Event::Init => "init".into(),
        Event::InitApply(o) => format!("init-apply {}", name(o)),
        Event::InitDone => "init-done".into(),
    }
}

impl Events {
    /// Waits for an event matching `pred`, skipping others.
    async fn expect(
        &mut self,
        what: &str,
        pred: impl Fn(&Event<DynamicObject>) -> bool,
    ) -> Event<DynamicObject> {
        let deadline = Instant::now() + WAIT;
        let mut skipped = Vec::new();
        loop {
            match timeout(
                deadline.saturating_duration_since(Instant::now()),
                self.rx.recv(),
            )
            .await
            {
                Ok(Some(event)) if pred(&event) => return event,
                Ok(Some(event)) => skipped.push(describe(&event)),
                Ok(None) => panic!("watcher ended while waiting for {what}; skipped {skipped:?}"),
                Err(_) => panic!("timed out waiting for {what}; skipped {skipped:?}"),
            }
        }
    }

    /// Asserts that no event matching `pred` arrives within `window`.
    async fn expect_none(
        &mut self,
        window: Duration,
        what: &str,
        pred: impl Fn(&Event<DynamicObject>) -> bool,
    ) {
        let deadline = Instant::now() + window;
        while let Ok(Some(event)) = timeout(
            deadline.saturating_duration_since(Instant::now()),
            self.rx.recv(),
        )
        .await
        {
            assert!(!pred(&event), "unexpected {what}: {}", describe(&event));
        }
    }

    async fn synced(&mut self) {
        self.expect("InitDone", |e| matches!(e, Event::InitDone))
            .await;
    }
}

fn is_apply(event: &Event<DynamicObject>, wanted: &str) -> bool {
    matches!(event, Event::Apply(o) if name(o) == wanted)
}

fn is_delete(event: &Event<DynamicObject>, wanted: &str) -> bool {
    matches!(event, Event::Delete(o) if name(o) == wanted)
}

async fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        sleep(Duration::from_millis(50)).await;
    }
}

// ----- tests -------------------------------------------------------------------------------

#[tokio::test]
async fn rejects_requests_without_the_right_token() {
    let sim = SimCluster::start("auth").await.unwrap();
    let yaml = sim.kubeconfig_yaml_with_token("not-the-token");
    let client = Client::try_from(config_for(&yaml, "auth").await).unwrap();
    assert_eq!(
        api_code(jobs(&client, "ml").list(&ListParams::default()).await),
        401
    );
    assert_eq!(api_code(client.apiserver_version().await), 401);

    let good = client_for(&sim).await;
    assert!(jobs(&good, "ml").list(&ListParams::default()).await.is_ok());
}

#[tokio::test]
async fn reports_a_realistic_version_and_discovery() {
    let sim = SimCluster::start("version").await.unwrap();
    let client = client_for(&sim).await;
    let info = client.apiserver_version().await.unwrap();
    assert_eq!(info.major, "1");
    assert_eq!(info.minor, "33");
    assert_eq!(info.git_version, "v1.33.0-jobrelay-sim");

    let gvk = kube::core::GroupVersionKind::gvk("kubeflow.org", "v2beta1", "MPIJob");
    let legacy = kube::discovery::Discovery::new(client.clone())
        .run()
        .await
        .unwrap();
    let (ar, caps) = legacy.resolve_gvk(&gvk).expect("MPIJob v2beta1 discovered");
    assert_eq!(ar.plural, "mpijobs");
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
    assert!(
        caps.subresources
            .iter()
            .any(|(r, _)| r.plural == "mpijobs/status" || r.plural == "status")
    );
    assert_eq!(
        legacy
            .get("kubeflow.org")
            .unwrap()
            .preferred_version_or_latest(),
        "v1"
    );

    let aggregated = kube::discovery::Discovery::new(client.clone())
        .run_aggregated()
        .await
        .unwrap();
    assert!(aggregated.resolve_gvk(&gvk).is_some());
    let pods = kube::core::GroupVersionKind::gvk("", "v1", "Pod");
    assert!(aggregated.resolve_gvk(&pods).is_some());

    let resources = client
        .list_api_group_resources("batch.volcano.sh/v1alpha1")
        .await
        .unwrap();
    assert!(
        resources
            .resources
            .iter()
            .any(|r| r.name == "jobs" && r.namespaced)
    );
}

#[tokio::test]
async fn create_get_replace_and_conflicts() {
    let sim = SimCluster::start("crud").await.unwrap();
    let client = client_for(&sim).await;
    let api = jobs(&client, "ml");

    let created = api
        .create(&PostParams::default(), &job("train", json!({})))
        .await
        .unwrap();
    assert_eq!(created.metadata.namespace.as_deref(), Some("ml"));
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.metadata.uid.as_ref().is_some_and(|u| u.len() == 36));
    assert!(created.metadata.creation_timestamp.is_some());
    assert_eq!(rv(&created), sim.current_rv().to_string());

    assert_eq!(
        api_code(
            api.create(&PostParams::default(), &job("train", json!({})))
                .await
        ),
        409
    );
    assert_eq!(api_code(api.get("missing").await), 404);
    let fetched = api.get("train").await.unwrap();
    assert_eq!(fetched.metadata.uid, created.metadata.uid);

    // A spec change bumps generation; status cannot be written through the main resource.
    let mut changed = fetched.clone();
    changed.data["spec"]["parallelism"] = json!(4);
    changed.data["status"] = json!({ "active": 9 });
    let replaced = api
        .replace("train", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert_eq!(replaced.metadata.generation, Some(2));
    assert_eq!(replaced.data["spec"]["parallelism"], 4);
    assert!(replaced.data.get("status").is_none());
    assert!(rv(&replaced).parse::<u64>().unwrap() > rv(&fetched).parse::<u64>().unwrap());

    // The stale copy conflicts.
    let mut stale = fetched.clone();
    stale.data["spec"]["parallelism"] = json!(8);
    let err = api
        .replace("train", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 409);
            assert_eq!(status.reason, "Conflict");
        }
        other => panic!("expected a conflict, got {other:?}"),
    }

    // A no-op replace writes nothing.
    let before = sim.current_rv();
    api.replace("train", &PostParams::default(), &replaced)
        .await
        .unwrap();
    assert_eq!(sim.current_rv(), before);
}

#[tokio::test]
async fn lists_in_consistent_pages() {
    let sim = SimCluster::start("pages").await.unwrap();
    for i in 0..7 {
        let ns = if i < 4 { "a" } else { "b" };
        sim.create(
            &Gvr::BATCH_JOB,
            job_value(ns, &format!("job-{i}"), json!({})),
        )
        .unwrap();
    }
    let client = client_for(&sim).await;
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &job_resource());

    let first = all.list(&ListParams::default().limit(3)).await.unwrap();
    assert_eq!(first.items.len(), 3);
    assert_eq!(first.metadata.remaining_item_count, Some(4));
    let list_rv = first.metadata.resource_version.clone().unwrap();
    let mut names: Vec<String> = first.items.iter().map(name).collect();
    let mut token = first.metadata.continue_.clone();
    // Changes after the first page are not part of this list.
    sim.create(&Gvr::BATCH_JOB, job_value("a", "job-late", json!({})))
        .unwrap();
    let mut pages = 1;
    while let Some(t) = token.filter(|t| !t.is_empty()) {
        let page = all
            .list(&ListParams::default().limit(3).continue_token(&t))
            .await
            .unwrap();
        assert_eq!(
            page.metadata.resource_version.as_deref(),
            Some(list_rv.as_str())
        );
        names.extend(page.items.iter().map(name));
        token = page.metadata.continue_.clone();
        pages += 1;
    }
    assert_eq!(pages, 3);
    assert_eq!(
        names,
        [
            "job-0", "job-1", "job-2", "job-3", "job-4", "job-5", "job-6"
        ]
    );
    assert!(
        first
            .items
            .iter()
            .all(|o| o.types.as_ref().is_some_and(|t| t.kind == "Job"))
    );

    // Namespaced list, then an expired continue token.
    let in_b = jobs(&client, "b")
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(in_b.items.len(), 3);
    let page = all.list(&ListParams::default().limit(2)).await.unwrap();
    sim.create(&Gvr::BATCH_JOB, job_value("c", "job-x", json!({})))
        .unwrap();
    sim.compact();
    let t = page.metadata.continue_.unwrap();
    let err = all
        .list(&ListParams::default().limit(2).continue_token(&t))
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(status) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"))
        }
        other => panic!("expected 410, got {other:?}"),
    }
}

#[tokio::test]
async fn watcher_sees_create_modify_delete_in_order() {
    let sim = SimCluster::start("watch").await.unwrap();
    sim.create(&Gvr::BATCH_JOB, job_value("ml", "existing", json!({})))
        .unwrap();
    let client = client_for(&sim).await;
    let mut events = spawn_watcher(jobs(&client, "ml"), watcher::Config::default());
    events.expect("Init", |e| matches!(e, Event::Init)).await;
    events
        .expect(
            "existing",
            |e| matches!(e, Event::InitApply(o) if name(o) == "existing"),
        )
        .await;
    events.synced().await;

    let api = jobs(&client, "ml");
    let created = api
        .create(&PostParams::default(), &job("a", json!({})))
        .await
        .unwrap();
    let patched = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { "step": "2" } } })),
        )
        .await
        .unwrap();
    sim.delete(&Gvr::BATCH_JOB, "ml", "a").unwrap();

    let first = events.expect("apply a", |e| is_apply(e, "a")).await;
    let second = events.expect("apply a again", |e| is_apply(e, "a")).await;
    let third = events.expect("delete a", |e| is_delete(e, "a")).await;
    let (Event::Apply(first), Event::Apply(second), Event::Delete(third)) = (first, second, third)
    else {
        unreachable!()
    };
    assert_eq!(rv(&first), rv(&created));
    assert_eq!(rv(&second), rv(&patched));
    assert_eq!(second.labels().get("step").map(String::as_str), Some("2"));
    assert!(rv(&third).parse::<u64>().unwrap() > rv(&second).parse::<u64>().unwrap());
    assert_eq!(sim.watch_requests("jobs"), 1);
    assert_eq!(sim.open_watches(), 1);
}

#[tokio::test]
async fn bookmarks_carry_the_latest_resource_version() {
    let options = SimOptions {
        bookmark_interval: Duration::from_millis(200),
        ..SimOptions::default()
    };
    let sim = SimCluster::start_with("bookmarks", options).await.unwrap();
    let client = client_for(&sim).await;
    let api = jobs(&client, "ml");
    let list = api.list(&ListParams::default()).await.unwrap();
    let from = list.metadata.resource_version.unwrap();
    let mut stream = api
        .watch(&WatchParams::default(), &from)
        .await
        .unwrap()
        .boxed();

    let first = timeout(WAIT, stream.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let WatchEvent::Bookmark(bookmark) = first else {
        panic!("expected a bookmark, got {first:?}")
    };
    assert_eq!(bookmark.metadata.resource_version, from);
    assert_eq!(bookmark.types.kind, "Job");

    // A write to another resource moves bookmarks forward without a job event.
    let pod = sim
        .create(
            &Gvr::POD,
            json!({ "metadata": { "name": "p", "namespace": "ml" }, "spec": { "containers": [] } }),
        )
        .unwrap();
    let pod_rv: u64 = pod["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    loop {
        let event = timeout(WAIT, stream.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        match event {
            WatchEvent::Bookmark(b)
                if b.metadata.resource_version.parse::<u64>().unwrap() >= pod_rv =>
            {
                break;
            }
            WatchEvent::Bookmark(_) => continue,
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn compaction_and_dropped_watches_force_a_relist() {
    let sim = SimCluster::start("relist").await.unwrap();
    let client = client_for(&sim).await;
    let mut events = spawn_watcher(jobs(&client, "ml"), watcher::Config::default());
    events.synced().await;
    // InitDone comes before the watch request: wait until the watch is really open.
    eventually("the watch to open", || sim.open_watches() == 1).await;
    let lists_before = sim.list_requests("jobs");

    // The watcher misses a change, the history is compacted, then its connection drops.
    sim.stall_watches(true);
    sleep(Duration::from_millis(300)).await;
    sim.create(&Gvr::BATCH_JOB, job_value("ml", "missed", json!({})))
        .unwrap();
    sim.compact();
    sim.drop_watches();
    sim.stall_watches(false);

    events
        .expect("a new Init", |e| matches!(e, Event::Init))
        .await;
    events
        .expect(
            "missed object in the relist",
            |e| matches!(e, Event::InitApply(o) if name(o) == "missed"),
        )
        .await;
    events.synced().await;
    assert!(sim.list_requests("jobs") > lists_before);
    // The missed change reaches the watcher either as a 410 on its stalled stream or on the
    // re-watch from its old resourceVersion; both end in a relist and a new watch.
    eventually("a new watch after the relist", || {
        sim.watch_requests("jobs") >= 2
    })
    .await;

    // And it keeps watching afterwards.
    sim.create(&Gvr::BATCH_JOB, job_value("ml", "after", json!({})))
        .unwrap();
    events.expect("apply after", |e| is_apply(e, "after")).await;
}

#[tokio::test]
async fn a_watch_from_a_compacted_version_gets_410() {
    let sim = SimCluster::start("gone").await.unwrap();
    let client = client_for(&sim).await;
    let api = jobs(&client, "ml");
    let old = sim.current_rv();
    sim.create(&Gvr::BATCH_JOB, job_value("ml", "x", json!({})))
        .unwrap();
    sim.compact();
    let mut stream = api
        .watch(&WatchParams::default(), &old.to_string())
        .await
        .unwrap()
        .boxed();
    match timeout(WAIT, stream.next()).await.unwrap() {
        Some(Ok(WatchEvent::Error(status))) => {
            assert_eq!(status.code, 410);
            assert_eq!(status.reason, "Expired");
            assert!(
                status
                    .message
                    .starts_with(&format!("too old resource version: {old}"))
            );
        }
        other => panic!("expected an ERROR event, got {other:?}"),
    }
    assert!(
        timeout(WAIT, stream.next()).await.unwrap().is_none(),
        "stream ends after the error"
    );
}

#[tokio::test]
async fn merge_and_json_patches() {
    let sim = SimCluster::start("patch").await.unwrap();
    let client = client_for(&sim).await;
    let api = jobs(&client, "ml");
    api.create(&PostParams::default(), &job("p", json!({ "team": "a" })))
        .await
        .unwrap();

    let merged = api
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { "team": "b", "tier": "gold" } } })),
        )
        .await
        .unwrap();
    assert_eq!(merged.labels().get("team").map(String::as_str), Some("b"));

    // A failing `test` op: 422 and nothing changes.
    let ops: json_patch::Patch = serde_json::from_value(json!([
        { "op": "test", "path": "/metadata/labels/team", "value": "a" },
        { "op": "replace", "path": "/metadata/labels/team", "value": "c" },
    ]))
    .unwrap();
    let result = api
        .patch("p", &PatchParams::default(), &Patch::Json::<()>(ops))
        .await;
    assert_eq!(api_code(result), 422);
    let unchanged = api.get("p").await.unwrap();
    assert_eq!(rv(&unchanged), rv(&merged));

    // A passing one, with pointer escaping and the `-` index.
    let ops: json_patch::Patch = serde_json::from_value(json!([
        { "op": "test", "path": "/metadata/labels/team", "value": "b" },
        { "op": "add", "path": "/metadata/annotations", "value": {} },
        { "op": "add", "path": "/metadata/annotations/example.com~1owner", "value": "me" },
        { "op": "add", "path": "/spec/template/spec/containers/-", "value": { "name": "d", "image": "busybox" } },
        { "op": "remove", "path": "/metadata/labels/tier" },
    ]))
    .unwrap();
    let patched = api
        .patch("p", &PatchParams::default(), &Patch::Json::<()>(ops))
        .await
        .unwrap();
    assert_eq!(
        patched
            .annotations()
            .get("example.com/owner")
            .map(String::as_str),
        Some("me")
    );
    assert_eq!(
        patched.data["spec"]["template"]["spec"]["containers"][1]["name"],
        "d"
    );
    assert!(!patched.labels().contains_key("tier"));
    assert_eq!(patched.metadata.generation, Some(2), "spec changed");

    // A patch carrying a stale resourceVersion conflicts.
    let stale =
        json!({ "metadata": { "resourceVersion": rv(&merged), "labels": { "team": "z" } } });
    assert_eq!(
        api_code(
            api.patch("p", &PatchParams::default(), &Patch::Merge(stale))
                .await
        ),
        409
    );
    // Strategic merge is accepted (with merge semantics).
    let smp = api
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(json!({ "metadata": { "labels": { "s": "1" } } })),
        )
        .await
        .unwrap();
    assert_eq!(smp.labels().get("s").map(String::as_str), Some("1"));
}

#[tokio::test]
async fn status_subresource_changes_only_status() {
    let sim = SimCluster::start("status").await.unwrap();
    let client = client_for(&sim).await;
    let api = jobs(&client, "ml");
    let created = api
        .create(&PostParams::default(), &job("s", json!({})))
        .await
        .unwrap();

    let patched = api
        .patch_status(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "active": 1 }, "spec": { "parallelism": 5 } })),
        )
        .await
        .unwrap();
    assert_eq!(patched.data["status"]["active"], 1);
    assert_eq!(patched.data["spec"]["parallelism"], 1);
    assert_eq!(patched.metadata.generation, created.metadata.generation);

    let mut body = patched.clone();
    body.data["status"] = json!({ "active": 2, "ready": 2 });
    let replaced = api
        .replace_status("s", &PostParams::default(), &body)
        .await
        .unwrap();
    assert_eq!(replaced.data["status"]["ready"], 2);
    assert_eq!(
        api_code(
            api.replace_status("s", &PostParams::default(), &patched)
                .await
        ),
        409
    );

    // In-process status writes are visible over HTTP.
    sim.update_status(&Gvr::BATCH_JOB, "ml", "s", json!({ "succeeded": 1 }))
        .unwrap();
    assert_eq!(
        api.get_status("s").await.unwrap().data["status"],
        json!({ "succeeded": 1 })
    );
}

#[tokio::test]
async fn deletion_waits_for_finalizers() {
    let sim = SimCluster::start("finalizers").await.unwrap();
    let client = client_for(&sim).await;
    let api = jobs(&client, "ml");
    let mut events = spawn_watcher(jobs(&client, "ml"), watcher::Config::default());
    events.synced().await;

    let mut obj = job("f", json!({}));
    obj.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    api.create(&PostParams::default(), &obj).await.unwrap();
    events.expect("apply f", |e| is_apply(e, "f")).await;

    let marked = api
        .delete("f", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("object returned");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(marked.metadata.deletion_grace_period_seconds, Some(0));
    let seen = events
        .expect(
            "apply with deletionTimestamp",
            |e| matches!(e, Event::Apply(o) if o.metadata.deletion_timestamp.is_some()),
        )
        .await;
    assert!(matches!(seen, Event::Apply(o) if rv(&o) == rv(&marked)));
    assert!(
        api.get("f").await.is_ok(),
        "still there while finalizers remain"
    );

    // No new finalizers on an object being deleted.
    let add = json!({ "metadata": { "finalizers": ["example.com/keep", "example.com/more"] } });
    let result = api
        .patch("f", &PatchParams::default(), &Patch::Merge(add))
        .await;
    assert_eq!(api_code(result), 422);

    // Removing the last finalizer removes the object.
    let ops: json_patch::Patch = serde_json::from_value(json!([
        { "op": "test", "path": "/metadata/finalizers/0", "value": "example.com/keep" },
        { "op": "remove", "path": "/metadata/finalizers/0" },
    ]))
    .unwrap();
    api.patch("f", &PatchParams::default(), &Patch::Json::<()>(ops))
        .await
        .unwrap();
    events.expect("delete f", |e| is_delete(e, "f")).await;
    assert_eq!(api_code(api.get("f").await), 404);

    // Without finalizers deletion is immediate and returns the object.
    api.create(&PostParams::default(), &job("g", json!({})))
        .await
        .unwrap();
    let gone = api
        .delete("g", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("object returned");
    assert_eq!(name(&gone), "g");
    assert_eq!(api_code(api.get("g").await), 404);
    events.expect("delete g", |e| is_delete(e, "g")).await;
}

#[tokio::test]
async fn pod_logs_including_previous_and_binary() {
    let sim = SimCluster::start("logs").await.unwrap();
    let client = client_for(&sim).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "ml");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": "worker-0" },
        "spec": { "containers": [{ "name": "main", "image": "x" }, { "name": "sidecar", "image": "y" }] },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    sim.set_pod_log("ml", "worker-0", "main", false, &b"hello\nworld\n"[..]);
    sim.set_pod_log("ml", "worker-0", "main", true, &b"crashed\n"[..]);
    sim.set_pod_log("ml", "worker-0", "sidecar", false, vec![0xff, 0xfe, b'\n']);

    let params = |container: &str| LogParams {
        container: Some(container.into()),
        ..LogParams::default()
    };
    assert_eq!(
        pods.logs("worker-0", &params("main")).await.unwrap(),
        "hello\nworld\n"
    );
    let previous = LogParams {
        previous: true,
        ..params("main")
    };
    assert_eq!(pods.logs("worker-0", &previous).await.unwrap(), "crashed\n");
    let tail = LogParams {
        tail_lines: Some(1),
        ..params("main")
    };
    assert_eq!(pods.logs("worker-0", &tail).await.unwrap(), "world\n");
    let limited = LogParams {
        limit_bytes: Some(3),
        ..params("main")
    };
    assert_eq!(pods.logs("worker-0", &limited).await.unwrap(), "hel");

    let mut raw = Vec::new();
    let mut reader = pods
        .log_stream("worker-0", &params("sidecar"))
        .await
        .unwrap();
    reader.read_to_end(&mut raw).await.unwrap();
    assert_eq!(raw, [0xff, 0xfe, b'\n']);

    assert_eq!(
        api_code(pods.logs("worker-0", &LogParams::default()).await),
        400
    );
    let no_previous = LogParams {
        previous: true,
        ..params("sidecar")
    };
    assert_eq!(api_code(pods.logs("worker-0", &no_previous).await), 400);
    assert_eq!(api_code(pods.logs("worker-0", &params("nope")).await), 400);
    assert_eq!(api_code(pods.logs("missing", &params("main")).await), 404);

    // Logs go with the pod.
    pods.delete("worker-0", &DeleteParams::default())
        .await
        .unwrap();
    assert!(sim.pod_log("ml", "worker-0", "main", false).is_none());
}

#[tokio::test]
async fn injected_failures_and_retries() {
    let sim = SimCluster::start("faults").await.unwrap();
    sim.create(&Gvr::BATCH_JOB, job_value("ml", "x", json!({})))
        .unwrap();
    let client = client_for(&sim).await;
    let api = jobs(&client, "ml");

    sim.fail_next(1, 500);
    assert_eq!(api_code(api.get("x").await), 500);
    assert!(api.get("x").await.is_ok());

    // 503 is retried by the default client (honouring Retry-After), invisibly to the caller.
    let before = sim.requests_total();
    sim.fail_next(2, 503);
    assert!(timeout(WAIT, api.get("x")).await.unwrap().is_ok());
    assert_eq!(sim.requests_total() - before, 3);
    let statuses: Vec<u16> = sim
        .recent_requests()
        .iter()
        .rev()
        .take(3)
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, [200, 503, 503]);
}

#[tokio::test]
async fn outages_soft_and_hard() {
    let sim = SimCluster::start("outage").await.unwrap();
    sim.create(&Gvr::BATCH_JOB, job_value("ml", "x", json!({})))
        .unwrap();
    let mut config = config_for(&sim.kubeconfig_yaml(), "outage").await;
    config.default_retry = false;
    let client = Client::try_from(config).unwrap();
    let api = jobs(&client, "ml");

    let mut stream = api
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let first = timeout(WAIT, stream.next()).await.unwrap();
    assert!(matches!(first, Some(Ok(WatchEvent::Added(_)))));
    assert_eq!(sim.open_watches(), 1);

    sim.set_outage(true);
    eventually("the watch to be cut", || sim.open_watches() == 0).await;
    let rest: Vec<_> = timeout(WAIT, stream.collect::<Vec<_>>()).await.unwrap();
    assert!(
        rest.iter()
            .all(|e| !matches!(e, Ok(WatchEvent::Added(_) | WatchEvent::Modified(_))))
    );
    assert_eq!(api_code(api.get("x").await), 503);
    sim.set_outage(false);
    assert!(api.get("x").await.is_ok());

    // Hard outage: the port refuses connections, then comes back on the same address.
    let addr = sim.addr();
    sim.outage_hard(true).unwrap();
    let err = api.get("x").await.unwrap_err();
    assert!(
        !matches!(err, kube::Error::Api(_)),
        "a transport error, got {err:?}"
    );
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    sim.outage_hard(false).unwrap();
    assert_eq!(sim.addr(), addr);
    assert!(timeout(WAIT, api.get("x")).await.unwrap().is_ok());
}

#[tokio::test]
async fn stalled_watches_trip_the_client_idle_timeout() {
    let sim = SimCluster::start("stall").await.unwrap();
    let client = client_for(&sim).await;
    // Server timeout 1 s, so the client's idle timeout is 1 + 5 s.
    let mut events = spawn_watcher(jobs(&client, "ml"), watcher::Config::default().timeout(1));
    events.synced().await;
    eventually("the watch to open", || sim.open_watches() == 1).await;

    sim.stall_watches(true);
    sleep(Duration::from_millis(300)).await;
    let watches_before = sim.watch_requests("jobs");
    sim.create(&Gvr::BATCH_JOB, job_value("ml", "held", json!({})))
        .unwrap();
    events
        .expect_none(Duration::from_secs(2), "event while stalled", |e| {
            is_apply(e, "held")
        })
        .await;
    // The stalled stream never ends on its own; the client gives up on it and reconnects.
    eventually("a reconnect after the idle timeout", || {
        sim.watch_requests("jobs") > watches_before
    })
    .await;

    sim.stall_watches(false);
    events.expect("apply held", |e| is_apply(e, "held")).await;
}

#[tokio::test]
async fn label_selectors_filter_lists_and_watches() {
    let sim = SimCluster::start("selectors").await.unwrap();
    let client = client_for(&sim).await;
    let api = jobs(&client, "ml");
    let config = watcher::Config::default().labels("team in (a,c),!legacy");
    let mut events = spawn_watcher(api.clone(), config);
    events.synced().await;

    sim.create(
        &Gvr::BATCH_JOB,
        job_value("ml", "mine", json!({ "team": "a" })),
    )
    .unwrap();
    sim.create(
        &Gvr::BATCH_JOB,
        job_value("ml", "theirs", json!({ "team": "b" })),
    )
    .unwrap();
    sim.create(
        &Gvr::BATCH_JOB,
        job_value("ml", "old", json!({ "team": "a", "legacy": "yes" })),
    )
    .unwrap();
    events.expect("apply mine", |e| is_apply(e, "mine")).await;

    // Leaving the selection is a delete; entering it is an apply.
    sim.patch_merge(
        &Gvr::BATCH_JOB,
        "ml",
        "mine",
        json!({ "metadata": { "labels": { "team": "b" } } }),
    )
    .unwrap();
    events.expect("delete mine", |e| is_delete(e, "mine")).await;
    sim.patch_merge(
        &Gvr::BATCH_JOB,
        "ml",
        "theirs",
        json!({ "metadata": { "labels": { "team": "c" } } }),
    )
    .unwrap();
    let entered = events
        .expect("apply theirs", |e| matches!(e, Event::Apply(_)))
        .await;
    assert!(is_apply(&entered, "theirs"), "got {}", describe(&entered));

    let listed = api
        .list(&ListParams::default().labels("team=b"))
        .await
        .unwrap();
    assert_eq!(listed.items.iter().map(name).collect::<Vec<_>>(), ["mine"]);
    let by_field = api
        .list(&ListParams::default().fields("metadata.name=old"))
        .await
        .unwrap();
    assert_eq!(by_field.items.len(), 1);
    assert_eq!(
        api_code(api.list(&ListParams::default().labels("team in (a")).await),
        400
    );
}

#[tokio::test]
async fn job_drivers_write_realistic_lifecycles() {
    let sim = SimCluster::start("drivers").await.unwrap();
    let client = client_for(&sim).await;
    for flavor in Flavor::ALL {
        let ar = resource_of(flavor);
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "ml", &ar);
        let mut events = spawn_watcher(api.clone(), watcher::Config::default());
        events.synced().await;

        let job_name = format!("{}-job", format!("{flavor:?}").to_lowercase());
        let mut driver = JobDriver::builder(flavor, "ml", &job_name)
            .workers(2)
            .finalizer("jobrelay.io/archive")
            .create(&sim)
            .unwrap();
        events.expect("created", |e| is_apply(e, &job_name)).await;
        let mut rvs = vec![driver.pending().unwrap(), driver.running().unwrap()];
        rvs.push(driver.succeeded().unwrap());
        let mut seen = Vec::new();
        while seen.last() != rvs.last() {
            let Event::Apply(obj) = events
                .expect("job update", |e| is_apply(e, &job_name))
                .await
            else {
                unreachable!()
            };
            seen.push(rv(&obj));
            if seen.last() == rvs.last() {
                let status = &obj.data["status"];
                match flavor {
                    Flavor::Batch => {
                        let types: Vec<&str> = status["conditions"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|c| c["type"].as_str().unwrap())
                            .collect();
                        assert_eq!(types, ["SuccessCriteriaMet", "Complete"]);
                        assert!(status["completionTime"].is_string());
                    }
                    Flavor::Volcano => {
                        assert_eq!(status["state"]["phase"], "Completed");
                        let phases: Vec<&str> = status["conditions"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|c| c["status"].as_str().unwrap())
                            .collect();
                        assert_eq!(phases, ["Pending", "Running", "Completing", "Completed"]);
                    }
                    Flavor::PyTorch | Flavor::Mpi => {
                        let conds = status["conditions"].as_array().unwrap();
                        let last = conds.last().unwrap();
                        assert_eq!(last["type"], "Succeeded");
                        assert_eq!(last["reason"], format!("{}Succeeded", flavor.kind()));
                        let running = conds.iter().find(|c| c["type"] == "Running").unwrap();
                        assert_eq!(running["status"], "False");
                    }
                    other => unreachable!("{other:?} is not in Flavor::ALL"),
                }
            }
        }
        for pair in seen.windows(2) {
            assert!(pair[0].parse::<u64>().unwrap() < pair[1].parse::<u64>().unwrap());
        }

        // Pods are findable by the flavour's label and carry logs.
        let pods: Api<Pod> = Api::namespaced(client.clone(), "ml");
        let selector = format!("{}={job_name}", flavor.pod_label());
        let listed = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .unwrap();
        assert_eq!(listed.items.len(), driver.pods().len());
        assert_eq!(
            listed.items.len(),
            if flavor == Flavor::Batch { 2 } else { 3 }
        );
        let first = &driver.pods()[0];
        let log = pods
            .logs(
                &first.name,
                &LogParams {
                    container: Some(first.container.clone()),
                    ..LogParams::default()
                },
            )
            .await
            .unwrap();
        assert!(log.contains("training complete"), "{log}");

        // Deletion waits for the finalizer; removing it garbage-collects the pods.
        driver.delete().unwrap();
        let still_there = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .unwrap();
        assert_eq!(still_there.items.len(), driver.pods().len());
        sim.patch_merge(
            &flavor.gvr(),
            "ml",
            &job_name,
            json!({ "metadata": { "finalizers": null } }),
        )
        .unwrap();
        events.expect("delete", |e| is_delete(e, &job_name)).await;
        assert!(
            pods.list(&ListParams::default().labels(&selector))
                .await
                .unwrap()
                .items
                .is_empty()
        );
    }
}

#[tokio::test]
async fn job_driver_failure_restart_and_suspend_paths() {
    let sim = SimCluster::start("paths").await.unwrap();

    let mut batch = JobDriver::create(&sim, Flavor::Batch, "ml", "b").unwrap();
    batch.running().unwrap();
    batch.failed("").unwrap();
    let status = batch.object().unwrap()["status"].clone();
    let types: Vec<&str> = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["FailureTarget", "Failed"]);
    assert_eq!(status["conditions"][1]["reason"], "BackoffLimitExceeded");
    let t0 = status["conditions"][0]["lastTransitionTime"]
        .as_str()
        .unwrap()
        .to_string();
    let t1 = status["conditions"][1]["lastTransitionTime"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(t0 < t1, "{t0} < {t1}");

    let mut suspended = JobDriver::create(&sim, Flavor::Batch, "ml", "s").unwrap();
    let before = suspended.object().unwrap()["metadata"]["generation"]
        .as_i64()
        .unwrap();
    suspended.suspended().unwrap();
    let obj = suspended.object().unwrap();
    assert_eq!(obj["spec"]["suspend"], true);
    assert_eq!(obj["metadata"]["generation"].as_i64().unwrap(), before + 1);
    assert_eq!(obj["status"]["conditions"][0]["type"], "Suspended");

    let mut volcano = JobDriver::create(&sim, Flavor::Volcano, "ml", "v").unwrap();
    volcano.running().unwrap();
    volcano.restarting().unwrap();
    let status = volcano.object().unwrap()["status"].clone();
    assert_eq!(status["state"]["phase"], "Restarting");
    assert_eq!(status["retryCount"], 1);
    let first_pod = volcano.pods()[0].clone();
    assert!(
        sim.pod_log("ml", &first_pod.name, &first_pod.container, true)
            .is_some()
    );
    volcano.failed("").unwrap();
    assert_eq!(
        volcano.object().unwrap()["status"]["state"]["phase"],
        "Failed"
    );

    let mut pytorch = JobDriver::create(&sim, Flavor::PyTorch, "ml", "pt").unwrap();
    pytorch.running().unwrap();
    pytorch.restarting().unwrap();
    pytorch.running().unwrap();
    pytorch.failed("OOMKilled").unwrap();
    assert!(
        pytorch.running().is_ok(),
        "writes after failure are ignored by the operator rules"
    );
    let conds = pytorch.object().unwrap()["status"]["conditions"]
        .as_array()
        .unwrap()
        .clone();
    let failed = conds.iter().find(|c| c["type"] == "Failed").unwrap();
    assert_eq!(failed["reason"], "OOMKilled");
    assert!(conds.iter().all(|c| c["type"] != "Restarting"));
    assert!(pytorch.completing().is_err());

    let mut mpi = JobDriver::create(&sim, Flavor::Mpi, "ml", "mpi").unwrap();
    mpi.suspended().unwrap();
    let obj = mpi.object().unwrap();
    assert_eq!(obj["spec"]["runPolicy"]["suspend"], true);
    let conds = obj["status"]["conditions"].as_array().unwrap();
    assert!(conds.iter().any(|c| c["type"] == "Suspended"
        && c["status"] == "True"
        && c["reason"] == "MPIJobSuspended"));
}

#[tokio::test]
async fn serves_registered_crds_and_survives_bad_input() {
    let sim = SimCluster::start("crds").await.unwrap();
    sim.register_kind(jobrelay_testkit::ResourceKind::new(
        "example.com",
        "v1",
        "Widget",
        "widgets",
        true,
    ));
    let client = client_for(&sim).await;
    let ar = ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "ml", &ar);
    let w: DynamicObject = serde_json::from_value(
        json!({ "apiVersion": "example.com/v1", "kind": "Widget", "metadata": { "name": "w" } }),
    )
    .unwrap();
    widgets.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(
        widgets
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );

    // Bad input is a Status, never a crash.
    let wrong_kind: DynamicObject = serde_json::from_value(
        json!({ "apiVersion": "example.com/v1", "kind": "Gadget", "metadata": { "name": "g" } }),
    )
    .unwrap();
    assert_eq!(
        api_code(widgets.create(&PostParams::default(), &wrong_kind).await),
        400
    );
    let raw = http_request(
        &client,
        "POST",
        "/apis/example.com/v1/namespaces/ml/widgets",
        b"{not json",
    )
    .await;
    assert_eq!(raw, 400);
    let raw = http_request(
        &client,
        "GET",
        "/apis/example.com/v1/namespaces/ml/widgets?limit=abc",
        b"",
    )
    .await;
    assert_eq!(raw, 400);
    let raw = http_request(&client, "GET", "/apis/nope/v1/things", b"").await;
    assert_eq!(raw, 404);
    let raw = http_request(
        &client,
        "GET",
        "/apis/example.com/v1/namespaces/ml/widgets?watch=1&resourceVersion=x",
        b"",
    )
    .await;
    assert_eq!(raw, 400);
    let huge =
        "/apis/example.com/v1/namespaces/ml/widgets?watch=1&timeoutSeconds=18446744073709551615";
    let request = hyper::Request::get(huge).body(Vec::new()).unwrap();
    let started = client.request_events::<Value>(request).await;
    assert!(
        started.is_ok(),
        "a watch with an absurd timeout still starts"
    );
    let raw = http_request(
        &client,
        "GET",
        "/apis/example.com/v1/namespaces/ml/widgets?labelSelector=%E2%9C%93%20in%20(",
        b"",
    )
    .await;
    assert_eq!(raw, 400);
    let raw = http_request(
        &client,
        "PATCH",
        "/apis/example.com/v1/namespaces/ml/widgets/w",
        b"{}",
    )
    .await;
    assert_eq!(raw, 415, "patch without a patch content type");
    assert!(widgets.get("w").await.is_ok(), "still serving");
}

/// Sends a raw request through the client and returns the status code.
async fn http_request(client: &Client, method: &str, path: &str, body: &[u8]) -> u16 {
    let request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(body.to_vec())
        .expect("a request of a method, a path and a header");
    match client.request::<Value>(request).await {
        Ok(_) => 200,
        Err(kube::Error::Api(status)) => status.code,
        Err(other) => panic!("transport error: {other:?}"),
    }
}

/// Sends one HTTP/1.1 request over a fresh TCP connection and reads until the server closes
/// it or `within` passes; returns everything received.
async fn raw_exchange(
    sim: &SimCluster,
    request: String,
    within: Duration,
    during: impl AsyncFnOnce(),
) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut socket = tokio::net::TcpStream::connect(sim.addr())
        .await
        .expect("connect to the simulator");
    socket
        .write_all(request.as_bytes())
        .await
        .expect("send the request");
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    // Read the head and first chunks, then trigger the fault, then read to the end.
    let first = timeout(WAIT, socket.read(&mut buf))
        .await
        .expect("the first bytes in time")
        .expect("read the first bytes");
    received.extend_from_slice(&buf[..first]);
    during().await;
    let deadline = Instant::now() + within;
    loop {
        match timeout(
            deadline.saturating_duration_since(Instant::now()),
            socket.read(&mut buf),
        )
        .await
        {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&received).into_owned()
}

#[tokio::test]
async fn wire_level_auth_and_abrupt_watch_drop() {
    let sim = SimCluster::start("wire").await.unwrap();
    sim.create(&Gvr::BATCH_JOB, job_value("ml", "x", json!({})))
        .unwrap();

    // No Authorization header: 401 with a Status body.
    let request =
        "GET /apis/batch/v1/namespaces/ml/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            .to_string();
    let response = raw_exchange(&sim, request, WAIT, async || {}).await;
    assert!(response.starts_with("HTTP/1.1 401"), "{response}");
    assert!(
        response.contains("\"kind\":\"Status\"")
            && response.contains("\"reason\":\"Unauthorized\"")
    );

    // A watch is a chunked JSON stream; a dropped watch ends without the final zero chunk.
    let request = format!(
        "GET /apis/batch/v1/namespaces/ml/jobs?watch=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\r\n",
        sim.token()
    );
    let response = raw_exchange(&sim, request, WAIT, async || {
        sleep(Duration::from_millis(200)).await;
        sim.drop_watches();
    })
    .await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        response
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{response}"
    );
    assert!(
        response.contains("{\"type\":\"ADDED\",\"object\":{"),
        "{response}"
    );
    assert!(
        !response.ends_with("0\r\n\r\n"),
        "the stream must end abruptly: {response:?}"
    );

    // A watch that times out ends cleanly with the final chunk.
    let request = format!(
        "GET /apis/batch/v1/namespaces/ml/jobs?watch=1&timeoutSeconds=1&allowWatchBookmarks=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
        sim.token()
    );
    let response = raw_exchange(&sim, request, WAIT, async || {}).await;
    assert!(response.ends_with("0\r\n\r\n"), "{response:?}");
    assert!(
        response.contains("\"type\":\"BOOKMARK\""),
        "a last bookmark before the timeout: {response}"
    );
}

#[tokio::test]
async fn leases_apply_dry_run_and_future_versions() {
    use k8s_openapi::api::coordination::v1::Lease;
    let sim = SimCluster::start("leases").await.unwrap();
    let client = client_for(&sim).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");

    // Server-side apply creates a missing object, then updates it.
    let body = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": { "name": "jobrelay-leader" },
        "spec": { "holderIdentity": "replica-a", "leaseDurationSeconds": 15 },
    });
    let created = leases
        .patch(
            "jobrelay-leader",
            &PatchParams::apply("jobrelay"),
            &Patch::Apply(&body),
        )
        .await
        .unwrap();
    assert_eq!(
        created.spec.as_ref().unwrap().holder_identity.as_deref(),
        Some("replica-a")
    );

    // Two replicas race on replace: the second, with the older resourceVersion, loses.
    let mut a = leases.get("jobrelay-leader").await.unwrap();
    let mut b = a.clone();
    a.spec.as_mut().unwrap().holder_identity = Some("replica-a2".into());
    b.spec.as_mut().unwrap().holder_identity = Some("replica-b".into());
    leases
        .replace("jobrelay-leader", &PostParams::default(), &a)
        .await
        .unwrap();
    assert_eq!(
        api_code(
            leases
                .replace("jobrelay-leader", &PostParams::default(), &b)
                .await
        ),
        409
    );

    // Dry runs validate but store nothing.
    let before = sim.current_rv();
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let mut other = a.clone();
    other.metadata = kube::api::ObjectMeta {
        name: Some("dry".into()),
        ..Default::default()
    };
    leases.create(&dry, &other).await.unwrap();
    assert_eq!(api_code(leases.get("dry").await), 404);
    assert_eq!(sim.current_rv(), before);

    // A resourceVersion from the future is a 504 after a short wait (the client retries 504s,
    // so use a client that does not).
    let mut config = config_for(&sim.kubeconfig_yaml(), "leases").await;
    config.default_retry = false;
    let no_retry: Api<Lease> = Api::namespaced(Client::try_from(config).unwrap(), "kube-system");
    let future = (sim.current_rv() + 100).to_string();
    let result = no_retry
        .watch(&WatchParams::default(), &future)
        .await
        .map(|_| ());
    assert_eq!(api_code(result), 504);
}

#[tokio::test]
async fn shutdown_and_drop_close_the_port() {
    let sim = SimCluster::start("bye").await.unwrap();
    let addr = sim.addr();
    assert!(tokio::net::TcpStream::connect(addr).await.is_ok());
    sim.shutdown().await;
    eventually("the listener to close", || {
        std::net::TcpStream::connect(addr).is_err()
    })
    .await;

    let sim = SimCluster::start("bye2").await.unwrap();
    let addr = sim.addr();
    let clone = sim.clone();
    drop(sim);
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_ok(),
        "a clone keeps it alive"
    );
    drop(clone);
    eventually("the listener to close after the last drop", || {
        std::net::TcpStream::connect(addr).is_err()
    })
    .await;
}
