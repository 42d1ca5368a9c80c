//! The WASI 0.2 base every plugin is linked with, granting nothing by itself.
//!
//! Plugins are ordinary `wasm32-wasip2` programs, so their standard library imports the WASI
//! interfaces (clocks, random, stdio, filesystem, sockets) whether or not they use them; all
//! of them are linked so that any such program loads. What they reach is decided here and by
//! the other capabilities:
//!
//! - clocks and randomness: the host's, as the design brief allows them to every plugin;
//! - environment, arguments: empty; the working directory is unset;
//! - stdin: closed;
//! - network: TCP, UDP and name lookup refused, and every socket address denied (wasmtime-wasi
//!   48 already defaults to this; it is set explicitly so an upstream default change cannot
//!   open the network);
//! - filesystem: no preopened directory; the `filesystem` capability adds granted ones;
//! - stdout and stderr: captured per call, keeping the last [`CAPTURE_BYTES`] of each, and
//!   written to the host's log at debug level after the call (tagged with plugin, version and
//!   event). Writes always succeed, so a chatty plugin never fails because of its output (Rust's
//!   `println!` panics when stdout fails), and it cannot grow host memory past the cap. The
//!   stderr tail also goes into trap messages, where a Rust panic message lands.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use parking_lot::{Mutex, MutexGuard};
use tokio::io::AsyncWrite;
use wasmtime::component::Linker;
use wasmtime_wasi::WasiView;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

use super::CallLabels;
use super::{CallScope, Capability, GrantProblem, StoreSetup};

/// Links every WASI 0.2 interface (what the plugin reaches is decided when its store's context
/// is built, in [`Capability::configure`]).
pub fn add_to_linker<T: WasiView>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_async(linker)
}

/// Bytes of stdout and of stderr kept per call.
pub const CAPTURE_BYTES: usize = 8 * 1024;

/// The WASI base capability.
pub struct WasiBase;

impl Capability for WasiBase {
    fn name(&self) -> &'static str {
        "wasi"
    }

    fn configure(&self, call: &CallScope<'_>, setup: &mut StoreSetup) -> Result<(), GrantProblem> {
        let Some(wasi) = setup.wasi.as_mut() else {
            return Ok(()); // a kept instance keeps its WASI context
        };
        if let Some(tape) = &call.services.tape {
            // A taped run's clock stands still at the tape's instant (see `tape.rs`).
            wasi.wall_clock(StoppedClock(tape.clock()));
        }
        wasi.allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .socket_addr_check(|_, _| Box::pin(async { false }))
            .stdout(setup.state.stdio.stdout.clone())
            .stderr(setup.state.stdio.stderr.clone());
        Ok(())
    }
}

/// A wall clock that always reads one instant.
struct StoppedClock(std::time::Duration);

impl wasmtime_wasi::HostWallClock for StoppedClock {
    fn resolution(&self) -> std::time::Duration {
        std::time::Duration::from_millis(1)
    }

    fn now(&self) -> std::time::Duration {
        self.0
    }
}

/// The captured stdout and stderr of one call.
#[derive(Default)]
pub struct Stdio {
    /// What the plugin wrote to stdout: its tail, up to the capture's cap.
    pub stdout: CapturedStream,
    /// What the plugin wrote to stderr: its tail, where a Rust panic message lands.
    pub stderr: CapturedStream,
}

impl Stdio {
    /// Writes what the plugin printed to the host log, one debug event per line.
    pub fn emit(&self, labels: &CallLabels) {
        for (stream, captured) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let tail = captured.lock();
            if tail.bytes.is_empty() {
                continue;
            }
            if tail.dropped > 0 {
                tracing::debug!(
                    target: "jobrelay::plugin",
                    plugin = %labels.plugin,
                    version = %labels.version,
                    event = %labels.event_or_dash(),
                    stream,
                    "({} earlier bytes of output not kept)",
                    tail.dropped
                );
            }
            let (front, back) = tail.bytes.as_slices();
            let text = String::from_utf8_lossy(&[front, back].concat()).into_owned();
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                tracing::debug!(
                    target: "jobrelay::plugin",
                    plugin = %labels.plugin,
                    version = %labels.version,
                    event = %labels.event_or_dash(),
                    stream,
                    "{line}"
                );
            }
        }
    }

    /// Forgets what was captured, for an instance that serves another call.
    pub fn clear(&self) {
        for captured in [&self.stdout, &self.stderr] {
            let mut tail = captured.lock();
            tail.bytes.clear();
            tail.dropped = 0;
        }
    }

    /// The last `max_lines` non-empty lines of stderr, joined with ` | `, for error messages.
    pub fn stderr_tail(&self, max_lines: usize) -> String {
        let tail = self.stderr.lock();
        let (front, back) = tail.bytes.as_slices();
        let text = String::from_utf8_lossy(&[front, back].concat()).into_owned();
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            // Rust's hint after a panic message says nothing about the failure.
            .filter(|l| !l.is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE"))
            .collect();
        let start = lines.len().saturating_sub(max_lines);
        lines[start..].join(" | ")
    }
}

/// An output stream that accepts every write and keeps the last [`CAPTURE_BYTES`].
#[derive(Clone, Default)]
pub struct CapturedStream {
    tail: Arc<Mutex<Tail>>,
}

#[derive(Default)]
struct Tail {
    bytes: VecDeque<u8>,
    dropped: u64,
}

impl CapturedStream {
    fn lock(&self) -> MutexGuard<'_, Tail> {
        // A panic while holding this lock cannot leave the buffer inconsistent.
        self.tail.lock()
    }

    fn push(&self, data: &[u8]) {
        let mut tail = self.lock();
        // Only the last CAPTURE_BYTES of `data` can survive.
        let skip = data.len().saturating_sub(CAPTURE_BYTES);
        tail.dropped += skip as u64;
        tail.bytes.extend(&data[skip..]);
        let excess = tail.bytes.len().saturating_sub(CAPTURE_BYTES);
        if excess > 0 {
            tail.bytes.drain(..excess);
            tail.dropped += excess as u64;
        }
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for CapturedStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // The usual WASI permit size; the capture trims on its own.
        Ok(64 * 1024)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CapturedStream {
    async fn ready(&mut self) {}
}

impl AsyncWrite for CapturedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for CapturedStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CapturedStream {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_keeps_the_tail() {
        let s = CapturedStream::default();
        s.push(&vec![b'a'; CAPTURE_BYTES]);
        s.push(b"\nlast line\n");
        let tail = s.lock();
        assert_eq!(tail.bytes.len(), CAPTURE_BYTES);
        assert_eq!(tail.dropped, 11);
        let end: Vec<u8> = tail.bytes.iter().rev().take(11).rev().copied().collect();
        assert_eq!(end, b"\nlast line\n");
    }

    #[test]
    fn huge_single_write_is_trimmed_before_copying() {
        let s = CapturedStream::default();
        s.push(&vec![b'x'; 10 * CAPTURE_BYTES]);
        let tail = s.lock();
        assert_eq!(tail.bytes.len(), CAPTURE_BYTES);
        assert_eq!(tail.dropped, 9 * CAPTURE_BYTES as u64);
    }

    #[test]
    fn stderr_tail_keeps_last_lines() {
        let stdio = Stdio::default();
        stdio.stderr.push(b"one\n\ntwo\nthree\n");
        assert_eq!(stdio.stderr_tail(2), "two | three");
    }
}
