//! The host's integration tests, one module per area, linked into one test binary.
//! Run one area with `cargo test -p jobrelay --test integration mysql_sync::`.

mod common;

mod chat_notify;
mod cleanup_kills;
mod cleanup_sharded;
mod cli;
mod cluster_api_sources;
mod cluster_profile_sources;
mod cluster_sources;
mod config_folder;
mod credential_expiry;
mod disk_full;
mod documented_commands;
mod failover;
mod fault_soak;
mod feishu_notify;
mod filters;
mod http_capability;
mod inbox;
mod job_tape;
mod job_view_sharded;
mod jobs_cli;
mod leader_election;
mod log_archive;
mod memory_budget;
mod mysql_sync;
mod oci_registry;
mod plugin_fleet;
mod plugin_new;
mod plugin_selection;
mod plugin_update;
mod process;
mod python_plugin;
mod read_once_edits;
mod record_replay;
mod runtime;
mod sandbox;
mod sharding;
mod state_backup;
mod state_store;
mod story_watch;
mod timer_kills;
mod watch_retry;
mod webhook_notify;
