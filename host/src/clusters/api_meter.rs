//! Per-cluster Kubernetes API request latency and results, by verb.
//!
//! A cluster that answers slowly or with errors shows first in its requests, long before its
//! health turns `error`: a list that takes seconds, a watch refused with 429, a patch of a
//! finalizer answered 500. The kube client of every cluster is built with [`ApiMeterLayer`]
//! around its HTTP stack, which times each request until its response head arrives and
//! counts its result into the cluster's [`ApiStats`]; `/metrics` reads them at scrape time
//! ([`encode`]).
//!
//! Verbs are the API server's own (its audit log and `apiserver_request_total`), so a
//! dashboard can set jobrelay's view of a cluster beside the cluster's:
//! see [`Verb::classify`].

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::{Method, Request, Response};
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;

/// The metric family of request latency (a histogram).
pub const DURATION_FAMILY: &str = "jobrelay_cluster_api_request_duration_seconds";
/// The metric family of requests by result (a counter; its samples end in `_total`).
pub const REQUESTS_FAMILY: &str = "jobrelay_cluster_api_requests";

/// Upper bounds of the latency buckets, in nanoseconds, so a request is put in its bucket by
/// integer comparison (a request of exactly 5 ms is in `le="0.005"`); `+Inf` follows them.
const BUCKET_NANOS: [u64; 11] = [
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// The latency buckets' upper bounds in seconds (without `+Inf`): from a quick get of a
/// small object to a list of many thousand jobs.
pub fn buckets() -> [f64; BUCKET_NANOS.len()] {
    BUCKET_NANOS.map(|n| n as f64 / 1e9)
}

/// What a request did, as the Kubernetes API server names it.
///
/// `deletecollection` is folded into `delete`; the special verbs (`proxy`), `connect`
/// methods and anything unrecognised are `other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    Other,
}

impl Verb {
    /// Every verb, in the order they are rendered.
    pub const ALL: [Verb; 8] = [
        Verb::Get,
        Verb::List,
        Verb::Watch,
        Verb::Create,
        Verb::Update,
        Verb::Patch,
        Verb::Delete,
        Verb::Other,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::Other => "other",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    /// The verb of a request, as the API server's request info derives it
    /// (`k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`):
    ///
    /// - a resource request is `/api/VERSION/...` or `/apis/GROUP/VERSION/...`, optionally
    ///   with `namespaces/NS/` before the resource; anything else (`/version`, `/api`,
    ///   `/apis/GROUP/VERSION`, `/healthz`) is a non-resource request, `get` for GET and HEAD
    ///   and `other` for the rest;
    /// - the method gives the verb (POST `create`, PUT `update`, PATCH `patch`, DELETE
    ///   `delete`, GET and HEAD `get`), except that a GET without an object name is a `list`,
    ///   or a `watch` with `watch=true` (or `1`) in the query, and a DELETE without one is a
    ///   `deletecollection`, counted as `delete`; a GET with `watch=true` on a named object is
    ///   a `watch` as well (the time to its response head, like any watch's);
    /// - `/api/v1/namespaces/NAME` names a namespace object (a `get`), `/api/v1/namespaces`
    ///   is their collection (a `list`); `namespaces/NAME/status` and `/finalize` are
    ///   subresources of a namespace;
    /// - the deprecated `/api/v1/watch/...` form is a `watch`, `/proxy/...` is `other`.
    pub fn classify(method: &Method, path: &str, query: Option<&str>) -> Verb {
        let parts: Vec<&str> = {
            let trimmed = path.trim_matches('/');
            if trimmed.is_empty() {
                Vec::new()
            } else {
                trimmed.split('/').collect()
            }
        };
        let non_resource = || {
            if method == Method::GET || method == Method::HEAD {
                Verb::Get
            } else {
                Verb::Other
            }
        };
        // The version and what follows it, or a non-resource request.
        let rest = match parts.as_slice() {
            ["api", _version, rest @ ..] if !rest.is_empty() => rest,
            ["apis", _group, _version, rest @ ..] if !rest.is_empty() => rest,
            _ => return non_resource(),
        };
        let (special, rest) = match rest {
            ["watch", rest @ ..] => (Some(Verb::Watch), rest),
            ["proxy", rest @ ..] => (Some(Verb::Other), rest),
            _ => (None, rest),
        };
        if special.is_some() && rest.is_empty() {
            // The API server refuses these: no resource to act on.
            return Verb::Other;
        }
        // `namespaces/NS/RESOURCE/...`: relative to the resource; `namespaces/NAME` and its
        // own subresources stay as they are (the namespace is the object).
        let rest = match rest {
            ["namespaces", _ns, resource, tail @ ..]
                if !matches!(*resource, "status" | "finalize") =>
            {
                let mut inner = vec![*resource];
                inner.extend_from_slice(tail);
                inner
            }
            _ => rest.to_vec(),
        };
        let named = rest.len() >= 2;
        if let Some(verb) = special {
            return verb;
        }
        match *method {
            Method::GET | Method::HEAD if watch_query(query) => Verb::Watch,
            Method::GET | Method::HEAD if named => Verb::Get,
            Method::GET | Method::HEAD => Verb::List,
            Method::POST => Verb::Create,
            Method::PUT => Verb::Update,
            Method::PATCH => Verb::Patch,
            Method::DELETE => Verb::Delete,
            _ => Verb::Other,
        }
    }

    /// The verb of an HTTP request (its URI is still relative: the base URI is added inside
    /// the stack).
    pub fn of<B>(request: &Request<B>) -> Verb {
        Verb::classify(
            request.method(),
            request.uri().path(),
            request.uri().query(),
        )
    }
}

/// Whether the query asks for a watch: `watch` parsed as Go's `strconv.ParseBool` does (the
/// API server decodes its list options so), the first value counting.
fn watch_query(query: Option<&str>) -> bool {
    let Some(query) = query else {
        return false;
    };
    form_urlencoded::parse(query.as_bytes())
        .find(|(key, _)| key == "watch")
        .is_some_and(|(_, value)| matches!(&*value, "1" | "t" | "T" | "true" | "TRUE" | "True"))
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A response arrived with this status code.
    Status(u16),
    /// No response at all: the connection failed or was cut, a timeout, TLS, credentials
    /// that could not be obtained.
    NoResponse,
}

impl Outcome {
    /// `ok` is a response below 400; everything else is an error.
    pub fn is_ok(self) -> bool {
        matches!(self, Outcome::Status(code) if code < 400)
    }
}

/// The last failed request of a verb: its status code, or that no response came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastError {
    Status(u16),
    NoResponse,
}

