//! HTTP routing and handlers: the Kubernetes REST surface over the store.
//!
//! Paths are parsed by hand (one fallback-style handler) because the set of resources is data:
//! `/api/v1/...` for the core group, `/apis/{group}/{version}/...` otherwise, then either a
//! cluster-wide collection `{plural}`, a namespaced one `namespaces/{ns}/{plural}`, an object
//! `.../{name}`, or a subresource `.../{name}/status|log`. Every failure is a `Status` body;
//! nothing a client sends can make a handler panic.
//!
//! Order of checks per request: outage (503), injected failures (`fail_next`), bearer-token
//! authentication (401), then routing.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};

use super::SimState;
use super::discovery;
use super::list::{ListQuery, list};
use super::logs::{LogQuery, read as read_log};
use super::patch::{PatchBody, PatchKind};
use super::resources::ResourceKind;
use super::selectors::{FieldSelector, LabelSelector};
use super::stats::{DeletionRecord, RequestRecord};
use super::status::SimError;
use super::store::ObjKey;
use super::watch::{WatchRequest, start as start_watch};
use super::writes::{self, CreateOptions, DeleteOptions, Target};

/// Response body type: either a full buffer or a watch stream.
pub(crate) type Body = UnsyncBoxBody<Bytes, io::Error>;

type Query = HashMap<String, String>;

/// Entry point for every request.
pub(crate) async fn handle(
    state: Arc<SimState>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    state.stats.count_request();
    let method = req.method().to_string();
    let uri = req.uri().to_string();
    let response = match serve(&state, req).await {
        Ok(response) => response,
        Err(err) => error_response(&err),
    };
    state.stats.record(RequestRecord {
        method,
        uri,
        status: response.status().as_u16(),
    });
    Ok(response)
}

async fn serve(state: &Arc<SimState>, req: Request<Incoming>) -> Result<Response<Body>, SimError> {
    if state.faults.outage() {
        return Err(SimError::new(
            503,
            "the server is currently unable to handle the request",
        ));
    }
    if let Some(code) = state.faults.take_failure() {
        return Err(SimError::new(code, format!("injected failure ({code})")));
    }
    if let Some(delay) = state.faults.delay_of(req.uri().path()) {
        tokio::time::sleep(delay).await;
    }
    let reads = [Method::GET, Method::HEAD, Method::OPTIONS];
    if state.faults.writes_fail() && !reads.contains(req.method()) {
        return Err(SimError::new(503, "injected write failure (503)"));
    }
    authenticate(state, &req)?;

    let path = req.uri().path().to_string();
    let query = parse_query(req.uri().query());
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let is_get = req.method() == Method::GET;
    let kinds = || state.registry.all();
    match segments.as_slice() {
        ["version"] if is_get => Ok(json_response(
            200,
            &discovery::version(state.options.kubernetes_minor),
        )),
        ["healthz" | "livez" | "readyz"] if is_get => {
            Ok(text_response(200, Bytes::from_static(b"ok")))
        }
        ["api" | "apis"] if is_get && wants_aggregated(&req) => {
            let doc = discovery::aggregated(&kinds(), segments[0] == "api");
            let mut response = json_response(200, &doc);
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(AGGREGATED_DISCOVERY));
            Ok(response)
        }
        ["api"] if is_get => Ok(json_response(
            200,
            &discovery::core_versions(&state.server_address()),
        )),
        ["apis"] if is_get => Ok(json_response(200, &discovery::group_list(&kinds()))),
        ["apis", group] if is_get => discovery::group(&kinds(), group)
            .map(|doc| json_response(200, &doc))
            .ok_or_else(not_found_path),
        ["api", version] if is_get => discovery::resource_list(&kinds(), "", version)
            .map(|doc| json_response(200, &doc))
            .ok_or_else(not_found_path),
        ["apis", group, version] if is_get => discovery::resource_list(&kinds(), group, version)
            .map(|doc| json_response(200, &doc))
            .ok_or_else(not_found_path),
        ["api", version, rest @ ..] => {
            let target = resolve(state, "", version, rest)?;
            dispatch(state, req, target, query).await
        }
        ["apis", group, version, rest @ ..] => {
            let target = resolve(state, group, version, rest)?;
            dispatch(state, req, target, query).await
        }
        _ => Err(not_found_path()),
    }
}

