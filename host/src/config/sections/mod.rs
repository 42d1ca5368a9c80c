//! The main file's sections that have rules of their own, one file each: the section as
//! written, its defaults and limits, and its check, which names the field at fault and makes
//! the settings the daemon runs with. [`super::main_file`] holds them as fields and calls each
//! check in turn.
//!
//! - [`kinds`] — `kinds:`, built-in or custom job kinds, made `jobrelay-watch` kinds (their
//!   normalizers checked and samples tried when the file is read);
//! - [`finalizers`] — `finalizers:`, jobrelay's finalizer for kinds that enable it;
//! - [`job_view`] — `job_view:`, the fleet's job view and SLI metrics (`jobrelay-fleet`);
//! - [`cluster_health`] — `cluster_health:`, how clusters are checked and judged;
//! - [`fleet`] — `fleet:`, rules on the job SLIs (`jobrelay-fleet`'s rules).
//!
//! Sections whose spec is a lower crate's settings type are written there: `cleanup:` is also
//! checked there (`jobrelay-lanes`), `state:` (`jobrelay-state`) and `coordination:`
//! (`jobrelay-coordination`) are resolved there; `sql:` and `archive:` (`jobrelay-capabilities`)
//! and `runtime:` are checked in the main file, where they meet the config folder and the
//! state store.

pub mod cluster_health;
pub mod finalizers;
pub mod fleet;
pub mod job_view;
pub mod kinds;
