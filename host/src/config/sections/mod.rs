//! The main file's sections that have rules of their own: the section as written, its
//! defaults and limits, and its check, which names the field at fault and makes the settings
//! the daemon runs with. [`super::main_file`] holds them as fields and calls each check in
//! turn. Each is written beside the crate that owns what it configures:
//!
//! - `kinds:` — `jobrelay_watch::kinds::spec`, built-in or custom job kinds made the watch's
//!   kinds (their normalizers checked and samples tried when the file is read);
//! - `finalizers:` — `jobrelay_watch::finalizer::spec`, jobrelay's finalizer for kinds that
//!   enable it;
//! - `job_view:` — `jobrelay_fleet::jobs::spec`, the fleet's job view and SLI metrics;
//! - `fleet:` — `jobrelay_fleet::rules::spec`, rules on the job SLIs;
//! - `cleanup:` — `jobrelay_fleet::cleanup`; `state:` (`jobrelay-state`) and `coordination:`
//!   (`jobrelay-coordination`) are resolved there; `sql:` and `archive:`
//!   (`jobrelay-capabilities`) and `runtime:` are checked in the main file, where they meet
//!   the config folder and the state store;
//! - [`cluster_health`] — `cluster_health:`, here: how clusters are checked and judged is
//!   this crate's health board ([`crate::clusters::health`]), whose settings it makes;
//! - [`cluster_sources`] — `cluster_sources:`, here: the inventories on the home cluster
//!   this crate watches for clusters ([`crate::clusters::inventory_watch`]).

pub mod cluster_health;
pub mod cluster_sources;
