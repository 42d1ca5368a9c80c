//! Outbound HTTP for plugins: a blocking request over the standard
//! `wasi:http/outgoing-handler` (WASI 0.2).
//!
//! A plugin handles one event per call and has nothing else to do meanwhile, so blocking on the
//! host's pollables is the simplest correct client; no async runtime is needed. Whether the
//! request may leave at all is the host's decision (the manifest's `grants.http`); a refusal
//! comes back as [`HttpError::Denied`], reported apart from other failures because retrying it
//! is pointless.
//!
//! ```ignore
//! let answer = jobrelay_guest::http::post_json("https://hooks.example.com/ml", br#"{"text":"done"}"#)?;
//! if answer.status >= 500 { /* retry */ }
//! ```

use std::fmt;

use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, Fields, IncomingBody, IncomingResponse, Method as WasiMethod, OutgoingBody,
    OutgoingRequest, Scheme as WasiScheme,
};
use wasip2::io::streams::StreamError;

/// How much of a response body [`send`] keeps unless the request says otherwise.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 1 << 20;

/// An HTTP method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

/// One request: where (`https://host[:port]/path?query`), how, and what.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub method: Method,
    pub url: &'a str,
    pub headers: Vec<(&'a str, &'a [u8])>,
    pub body: &'a [u8],
    /// The response body is cut here; what was read still comes back.
    pub max_response_bytes: usize,
}

impl<'a> Request<'a> {
    /// A request without headers or body.
    pub fn new(method: Method, url: &'a str) -> Request<'a> {
        Request {
            method,
            url,
            headers: Vec::new(),
            body: &[],
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }
}

/// An HTTP answer: any status, including errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// The answer's headers, names in lower case, in the order sent.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Up to the request's `max_response_bytes`.
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name` (any case), if it is there and is text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }
}

/// A request that got no HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// The host refused to send it: the destination is not in the manifest's `grants.http`
    /// (`HTTP-request-denied`), or resolves to a private address without `allow_private`
    /// (`destination-IP-prohibited`).
    Denied,
    /// The URL is not `http(s)://authority[/path]`.
    InvalidUrl(String),
    /// Anything else: DNS, connect, TLS, timeouts, a cut connection.
    Failed(String),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Denied => write!(
                f,
                "the host denied the request: the destination is not in the manifest's \
                 grants.http.allow, or resolves to a private address (allowed only with \
                 grants.http.allow_private)"
            ),
            HttpError::InvalidUrl(why) => write!(f, "invalid URL: {why}"),
            HttpError::Failed(why) => write!(f, "{why}"),
        }
    }
}

impl std::error::Error for HttpError {}

/// POSTs `body` as `application/json` to `url`.
pub fn post_json(url: &str, body: &[u8]) -> Result<Response, HttpError> {
    send(&Request {
        headers: vec![("content-type", b"application/json")],
        body,
        ..Request::new(Method::Post, url)
    })
}

/// GETs `url`.
pub fn get(url: &str) -> Result<Response, HttpError> {
    send(&Request::new(Method::Get, url))
}

/// The parts of `scheme://authority[/path?query]`.
fn split_url(url: &str) -> Result<(WasiScheme, &str, String), HttpError> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| HttpError::InvalidUrl("no scheme".to_string()))?;
    let scheme = match scheme {
        "http" => WasiScheme::Http,
        "https" => WasiScheme::Https,
        other => return Err(HttpError::InvalidUrl(format!("scheme `{other}`"))),
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(at) if rest[at..].starts_with('/') => rest.split_at(at),
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        return Err(HttpError::InvalidUrl("no host".to_string()));
    }
    // A fragment is never sent over HTTP; a path always starts with `/`.
    let path = path.split('#').next().unwrap_or_default();
    let path = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    };
    Ok((scheme, authority, path))
}

/// Sends `request` and waits for the whole answer.
pub fn send(request: &Request<'_>) -> Result<Response, HttpError> {
    let (scheme, authority, path) = split_url(request.url)?;
    // A known length rather than chunked encoding: every server and proxy takes it, and the
    // host checks the written body against it.
    let mut headers: Vec<(String, Vec<u8>)> = request
        .headers
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_vec()))
        .collect();
    if !request.body.is_empty() || request.method != Method::Get {
        headers.push((
            "content-length".to_string(),
            request.body.len().to_string().into_bytes(),
        ));
    }
    let fields = Fields::from_list(&headers)
        .map_err(|e| HttpError::Failed(format!("building headers: {e:?}")))?;
    let outgoing_request = OutgoingRequest::new(fields);
    let refused = |what: &str| HttpError::Failed(format!("the host refused the request's {what}"));
    let method = match request.method {
        Method::Get => WasiMethod::Get,
        Method::Post => WasiMethod::Post,
        Method::Put => WasiMethod::Put,
        Method::Patch => WasiMethod::Patch,
        Method::Delete => WasiMethod::Delete,
    };
    outgoing_request
        .set_method(&method)
        .map_err(|()| refused("method"))?;
    outgoing_request
        .set_scheme(Some(&scheme))
        .map_err(|()| refused("scheme"))?;
    outgoing_request
        .set_authority(Some(authority))
        .map_err(|()| refused("authority"))?;
    outgoing_request
        .set_path_with_query(Some(&path))
        .map_err(|()| refused("path"))?;
    // The body handle must be taken before `handle` consumes the request.
    let outgoing = outgoing_request.body().map_err(|()| refused("body"))?;

    // The request is handed over before the body is written: the host streams the body into the
    // connection as it arrives and holds little of it meanwhile, so a body written before
    // `handle` stops at that little and the call waits until its time limit.
    let future = outgoing_handler::handle(outgoing_request, None).map_err(transport)?;
    let written = write_body(outgoing, request.body);

    let pollable = future.subscribe();
    pollable.block();
    drop(pollable);
    // A server that answered although the body could not be written whole (an early 413 or
    // 429) explains the failure better than the write error, so an answer is what counts; the
    // write error is kept for a request that got none.
    let response = match future.get() {
        Some(Ok(Ok(response))) => response,
        Some(Ok(Err(code))) => return Err(unanswered(transport(code), written)),
        Some(Err(())) => return Err(HttpError::Failed("response already taken".to_string())),
        None => return Err(HttpError::Failed("no response after waiting".to_string())),
    };
    let status = response.status();
    let headers = response
        .headers()
        .entries()
        .into_iter()
        .map(|(name, value)| (name.to_ascii_lowercase(), value))
        .collect();
    let body = read_body(&response, request.max_response_bytes)?;
    Ok(Response {
        status,
        headers,
        body,
    })
}

