//! `jobrelay run --config DIR`: the daemon in this process, until a stop signal (SIGTERM or
//! SIGINT) or the loss of the Lease, and the exit status that says which.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use crate::daemon::Daemon;

/// How long calls in flight may take to finish after a stop signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);
/// Exit status after losing the Lease (leader election): not a crash, but not a clean stop.
const LOST_LEASE_EXIT: u8 = 3;

/// Runs the daemon on `config` until it is stopped.
pub async fn command(config: &Path) -> anyhow::Result<ExitCode> {
    // Listening from the very start: a stop signal during start-up is a clean stop too, not
    // the signal's default action.
    let mut stop = StopSignals::install()?;
    tracing::info!(config = %config.display(), "starting");
    let daemon = tokio::select! {
        started = Daemon::start(config) => started?,
        _ = stop.next() => {
            tracing::info!("stop signal during start-up; exiting");
            return Ok(ExitCode::SUCCESS);
        }
    };
    tokio::select! {
        _ = stop.next() => {}
        _ = daemon.lost_leadership() => {
            // Another replica may take the Lease soon: stop, and come back as a follower.
            let grace = daemon.loss_grace();
            daemon.shutdown(grace).await;
            tracing::error!("exiting after losing the Lease; a restart rejoins as a follower");
            return Ok(ExitCode::from(LOST_LEASE_EXIT));
        }
    }
    tracing::info!("stop signal received; shutting down (a second signal exits at once)");
    tokio::select! {
        _ = daemon.shutdown(SHUTDOWN_GRACE) => {}
        _ = stop.next() => {
            tracing::warn!("second stop signal; exiting now");
            return Ok(ExitCode::from(130));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// SIGTERM and SIGINT. Each is registered when installed, so none is missed in between.
struct StopSignals {
    term: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn install() -> anyhow::Result<StopSignals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(StopSignals {
            term: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    /// The next stop signal.
    async fn next(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}
