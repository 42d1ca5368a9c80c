//! One cluster's supervisor: builds the cluster's client and runs one watch stream per
//! (job kind, namespace), until its own cancellation token fires.
//!
//! Every cluster has its own token (a child of the daemon's), so stopping one cluster cancels
//! exactly its streams; dropping the stream tasks closes their HTTP connections, so nothing is
//! left watching a removed cluster.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use kube::Client;
use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::api_meter::{ApiMeterLayer, ApiMeters, ApiStats};
use super::cleanup::Cleaner;
use super::credentials::{self, CredentialExpiry};
use super::finalizer::FinalizerService;
use super::health::{CheckFailure, HealthBoard};
use crate::config::main_file::MainConfig;
use crate::config::sources::ClusterSource;
use jobrelay_capabilities::open_error::chain;
use jobrelay_capabilities::pod_logs::ClusterDirectory;
use jobrelay_watch::story::book::BookLimits;
use jobrelay_watch::story::sources::{self, Stories};
use jobrelay_watch::watcher::Sink;
use jobrelay_watch::watcher::{self, WatchTarget};

/// A running supervisor.
#[derive(Debug)]
pub struct SupervisorHandle {
    pub sha256: String,
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

impl SupervisorHandle {
    /// Cancel and wait until every stream of the cluster is gone.
    pub async fn stop(self) {
        self.cancel.cancel();
        let _ = self.task.await;
    }
}

/// Who gets a cluster's client once it is connected, and loses it when the cluster stops.
#[derive(Clone)]
pub struct ClientUsers {
    /// Removes jobrelay's finalizer from jobs.
    pub finalizers: Arc<FinalizerService>,
    /// Reads pod logs for plugins.
    pub directory: ClusterDirectory,
    /// Deletes finished jobs (`cleanup:`).
    pub cleanup: Arc<Cleaner>,
    /// Meters each cluster's API requests; its stats outlive the cluster's restarts, so the
    /// counters `/metrics` reads from it never go back.
    pub meters: ApiMeters,
}

impl ClientUsers {
    fn register(&self, cluster: &str, client: &Client) {
        self.finalizers.register(cluster, client.clone());
        self.directory.set_client(cluster, client.clone());
        self.cleanup.register(cluster, client.clone());
    }

