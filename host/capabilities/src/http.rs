//! Outbound HTTP through the standard `wasi:http/outgoing-handler` interface.
//!
//! Plugins use any ordinary WASI HTTP client; the host decides in `send_request` whether a
//! request may leave. Denied by default: a plugin without `grants.http` gets
//! `HTTP-request-denied` for every request.
//!
//! A request leaves only if all of this holds, checked in this order:
//! 1. The plugin has `grants.http`, and its scheme, host and port match an `allow` pattern
//!    (`scheme://host[:port]`, see the `allow` module). Names are matched as names and addresses as
//!    addresses: `http://127.0.0.1:*` does not allow `http://localhost:8080`. Otherwise:
//!    `HTTP-request-denied`.
//! 2. Unless the grant says `allow_private: true`, the host is resolved and every address it
//!    resolves to must be public (see the `address` module): loopback, private, link-local, CGNAT and
//!    unspecified addresses, also in IPv4-mapped form, fail the request with
//!    `destination-IP-prohibited`. Every address, not just the first, so a name cannot hide
//!    one internal address among public ones.
//! 3. The request runs with the grant's time limits, whatever the plugin asked for: connect
//!    (`connect_timeout_ms`, default 5 s; also bounds the DNS lookup), first byte and between
//!    bytes (`timeout_ms`, default 30 s), smaller values the plugin sets are kept. On top, one
//!    deadline of `timeout_ms` covers the whole exchange, from the hook to the last byte of the
//!    body: `HTTP-response-timeout` past it.
//! 4. The response body is cut at `max_response_bytes` (default 1 MiB): a declared
//!    `Content-Length` above it fails the response at once, a body that grows past it fails
//!    with `HTTP-response-body-size` when it does.
//!
//! **DNS between check and connection.** For `http`, the request is sent to the address that
//! was checked (the URI's authority is rewritten to `ip:port`; the `Host` header, which wasmtime
//! sets from the plugin's authority before the hook runs, is kept), so the name cannot resolve
//! differently when the connection is made. The first resolved address is used; the others are
//! not tried. For `https` that is not possible with wasmtime's sender, which takes the TLS
//! server name from the same authority: the request goes out by name and the name is resolved
//! a second time when connecting. A DNS server that answers the check with a public address and
//! the connection with an internal one (DNS rebinding) can therefore still make the host open
//! a TCP connection to an internal address, on an allowed port; the TLS handshake then fails
//! unless that service holds a publicly trusted certificate for the allowed name, so no request
//! reaches it otherwise. Closing the gap needs a connector of our own (connect to the checked
//! address, verify TLS against the name).
//!
//! **Body errors in WASI 0.2.** wasmtime-wasi-http 48 hands an error of the response body to a
//! WASI 0.2 guest as a stream error whose `http-error-code` is none: the guest sees
//! `HTTP-response-body-size` only in the error's debug text ("HTTP response body size exceeds
//! limit: N bytes"). That is why a declared length over the cap is refused before the body:
//! the guest then gets the proper error code from the response future.
//!
//! Every refusal is logged once, at debug, with the plugin's name and the destination as
//! `scheme://host:port`; never the path or query (webhook tokens live there) nor headers.

