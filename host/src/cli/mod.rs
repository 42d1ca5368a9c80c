//! The command line: `run`, `check`, `demo`, `plugin new|run|test|push|sample-event`, `dead-letters`,
//! `finalizers`.

pub mod check;
pub mod dead_letters;
#[cfg(feature = "demo")]
pub mod demo;
pub mod finalizers;
pub mod plugin_new;
pub mod plugin_run;
pub mod plugin_test;
pub mod sample_event;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::telemetry::logging::LogFormat;

#[derive(Debug, Parser)]
#[command(
    name = "jobrelay",
    version,
    about = "Relays training-job changes from many Kubernetes clusters to WebAssembly plugins"
)]
pub struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Human, env = "JOBRELAY_LOG_FORMAT")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon on a config folder, following its changes.
    Run {
        /// The config folder (main file, clusters/, plugins/).
        #[arg(long, short, env = "JOBRELAY_CONFIG")]
        config: PathBuf,
    },
    /// Validate every config file, try the state store, compile every plugin and try every
    /// cluster; exit 1 on any problem. Loading a plugin runs its load-time `init` against what it is granted, as the
    /// daemon would: a plugin may create its tables there (see `--no-init`).
    Check {
        #[arg(long, short, env = "JOBRELAY_CONFIG")]
        config: PathBuf,
        /// Compile and link every plugin and check its grants, but run no plugin code: no
        /// `init`, so no tables or files of the plugins are created, and a config only `init`
        /// would refuse passes. Granted host directories that are missing are still created.
        #[arg(long)]
        no_init: bool,
        /// Seconds to wait for each cluster to answer.
        #[arg(long, default_value_t = 10)]
        cluster_timeout: u64,
    },
    /// Run the whole product on a simulated cluster: the three shipped plugins on local
    /// defaults, live progress, and the status endpoint. Needs `plugins/build.sh` first.
    #[cfg(feature = "demo")]
    Demo {
        /// Folder for config, state, tables and archive: created, or emptied if an earlier
        /// demo made it; a folder holding anything else is refused.
        #[arg(long, default_value = "target/demo")]
        dir: PathBuf,
        /// Folder with the built components; default: `target/plugins` beside this binary.
        #[arg(long)]
        plugins: Option<PathBuf>,
        /// Jobs to play; 0 plays until Ctrl-C.
        #[arg(long, default_value_t = 0)]
        jobs: usize,
        /// Milliseconds between lifecycle steps.
        #[arg(long, default_value_t = 700)]
        interval_ms: u64,
        /// Address of the status and metrics endpoint.
        #[arg(long, default_value = "127.0.0.1:9464")]
        listen: std::net::SocketAddr,
    },
    /// Plugin tools.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// jobrelay's finalizer on jobs.
    Finalizers {
        #[command(subcommand)]
        command: FinalizersCommand,
    },
    /// Print a shell completion script, e.g. `jobrelay completions bash >
    /// /etc/bash_completion.d/jobrelay`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// List, replay or drop dead letters; works beside a running daemon.
    DeadLetters {
        /// The config folder; accepted before or after `list`, `replay` or `drop`.
        #[arg(long, short, global = true, env = "JOBRELAY_CONFIG")]
        config: Option<PathBuf>,
        #[command(subcommand)]
        command: dead_letters::DeadLettersCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum FinalizersCommand {
    /// Remove jobrelay's finalizer from every job of every cluster (for uninstalling).
    Release {
        #[arg(long, short, env = "JOBRELAY_CONFIG")]
        config: PathBuf,
        /// Seconds allowed per cluster.
        #[arg(long, default_value_t = 120)]
        cluster_timeout: u64,
    },
}

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Create a plugin project in Rust: sources, manifest, build script, sample events, a test
    /// case and the SDK; `./build.sh` in it builds NAME.wasm.
    New {
        #[command(flatten)]
        args: plugin_new::PluginNewArgs,
    },
    /// Call a plugin with job events, without any cluster: loaded once, then one call per
    /// event, in order; exit 1 if any call failed or a replay went differently from its tape.
    Run {
        #[command(flatten)]
        args: plugin_run::PluginRunArgs,
        /// Print one JSON object per call (plugin, event, status, message, elapsed_ms,
        /// load_ms, host_calls) instead of text.
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
    /// Run a plugin's recorded cases offline: each folder of DIR holds events.jsonl, the
    /// tape.jsonl of its capability calls (from `plugin run --record`) and expect.yaml; exit 1
    /// if any case ends otherwise or its calls differ from its tape.
    Test {
        #[command(flatten)]
        args: plugin_test::PluginTestArgs,
    },
    /// Print a job event as the daemon would hand it to a plugin — a job of a built-in kind
    /// in the given phase, made by that kind's normalizer and the real watch tracker — to try
    /// a plugin with `plugin run --event -`.
    SampleEvent {
        /// batch-job, volcano-job, pytorch-job, mpi-job or mpi-job-v1.
        #[arg(long)]
        kind: String,
        /// pending, running, restarting, suspended, succeeded, failed, terminating or deleted.
        #[arg(long)]
        phase: String,
        /// The cluster the event names.
        #[arg(long, default_value = "example")]
        cluster: String,
        /// The phase the plugin saw before (a lane fills this in from its cursor).
        #[arg(long)]
        previous: Option<String>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("jobrelay").chain(args.iter().copied()))
    }

    /// `dead-letters` takes `--config` where the README writes it (after the action) and
    /// before it.
    #[test]
    fn dead_letters_take_config_before_or_after_the_action() {
        for args in [
            &["dead-letters", "list", "--config", "/etc/jobrelay"][..],
            &["dead-letters", "--config", "/etc/jobrelay", "list"][..],
            &[
                "dead-letters",
                "replay",
                "--config",
                "/etc/jobrelay",
                "--all",
            ][..],
            &["dead-letters", "drop", "-c", "/etc/jobrelay", "4", "7"][..],
        ] {
            let cli = parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            let Command::DeadLetters { config, .. } = cli.command else {
                panic!("{args:?}: not dead-letters");
            };
            assert_eq!(
                config.as_deref(),
                Some(std::path::Path::new("/etc/jobrelay"))
            );
        }
    }

    #[test]
    fn the_command_line_is_well_formed() {
        <Cli as clap::CommandFactory>::command().debug_assert();
    }

    #[test]
    fn the_other_commands_parse_as_documented() {
        for args in [
            &["run", "--config", "/etc/jobrelay"][..],
            &["check", "--config", "config"][..],
            &["finalizers", "release", "--config", "/etc/jobrelay"][..],
            &["plugin", "run", "x.wasm", "--event", "e.json"][..],
            &["--log-format", "json", "run", "--config", "c"][..],
            &["completions", "bash"][..],
        ] {
            parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        }
    }
}