    fn unregister(&self, cluster: &str) {
        self.finalizers.unregister(cluster);
        self.directory.remove_client(cluster);
        self.cleanup.unregister(cluster);
    }
}

/// Start supervising one cluster.
/// `passive`: watch without managing jobrelay's finalizer (a follower that does not deliver
/// must neither add nor remove it).
pub fn spawn(
    source: &ClusterSource,
    main: &Arc<MainConfig>,
    passive: bool,
    sink: Sink,
    health: HealthBoard,
    users: ClientUsers,
    parent: &CancellationToken,
) -> SupervisorHandle {
    let cancel = parent.child_token();
    let targets = targets(&source.name, main, passive);
    let mut kinds: Vec<String> = targets.iter().map(|t| t.kind.name.clone()).collect();
    kinds.dedup();
    health.connecting(&source.name, targets.len(), kinds);
    health.credentials(
        &source.name,
        read_credentials(&source.name, &source.kubeconfig),
    );
    let task = tokio::spawn(supervise(
        source.name.clone(),
        source.kubeconfig.clone(),
        targets,
        sink,
        health,
        users,
        cancel.clone(),
    ));
    SupervisorHandle {
        sha256: source.sha256.clone(),
        cancel,
        task,
    }
}

/// When the kubeconfig's credentials expire; says in the log (never the credential itself)
/// which expire within a week or have expired, and which could not be read.
fn read_credentials(cluster: &str, kubeconfig: &Kubeconfig) -> Vec<CredentialExpiry> {
    let read = credentials::expiries(kubeconfig);
    for problem in &read.problems {
        tracing::warn!(cluster = %cluster, error = %problem, "cannot tell when a credential of the kubeconfig expires");
    }
    let now = chrono::Utc::now().timestamp();
    for expiry in read.found.iter().filter(|e| e.due_soon(now)) {
        let what = if expiry.expires_unix <= now {
            "has expired"
        } else {
            "expires within 7 days"
        };
        tracing::warn!(
            cluster = %cluster,
            credential = %expiry.credential,
            expires_at = %expiry.expires_at,
            "the cluster's {} {what}: replace its kubeconfig",
            expiry.credential
        );
    }
    read.found
}

/// The streams of one cluster: every kind, in every configured namespace (or all).
fn targets(cluster: &str, main: &MainConfig, passive: bool) -> Vec<WatchTarget> {
    let cluster: Arc<str> = Arc::from(cluster);
    let namespaces: Vec<Option<String>> = if main.watch.namespaces.is_empty() {
        vec![None]
    } else {
        main.watch.namespaces.iter().cloned().map(Some).collect()
    };
    let watched: Vec<_> = main
        .kinds
        .iter()
        .filter(|k| k.watched_on(&cluster))
        .collect();
    // One story book for the cluster, when a kind watched here tells its jobs' stories.
    let stories = watched
        .iter()
        .any(|k| !k.story.is_off())
        .then(|| Stories::new(BookLimits::default()));
    let mut targets = Vec::new();
    for kind in watched {
        let kind = Arc::new(kind.clone());
        for ns in &namespaces {
            targets.push(WatchTarget {
                cluster: cluster.clone(),
                kind: kind.clone(),
                namespace: ns.clone(),
                label_selector: main.watch.label_selector.clone(),
                timeout_seconds: main.watch.timeout_seconds,
                finalizer: (kind.finalizer && !passive).then(|| main.finalizers.name.clone()),
                stories: stories.clone(),
                back: None,
            });
        }
    }
    targets
}

async fn supervise(
    name: String,
    kubeconfig: Arc<Kubeconfig>,
    targets: Vec<WatchTarget>,
    sink: Sink,
    health: HealthBoard,
    users: ClientUsers,
    cancel: CancellationToken,
) {
    let meter = users.meters.for_cluster(&name);
    let client = tokio::select! {
        c = connect(&name, &kubeconfig, &health, Some(meter)) => c,
        _ = cancel.cancelled() => return,
    };
    users.register(&name, &client);
    let mut streams = JoinSet::new();
    let story_sources = story_sources(&name, &client, &targets, &sink);
    // The health check tells the streams when the cluster answers again.
    let back = Arc::new(tokio::sync::Notify::new());
    for (index, mut target) in targets.into_iter().enumerate() {
        target.back = Some(back.clone());
        let health = health.clone();
        let cluster = name.clone();
        // Every line logged inside the stream, the kube client's own included (which name no
        // cluster), carries the stream's cluster and kind.
        let span = tracing::info_span!("watch", cluster = %name, kind = %target.kind.name);
        streams.spawn(
            watcher::run(client.clone(), target, sink.clone(), move |p| {
                health.stream(&cluster, index, p)
            })
            .instrument(span),
        );
    }
    for source in story_sources {
        streams.spawn(source);
    }
    // The kube client's own lines about a failed probe name the cluster too.
    let span = tracing::info_span!("health_check", cluster = %name);
    let server = crate::config::sources::server_of(&kubeconfig).unwrap_or_default();
    let check = check_health(client.clone(), name.clone(), server, health.clone(), back);
    streams.spawn(check.instrument(span));
    tracing::info!(cluster = %name, streams = streams.len() - 1, "cluster watched");
    cancel.cancelled().await;
    streams.shutdown().await;
    users.unregister(&name);
    tracing::info!(cluster = %name, "cluster stopped");
}

/// One watch of the objects around a cluster's jobs, run beside its job streams.
type StorySource = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// The watches of the objects around the cluster's jobs that its kinds ask for
/// (`kinds[].story`): one Workload stream and one pod stream per watched namespace (or for
/// all), whichever kinds ask. Not counted among the job streams of the cluster's health: a
/// cluster without Kueue is no less healthy for it.
fn story_sources(
    cluster: &str,
    client: &Client,
    targets: &[WatchTarget],
    sink: &Sink,
) -> Vec<StorySource> {
    let mut kueue = BTreeSet::new();
    let mut pods = BTreeSet::new();
    let mut book = None;
    for WatchTarget {
        kind,
        namespace,
        stories,
        ..
    } in targets
    {
        let asks = kind.story;
        if asks.kueue {
            kueue.insert(namespace.clone());
        }
        if asks.pods {
            pods.insert(namespace.clone());
        }
        book = book.or_else(|| stories.clone());
    }
    let Some(book) = book else {
        return Vec::new();
    };
    // Before any stream starts: the job streams that read Workloads wait for these lists.
    book.expect_workload_lists(kueue.len());
    let cluster: Arc<str> = Arc::from(cluster);
    let mut sources: Vec<StorySource> = Vec::new();
    for namespace in kueue {
        let span = tracing::info_span!("story", cluster = %cluster, source = "workloads");
        let news = Some(sink.clone());
        let run = sources::watch_workloads(
            client.clone(),
            namespace,
            book.clone(),
            cluster.clone(),
            news,
        );
        sources.push(Box::pin(run.instrument(span)));
    }
    for namespace in pods {
        let span = tracing::info_span!("story", cluster = %cluster, source = "pods");
        let news = Some(sink.clone());
        let run = sources::watch_pods(
            client.clone(),
            namespace,
            book.clone(),
            cluster.clone(),
            news,
        );
        sources.push(Box::pin(run.instrument(span)));
    }
    sources
}

/// The cluster's health checks, one per check interval (main file `cluster_health`): the API
/// server is asked for `/version`, and the board judges the answer together with the
/// streams' state (see [`jobrelay_fleet::availability`]). The wait for an answer is the
/// interval, between 1 and 10 seconds: a server that does not answer in that time fails the
/// check.
async fn check_health(
    client: Client,
    cluster: String,
    server: String,
    health: HealthBoard,
    back: Arc<tokio::sync::Notify>,
) {
    let mut failing = false;
    loop {
        let interval = health.check_settings().interval;
        tokio::time::sleep(interval).await;
        let patience = interval.clamp(Duration::from_secs(1), Duration::from_secs(10));
        let answered = match tokio::time::timeout(patience, client.apiserver_version()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(source)) => Err(CheckFailure::Probe {
                server: server.clone(),
                source,
            }),
            Err(_) => Err(CheckFailure::NoAnswer { within: patience }),
        };
        // Back after failing: the streams waiting out their backoff try at once.
        if answered.is_ok() && std::mem::replace(&mut failing, false) {
            back.notify_waiters();
        }
        failing |= answered.is_err();
        health.check(&cluster, answered);
    }
}

