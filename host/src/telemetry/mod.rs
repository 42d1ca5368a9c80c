//! Telemetry: logs now; metrics and the status API build on the same data later.

pub mod logging;