/// Content type of aggregated discovery documents.
const AGGREGATED_DISCOVERY: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether the client asked for aggregated discovery in `Accept`.
fn wants_aggregated(req: &Request<Incoming>) -> bool {
    req.headers()
        .get_all(hyper::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("as=APIGroupDiscoveryList") && v.contains("v=v2"))
}

fn authenticate(state: &SimState, req: &Request<Incoming>) -> Result<(), SimError> {
    let presented = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    if presented.is_some_and(|token| state.accepts(token)) {
        Ok(())
    } else {
        Err(SimError::new(401, "Unauthorized"))
    }
}

fn not_found_path() -> SimError {
    SimError::new(404, "the server could not find the requested resource")
}

/// What a resource path addresses.
struct Addressed {
    kind: Arc<ResourceKind>,
    /// `None` for a cluster-wide collection of a namespaced kind (and for cluster-scoped kinds).
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

fn resolve(
    state: &SimState,
    group: &str,
    version: &str,
    rest: &[&str],
) -> Result<Addressed, SimError> {
    // `namespaces/{ns}/{plural}...` when {plural} is a namespaced resource of this group version.
    if let ["namespaces", ns, plural, tail @ ..] = rest
        && let Some(kind) = state
            .registry
            .find(group, version, plural)
            .filter(|k| k.namespaced)
    {
        return addressed(kind, Some(ns.to_string()), tail);
    }
    let [plural, tail @ ..] = rest else {
        return Err(not_found_path());
    };
    let kind = state
        .registry
        .find(group, version, plural)
        .ok_or_else(not_found_path)?;
    if kind.namespaced && !tail.is_empty() {
        // Objects of namespaced kinds are only reachable through their namespace.
        return Err(not_found_path());
    }
    addressed(kind, None, tail)
}

fn addressed(
    kind: Arc<ResourceKind>,
    namespace: Option<String>,
    tail: &[&str],
) -> Result<Addressed, SimError> {
    let (name, subresource) = match tail {
        [] => (None, None),
        [name] => (Some(name.to_string()), None),
        [name, sub] => (Some(name.to_string()), Some(sub.to_string())),
        _ => return Err(not_found_path()),
    };
    let served = match subresource.as_deref() {
        None => true,
        Some("status") => kind.status_subresource,
        Some("log") => kind.log_subresource,
        Some(_) => false,
    };
    if !served {
        return Err(not_found_path());
    }
    Ok(Addressed {
        kind,
        namespace,
        name,
        subresource,
    })
}

async fn dispatch(
    state: &Arc<SimState>,
    req: Request<Incoming>,
    target: Addressed,
    query: Query,
) -> Result<Response<Body>, SimError> {
    let method = req.method().clone();
    let ns = target.namespace.clone().unwrap_or_default();
    let kind = target.kind.clone();
    let dry_run = dry_run(&query)?;
    match (
        target.name.as_deref(),
        target.subresource.as_deref(),
        &method,
    ) {
        (None, None, &Method::GET) => {
            if flag(&query, "watch") {
                watch(state, &target, &query).await
            } else {
                list_objects(state, &target, &query).await
            }
        }
        (None, None, &Method::POST) => {
            if kind.namespaced && target.namespace.is_none() {
                return Err(SimError::method_not_allowed(format!(
                    "create of {} requires a namespace in the path",
                    kind.gvr.group_resource()
                )));
            }
            let body = read_json(state, req).await?;
            let opts = CreateOptions {
                dry_run,
                keep_status: false,
            };
            let created = state
                .store
                .write(|s| writes::create(s, &kind, &ns, body, opts))?;
            Ok(json_response(201, &created))
        }
        (Some(name), None | Some("status"), &Method::GET) => {
            let key = ObjKey::new(&kind.gvr, &ns, name);
            let found = state.store.read(|s| s.objects.get(&key).cloned());
            found
                .map(|o| json_response(200, &o))
                .ok_or_else(|| SimError::not_found(&kind.gvr, name))
        }
        (Some(name), sub @ (None | Some("status")), &Method::PUT) => {
            let target_half = subresource_target(&kind, sub)?;
            let body = read_json(state, req).await?;
            let updated = state
                .store
                .write(|s| writes::update(s, &kind, &ns, name, body, target_half, dry_run))?;
            Ok(json_response(200, &updated))
        }
        (Some(name), sub @ (None | Some("status")), &Method::PATCH) => {
            let target_half = subresource_target(&kind, sub)?;
            let patch_kind = req
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .and_then(PatchKind::from_content_type)
                .ok_or_else(|| {
                    SimError::new(
                        415,
                        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                    )
                })?;
            if patch_kind == PatchKind::Apply
                && query.get("fieldManager").is_none_or(|m| m.is_empty())
            {
                return Err(SimError::new(
                    422,
                    "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
                ));
            }
            let bytes = read_body(state, req).await?;
            let patch = PatchBody::decode(patch_kind, &bytes)?;
            let create_missing = patch_kind == PatchKind::Apply;
            let (object, created) = state.store.write(|s| {
                writes::patch(
                    s,
                    &kind,
                    &ns,
                    name,
                    &patch,
                    target_half,
                    create_missing,
                    dry_run,
                )
            })?;
            Ok(json_response(if created { 201 } else { 200 }, &object))
        }
        (Some(name), None, &Method::DELETE) => {
            let bytes = read_body(state, req).await?;
            let mut opts = delete_options(&bytes, &query)?;
            opts.dry_run |= dry_run;
            let deleted = state
                .store
                .write(|s| writes::delete(s, &kind.gvr, &ns, name, &opts));
            state.stats.record_deletion(DeletionRecord {
                at: std::time::Instant::now(),
                resource: kind.gvr.plural.to_string(),
                namespace: ns.to_string(),
                name: name.to_string(),
                precondition_uid: opts.precondition_uid.clone(),
                propagation: opts.propagation.clone(),
                status: deleted.as_ref().map_or_else(|e| e.code, |_| 200),
            });
            Ok(json_response(200, &*deleted?))
        }
        (Some(name), Some("log"), &Method::GET) if kind.log_subresource => {
            let log_query = log_query(&query)?;
            let bytes = state.store.read(|s| read_log(s, &ns, name, &log_query))?;
            Ok(text_response(200, bytes))
        }
        (_, None, _) | (Some(_), Some("status" | "log"), _) => Err(SimError::method_not_allowed(
            format!("the server does not allow this method on the requested resource ({method})"),
        )),
        _ => Err(not_found_path()),
    }
}

fn subresource_target(kind: &ResourceKind, sub: Option<&str>) -> Result<Target, SimError> {
    match sub {
        None => Ok(Target::Main),
        Some(_) if kind.status_subresource => Ok(Target::Status),
        Some(_) => Err(not_found_path()),
    }
}

async fn list_objects(
    state: &SimState,
    target: &Addressed,
    query: &Query,
) -> Result<Response<Body>, SimError> {
    let kind = &target.kind;
    state.stats.count_list(&kind.gvr);
    let limit = match query.get("limit").filter(|l| !l.is_empty()) {
        Some(l) => Some(
            l.parse::<usize>()
                .map_err(|_| SimError::bad_request(format!("invalid limit: {l}")))?,
        ),
        None => None,
    };
    let exact_rv = match (
        query.get("resourceVersion"),
        query.get("resourceVersionMatch"),
    ) {
        (Some(rv), Some(m)) if m == "Exact" => {
            let rv = parse_rv(rv)?;
            wait_for_rv(state, rv).await?;
            Some(rv)
        }
        (Some(rv), _) if !rv.is_empty() => {
            wait_for_rv(state, parse_rv(rv)?).await?;
            None
        }
        _ => None,
    };
    let list_query = ListQuery {
        namespace: target.namespace.clone(),
        labels: label_selector(query)?,
        fields: field_selector(query, kind)?,
        limit,
        continue_token: query.get("continue").filter(|c| !c.is_empty()).cloned(),
        exact_rv,
    };
    let page = state.store.read(|s| list(s, &kind.gvr, &list_query))?;
    let mut metadata = json!({ "resourceVersion": page.resource_version.to_string() });
    if let Some(token) = &page.continue_token {
        metadata["continue"] = json!(token);
    }
    if let Some(remaining) = page.remaining {
        metadata["remainingItemCount"] = json!(remaining);
    }
    let items: Vec<&Value> = page.items.iter().map(|o| o.as_ref()).collect();
    let body = json!({
        "kind": kind.list_kind(),
        "apiVersion": kind.api_version(),
        "metadata": metadata,
        "items": items,
    });
    Ok(json_response(200, &body))
}

async fn watch(
    state: &Arc<SimState>,
    target: &Addressed,
    query: &Query,
) -> Result<Response<Body>, SimError> {
    let kind = target.kind.clone();
    let resource_version = match query.get("resourceVersion").filter(|rv| !rv.is_empty()) {
        Some(rv) => Some(parse_rv(rv)?),
        None => None,
    };
    if let Some(rv) = resource_version {
        wait_for_rv(state, rv).await?;
    }
    let timeout = match query.get("timeoutSeconds").filter(|t| !t.is_empty()) {
        // Capped (at a year) so that no value can overflow the deadline arithmetic.
        Some(t) => Duration::from_secs(
            t.parse::<u64>()
                .map_err(|_| SimError::bad_request(format!("invalid timeoutSeconds: {t}")))?
                .min(365 * 24 * 3600),
        ),
        // The apiserver picks a random timeout of 30-60 minutes when none is given.
        None => Duration::from_secs(1800),
    };
    let request = WatchRequest {
        labels: label_selector(query)?,
        fields: field_selector(query, &kind)?,
        namespace: target.namespace.clone(),
        resource_version,
        bookmarks: flag(query, "allowWatchBookmarks"),
        send_initial_events: flag(query, "sendInitialEvents"),
        timeout,
        kind,
    };
    let rx = start_watch(state.clone(), request);
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        let chunk = rx.recv().await?;
        Some((chunk.map(Frame::data), rx))
    });
    let mut response = Response::new(BodyExt::boxed_unsync(StreamBody::new(stream)));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response.headers_mut().insert(
        "cache-control",
        HeaderValue::from_static("no-cache, private"),
    );
    Ok(response)
}