mod address;
mod allow;
mod body;
mod taped;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::{CONTENT_LENGTH, HOST};
use http::{HeaderValue, Method, Request, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use wasmtime::component::{Linker, ResourceTable};
use wasmtime_wasi_http::{
    Error, RequestOptions, WasiBody, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView,
};

use self::allow::{AllowList, Host, PatternError, Scheme, Target};
use self::body::CappedBody;
use super::refusals::{Limit, Refusals};
use super::tape::CallTape;
use super::{CallScope, Capability, GrantProblem, LoadScope, StoreSetup};
use serde::{Deserialize, Serialize};

use super::Grants;
use super::MAX_TIMEOUT;

/// Connection timeout when the grant sets none.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 5_000;
/// Limit of one request when the grant sets none.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// Largest response body when the grant sets none.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 1 << 20;
/// Requests one call may have open at once when the grant sets no number.
pub const DEFAULT_MAX_CONCURRENT_REQUESTS: u32 = 16;
/// The most a grant may allow.
pub const MAX_CONCURRENT_REQUESTS: u32 = 1024;

/// What the send hook hands back to wasmtime: the response, and the future that drives the
/// connection while the body is read.
type Sent = (
    Response<WasiBody>,
    Box<dyn Future<Output = Result<(), Error>> + Send>,
);

/// Outbound HTTP a plugin may make.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpGrant {
    /// Destinations, as `scheme://host[:port]` patterns: `https://open.feishu.cn`,
    /// `https://*.example.com`, `http://10.0.0.5:8080`, `http://127.0.0.1:*`. A missing port
    /// means the scheme's default port.
    pub allow: Vec<String>,
    /// Whether destinations that resolve to private, loopback or link-local addresses are
    /// allowed. Refused by default, so an allowed name cannot be pointed at the cluster's
    /// internal network.
    #[serde(default)]
    pub allow_private: bool,
    /// Connection timeout in milliseconds (default 5000).
    #[serde(default)]
    pub connect_timeout_ms: Option<u64>,
    /// Limit of one request from sending to the last byte of the response, in milliseconds
    /// (default 30000; the call's own time limit still applies).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Largest response body read, in bytes (default 1 MiB).
    #[serde(default)]
    pub max_response_bytes: Option<u64>,
    /// Requests one call may have open at once, each with its connection (default 16, at
    /// most 1024); one more is refused with `connection-limit-reached`.
    #[serde(default)]
    pub max_concurrent_requests: Option<u32>,
}

/// The HTTP capability.
pub struct Http;

impl Capability for Http {
    fn name(&self) -> &'static str {
        "http"
    }

    /// Checks every pattern and limit, and rewrites the patterns in canonical form
    /// (`https://*.example.com:443`), which is what `grants()` then shows.
    fn prepare(&self, grants: &mut Grants, load: &LoadScope<'_>) -> Result<(), GrantProblem> {
        let _ = load;
        if let Some(grant) = &mut grants.http {
            let rules = Rules::from_grant(grant)?;
            grant.allow = rules.allow.canonical();
        }
        Ok(())
    }

    /// Parses the (already checked) grant again: a handful of short patterns, about a
    /// microsecond, and only for plugins that have the grant.
    fn configure(&self, call: &CallScope<'_>, setup: &mut StoreSetup) -> Result<(), GrantProblem> {
        let rules = call
            .grants
            .http
            .as_ref()
            .map(Rules::from_grant)
            .transpose()?;
        let open = rules
            .as_ref()
            .map(|r| Arc::new(tokio::sync::Semaphore::new(r.max_concurrent_requests)));
        setup.state.http.policy = Policy {
            plugin: Arc::from(call.plugin),
            rules,
            open,
            refusals: call.services.refusals.clone(),
            tape: call.tape(),
        };
        Ok(())
    }
}

/// The HTTP state of one call.
#[derive(Default)]
pub struct HttpAccess {
    ctx: WasiHttpCtx,
    policy: Policy,
}

/// A grant, parsed.
#[derive(Debug)]
struct Rules {
    allow: AllowList,
    limits: Limits,
    /// Requests one call may have open at once.
    max_concurrent_requests: usize,
}

/// The per-request limits of a grant; copied into each request's future.
#[derive(Debug, Clone, Copy)]
struct Limits {
    allow_private: bool,
    connect_timeout: Duration,
    timeout: Duration,
    max_response_bytes: u64,
}

/// Why an HTTP grant cannot be used as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum RulesError {
    #[error(transparent)]
    Allow(#[from] PatternError),
    /// A time limit that is zero or above [`MAX_TIMEOUT`].
    #[error("{field} must be from 1 to {max} ms, got {value}", max = MAX_TIMEOUT.as_millis())]
    Timeout { field: &'static str, value: u64 },
    /// `max_concurrent_requests` zero or above [`MAX_CONCURRENT_REQUESTS`].
    #[error(
        "max_concurrent_requests must be from 1 to {max}, got {0}",
        max = MAX_CONCURRENT_REQUESTS
    )]
    Concurrency(u32),
}

/// A grant's problem is the grant's error, as the load reports it.
impl From<RulesError> for GrantProblem {
    fn from(error: RulesError) -> GrantProblem {
        GrantProblem::Invalid(error.to_string())
    }
}

