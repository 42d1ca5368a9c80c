//! Why `jobrelay jobs` could not show what it was asked for. Each message names what the
//! operator can act on: the URL that did not answer, the parameter the daemon refused, the
//! job that is not there (and which replica holds it).

use super::client::TIMEOUT;

#[derive(Debug, thiserror::Error)]
pub enum JobsError {
    /// `--server` is not an HTTP URL.
    #[error("`{server}` is not a server URL (http://HOST:PORT): {why}")]
    BadServer { server: String, why: String },
    /// `jobs show` was given something other than `CLUSTER/NAMESPACE/NAME`.
    #[error("`{0}` is not a job: write CLUSTER/NAMESPACE/NAME (e.g. east/ml/train-1)")]
    BadJob(String),
    /// Nothing answered at the URL: no daemon, or one without `telemetry.listen`.
    #[error(
        "cannot reach the jobrelay daemon at {url}: {reason}; is it running with \
         telemetry.listen set? --server (or JOBRELAY_SERVER) names another address"
    )]
    Unreachable { url: String, reason: String },
    /// Something accepted the connection but did not answer in time.
    #[error(
        "the jobrelay daemon at {url} did not answer within {} s",
        TIMEOUT.as_secs()
    )]
    TimedOut { url: String },
    /// The daemon answered with its `{"error": …}`: a bad parameter (400), no job view (503).
    #[error("{url} answered {status}: {error}")]
    Refused {
        url: String,
        status: u16,
        error: String,
    },
    /// `jobs show` of a job the daemon does not have; in sharded mode, `held_by` is the replica
    /// that holds its cluster.
    #[error("{error}{}", held_by.as_deref().map(|r| format!(" (held_by: {r}: ask that replica)")).unwrap_or_default())]
    NotFound {
        error: String,
        held_by: Option<String>,
    },
    /// What answered is not the job view API: another service on the port, or a daemon older
    /// than the API.
    #[error(
        "{url} answered {status} with {what}: not the job view API of a jobrelay daemon (one \
         older than `jobs`, or another service on that address?)"
    )]
    NotTheApi {
        url: String,
        status: u16,
        what: String,
    },
    /// The daemon gave the same `continue` token twice while `--all` followed the pages.
    #[error("{url} gave the same continue token twice; stopped following pages")]
    Looping { url: String },
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
}