/// A resourceVersion newer than the store's is waited for briefly (another apiserver may be
/// ahead); if it does not arrive, the apiserver answers 504 "Too large resource version".
async fn wait_for_rv(state: &SimState, rv: u64) -> Result<(), SimError> {
    let mut notify = state.store.subscribe();
    let deadline = tokio::time::Instant::now() + TOO_LARGE_RV_WAIT;
    loop {
        let current = state.store.current_rv();
        if rv <= current {
            return Ok(());
        }
        if !matches!(
            tokio::time::timeout_at(deadline, notify.changed()).await,
            Ok(Ok(()))
        ) {
            let mut err = SimError::with_reason(
                504,
                "Timeout",
                format!("Too large resource version: {rv}, current: {current}"),
            );
            err.details = Some(json!({
                "causes": [{ "reason": "ResourceVersionTooLarge", "message": "Too large resource version" }],
                "retryAfterSeconds": 1,
            }));
            return Err(err);
        }
    }
}

/// How long a request with a future resourceVersion waits, as the apiserver's watch cache.
const TOO_LARGE_RV_WAIT: Duration = Duration::from_secs(3);

fn parse_rv(rv: &str) -> Result<u64, SimError> {
    rv.parse::<u64>()
        .map_err(|_| SimError::bad_request(format!("invalid resource version: {rv}")))
}