/// Writes `body` in the pieces the stream takes, flushes it and finishes it. `check-write`
/// says how much the host takes now (nothing while the connection catches up: then its
/// pollable says when); `blocking-write-and-flush` would take at most 4,096 bytes a call. On a
/// failure the body is dropped unfinished, which tells the host the request is incomplete so it
/// does not wait for more.
fn write_body(outgoing: OutgoingBody, body: &[u8]) -> Result<(), String> {
    {
        let stream = outgoing
            .write()
            .map_err(|()| "the request body stream was already taken".to_string())?;
        let failed = |e| format!("writing the request body: {}", stream_error(e));
        let mut rest = body;
        while !rest.is_empty() {
            let permitted = stream.check_write().map_err(failed)?;
            if permitted == 0 {
                stream.subscribe().block();
                continue;
            }
            let n = usize::try_from(permitted).map_or(rest.len(), |p| p.min(rest.len()));
            let (piece, after) = rest.split_at(n);
            stream.write(piece).map_err(failed)?;
            rest = after;
        }
        stream.blocking_flush().map_err(failed)?;
        // The stream is a child of the body and must be gone before the body is finished.
    }
    OutgoingBody::finish(outgoing, None).map_err(|code| format!("finishing the body: {code:?}"))
}

/// The error of a request that got no answer, with why its body could not be written, if it
/// could not (a refusal stays a refusal: there is nothing more to say).
fn unanswered(error: HttpError, written: Result<(), String>) -> HttpError {
    match (error, written) {
        (HttpError::Failed(why), Err(write)) => HttpError::Failed(format!("{why} ({write})")),
        (error, _) => error,
    }
}

/// Reads the response body up to `max` bytes.
fn read_body(response: &IncomingResponse, max: usize) -> Result<Vec<u8>, HttpError> {
    let incoming = response
        .consume()
        .map_err(|()| HttpError::Failed("the response body was already taken".to_string()))?;
    let mut bytes = Vec::new();
    {
        let stream = incoming
            .stream()
            .map_err(|()| HttpError::Failed("the response stream was already taken".to_string()))?;
        while bytes.len() < max {
            let want = (max - bytes.len()) as u64;
            match stream.blocking_read(want) {
                Ok(chunk) => bytes.extend_from_slice(&chunk),
                Err(StreamError::Closed) => break,
                Err(e) => {
                    return Err(HttpError::Failed(format!(
                        "reading the response: {}",
                        stream_error(e)
                    )));
                }
            }
        }
        // The stream is a child of the body: dropped here, before the body is finished.
    }
    drop(IncomingBody::finish(incoming));
    Ok(bytes)
}

fn transport(code: ErrorCode) -> HttpError {
    match code {
        // The host's two refusals: a destination outside `grants.http.allow`, and one that
        // resolves to a private address without `allow_private`. Retrying either is pointless.
        ErrorCode::HttpRequestDenied | ErrorCode::DestinationIpProhibited => HttpError::Denied,
        other => HttpError::Failed(format!("{other:?}")),
    }
}

fn stream_error(error: StreamError) -> String {
    match error {
        StreamError::Closed => "closed".to_string(),
        StreamError::LastOperationFailed(e) => e.to_debug_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_scheme_authority_and_path() {
        let (scheme, authority, path) =
            split_url("https://open.feishu.cn/hook/x?a=1#top").expect("a URL");
        assert!(matches!(scheme, WasiScheme::Https));
        assert_eq!(
            (authority, path.as_str()),
            ("open.feishu.cn", "/hook/x?a=1")
        );
        let (_, authority, path) = split_url("http://127.0.0.1:8080").expect("no path");
        assert_eq!((authority, path.as_str()), ("127.0.0.1:8080", "/"));
        let (_, authority, path) = split_url("http://h?q=1").expect("query only");
        assert_eq!((authority, path.as_str()), ("h", "/?q=1"));
        assert!(split_url("ftp://h/x").is_err());
        assert!(split_url("no-scheme").is_err());
        assert!(split_url("http:///path").is_err());
    }
}
