//! Telemetry: logs, Prometheus metrics, the status endpoint and page, all read from the counters the
//! clusters and lanes keep anyway.

pub mod exposition;
pub mod http;
pub mod jobs_api;
pub mod jobs_page;
pub mod logging;
pub mod metrics;
pub mod page;
pub mod process;
pub mod status;
pub mod store_check;
