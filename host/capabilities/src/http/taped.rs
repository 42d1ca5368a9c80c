//! HTTP exchanges on a tape (see `tape.rs`): what a request was and what came back.
//!
//! A request is matched on replay by its method, URL and body; headers are left out of the
//! tape, since that is where credentials travel (`Authorization`), and left out of the
//! match. Recording reads the plugin's whole request body before sending it and the whole
//! response body before the plugin sees the response, so that both can be written down: a body
//! error (the response cap, a timeout) then fails the response itself rather than its stream.

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use wasmtime_wasi_http::{Error, WasiBody};

use super::Sent;
use crate::tape::{self, CallTape, DecodeError, FromDivergence, Taped};

/// The name of the call on a tape.
pub const CALL: &str = "http.request";

/// A response as recorded.
pub struct TapedResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl TapedResponse {
    /// The response and its already finished connection, as the send hook hands them over.
    pub fn into_sent(self) -> Result<Sent, Error> {
        let mut builder = Response::builder()
            .status(StatusCode::from_u16(self.status).map_err(|_| Error::HttpProtocolError)?);
        for (name, value) in &self.headers {
            builder = builder.header(name, value);
        }
        let response = builder
            .body(full(Bytes::from(self.body)))
            .map_err(|e| Error::InternalError(Some(format!("a recorded response: {e}"))))?;
        let done: Box<dyn Future<Output = Result<(), Error>> + Send> =
            Box::new(std::future::ready(Ok(())));
        Ok((response, done))
    }
}

/// `{"status": 200, "headers": [["content-type", "..."]], "body": {"text": "..."}}`.
impl Taped for TapedResponse {
    fn to_tape(&self) -> Value {
        json!({
            "status": self.status,
            "headers": self.headers,
            "body": tape::bytes_to_tape(&self.body),
        })
    }

    fn from_tape(value: &Value) -> Result<TapedResponse, DecodeError> {
        let status = u64::from_tape(tape::field(value, "status")?)?;
        let headers = match value.get("headers") {
            None => Vec::new(),
            Some(list) => tape::list_from_tape(list, |pair| {
                let pair = tape::list_from_tape(pair, String::from_tape)?;
                match <[String; 2]>::try_from(pair) {
                    Ok([name, value]) => Ok((name, value)),
                    Err(_) => Err(DecodeError::BadHeader),
                }
            })?,
        };
        Ok(TapedResponse {
            status: u16::try_from(status).map_err(|_| DecodeError::BadStatus(status))?,
            headers,
            body: match value.get("body") {
                None => Vec::new(),
                Some(body) => tape::bytes_from_tape(body)?,
            },
        })
    }
}

/// A failed exchange as recorded: `{"code": "connection-refused", "message": "..."}`.
pub struct Failed(pub Error);

impl Taped for Failed {
    fn to_tape(&self) -> Value {
        json!({ "code": code(&self.0), "message": self.0.to_string() })
    }

    fn from_tape(value: &Value) -> Result<Failed, DecodeError> {
        let code = String::from_tape(tape::field(value, "code")?)?;
        let message = value.get("message").and_then(Value::as_str).unwrap_or("");
        Ok(Failed(error(&code, message)))
    }
}

impl FromDivergence for Failed {
    fn from_divergence(reason: String) -> Failed {
        Failed(Error::InternalError(Some(reason)))
    }
}

/// The request's part of a tape entry; reads the whole body.
pub async fn request_args(request: Request<WasiBody>) -> Result<(Value, Request<WasiBody>), Error> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await?.to_bytes();
    let args = json!({
        "method": parts.method.as_str(),
        "url": parts.uri.to_string(),
        "body": tape::bytes_to_tape(&body),
    });
    Ok((args, Request::from_parts(parts, full(body))))
}

/// Replays one exchange: nothing is sent.
pub async fn replay(tape: CallTape, request: Request<WasiBody>) -> Result<Sent, Error> {
    let (args, _request) = request_args(request).await?;
    let answer: Result<TapedResponse, Failed> = tape.replay(CALL, args);
    answer.map_err(|Failed(e)| e)?.into_sent()
}