fn label_selector(query: &Query) -> Result<LabelSelector, SimError> {
    LabelSelector::parse(
        query
            .get("labelSelector")
            .map(String::as_str)
            .unwrap_or_default(),
    )
}

fn field_selector(query: &Query, kind: &ResourceKind) -> Result<FieldSelector, SimError> {
    FieldSelector::parse(
        query
            .get("fieldSelector")
            .map(String::as_str)
            .unwrap_or_default(),
        &kind.gvr.plural,
    )
}

fn log_query(query: &Query) -> Result<LogQuery, SimError> {
    let number = |name: &str| -> Result<Option<usize>, SimError> {
        match query.get(name).filter(|v| !v.is_empty()) {
            Some(v) => v
                .parse::<usize>()
                .map(Some)
                .map_err(|_| SimError::bad_request(format!("invalid {name}: {v}"))),
            None => Ok(None),
        }
    };
    Ok(LogQuery {
        container: query.get("container").filter(|c| !c.is_empty()).cloned(),
        previous: flag(query, "previous"),
        limit_bytes: number("limitBytes")?,
        tail_lines: number("tailLines")?,
    })
}

fn dry_run(query: &Query) -> Result<bool, SimError> {
    match query.get("dryRun").map(String::as_str) {
        None | Some("") => Ok(false),
        Some("All") => Ok(true),
        Some(other) => Err(SimError::bad_request(format!(
            "unsupported dry run value: {other}"
        ))),
    }
}