impl Rules {
    fn from_grant(grant: &HttpGrant) -> Result<Rules, RulesError> {
        let allow = AllowList::parse(&grant.allow)?;
        let millis = |field: &'static str, value: Option<u64>, default: u64| {
            let value = value.unwrap_or(default);
            let limit = Duration::from_millis(value);
            if value == 0 || limit > MAX_TIMEOUT {
                return Err(RulesError::Timeout { field, value });
            }
            Ok(limit)
        };
        let limits = Limits {
            allow_private: grant.allow_private,
            connect_timeout: millis(
                "connect_timeout_ms",
                grant.connect_timeout_ms,
                DEFAULT_CONNECT_TIMEOUT_MS,
            )?,
            timeout: millis("timeout_ms", grant.timeout_ms, DEFAULT_TIMEOUT_MS)?,
            max_response_bytes: grant
                .max_response_bytes
                .unwrap_or(DEFAULT_MAX_RESPONSE_BYTES),
        };
        let max_concurrent_requests = grant
            .max_concurrent_requests
            .unwrap_or(DEFAULT_MAX_CONCURRENT_REQUESTS);
        if max_concurrent_requests == 0 || max_concurrent_requests > MAX_CONCURRENT_REQUESTS {
            return Err(RulesError::Concurrency(max_concurrent_requests));
        }
        Ok(Rules {
            allow,
            limits,
            max_concurrent_requests: max_concurrent_requests as usize,
        })
    }
}

impl Limits {
    /// The options a request runs with: the grant's limits, or the plugin's where smaller.
    fn options(&self, asked: Option<RequestOptions>) -> RequestOptions {
        let asked = asked.unwrap_or_default();
        let at_most = |asked: Option<Duration>, limit: Duration| {
            Some(asked.map_or(limit, |asked| asked.min(limit)))
        };
        RequestOptions {
            connect_timeout: at_most(asked.connect_timeout, self.connect_timeout),
            first_byte_timeout: at_most(asked.first_byte_timeout, self.timeout),
            between_bytes_timeout: at_most(asked.between_bytes_timeout, self.timeout),
        }
    }
}

/// Decides which requests leave.
#[derive(Default)]
struct Policy {
    /// The plugin's name, for the log lines of refusals.
    plugin: Arc<str>,
    /// `None`: no `grants.http`, every request is refused.
    rules: Option<Rules>,
    /// One permit per request the call may have open; a request holds its permit until its
    /// connection is done (the response read or dropped), and the call's end drops them all.
    open: Option<Arc<tokio::sync::Semaphore>>,
    /// Where a refusal by the open-request limit is counted.
    refusals: Arc<Refusals>,
    /// The run's tape, if requests are recorded or replayed.
    tape: Option<CallTape>,
}

impl Policy {
    /// The checks that need no network: a grant, and a pattern matching the destination.
    fn admit(&self, uri: &Uri) -> Result<(Target, Limits), Error> {
        let target = Target::from_uri(uri).map_err(|why| {
            refused(&self.plugin, &"-", why);
            Error::HttpRequestUriInvalid
        })?;
        let Some(rules) = &self.rules else {
            refused(
                &self.plugin,
                &target,
                format_args!(
                    "the manifest has no grants.http; to allow it: \
                     grants: {{http: {{allow: [\"{target}\"]}}}}"
                ),
            );
            return Err(Error::HttpRequestDenied);
        };
        if !rules.allow.allows(&target) {
            refused(
                &self.plugin,
                &target,
                format_args!("not in grants.http.allow; to allow it, add \"{target}\" there"),
            );
            return Err(Error::HttpRequestDenied);
        }
        Ok((target, rules.limits))
    }
}