/// Reads a whole response (driving its connection meanwhile) into what the tape keeps.
pub async fn read_response(sent: Sent) -> Result<TapedResponse, Error> {
    let (response, io) = sent;
    let (parts, body) = response.into_parts();
    let (done, collected) = tokio::join!(Box::into_pin(io), body.collect());
    let body = collected?.to_bytes();
    done?;
    Ok(TapedResponse {
        status: parts.status.as_u16(),
        headers: parts
            .headers
            .iter()
            .map(|(name, value)| {
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                (name.as_str().to_string(), value)
            })
            .collect(),
        body: body.to_vec(),
    })
}

fn full(bytes: Bytes) -> WasiBody {
    Full::new(bytes).map_err(Error::from).boxed_unsync()
}

/// The codes a replay gives back as they were; others come back as `internal-error` with the
/// recorded message.
#[cfg(test)]
const NAMED: [&str; 14] = [
    "dns-timeout",
    "destination-not-found",
    "destination-unavailable",
    "destination-ip-prohibited",
    "connection-refused",
    "connection-terminated",
    "connection-timeout",
    "connection-read-timeout",
    "connection-limit-reached",
    "http-request-denied",
    "http-request-uri-invalid",
    "http-response-incomplete",
    "http-response-timeout",
    "http-protocol-error",
];

fn code(error: &Error) -> &'static str {
    match error {
        Error::DnsTimeout => "dns-timeout",
        Error::DestinationNotFound => "destination-not-found",
        Error::DestinationUnavailable => "destination-unavailable",
        Error::DestinationIpProhibited => "destination-ip-prohibited",
        Error::ConnectionRefused => "connection-refused",
        Error::ConnectionTerminated => "connection-terminated",
        Error::ConnectionTimeout => "connection-timeout",
        Error::ConnectionReadTimeout => "connection-read-timeout",
        Error::ConnectionLimitReached => "connection-limit-reached",
        Error::HttpRequestDenied => "http-request-denied",
        Error::HttpRequestUriInvalid => "http-request-uri-invalid",
        Error::HttpResponseIncomplete => "http-response-incomplete",
        Error::HttpResponseTimeout => "http-response-timeout",
        Error::HttpProtocolError => "http-protocol-error",
        _ => "internal-error",
    }
}

fn error(code: &str, message: &str) -> Error {
    match code {
        "dns-timeout" => Error::DnsTimeout,
        "destination-not-found" => Error::DestinationNotFound,
        "destination-unavailable" => Error::DestinationUnavailable,
        "destination-ip-prohibited" => Error::DestinationIpProhibited,
        "connection-refused" => Error::ConnectionRefused,
        "connection-terminated" => Error::ConnectionTerminated,
        "connection-timeout" => Error::ConnectionTimeout,
        "connection-read-timeout" => Error::ConnectionReadTimeout,
        "connection-limit-reached" => Error::ConnectionLimitReached,
        "http-request-denied" => Error::HttpRequestDenied,
        "http-request-uri-invalid" => Error::HttpRequestUriInvalid,
        "http-response-incomplete" => Error::HttpResponseIncomplete,
        "http-response-timeout" => Error::HttpResponseTimeout,
        "http-protocol-error" => Error::HttpProtocolError,
        _ => Error::InternalError(Some(message.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_code_round_trips() {
        for name in NAMED {
            assert_eq!(code(&error(name, "")), name);
        }
        let other = Failed(Error::InternalError(Some("boom".into()))).to_tape();
        let Ok(Failed(Error::InternalError(Some(message)))) = Failed::from_tape(&other) else {
            panic!("an internal error comes back as one");
        };
        assert!(message.contains("boom"), "{message}");
    }

    #[test]
    fn a_recorded_response_reads_back() {
        let recorded = TapedResponse {
            status: 201,
            headers: vec![("content-type".into(), "application/json".into())],
            body: br#"{"code":0}"#.to_vec(),
        };
        let again = TapedResponse::from_tape(&recorded.to_tape()).expect("reads back");
        assert_eq!(again.status, 201);
        assert_eq!(again.headers, recorded.headers);
        assert_eq!(again.body, recorded.body);
        assert!(TapedResponse::from_tape(&json!({"status": 70000})).is_err());
    }
}