/// `last_error` as one atomic word: 0 none yet, a status code, or [`NO_RESPONSE`].
const NO_RESPONSE: u32 = u32::MAX;

/// One verb's counters.
#[derive(Default)]
struct VerbStats {
    /// Requests per bucket (not cumulative), `+Inf` last.
    buckets: [AtomicU64; BUCKET_NANOS.len() + 1],
    /// Total latency, nanoseconds (u64 holds 584 years of it).
    sum_nanos: AtomicU64,
    ok: AtomicU64,
    error: AtomicU64,
    last_error: AtomicU32,
}

/// One cluster's API requests: per verb, a latency histogram and counts by result.
///
/// Atomics only: recording is a few relaxed increments, and a scrape may read a request
/// half-recorded (its bucket counted, its result not yet), which the next scrape settles.
#[derive(Default)]
pub struct ApiStats {
    verbs: [VerbStats; Verb::ALL.len()],
}

impl std::fmt::Debug for ApiStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.snapshot()).finish()
    }
}

/// One verb's numbers at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct VerbSnapshot {
    pub verb: Verb,
    /// `(upper bound in seconds, requests at or below it)`, cumulative, without `+Inf`.
    pub buckets: Vec<(f64, u64)>,
    /// Requests timed: the `+Inf` bucket.
    pub count: u64,
    pub sum_seconds: f64,
    /// Responses below 400.
    pub ok: u64,
    /// Responses of 400 or more, and requests that got no response.
    pub error: u64,
    pub last_error: Option<LastError>,
}

impl ApiStats {
    /// Counts one request of `verb` that took `elapsed` until its response head (or its
    /// failure).
    pub fn record(&self, verb: Verb, elapsed: Duration, outcome: Outcome) {
        let stats = &self.verbs[verb.index()];
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        stats.buckets[bucket_index(nanos)].fetch_add(1, Ordering::Relaxed);
        stats.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
        if outcome.is_ok() {
            stats.ok.fetch_add(1, Ordering::Relaxed);
        } else {
            stats.error.fetch_add(1, Ordering::Relaxed);
            let code = match outcome {
                Outcome::Status(code) => u32::from(code),
                Outcome::NoResponse => NO_RESPONSE,
            };
            stats.last_error.store(code, Ordering::Relaxed);
        }
    }