impl WasiHttpHooks for Policy {
    fn send_request(
        &mut self,
        request: Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Box<dyn Future<Output = Result<Sent, Error>> + Send> {
        // `fut` reports how the guest consumed the response, for WASI 0.3; the 0.2 handler
        // passes one that is always `Ok`, and wasmtime's default hook ignores it too.
        drop(fut);
        let admitted = self.admit(request.uri()).and_then(|(target, limits)| {
            let permit = self
                .open
                .as_ref()
                .and_then(|open| open.clone().try_acquire_owned().ok())
                .ok_or_else(|| {
                    self.refusals.count(&self.plugin, Limit::HttpOpenRequests);
                    refused(
                        &self.plugin,
                        &target,
                        "too many requests open at once (grants.http.max_concurrent_requests)",
                    );
                    Error::ConnectionLimitReached
                })?;
            Ok((target, limits, permit))
        });
        let (target, limits, permit) = match admitted {
            Ok(admitted) => admitted,
            Err(error) => return Box::new(std::future::ready(Err(error))),
        };
        let plugin = self.plugin.clone();
        match self.tape.clone() {
            None => Box::new(send(plugin, target, limits, request, options, permit)),
            Some(tape) if tape.replaying() => Box::new(taped::replay(tape, request)),
            Some(tape) => Box::new(async move {
                let (args, request) = taped::request_args(request).await?;
                let sent = send(plugin, target, limits, request, options, permit).await;
                let answer = match sent {
                    Ok(sent) => taped::read_response(sent).await,
                    Err(error) => Err(error),
                }
                .map_err(taped::Failed);
                tape.record(taped::CALL, args, &answer);
                answer.map_err(|taped::Failed(e)| e)?.into_sent()
            }),
        }
    }
}

/// Sends an admitted request within its limits.
async fn send(
    plugin: Arc<str>,
    target: Target,
    limits: Limits,
    mut request: Request<WasiBody>,
    options: Option<RequestOptions>,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> Result<Sent, Error> {
    let deadline = tokio::time::Instant::now() + limits.timeout;
    let exchange = async {
        if !limits.allow_private {
            let address = checked_address(&plugin, &target, limits.connect_timeout).await?;
            if target.scheme == Scheme::Http {
                pin_to(&mut request, address)?;
            }
        }
        let head = request.method() == Method::HEAD;
        let (response, io) =
            wasmtime_wasi_http::default_send_request(request, Some(limits.options(options)))
                .await?;
        if !head
            && has_body(response.status())
            && declared_length(&response).is_some_and(|length| length > limits.max_response_bytes)
        {
            refused(
                &plugin,
                &target,
                format_args!(
                    "the response declares a body longer than max_response_bytes ({})",
                    limits.max_response_bytes
                ),
            );
            return Err(Error::HttpResponseBodySize(Some(limits.max_response_bytes)));
        }
        let response = response.map(|body| {
            CappedBody::new(
                body.boxed_unsync(),
                limits.max_response_bytes,
                deadline,
                plugin.clone(),
                target.clone(),
            )
            .boxed_unsync()
        });
        // The connection counts against the call's open requests until it is done.
        let io = async move {
            let done = io.await;
            drop(permit);
            done
        };
        Ok((response, Box::new(io) as Box<dyn Future<Output = _> + Send>))
    };
    tokio::time::timeout_at(deadline, exchange)
        .await
        .unwrap_or(Err(Error::HttpResponseTimeout))
}

/// Resolves the target (unless it is an address) and refuses it if any address is not public;
/// returns the address to connect to.
async fn checked_address(
    plugin: &str,
    target: &Target,
    lookup_limit: Duration,
) -> Result<SocketAddr, Error> {
    let addresses: Vec<SocketAddr> = match &target.host {
        Host::Ip(ip) => vec![SocketAddr::new(*ip, target.port)],
        Host::Name(name) => {
            let lookup = tokio::net::lookup_host((name.as_str(), target.port));
            match tokio::time::timeout(lookup_limit, lookup).await {
                Err(_elapsed) => return Err(Error::DnsTimeout),
                // Mapped by wasmtime like its own failed lookups (a DNS error).
                Ok(Err(error)) => return Err(Error::Connect(error)),
                Ok(Ok(found)) => found.collect(),
            }
        }
    };
    for address in &addresses {
        if let Some(why) = address::non_public(address.ip()) {
            refused(
                plugin,
                target,
                format_args!(
                    "it resolves to {} ({why}) and the grant does not set allow_private; to \
                     allow it (a destination you trust): grants.http.allow_private: true",
                    address.ip()
                ),
            );
            return Err(Error::DestinationIpProhibited);
        }
    }
    addresses.first().copied().ok_or(Error::DestinationNotFound)
}

/// Points a plain-HTTP request at the checked address, keeping its `Host` header.
fn pin_to(request: &mut Request<WasiBody>, address: SocketAddr) -> Result<(), Error> {
    let original = request
        .uri()
        .authority()
        .cloned()
        .ok_or(Error::HttpRequestUriInvalid)?;
    if !request.headers().contains_key(HOST) {
        let host =
            HeaderValue::from_str(original.as_str()).map_err(|_| Error::HttpRequestUriInvalid)?;
        request.headers_mut().insert(HOST, host);
    }
    let mut parts = request.uri().clone().into_parts();
    parts.authority = Some(
        address
            .to_string()
            .parse()
            .map_err(|_| Error::HttpRequestUriInvalid)?,
    );
    *request.uri_mut() = Uri::from_parts(parts).map_err(|_| Error::HttpRequestUriInvalid)?;
    Ok(())
}

/// Whether a response with this status can carry a body (RFC 9110: not 1xx, 204 or 304).
fn has_body(status: StatusCode) -> bool {
    !(status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED)
}

/// The `Content-Length` of a response, if it has one that parses.
fn declared_length<B>(response: &Response<B>) -> Option<u64> {
    response
        .headers()
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Logs one refusal. `target` is `scheme://host:port` (or `-`): never a path, query or header.
/// The plugin sees only an error code (`destination-IP-prohibited` says nothing of a grant), so
/// the reason — which names the grant that would allow the request — is a warning, once a
/// minute per plugin, destination and reason; the repeats are debug lines, so a plugin that
/// keeps trying cannot flood the log (see [`said_lately`]).
fn refused(plugin: &str, target: &dyn fmt::Display, reason: impl fmt::Display) {
    let reason = reason.to_string();
    if said_lately(plugin, format!("{plugin} {target} {reason}")) {
        tracing::debug!(plugin, destination = %target, reason = %reason,
            "outbound HTTP request refused");
    } else {
        tracing::warn!(plugin, destination = %target, reason = %reason,
            "outbound HTTP request refused");
    }
}

/// Whether a refusal of `plugin` (`key`: plugin, destination and reason) was warned about in
/// the last minute, or the plugin has had its [`WARNINGS_PER_MINUTE`] already; notes it if
/// not. Holds at most [`SAID_AT_MOST`] keys (all forgotten when full), so destinations a plugin
/// makes up cannot grow it, and the per-plugin quota bounds the warnings of a plugin that
/// makes up a new destination for every request.
fn said_lately(plugin: &str, key: String) -> bool {
    const SAID_AT_MOST: usize = 256;
    const AGAIN_AFTER: Duration = Duration::from_secs(60);
    type Quotas = governor::DefaultKeyedRateLimiter<String>;
    static SAID: std::sync::OnceLock<
        parking_lot::Mutex<std::collections::HashMap<String, Instant>>,
    > = std::sync::OnceLock::new();
    static QUOTAS: std::sync::OnceLock<Quotas> = std::sync::OnceLock::new();
    let mut said = SAID.get_or_init(Default::default).lock();
    let now = Instant::now();
    if said
        .get(&key)
        .is_some_and(|at| now.duration_since(*at) < AGAIN_AFTER)
    {
        return true;
    }
    let quotas = QUOTAS.get_or_init(|| {
        governor::RateLimiter::keyed(governor::Quota::per_minute(WARNINGS_PER_MINUTE))
    });
    if quotas.check_key(&plugin.to_string()).is_err() {
        return true;
    }
    if said.len() >= SAID_AT_MOST {
        said.clear();
        quotas.retain_recent();
    }
    said.insert(key, now);
    false
}

/// Most refusal warnings of one plugin per minute.
const WARNINGS_PER_MINUTE: std::num::NonZeroU32 = match std::num::NonZeroU32::new(10) {
    Some(n) => n,
    None => unreachable!(),
};

/// Links `wasi:http`'s outgoing handler (every request then passes the call's `Policy`).
pub fn add_to_linker<T: WasiHttpView>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)
}

impl HttpAccess {
    /// What `wasi:http` works with in one store: this call's context and policy, and the
    /// store's resource table (`wasi:http` keeps its requests and bodies there, beside the
    /// WASI streams they are read through).
    pub fn view<'a>(&'a mut self, table: &'a mut ResourceTable) -> WasiHttpCtxView<'a> {
        WasiHttpCtxView {
            ctx: &mut self.ctx,
            table,
            hooks: &mut self.policy,
        }
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::Empty;

    use super::*;

    fn grant(allow: &[&str]) -> HttpGrant {
        HttpGrant {
            allow: allow.iter().map(|entry| entry.to_string()).collect(),
            ..HttpGrant::default()
        }
    }

    fn request(uri: &str, host: &str) -> Request<WasiBody> {
        Request::get(uri)
            .header(HOST, host)
            .body(Empty::new().map_err(|never| match never {}).boxed_unsync())
            .expect("test request builds")
    }

    fn policy(grant: Option<HttpGrant>) -> Policy {
        let rules = grant.map(|g| Rules::from_grant(&g).expect("test grant parses"));
        let open = rules
            .as_ref()
            .map(|r| Arc::new(tokio::sync::Semaphore::new(r.max_concurrent_requests)));
        Policy {
            plugin: Arc::from("probe"),
            rules,
            open,
            refusals: Arc::default(),
            tape: None,
        }
    }

    #[test]
    fn limits_default_and_bound_what_the_plugin_asks_for() {
        let rules = Rules::from_grant(&grant(&[])).expect("defaults");
        assert!(!rules.limits.allow_private);
        assert_eq!(rules.limits.max_response_bytes, 1 << 20);
        let options = rules.limits.options(None);
        assert_eq!(options.connect_timeout, Some(Duration::from_secs(5)));
        assert_eq!(options.first_byte_timeout, Some(Duration::from_secs(30)));
        assert_eq!(options.between_bytes_timeout, Some(Duration::from_secs(30)));

        let mut tight = grant(&[]);
        tight.connect_timeout_ms = Some(100);
        tight.timeout_ms = Some(300);
        let limits = Rules::from_grant(&tight).expect("parses").limits;
        let asked = RequestOptions {
            connect_timeout: Some(Duration::from_secs(600)),
            first_byte_timeout: Some(Duration::from_millis(50)),
            between_bytes_timeout: None,
        };
        let options = limits.options(Some(asked));
        assert_eq!(options.connect_timeout, Some(Duration::from_millis(100)));
        assert_eq!(options.first_byte_timeout, Some(Duration::from_millis(50)));
        assert_eq!(
            options.between_bytes_timeout,
            Some(Duration::from_millis(300))
        );
    }

    #[test]
    fn bad_limits_and_patterns_fail_the_grant() {
        let mut zero = grant(&[]);
        zero.timeout_ms = Some(0);
        let error = Rules::from_grant(&zero)
            .expect_err("zero timeout")
            .to_string();
        assert!(error.contains("timeout_ms"), "{error}");
        let mut huge = grant(&[]);
        huge.connect_timeout_ms = Some(u64::MAX);
        let error = Rules::from_grant(&huge)
            .expect_err("huge timeout")
            .to_string();
        assert!(error.contains("connect_timeout_ms"), "{error}");
        let error = Rules::from_grant(&grant(&["https://ok.example.com", "https://x/y"]))
            .expect_err("a path")
            .to_string();
        assert!(error.contains("`https://x/y`"), "{error}");
    }

    #[test]
    fn prepare_stores_the_canonical_patterns() {
        let mut grants = Grants {
            http: Some(grant(&["HTTPS://Open.Feishu.cn", "http://127.0.0.1:*"])),
            ..Grants::default()
        };
        let services = super::super::Services::default();
        let load = LoadScope {
            plugin: "probe",
            services: &services,
        };
        Http.prepare(&mut grants, &load).expect("valid grant");
        let allow = grants.http.map(|g| g.allow).unwrap_or_default();
        assert_eq!(allow, ["https://open.feishu.cn:443", "http://127.0.0.1:*"]);
    }

    #[test]
    fn admission_needs_a_grant_and_a_matching_pattern() {
        let uri: Uri = "https://open.feishu.cn/open-apis/bot/v2/hook/token"
            .parse()
            .expect("uri");
        assert!(matches!(
            policy(None).admit(&uri),
            Err(Error::HttpRequestDenied)
        ));
        assert!(matches!(
            policy(Some(grant(&["https://example.com"]))).admit(&uri),
            Err(Error::HttpRequestDenied)
        ));
        let (target, _) = policy(Some(grant(&["https://*.feishu.cn"])))
            .admit(&uri)
            .expect("allowed");
        assert_eq!(target.to_string(), "https://open.feishu.cn:443");
        let credentials: Uri = "https://u:p@open.feishu.cn/".parse().expect("uri");
        assert!(matches!(
            policy(Some(grant(&["https://*.feishu.cn"]))).admit(&credentials),
            Err(Error::HttpRequestUriInvalid)
        ));
    }

    #[test]
    fn pinning_rewrites_the_authority_and_keeps_the_host_header() {
        let mut req = request(
            "http://hooks.example.com:8080/a/b?token=x",
            "hooks.example.com:8080",
        );
        pin_to(&mut req, "93.184.216.34:8080".parse().expect("address")).expect("pins");
        assert_eq!(
            req.uri().to_string(),
            "http://93.184.216.34:8080/a/b?token=x"
        );
        assert_eq!(req.headers()[HOST], "hooks.example.com:8080");

        let mut v6 = request("http://hooks.example.com/", "hooks.example.com");
        pin_to(&mut v6, "[2606:4700::1]:80".parse().expect("address")).expect("pins");
        assert_eq!(v6.uri().to_string(), "http://[2606:4700::1]:80/");
        assert_eq!(v6.headers()[HOST], "hooks.example.com");
    }

    #[test]
    fn a_missing_host_header_is_set_from_the_original_authority() {
        let mut req = request("http://hooks.example.com/", "unused");
        req.headers_mut().remove(HOST);
        pin_to(&mut req, "93.184.216.34:80".parse().expect("address")).expect("pins");
        assert_eq!(req.headers()[HOST], "hooks.example.com");
    }

    #[tokio::test]
    async fn literal_private_addresses_are_refused_and_public_ones_kept() {
        let private: Uri = "http://10.1.2.3:8080/".parse().expect("uri");
        let target = Target::from_uri(&private).expect("target");
        assert!(matches!(
            checked_address("probe", &target, Duration::from_secs(1)).await,
            Err(Error::DestinationIpProhibited)
        ));
        let public: Uri = "http://[2606:4700:4700::1111]/".parse().expect("uri");
        let target = Target::from_uri(&public).expect("target");
        let address = checked_address("probe", &target, Duration::from_secs(1))
            .await
            .expect("public");
        assert_eq!(
            address,
            "[2606:4700:4700::1111]:80".parse().expect("address")
        );
    }

    /// A refusal is a warning once a minute per plugin, destination and reason, and at most
    /// ten a minute per plugin however many destinations it makes up; another plugin's are
    /// counted apart.
    #[test]
    fn refusal_warnings_are_bounded_per_plugin() {
        let warned = |plugin: &str, i: usize| !said_lately(plugin, format!("{plugin} d{i} r"));
        let first: Vec<bool> = (0..12).map(|i| warned("bounded-a", i)).collect();
        assert_eq!(first.iter().filter(|w| **w).count(), 10, "{first:?}");
        assert!(
            !warned("bounded-a", 0),
            "a repeat within the minute is not warned"
        );
        assert!(warned("bounded-b", 0), "another plugin has its own quota");
    }

    #[tokio::test]
    async fn names_resolving_to_loopback_are_refused() {
        let uri: Uri = "http://localhost:8080/".parse().expect("uri");
        let target = Target::from_uri(&uri).expect("target");
        assert!(matches!(
            checked_address("probe", &target, Duration::from_secs(5)).await,
            Err(Error::DestinationIpProhibited)
        ));
    }

    #[test]
    fn only_responses_that_can_have_a_body_are_checked_for_length() {
        assert!(has_body(StatusCode::OK));
        assert!(has_body(StatusCode::NOT_FOUND));
        assert!(!has_body(StatusCode::NO_CONTENT));
        assert!(!has_body(StatusCode::NOT_MODIFIED));
        assert!(!has_body(StatusCode::CONTINUE));
        let response = Response::builder()
            .header(CONTENT_LENGTH, "2048")
            .body(())
            .expect("builds");
        assert_eq!(declared_length(&response), Some(2048));
        let response = Response::builder()
            .header(CONTENT_LENGTH, "lots")
            .body(())
            .expect("builds");
        assert_eq!(declared_length(&response), None);
    }
}
