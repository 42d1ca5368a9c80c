//! A container log being read: opened as the API server's stream for one of the job's pods,
//! pulled by the plugin in chunks, and cut at the grant's cap.
//!
//! Apart because a large log must never sit whole in host or plugin memory: this is the one
//! place that holds a stream and counts what it passed on.

use std::pin::Pin;

use futures::io::{AsyncRead, AsyncReadExt};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::LogParams;

use super::pods::unavailable;
use super::{LogError, PodLogAccess};

/// Largest chunk one `read` returns.
pub const MAX_READ_BYTES: u32 = 1 << 20;

/// A container log being read. The stream is the API server's response body.
pub struct LogReader {
    stream: Pin<Box<dyn AsyncRead + Send>>,
    /// Bytes the plugin may still get.
    remaining: u64,
    pub(super) truncated: bool,
    done: bool,
}

impl PodLogAccess {
    pub(super) async fn open_log(
        &mut self,
        pod: &str,
        container: &str,
        previous: bool,
    ) -> Result<LogReader, LogError> {
        let pods = self.pods().await?;
        let Some(found) = pods.iter().find(|p| p.name == pod) else {
            let scope = self.scope()?;
            return Err(LogError::Denied(format!(
                "pod `{pod}` is not one of the pods of job {}/{}",
                scope.namespace, scope.name
            )));
        };
        if !found.containers.iter().any(|c| c.name == container) {
            return Err(LogError::Denied(format!(
                "pod `{pod}` has no container `{container}`"
            )));
        }
        let max_bytes = self.max_bytes;
        let scope = self.scope()?;
        let api: Api<Pod> = Api::namespaced(scope.client.clone(), &scope.namespace);
        let params = LogParams {
            container: Some(container.to_string()),
            previous,
            // One byte over the cap tells a log of exactly the cap from a longer one.
            limit_bytes: i64::try_from(max_bytes.saturating_add(1)).ok(),
            ..LogParams::default()
        };
        let stream = api
            .log_stream(pod, &params)
            .await
            .map_err(|e| unavailable(&format!("log of {pod}/{container}"), e))?;
        Ok(LogReader {
            stream: Box::pin(stream),
            remaining: max_bytes,
            truncated: false,
            done: false,
        })
    }
}

impl LogReader {
    /// What stands for a log in a replay: the tape answers its reads, so it holds nothing.
    pub(super) fn replayed() -> LogReader {
        LogReader {
            stream: Box::pin(futures::io::empty()),
            remaining: 0,
            truncated: false,
            done: true,
        }
    }

    pub(super) async fn read_chunk(&mut self, max_bytes: u32) -> Result<Vec<u8>, LogError> {
        if self.done {
            return Ok(Vec::new());
        }
        let want = max_bytes.clamp(1, MAX_READ_BYTES) as usize;
        let mut buf = vec![0u8; want];
        let read = self
            .stream
            .read(&mut buf)
            .await
            .map_err(|e| LogError::Unavailable(format!("reading the log: {e}")))?;
        if read == 0 {
            self.done = true;
            return Ok(Vec::new());
        }
        buf.truncate(read);
        let allowed = usize::try_from(self.remaining).unwrap_or(usize::MAX);
        if buf.len() > allowed {
            buf.truncate(allowed);
            self.truncated = true;
            self.done = true;
        }
        self.remaining -= buf.len() as u64;
        if buf.is_empty() {
            self.done = true;
        }
        Ok(buf)
    }
}
