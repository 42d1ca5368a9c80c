//! The end-to-end tests, one module per area, linked into one test binary.
//! Run one area with `cargo test -p jobrelay-e2e --test e2e delivery::`.

mod ai_job_kinds;
mod chart;
mod chat_sinks;
mod cleanup;
mod clusters;
mod delivery;
mod finalizers;
mod fleet_events;
mod image;
mod job_view;
mod job_writes;
mod jobs_page;
mod kueue_story;
mod oci_plugins;
mod pipeline;
mod python_plugin;
mod reload;
mod resilience;
mod shared_state;
mod status_page;
mod telemetry;
mod transition_identity;
mod waiting_plugin;
