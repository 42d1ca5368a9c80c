//! `jobrelay plugin …`: the plugin author's tools, for a workstation or a plugin's CI; none needs
//! a running daemon.
//!
//! - [`new`] — `plugin new`: a ready plugin project (its templates in `new/`);
//! - [`run`] — `plugin run`: calls of a plugin with job and fleet events, recorded or replayed;
//! - [`test`] — `plugin test`: a plugin's recorded cases run as a suite;
//! - [`dev`] — `plugin dev`: build, run the samples and cases, and again on every change;
//! - [`bench`] — `plugin bench`: calls per second, µs per call and memory, fresh and reused;
//! - [`inspect`] — `plugin inspect`: a component's size, digests, world, imports and exports;
//! - [`push`] — `plugin push`: a component published to an OCI registry;
//! - [`digest`] — `plugin digest`: the pin of a component file or of a tag;
//! - [`sample_event`] — `plugin sample-event`: a job or fleet event as the daemon would make it;
//! - [`events`] — the event files of `plugin run`, `test` and `bench`, fleet events among them;
//! - [`selection`] — which events `plugin run`, `test` and `dev` call the plugin with: those
//!   the daemon would deliver to it by its manifest's kinds, filter, delivery and fleet_events.

pub mod bench;
pub mod dev;
pub mod digest;
pub mod events;
pub mod expect_calls;
pub mod inspect;
pub mod new;
pub mod outcomes_edit;
pub mod push;
pub mod run;
pub mod sample_event;
pub mod selection;
pub mod test;

use std::io::Write as _;
use std::path::PathBuf;

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Create a plugin project, in Rust or (`--lang python`) in Python: sources, manifest, build
    /// script, sample events, a test case and the SDK; `./build.sh` in it builds NAME.wasm.
    New {
        #[command(flatten)]
        args: new::PluginNewArgs,
    },
    /// Call a plugin with job events, without any cluster: loaded once, then one call per
    /// event, in order, but for the events the daemon would not deliver to it by the
    /// manifest's kinds, filter and delivery, which are skipped, saying why (--all calls
    /// them); exit 1 if any call failed or a replay went differently from its tape.
    Run {
        #[command(flatten)]
        args: run::PluginRunArgs,
        /// Print one JSON object per event (plugin, event, status, message, elapsed_ms,
        /// load_ms, host_calls, skipped) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Publish a component to an OCI registry as a Wasm artifact; prints the pinned reference
    /// (`oci://REGISTRY/REPO:TAG@sha256:…`) to put in a manifest's `wasm:`. Credentials, if the
    /// registry needs them: JOBRELAY_OCI_USERNAME and JOBRELAY_OCI_PASSWORD.
    Push {
        /// The component (.wasm).
        wasm: PathBuf,
        /// Where: `oci://REGISTRY/REPO:TAG`.
        target: String,
        /// Reach the registry over plain HTTP (a local registry), not HTTPS.
        #[arg(long)]
        plain_http: bool,
    },
    /// The edit → build → run loop of a plugin project: runs its build.sh, then the plugin on
    /// its sample events (events/) and cases (tests/cases/), and again whenever a file of the
    /// project changes. --once: one round, exit 1 if anything failed. --manifest: a dev
    /// manifest instead of the project's NAME.yaml.
    Dev {
        #[command(flatten)]
        args: dev::PluginDevArgs,
    },
    /// Measure a plugin: calls per second, µs per call (mean, p50, p99) and the most linear
    /// memory one call used, with a fresh instance per call and with instances reused 256
    /// times. Its capability calls are real, as in `plugin run`.
    Bench {
        #[command(flatten)]
        args: bench::PluginBenchArgs,
    },
    /// Describe a component without running it: size, sha256 and pin, the plugin world it
    /// targets (exit 1 if it is not a plugin this host runs), its exports and imports.
    Inspect {
        /// A component (.wasm) or a pinned `oci://REGISTRY/REPO:TAG@sha256:…`.
        target: String,
        /// Reach the registry over plain HTTP (a local registry), not HTTPS.
        #[arg(long)]
        plain_http: bool,
    },
    /// Print a component's pin: the digest of its OCI artifact's manifest, which a manifest's
    /// `wasm: oci://…@sha256:…` names. For a .wasm file, the pin `plugin push` of it gives
    /// (and the file's own sha256, which is not one); for `oci://REGISTRY/REPO:TAG`, the pinned
    /// reference of what the registry serves under the tag now.
    Digest {
        /// A component (.wasm) or `oci://REGISTRY/REPO:TAG`.
        target: String,
        /// Reach the registry over plain HTTP (a local registry), not HTTPS.
        #[arg(long)]
        plain_http: bool,
    },
    /// Run a plugin's recorded cases offline: each folder of DIR holds events.jsonl, the
    /// tape.jsonl of its capability calls (from `plugin run --record`) and expect.yaml; exit 1
    /// if any case ends otherwise or its calls differ from its tape. An event the daemon would
    /// not deliver by the manifest's kinds, filter and delivery is `skipped`, not called.
    Test {
        #[command(flatten)]
        args: test::PluginTestCommand,
    },
    /// Print a job event as the daemon would hand it to a plugin — a job of a built-in kind
    /// in the given phase, made by that kind's normalizer and the real watch tracker — or with
    /// --fleet a fleet event as `handle-fleet` gets it, to try a plugin with
    /// `plugin run --event -`.
    SampleEvent {
        #[command(flatten)]
        args: sample_event::SampleEventArgs,
    },
}

/// Writes `text` to standard output, as the plugin tools print what they found. A reader that
/// went away (`jobrelay plugin inspect PLUGIN.wasm | head`) is not an error: what it wanted, it
/// got, and the command ends as it would have.
pub(crate) fn print_out(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(anyhow::Error::new(e).context("cannot write to standard output")),
        Ok(()) => Ok(()),
    }
}