    /// Every verb used so far (a verb never requested has no entry), in [`Verb::ALL`] order.
    pub fn snapshot(&self) -> Vec<VerbSnapshot> {
        Verb::ALL
            .iter()
            .filter_map(|&verb| {
                let stats = &self.verbs[verb.index()];
                let ok = stats.ok.load(Ordering::Relaxed);
                let error = stats.error.load(Ordering::Relaxed);
                let mut below = 0;
                let mut buckets = Vec::with_capacity(BUCKET_NANOS.len());
                for (bound, slot) in buckets_seconds().zip(&stats.buckets) {
                    below += slot.load(Ordering::Relaxed);
                    buckets.push((bound, below));
                }
                let count = below + stats.buckets[BUCKET_NANOS.len()].load(Ordering::Relaxed);
                if count == 0 && ok == 0 && error == 0 {
                    return None;
                }
                let last_error = match stats.last_error.load(Ordering::Relaxed) {
                    0 => None,
                    NO_RESPONSE => Some(LastError::NoResponse),
                    code => Some(LastError::Status(u16::try_from(code).unwrap_or(u16::MAX))),
                };
                Some(VerbSnapshot {
                    verb,
                    buckets,
                    count,
                    sum_seconds: stats.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9,
                    ok,
                    error,
                    last_error,
                })
            })
            .collect()
    }
}

fn buckets_seconds() -> impl Iterator<Item = f64> {
    buckets().into_iter()
}

/// The bucket a latency falls in: the first bound at or above it, else `+Inf`.
fn bucket_index(nanos: u64) -> usize {
    BUCKET_NANOS
        .iter()
        .position(|&bound| nanos <= bound)
        .unwrap_or(BUCKET_NANOS.len())
}

/// Every cluster's [`ApiStats`], shared by the supervisors (which meter their clients) and
/// the metrics (which read them). Cheap to clone.
///
/// A cluster keeps its stats while its supervisor restarts (a changed kubeconfig, a new
/// Lease), so its counters never go back; [`remove`](Self::remove) forgets a cluster that
/// no longer runs here.
#[derive(Clone, Default)]
pub struct ApiMeters {
    clusters: Arc<Mutex<BTreeMap<String, Arc<ApiStats>>>>,
}

impl std::fmt::Debug for ApiMeters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.snapshot()).finish()
    }
}

impl ApiMeters {
    /// The cluster's stats, made on first use.
    pub fn for_cluster(&self, cluster: &str) -> Arc<ApiStats> {
        let mut clusters = self.clusters.lock();
        clusters.entry(cluster.to_string()).or_default().clone()
    }

    /// Forgets a cluster: its series leave `/metrics`. A client still holding its stats
    /// counts into them unseen.
    pub fn remove(&self, cluster: &str) {
        let mut clusters = self.clusters.lock();
        clusters.remove(cluster);
    }

    /// Every cluster's verbs used so far; a cluster with none has an empty list.
    pub fn snapshot(&self) -> BTreeMap<String, Vec<VerbSnapshot>> {
        let clusters: Vec<(String, Arc<ApiStats>)> = {
            let clusters = self.clusters.lock();
            clusters
                .iter()
                .map(|(name, stats)| (name.clone(), stats.clone()))
                .collect()
        };
        clusters
            .into_iter()
            .map(|(name, stats)| (name, stats.snapshot()))
            .collect()
    }
}

/// A [`tower::Layer`] that meters every request of a kube client into one cluster's
/// [`ApiStats`]; put on the client's stack with `ClientBuilder::with_layer`.
#[derive(Debug, Clone)]
pub struct ApiMeterLayer {
    stats: Arc<ApiStats>,
}

impl ApiMeterLayer {
    pub fn new(stats: Arc<ApiStats>) -> Self {
        ApiMeterLayer { stats }
    }
}

impl<S> tower::Layer<S> for ApiMeterLayer {
    type Service = ApiMeterService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ApiMeterService {
            inner,
            stats: self.stats.clone(),
        }
    }
}

/// The service of [`ApiMeterLayer`]: times a request from its dispatch to its response head
/// (so a watch counts until its stream begins, not for the stream's life) and counts its
/// result. A request abandoned before either (its caller dropped it) is not counted.
#[derive(Debug, Clone)]
pub struct ApiMeterService<S> {
    inner: S,
    stats: Arc<ApiStats>,
}

