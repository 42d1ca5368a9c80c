//! The accept loop shared by the kit's HTTP servers (the Kubernetes API simulator and the
//! Feishu receiver): HTTP/1.1 connections served until a cancellation token fires, which also
//! cuts the open connections (dropping a connection future closes its socket without a
//! goodbye, as a server going away would).

use std::convert::Infallible;
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Serves `handle` on every connection `listener` accepts until `token` is cancelled. `what`
/// names the server in debug logs.
pub(crate) async fn accept_loop<F, Fut, B>(
    listener: TcpListener,
    token: CancellationToken,
    what: &'static str,
    handle: F,
) where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<Response<B>, Infallible>> + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    loop {
        let accepted = tokio::select! {
            _ = token.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::debug!("{what} accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let handle = handle.clone();
        let token = token.clone();
        tokio::spawn(async move {
            let service = service_fn(handle);
            let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                result = connection => {
                    if let Err(e) = result {
                        tracing::debug!("{what} connection ended: {e}");
                    }
                }
                _ = token.cancelled() => {}
            }
        });
    }
}