/// Build the cluster's client, retrying with backoff: a kubeconfig that parses can still fail
/// here (missing credentials file, exec plugin error), and that must not end the supervisor.
/// Its requests are counted into `meter`, when given.
async fn connect(
    name: &str,
    kubeconfig: &Kubeconfig,
    health: &HealthBoard,
    meter: Option<Arc<ApiStats>>,
) -> Client {
    let mut delays = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(Duration::from_secs(30))
        .with_jitter()
        .without_max_times()
        .build();
    loop {
        match build_client(kubeconfig, meter.clone()).await {
            Ok(client) => return client,
            Err(e) => {
                tracing::warn!(cluster = %name, error = %e, "cannot build cluster client; retrying");
                health.failed(name, e.to_string());
                let delay = delays.next().unwrap_or(Duration::from_secs(30));
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// Why no client could be made for a cluster. The text carries every cause beneath kube's
/// (a kubeconfig's unreadable certificate file, the I/O error under a TLS setup), because
/// kube's own text often names only the kind of failure; so the cause is not kept as a
/// `source` as well, which would say it twice.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("kubeconfig: {}", chain(.0))]
    Kubeconfig(kube::config::KubeconfigError),
    #[error("client: {}", chain(.0))]
    Client(kube::Error),
}

/// A kube client from an in-memory kubeconfig, its requests counted into `meter` by verb,
/// latency and result (see [`super::api_meter`]); `None` for a client nobody meters (a
/// one-off command).
pub async fn build_client(
    kubeconfig: &Kubeconfig,
    meter: Option<Arc<ApiStats>>,
) -> Result<Client, ClientError> {
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig.clone(), &KubeConfigOptions::default())
            .await
            .map_err(ClientError::Kubeconfig)?;
    // The client's own retry of 429/503/504 (up to 15 times, honouring Retry-After) would hide
    // an unavailable API server from the cluster's health for minutes. The watcher already
    // retries every failed request with backoff, so each failure is retried and also seen.
    config.default_retry = false;
    let builder = ClientBuilder::try_from(config).map_err(ClientError::Client)?;
    // Outermost: a request is timed from its dispatch (credentials included) to its response
    // head.
    Ok(match meter {
        Some(stats) => builder.with_layer(&ApiMeterLayer::new(stats)).build(),
        None => builder.build(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::main_file::MainConfig;

    #[test]
    fn a_passive_watch_leaves_the_finalizer_alone() {
        let main = MainConfig::parse(
            "kinds: [{name: volcano-job, finalizer: true}, {name: batch-job}]",
            std::path::Path::new("/etc/jobrelay"),
        )
        .expect("main file");
        let active = targets("east", &main, false);
        assert_eq!(active[0].finalizer.as_deref(), Some("jobrelay.io/delivery"));
        assert_eq!(active[1].finalizer, None);
        let passive = targets("east", &main, true);
        assert!(passive.iter().all(|t| t.finalizer.is_none()));
    }

    /// A kind limited to some clusters is watched there and nowhere else.
    #[test]
    fn a_kind_is_watched_only_on_its_clusters() {
        let main = MainConfig::parse(
            "kinds: [{name: batch-job}, {name: volcano-job, clusters: [\"gpu-*\", lab]}]",
            std::path::Path::new("/etc/jobrelay"),
        )
        .expect("main file");
        let kinds = |cluster: &str| -> Vec<String> {
            targets(cluster, &main, false)
                .iter()
                .map(|t| t.kind.name.clone())
                .collect()
        };
        assert_eq!(kinds("gpu-east"), ["batch-job", "volcano-job"]);
        assert_eq!(kinds("lab"), ["batch-job", "volcano-job"]);
        assert_eq!(kinds("cpu-east"), ["batch-job"]);
    }
}