impl<S, B, R> tower::Service<Request<B>> for ApiMeterService<S>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    R: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    // Boxed: a request to the API server is rare next to the events it brings, and an
    // allocation per request keeps this free of pin projection.
    type Future = Pin<Box<dyn Future<Output = Result<Response<R>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let verb = Verb::of(&request);
        let stats = self.stats.clone();
        let started = Instant::now();
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            let outcome = match &result {
                Ok(response) => Outcome::Status(response.status().as_u16()),
                Err(_) => Outcome::NoResponse,
            };
            stats.record(verb, started.elapsed(), outcome);
            result
        })
    }
}

type Labels = Vec<(&'static str, String)>;

/// The two families, from [`ApiMeters::snapshot`]: `jobrelay_cluster_api_request_duration_seconds`
/// (labels `cluster`, `verb`) and `jobrelay_cluster_api_requests_total` (`cluster`, `verb`,
/// `result`: `ok` or `error`, both for every verb used). Only verbs a cluster has used have
/// series; with none at all, neither family is written.
pub fn encode(
    e: &mut DescriptorEncoder,
    clusters: &BTreeMap<String, Vec<VerbSnapshot>>,
) -> Result<(), std::fmt::Error> {
    let used = || {
        clusters
            .iter()
            .flat_map(|(cluster, verbs)| verbs.iter().map(move |v| (cluster, v)))
    };
    if used().next().is_none() {
        return Ok(());
    }
    let labels = |cluster: &String, v: &VerbSnapshot| -> Labels {
        vec![
            ("cluster", cluster.clone()),
            ("verb", v.verb.as_str().to_string()),
        ]
    };
    let mut metric = e.encode_descriptor(
        DURATION_FAMILY,
        "Time from a Kubernetes API request to its response head (a watch: until its stream \
         begins), by cluster and verb",
        None,
        MetricType::Histogram,
    )?;
    for (cluster, v) in used() {
        // The encoder wants per-bucket counts and `f64::MAX` as the `+Inf` bound.
        let mut per_bucket = Vec::with_capacity(v.buckets.len() + 1);
        let mut below = 0;
        for (bound, total) in &v.buckets {
            per_bucket.push((*bound, total.saturating_sub(below)));
            below = *total;
        }
        per_bucket.push((f64::MAX, v.count.saturating_sub(below)));
        metric
            .encode_family(&labels(cluster, v))?
            .encode_histogram::<Labels>(v.sum_seconds, v.count, &per_bucket, None)?;
    }
    let mut metric = e.encode_descriptor(
        REQUESTS_FAMILY,
        "Kubernetes API requests by cluster, verb and result: ok (a response below 400) or \
         error (400 or more, or no response: connection, timeout, TLS)",
        None,
        MetricType::Counter,
    )?;
    for (cluster, v) in used() {
        for (result, n) in [("ok", v.ok), ("error", v.error)] {
            let mut l = labels(cluster, v);
            l.push(("result", result.to_string()));
            ConstCounter::new(n).encode(metric.encode_family(&l)?)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_as_the_api_server_names_them() {
        use Verb::*;
        let cases: &[(&str, &str, Verb)] = &[
            // Lists and watches of collections, cluster-wide and namespaced.
            ("GET", "/api/v1/pods", List),
            ("GET", "/api/v1/pods?limit=500", List),
            ("GET", "/api/v1/namespaces/ml/pods", List),
            ("GET", "/apis/batch/v1/jobs?labelSelector=a%3Db", List),
            (
                "GET",
                "/apis/batch.volcano.sh/v1alpha1/namespaces/ml/jobs",
                List,
            ),
            (
                "GET",
                "/apis/batch/v1/jobs?watch=true&resourceVersion=10",
                Watch,
            ),
            (
                "GET",
                "/apis/batch/v1/jobs?resourceVersion=10&watch=1",
                Watch,
            ),
            ("GET", "/apis/batch/v1/jobs?watch=false", List),
            (
                "GET",
                "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs?allowWatchBookmarks=true&watch=true&timeoutSeconds=290",
                Watch,
            ),
            (
                "GET",
                "/api/v1/namespaces/ml/pods?fieldSelector=metadata.name%3Dp&watch=true",
                Watch,
            ),
            ("GET", "/api/v1/watch/namespaces/ml/pods", Watch),
            // Named objects and subresources.
            ("GET", "/api/v1/namespaces/ml/pods/p-0", Get),
            (
                "GET",
                "/api/v1/namespaces/ml/pods/p-0/log?container=main",
                Get,
            ),
            ("GET", "/apis/batch/v1/namespaces/ml/jobs/train/status", Get),
            ("GET", "/api/v1/nodes/node-1", Get),
            (
                "GET",
                "/apis/coordination.k8s.io/v1/namespaces/jobrelay/leases/jobrelay",
                Get,
            ),
            // Namespaces are objects themselves.
            ("GET", "/api/v1/namespaces", List),
            ("GET", "/api/v1/namespaces/ml", Get),
            ("GET", "/api/v1/namespaces/ml/", Get),
            ("GET", "/api/v1/namespaces/ml/status", Get),
            ("GET", "/api/v1/namespaces?watch=true", Watch),
            ("PUT", "/api/v1/namespaces/ml/finalize", Update),
            ("DELETE", "/api/v1/namespaces/ml", Delete),
            // Non-resource requests.
            ("GET", "/version", Get),
            ("GET", "/api", Get),
            ("GET", "/api/v1", Get),
            ("GET", "/apis", Get),
            ("GET", "/apis/batch/v1", Get),
            ("GET", "/healthz", Get),
            ("GET", "/openapi/v2", Get),
            ("POST", "/version", Other),
            // Writes.
            ("POST", "/apis/batch/v1/namespaces/ml/jobs", Create),
            (
                "POST",
                "/apis/coordination.k8s.io/v1/namespaces/ns/leases",
                Create,
            ),
            ("PUT", "/apis/batch/v1/namespaces/ml/jobs/train", Update),
            (
                "PUT",
                "/apis/batch/v1/namespaces/ml/jobs/train/status",
                Update,
            ),
            ("PATCH", "/apis/batch/v1/namespaces/ml/jobs/train", Patch),
            ("DELETE", "/apis/batch/v1/namespaces/ml/jobs/train", Delete),
            ("DELETE", "/apis/batch/v1/namespaces/ml/jobs", Delete),
            // The rest.
            ("GET", "/api/v1/proxy/namespaces/ml/pods/p-0", Other),
            ("GET", "/api/v1/watch", Other),
            ("OPTIONS", "/api/v1/pods", Other),
            ("HEAD", "/api/v1/pods", List),
        ];
        for (method, uri, want) in cases {
            let method = Method::from_bytes(method.as_bytes()).expect("method");
            let request = Request::builder()
                .method(method)
                .uri(*uri)
                .body(())
                .expect("request");
            assert_eq!(Verb::of(&request), *want, "{uri}");
        }
    }

    #[test]
    fn a_latency_lands_in_the_first_bucket_at_or_above_it() {
        let stats = ApiStats::default();
        let ok = Outcome::Status(200);
        for millis in [1, 5, 6, 10_000, 10_001, 60_000] {
            stats.record(Verb::Get, Duration::from_millis(millis), ok);
        }
        let [get] = stats.snapshot().try_into().expect("one verb used");
        let at = |bound: f64| {
            get.buckets
                .iter()
                .find(|(b, _)| *b == bound)
                .map(|(_, n)| *n)
                .expect("bucket")
        };
        assert_eq!(at(0.005), 2, "1 ms and exactly 5 ms");
        assert_eq!(at(0.01), 3);
        assert_eq!(at(5.0), 3);
        assert_eq!(at(10.0), 4, "exactly 10 s");
        assert_eq!(get.count, 6, "+Inf holds the two beyond 10 s");
        assert!(
            (get.sum_seconds - 80.013).abs() < 1e-9,
            "{}",
            get.sum_seconds
        );
        assert_eq!((get.ok, get.error), (6, 0));
        let bounds: Vec<f64> = get.buckets.iter().map(|(b, _)| *b).collect();
        assert_eq!(
            bounds,
            [
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0
            ]
        );
    }

    #[test]
    fn results_and_the_last_error_per_verb() {
        let stats = ApiStats::default();
        let d = Duration::from_millis(3);
        stats.record(Verb::List, d, Outcome::Status(200));
        stats.record(Verb::List, d, Outcome::Status(304));
        stats.record(Verb::List, d, Outcome::Status(404));
        stats.record(Verb::Patch, d, Outcome::Status(409));
        stats.record(Verb::Patch, d, Outcome::NoResponse);
        let snapshot = stats.snapshot();
        let verbs: Vec<Verb> = snapshot.iter().map(|v| v.verb).collect();
        assert_eq!(verbs, [Verb::List, Verb::Patch], "only verbs used");
        assert_eq!((snapshot[0].ok, snapshot[0].error), (2, 1));
        assert_eq!(snapshot[0].last_error, Some(LastError::Status(404)));
        assert_eq!((snapshot[1].ok, snapshot[1].error), (0, 2));
        assert_eq!(snapshot[1].last_error, Some(LastError::NoResponse));
    }

    #[test]
    fn a_cluster_keeps_its_stats_until_removed() {
        let meters = ApiMeters::default();
        let first = meters.for_cluster("east");
        assert!(Arc::ptr_eq(&first, &meters.for_cluster("east")));
        first.record(Verb::Get, Duration::ZERO, Outcome::Status(200));
        assert_eq!(meters.snapshot()["east"].len(), 1);
        meters.remove("east");
        assert!(meters.snapshot().is_empty());
        assert!(!Arc::ptr_eq(&first, &meters.for_cluster("east")));
    }

    /// A sample line: `(name, labels, value)`.
    fn parse_sample(line: &str) -> (String, BTreeMap<String, String>, f64) {
        let (series, value) = line.rsplit_once(' ').expect("a value");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("value of {line}")),
        };
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.strip_suffix('}').expect("closing brace")),
            None => (series, ""),
        };
        let labels = labels
            .split(',')
            .filter(|pair| !pair.is_empty())
            .map(|pair| {
                let (k, v) = pair.split_once('=').expect("label=value");
                let v = v.strip_prefix('"').and_then(|v| v.strip_suffix('"'));
                (k.to_string(), v.expect("quoted label value").to_string())
            })
            .collect();
        (name.to_string(), labels, value)
    }

    #[test]
    fn the_exposition_parses_with_cumulative_buckets() {
        use prometheus_client::collector::Collector;

        #[derive(Debug)]
        struct Meters(ApiMeters);
        impl Collector for Meters {
            fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
                encode(&mut e, &self.0.snapshot())
            }
        }

        let meters = ApiMeters::default();
        let east = meters.for_cluster("east");
        for millis in [2, 30, 30, 700, 12_000] {
            east.record(
                Verb::List,
                Duration::from_millis(millis),
                Outcome::Status(200),
            );
        }
        east.record(Verb::Get, Duration::from_millis(4), Outcome::Status(404));
        meters.for_cluster("west").record(
            Verb::Watch,
            Duration::from_millis(8),
            Outcome::NoResponse,
        );
        meters.for_cluster("idle");

        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(Meters(meters)));
        let openmetrics = crate::telemetry::metrics::render(&registry).expect("render");
        let classic = crate::telemetry::exposition::classic(&openmetrics);
        for text in [&openmetrics, &classic] {
            assert!(
                text.contains(&format!("# TYPE {DURATION_FAMILY} histogram")),
                "{text}"
            );
            let mut histograms: BTreeMap<(String, String), Vec<(f64, f64)>> = BTreeMap::new();
            let mut counts = BTreeMap::new();
            let mut requests = BTreeMap::new();
            for line in text.lines().filter(|l| !l.starts_with('#')) {
                let (name, labels, value) = parse_sample(line);
                let cluster = labels["cluster"].clone();
                let verb = labels["verb"].clone();
                assert_ne!(cluster, "idle", "no series for a cluster without requests");
                match name.strip_prefix(DURATION_FAMILY) {
                    Some("_bucket") => {
                        assert_eq!(labels.len(), 3, "{line}");
                        let le = match labels["le"].as_str() {
                            "+Inf" => f64::INFINITY,
                            le => le.parse().expect("le"),
                        };
                        histograms
                            .entry((cluster, verb))
                            .or_default()
                            .push((le, value));
                    }
                    Some("_count") => {
                        counts.insert((cluster, verb), value);
                    }
                    Some("_sum") => assert!(value > 0.0, "{line}"),
                    _ => {
                        assert_eq!(name, format!("{REQUESTS_FAMILY}_total"), "{line}");
                        assert_eq!(labels.len(), 3, "{line}");
                        requests.insert((cluster, verb, labels["result"].clone()), value);
                    }
                }
            }
            assert_eq!(histograms.len(), 3, "east list and get, west watch");
            for (key, buckets) in &histograms {
                assert_eq!(buckets.len(), 12, "11 bounds and +Inf");
                assert!(
                    buckets
                        .windows(2)
                        .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
                    "cumulative, in order: {buckets:?}"
                );
                let inf = buckets.last().map(|b| b.1);
                assert_eq!(inf, counts.get(key).copied(), "+Inf is the count");
            }
            let list = &histograms[&("east".to_string(), "list".to_string())];
            let at = |le: f64| list.iter().find(|b| b.0 == le).map(|b| b.1);
            assert_eq!(at(0.005), Some(1.0));
            assert_eq!(at(0.05), Some(3.0));
            assert_eq!(at(1.0), Some(4.0));
            assert_eq!(at(f64::INFINITY), Some(5.0));
            let n =
                |c: &str, v: &str, r: &str| requests.get(&(c.into(), v.into(), r.into())).copied();
            assert_eq!(n("east", "list", "ok"), Some(5.0));
            assert_eq!(n("east", "list", "error"), Some(0.0));
            assert_eq!(n("east", "get", "error"), Some(1.0));
            assert_eq!(n("west", "watch", "error"), Some(1.0));
            assert_eq!(requests.len(), 6, "ok and error for each verb used");
        }
    }

    /// The production client, metered, against the test kit's simulated API server: each
    /// request lands under its verb and result, and failures, with and without a response,
    /// are errors.
    #[tokio::test]
    async fn a_metered_client_counts_its_requests_by_verb_and_result() {
        use kube::api::{Api, ApiResource, DynamicObject, ListParams, WatchParams};
        use kube::config::Kubeconfig;
        use kube::core::GroupVersionKind;

        let sim = jobrelay_testkit::SimCluster::start("metered")
            .await
            .expect("simulator");
        let kubeconfig = Kubeconfig::from_yaml(&sim.kubeconfig_yaml()).expect("kubeconfig");
        let meters = ApiMeters::default();
        let stats = meters.for_cluster("metered");
        let client = crate::clusters::supervisor::build_client(&kubeconfig, Some(stats.clone()))
            .await
            .expect("client");
        let jobs =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("batch", "v1", "Job"), "jobs");
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "ml", &jobs);

        api.list(&ListParams::default()).await.expect("list");
        let missing = api.get("no-such-job").await;
        assert!(
            matches!(&missing, Err(kube::Error::Api(s)) if s.code == 404),
            "{missing:?}"
        );
        client.apiserver_version().await.expect("version");
        let watch = api
            .watch(&WatchParams::default().timeout(5), "0")
            .await
            .expect("watch");

        let counts = |stats: &ApiStats| -> BTreeMap<&'static str, (u64, u64)> {
            stats
                .snapshot()
                .iter()
                .map(|v| (v.verb.as_str(), (v.ok, v.error)))
                .collect()
        };
        // The watch was counted when its response head arrived, with its stream still open.
        assert_eq!(
            counts(&stats),
            BTreeMap::from([("get", (1, 1)), ("list", (1, 0)), ("watch", (1, 0))])
        );
        drop(watch);
        let get = stats.snapshot()[0].clone();
        assert_eq!(get.last_error, Some(LastError::Status(404)));
        assert_eq!(get.count, 2);

        // The API server answers 503 to everything.
        sim.set_outage(true);
        assert!(api.list(&ListParams::default()).await.is_err());
        sim.set_outage(false);
        // Nothing listens: no response at all.
        sim.outage_hard(true).expect("stop listening");
        assert!(api.list(&ListParams::default()).await.is_err());
        assert_eq!(
            counts(&stats),
            BTreeMap::from([("get", (1, 1)), ("list", (1, 2)), ("watch", (1, 0))])
        );
        let list = stats.snapshot()[1].clone();
        assert_eq!(list.verb, Verb::List);
        assert_eq!(list.last_error, Some(LastError::NoResponse));
        assert_eq!(list.count, 3);

        // An unmetered client counts nowhere.
        sim.outage_hard(false).expect("listen again");
        let plain = crate::clusters::supervisor::build_client(&kubeconfig, None)
            .await
            .expect("client");
        plain.apiserver_version().await.expect("version");
        assert_eq!(meters.snapshot()["metered"].len(), 3);
    }
}