/// Reads `DeleteOptions` from the body (optional) and the query.
fn delete_options(body: &[u8], query: &Query) -> Result<DeleteOptions, SimError> {
    let parsed: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        serde_json::from_slice(body)
            .map_err(|e| SimError::bad_request(format!("invalid DeleteOptions: {e}")))?
    };
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    let policy =
        text(parsed.get("propagationPolicy")).or_else(|| query.get("propagationPolicy").cloned());
    let orphan_flag = parsed.get("orphanDependents").and_then(Value::as_bool) == Some(true);
    let dry_run = parsed
        .get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|v| v == "All"));
    Ok(DeleteOptions {
        propagation: policy.clone(),
        dry_run,
        precondition_uid: text(parsed.pointer("/preconditions/uid")),
        precondition_rv: text(parsed.pointer("/preconditions/resourceVersion")),
        orphan: orphan_flag || policy.as_deref() == Some("Orphan"),
    })
}

fn flag(query: &Query, name: &str) -> bool {
    matches!(query.get(name).map(String::as_str), Some("true" | "1"))
}

fn parse_query(raw: Option<&str>) -> Query {
    form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}

async fn read_body(state: &SimState, req: Request<Incoming>) -> Result<Bytes, SimError> {
    let limit = state.options.max_body_bytes;
    match Limited::new(req.into_body(), limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(SimError::new(
            413,
            format!("the request body is larger than {limit} bytes"),
        )),
        Err(e) => Err(SimError::bad_request(format!(
            "failed to read the request body: {e}"
        ))),
    }
}

/// Reads a JSON (or YAML) object body.
async fn read_json(state: &SimState, req: Request<Incoming>) -> Result<Value, SimError> {
    let yaml = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.contains("yaml"));
    let bytes = read_body(state, req).await?;
    let value: Value = if yaml {
        serde_yaml_ng::from_slice(&bytes)
            .map_err(|e| SimError::bad_request(format!("invalid YAML body: {e}")))?
    } else {
        serde_json::from_slice(&bytes)
            .map_err(|e| SimError::bad_request(format!("invalid JSON body: {e}")))?
    };
    if !value.is_object() {
        return Err(SimError::bad_request("the request body must be an object"));
    }
    Ok(value)
}

fn full(bytes: Bytes) -> Body {
    BodyExt::boxed_unsync(Full::new(bytes).map_err(|never: Infallible| match never {}))
}

fn json_response(code: u16, value: &Value) -> Response<Body> {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    let mut response = Response::new(full(Bytes::from(bytes)));
    *response.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn text_response(code: u16, bytes: Bytes) -> Response<Body> {
    let mut response = Response::new(full(bytes));
    *response.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response
}

/// A `Status` response; 429 and 503 carry `Retry-After: 1` as the apiserver's do.
pub(crate) fn error_response(err: &SimError) -> Response<Body> {
    let mut response = json_response(err.code, &err.to_status());
    if StatusCode::from_u16(err.code).is_err() {
        *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    }
    if matches!(err.code, 429 | 503) {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}
