//! The main file's `job_view:` section: how long the job view keeps deleted jobs, and how
//! many namespaces the job SLI metrics name. Checked here and made the view's
//! [`ViewSettings`], beside the view that runs with them; its durations are written as the
//! clean-up's ([`AfterFinished`]).

use serde::{Deserialize, Serialize};

use super::ViewSettings;
use crate::cleanup::{AfterFinished, DurationError};

/// The `job_view:` section as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobViewSpec {
    /// How long a deleted job stays visible (seconds, or `30m`, `2h`, …; default 1h).
    #[serde(default = "default_keep_deleted")]
    pub keep_deleted: AfterFinished,
    /// The most deleted jobs kept, all clusters together; the oldest go first.
    #[serde(default = "default_max_deleted")]
    pub max_deleted: usize,
    /// Namespaces per cluster the job SLI metrics label by name (the first seen); the rest
    /// are counted as `other`.
    #[serde(default = "default_metrics_namespaces")]
    pub metrics_namespaces: usize,
}

impl Default for JobViewSpec {
    fn default() -> JobViewSpec {
        JobViewSpec {
            keep_deleted: default_keep_deleted(),
            max_deleted: default_max_deleted(),
            metrics_namespaces: default_metrics_namespaces(),
        }
    }
}

fn default_keep_deleted() -> AfterFinished {
    AfterFinished::Text("1h".into())
}

fn default_max_deleted() -> usize {
    ViewSettings::default().max_deleted
}

fn default_metrics_namespaces() -> usize {
    ViewSettings::default().metrics_namespaces
}

/// The most namespaces per cluster the SLI metrics may label by name.
const MAX_METRICS_NAMESPACES: usize = 1_000;

/// The longest a deleted job may be kept: a week.
const MAX_KEEP_DELETED_SECONDS: u64 = 7 * 24 * 3_600;
/// The most deleted jobs that may be kept.
const MAX_DELETED: usize = 10_000_000;

/// Why the `job_view:` section is refused; the message names the field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JobViewError {
    /// `keep_deleted` is not a duration.
    #[error("job_view.keep_deleted: {0}")]
    KeepDeleted(#[source] DurationError),
    /// `keep_deleted` is longer than a week: the view is memory, not a history.
    #[error(
        "job_view.keep_deleted: at most a week ({} seconds)",
        MAX_KEEP_DELETED_SECONDS
    )]
    KeepDeletedTooLong {
        /// The duration given, in seconds.
        seconds: u64,
    },
    /// `max_deleted` is past what memory can be expected to hold.
    #[error("job_view.max_deleted: at most {}", MAX_DELETED)]
    TooManyDeleted {
        /// The number given.
        given: usize,
    },
    /// `metrics_namespaces` is past what the metrics' series count can bear.
    #[error(
        "job_view.metrics_namespaces: at most {} (each is a set of series per cluster and kind)",
        MAX_METRICS_NAMESPACES
    )]
    TooManyMetricsNamespaces {
        /// The number given.
        given: usize,
    },
}

impl JobViewSpec {
    /// The view's settings, or the first field out of bounds.
    pub fn validate(&self) -> Result<ViewSettings, JobViewError> {
        let keep = self
            .keep_deleted
            .duration()
            .map_err(JobViewError::KeepDeleted)?;
        if keep.as_secs() > MAX_KEEP_DELETED_SECONDS {
            return Err(JobViewError::KeepDeletedTooLong {
                seconds: keep.as_secs(),
            });
        }
        if self.max_deleted > MAX_DELETED {
            return Err(JobViewError::TooManyDeleted {
                given: self.max_deleted,
            });
        }
        if self.metrics_namespaces > MAX_METRICS_NAMESPACES {
            return Err(JobViewError::TooManyMetricsNamespaces {
                given: self.metrics_namespaces,
            });
        }
        Ok(ViewSettings {
            keep_deleted_seconds: keep.as_secs() as u32,
            max_deleted: self.max_deleted,
            metrics_namespaces: self.metrics_namespaces,
        })
    }
}
