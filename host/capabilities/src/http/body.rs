//! The response body a plugin reads: cut at `max_response_bytes` and at the request's deadline.
//!
//! wasmtime reads a response body only as fast as the plugin asks for it, so neither limit
//! costs anything while the plugin is not reading; both are checked per frame.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use wasmtime_wasi_http::{Error, WasiBody};

use super::allow::Target;
use super::refused;

/// A response body that ends in an error instead of passing more than `limit` bytes or
/// running past `deadline`.
pub struct CappedBody {
    inner: WasiBody,
    limit: u64,
    read: u64,
    deadline: Pin<Box<tokio::time::Sleep>>,
    /// Set once the body has failed: nothing more is read from the server.
    failed: bool,
    /// For the log line of a refusal.
    plugin: Arc<str>,
    target: Target,
}

impl CappedBody {
    /// Must be called inside the tokio runtime (the deadline is a tokio timer).
    pub fn new(
        inner: WasiBody,
        limit: u64,
        deadline: tokio::time::Instant,
        plugin: Arc<str>,
        target: Target,
    ) -> CappedBody {
        CappedBody {
            inner,
            limit,
            read: 0,
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
            failed: false,
            plugin,
            target,
        }
    }
}

impl Body for CappedBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = &mut *self;
        if this.failed {
            return Poll::Ready(None);
        }
        // The deadline first: no frame is handed out after it, even one already buffered.
        if this.deadline.as_mut().poll(cx).is_ready() {
            this.failed = true;
            return Poll::Ready(Some(Err(Error::HttpResponseTimeout)));
        }
        let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            Poll::Ready(Some(Err(error))) => {
                this.failed = true;
                return Poll::Ready(Some(Err(error)));
            }
            other => return other,
        };
        if let Some(data) = frame.data_ref() {
            this.read = this.read.saturating_add(data.len() as u64);
            if this.read > this.limit {
                this.failed = true;
                refused(
                    &this.plugin,
                    &this.target,
                    format_args!(
                        "the response body is longer than max_response_bytes ({})",
                        this.limit
                    ),
                );
                return Poll::Ready(Some(Err(Error::HttpResponseBodySize(Some(this.limit)))));
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        if self.failed {
            SizeHint::with_exact(0)
        } else {
            self.inner.size_hint()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http_body_util::{BodyExt, StreamBody};

    use super::*;

    fn target() -> Target {
        let uri: http::Uri = "http://example.com/".parse().expect("parses");
        Target::from_uri(&uri).expect("has a destination")
    }

    fn chunks(sizes: &[usize]) -> WasiBody {
        let frames: Vec<Result<Frame<Bytes>, Error>> = sizes
            .iter()
            .map(|&n| Ok(Frame::data(Bytes::from(vec![b'x'; n]))))
            .collect();
        StreamBody::new(futures::stream::iter(frames)).boxed_unsync()
    }

    fn capped(body: WasiBody, limit: u64, within: Duration) -> CappedBody {
        let deadline = tokio::time::Instant::now() + within;
        CappedBody::new(body, limit, deadline, Arc::from("probe"), target())
    }

    #[tokio::test]
    async fn a_body_up_to_the_limit_passes_whole() {
        let body = capped(chunks(&[400, 400, 200]), 1000, Duration::from_secs(5));
        let bytes = body.collect().await.expect("within the limit").to_bytes();
        assert_eq!(bytes.len(), 1000);
    }

    #[tokio::test]
    async fn a_body_over_the_limit_ends_in_the_size_error() {
        let mut body = capped(chunks(&[600, 600, 600]), 1000, Duration::from_secs(5));
        let first = body
            .frame()
            .await
            .expect("a frame")
            .expect("first frame passes");
        assert_eq!(first.data_ref().map(Bytes::len), Some(600));
        match body.frame().await {
            Some(Err(Error::HttpResponseBodySize(Some(1000)))) => {}
            other => panic!("expected the size error, got {other:?}"),
        }
        assert!(body.frame().await.is_none(), "nothing after the error");
        assert!(body.is_end_stream());
    }

    #[tokio::test]
    async fn a_body_past_the_deadline_ends_in_a_timeout() {
        let stalled = StreamBody::new(futures::stream::pending::<Result<Frame<Bytes>, Error>>());
        let mut body = capped(stalled.boxed_unsync(), 1000, Duration::from_millis(50));
        match tokio::time::timeout(Duration::from_secs(5), body.frame()).await {
            Ok(Some(Err(Error::HttpResponseTimeout))) => {}
            other => panic!("expected the deadline, got {other:?}"),
        }
    }
}
