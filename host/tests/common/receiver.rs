//! A real HTTP/1.1 receiver on 127.0.0.1 that keeps every request whole — head, headers and
//! the body byte for byte, read by its `content-length` or decoded from chunks — so a test can
//! tell a body that arrived whole, with its length declared, from one cut, padded or chunked.
//!
//! Each request is answered by a function of the request (status, extra headers, body), then
//! the connection is closed.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// The request target: path and query.
    pub target: String,
    /// Names lower-cased, in the order sent.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Whether the body came as `transfer-encoding: chunked`.
    pub chunked: bool,
}

impl Request {
    /// The first value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// An answer: status, extra headers, body.
pub type Answer = (u16, Vec<(String, String)>, Vec<u8>);

type Answering = Arc<dyn Fn(&Request) -> Answer + Send + Sync>;

pub struct Receiver {
    pub url: String,
    received: Arc<Mutex<Vec<Request>>>,
}

impl Receiver {
    /// Answers every request `204 No Content`.
    pub async fn start() -> Receiver {
        Receiver::answering(|_| (204, Vec::new(), Vec::new())).await
    }

    /// Answers each request with `answer(request)`.
    pub async fn answering(
        answer: impl Fn(&Request) -> Answer + Send + Sync + 'static,
    ) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let url = format!("http://{}", listener.local_addr().expect("bound"));
        let received = Arc::new(Mutex::new(Vec::new()));
        let (sink, answer): (_, Answering) = (received.clone(), Arc::new(answer));
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let (sink, answer) = (sink.clone(), answer.clone());
                tokio::spawn(async move {
                    if let Some(request) = serve(socket, answer.as_ref()).await {
                        sink.lock().unwrap_or_else(|p| p.into_inner()).push(request);
                    }
                });
            }
        });
        Receiver { url, received }
    }

    /// Every request received so far, in the order they were complete.
    pub fn requests(&self) -> Vec<Request> {
        self.received
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Waits up to `deadline` for `n` requests.
    pub async fn wait_for(&self, n: usize, deadline: Duration) -> Vec<Request> {
        let started = Instant::now();
        loop {
            let requests = self.requests();
            if requests.len() >= n || started.elapsed() > deadline {
                return requests;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Reads one request from `socket` and answers it; `None` if the connection broke first.
async fn serve(
    socket: TcpStream,
    answer: &(dyn Fn(&Request) -> Answer + Send + Sync),
) -> Option<Request> {
    let mut reader = BufReader::new(socket);
    let mut line = String::new();
    reader.read_line(&mut line).await.ok()?;
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = Vec::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).await.ok()? == 0 {
            return None;
        }
        let header = line.trim_end_matches(['\r', '\n']);
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let chunked = find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            reader.read_line(&mut line).await.ok()?;
            let size = usize::from_str_radix(line.trim().split(';').next()?, 16).ok()?;
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk).await.ok()?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else if let Some(length) = find("content-length") {
        body = vec![0; length.parse().ok()?];
        reader.read_exact(&mut body).await.ok()?;
    }
    let request = Request {
        method,
        target,
        headers,
        body,
        chunked,
    };
    let (status, extra, content) = answer(&request);
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-length: {}\r\nconnection: close\r\n",
        reason(status),
        content.len()
    );
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut socket = reader.into_inner();
    let _ = socket.write_all(head.as_bytes()).await;
    let _ = socket.write_all(&content).await;
    let _ = socket.shutdown().await;
    Some(request)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        429 => "Too Many Requests",
        _ => "Answer",
    }
}

/// `n` bytes where byte `i` is `i % 251`: a piece lost, doubled or out of order shows (the
/// probe's `http-post:N` sends these).
pub fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

/// The sizes every outbound-HTTP test tries: empty, around the stream's 4,096-byte pieces, and
/// far past them.
pub const BODY_SIZES: [usize; 6] = [0, 4095, 4096, 4097, 64 * 1024, 1 << 20];

/// Checks that `request` carries exactly `expected`, its length declared: the mismatch, if any.
pub fn whole(request: &Request, expected: &[u8]) -> Result<(), String> {
    if request.chunked {
        return Err(format!(
            "{} bytes came chunked, without a content-length",
            request.body.len()
        ));
    }
    let declared = request.header("content-length");
    if declared != Some(expected.len().to_string().as_str()) {
        return Err(format!(
            "content-length {declared:?} for a body of {} bytes",
            expected.len()
        ));
    }
    if request.body != expected {
        let first = request
            .body
            .iter()
            .zip(expected)
            .position(|(a, b)| a != b)
            .unwrap_or(request.body.len().min(expected.len()));
        return Err(format!(
            "{} bytes arrived for {}, first difference at byte {first}",
            request.body.len(),
            expected.len()
        ));
    }
    Ok(())
}
