//! The listener and connection handling: HTTP/1.1 on `127.0.0.1`, one task per connection.
//!
//! Written on hyper directly (not a router framework) so the simulator controls connection
//! lifetimes: a "hard" outage must close the listening socket, so clients get connection
//! refused, and cut every open connection; recovery binds the same port again so kubeconfigs
//! stay valid.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::SimState;
use super::http::handle;

/// A running server; the listener can be taken down and brought back.
pub(crate) struct Server {
    addr: SocketAddr,
    state: Arc<SimState>,
    /// Cancelled on shutdown; parent of every listener token.
    root: CancellationToken,
    /// Token of the current accept loop and its connections; `None` during a hard outage.
    listening: Mutex<Option<CancellationToken>>,
    runtime: tokio::runtime::Handle,
}

impl Server {
    /// Binds `127.0.0.1:0` and starts serving.
    pub(crate) async fn start(state: Arc<SimState>) -> anyhow::Result<Server> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the simulator's listener")?;
        let addr = listener.local_addr()?;
        let server = Server {
            addr,
            state,
            root: CancellationToken::new(),
            listening: Mutex::new(None),
            runtime: tokio::runtime::Handle::current(),
        };
        server.serve(listener);
        Ok(server)
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn serve(&self, listener: TcpListener) {
        let token = self.root.child_token();
        let state = self.state.clone();
        self.runtime.spawn(crate::serve::accept_loop(
            listener,
            token.clone(),
            "simulator",
            move |req| handle(state.clone(), req),
        ));
        let mut listening = self.listening.lock();
        *listening = Some(token);
    }

    /// Closes the listener and every open connection.
    pub(crate) fn stop_listening(&self) {
        let mut listening = self.listening.lock();
        if let Some(token) = listening.take() {
            token.cancel();
        }
    }

    /// Binds the same port again (retrying briefly while the old socket is released).
    pub(crate) fn resume_listening(&self) -> anyhow::Result<()> {
        if self.is_listening() {
            return Ok(());
        }
        let mut last_error = None;
        for _ in 0..50 {
            match std::net::TcpListener::bind(self.addr) {
                Ok(std_listener) => {
                    std_listener.set_nonblocking(true)?;
                    let _guard = self.runtime.enter();
                    let listener = TcpListener::from_std(std_listener)?;
                    self.serve(listener);
                    return Ok(());
                }
                Err(e) => {
                    last_error = Some(e);
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        Err(anyhow::anyhow!(
            "rebinding {} after a hard outage failed: {:?}",
            self.addr,
            last_error
        ))
    }

    pub(crate) fn is_listening(&self) -> bool {
        self.listening.lock().is_some()
    }

    /// Stops everything: listener, connections, and with them the watch streams.
    pub(crate) fn shutdown(&self) {
        self.root.cancel();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.root.cancel();
    }
}
