//! A blocking JSON POST over the standard `wasi:http/outgoing-handler` (WASI 0.2).
//!
//! A plugin handles one event per call and has nothing else to do meanwhile, so blocking on the
//! host's pollables is the simplest correct client; no async runtime is needed. Whether the
//! request may leave at all is the host's decision (the manifest's `grants.http`); a refusal
//! comes back as `HTTP-request-denied`, which is reported separately because retrying it is
//! pointless.

use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, Fields, IncomingBody, IncomingResponse, Method, OutgoingBody, OutgoingRequest,
    Scheme as WasiScheme,
};
use wasip2::io::streams::StreamError;

use crate::response::Transport;
use crate::webhook::{Scheme, Webhook};

/// `blocking-write-and-flush` takes at most this much per call.
const WRITE_CHUNK: usize = 4096;
/// Feishu's answers are tiny; anything longer is not worth holding, and what was read still
/// classifies (a cut answer simply has no parsable `code`).
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// POSTs `body` as `application/json` to `webhook`; returns the HTTP status and up to 64 KiB of
/// the response body.
pub fn post_json(webhook: &Webhook, body: &[u8]) -> Result<(u16, Vec<u8>), Transport> {
    // A known length rather than chunked encoding: every server and proxy takes it, and the
    // host checks the written body against it.
    let headers = Fields::from_list(&[
        ("content-type".to_string(), b"application/json".to_vec()),
        (
            "content-length".to_string(),
            body.len().to_string().into_bytes(),
        ),
    ])
    .map_err(|e| Transport::Failed(format!("building headers: {e:?}")))?;
    let request = OutgoingRequest::new(headers);
    let refused = |what: &str| Transport::Failed(format!("the host refused the request's {what}"));
    request
        .set_method(&Method::Post)
        .map_err(|()| refused("method"))?;
    let scheme = match webhook.scheme {
        Scheme::Http => WasiScheme::Http,
        Scheme::Https => WasiScheme::Https,
    };
    request
        .set_scheme(Some(&scheme))
        .map_err(|()| refused("scheme"))?;
    request
        .set_authority(Some(&webhook.authority))
        .map_err(|()| refused("authority"))?;
    request
        .set_path_with_query(Some(&webhook.path_with_query))
        .map_err(|()| refused("path"))?;
    // The body handle must be taken before `handle` consumes the request.
    let outgoing = request.body().map_err(|()| refused("body"))?;

    // The request is handed over before the body is written: the host streams the body into the
    // connection as it arrives, so writing more than its buffer before sending would block.
    let future = outgoing_handler::handle(request, None).map_err(transport)?;
    let written = write_body(outgoing, body);

    let pollable = future.subscribe();
    pollable.block();
    drop(pollable);
    let response = match future.get() {
        Some(Ok(Ok(response))) => response,
        Some(Ok(Err(code))) => return Err(transport(code)),
        Some(Err(())) => return Err(Transport::Failed("response already taken".to_string())),
        None => return Err(Transport::Failed("no response after waiting".to_string())),
    };
    // A server that answered although the body could not be written whole (an early 413 or
    // 429) explains the failure better than the write error, so the answer is what counts.
    let _ = written;
    let status = response.status();
    let bytes = read_body(&response)?;
    Ok((status, bytes))
}

/// Writes `body` in chunks and finishes it. On a failure the body is dropped unfinished, which
/// tells the host the request is incomplete so it does not wait for more.
fn write_body(outgoing: OutgoingBody, body: &[u8]) -> Result<(), String> {
    {
        let stream = outgoing
            .write()
            .map_err(|()| "the request body stream was already taken".to_string())?;
        for chunk in body.chunks(WRITE_CHUNK) {
            stream
                .blocking_write_and_flush(chunk)
                .map_err(|e| format!("writing the request body: {}", stream_error(e)))?;
        }
        // The stream is a child of the body and must be gone before the body is finished.
    }
    OutgoingBody::finish(outgoing, None).map_err(|code| format!("finishing the body: {code:?}"))
}

/// Reads the response body up to [`MAX_RESPONSE_BYTES`].
fn read_body(response: &IncomingResponse) -> Result<Vec<u8>, Transport> {
    let incoming = response
        .consume()
        .map_err(|()| Transport::Failed("the response body was already taken".to_string()))?;
    let mut bytes = Vec::new();
    {
        let stream = incoming
            .stream()
            .map_err(|()| Transport::Failed("the response stream was already taken".to_string()))?;
        while bytes.len() < MAX_RESPONSE_BYTES {
            let want = (MAX_RESPONSE_BYTES - bytes.len()) as u64;
            match stream.blocking_read(want) {
                Ok(chunk) => bytes.extend_from_slice(&chunk),
                Err(StreamError::Closed) => break,
                Err(e) => {
                    return Err(Transport::Failed(format!(
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

fn transport(code: ErrorCode) -> Transport {
    match code {
        ErrorCode::HttpRequestDenied => Transport::Denied,
        other => Transport::Failed(format!("{other:?}")),
    }
}

fn stream_error(error: StreamError) -> String {
    match error {
        StreamError::Closed => "closed".to_string(),
        StreamError::LastOperationFailed(e) => e.to_debug_string(),
    }
}
