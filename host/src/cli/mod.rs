//! The command line: what `jobrelay` accepts ([`Cli`]), and how a command's outcome becomes
//! the exit status ([`exit_code`]). `main.rs` parses it and hands each command to its module:
//!
//! - [`ops`] — the operator's commands on a deployment: `run`, `check`, `dead-letters`,
//!   `finalizers`, `jobs`, `demo`;
//! - [`plugin`] — the plugin author's tools: `plugin new|run|test|push|sample-event`.

pub mod ops;
pub mod plugin;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use self::ops::finalizers::FinalizersCommand;
use self::plugin::PluginCommand;
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
        /// The config folder (main file, clusters/, plugins/).
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
        /// Dial nothing: no cluster, cluster source, state store, database or registry is
        /// asked and no secret reference is resolved; the files are judged as the daemon
        /// judges them and each plugin compiled and linked without `init` (as `--no-init`).
        /// For a CI job or a pre-upgrade hook, where those are out of reach.
        #[arg(long)]
        offline: bool,
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
        /// Run this config folder (its main file, plugins and their files) against simulated
        /// clusters instead of the shipped plugins: one cluster per file of its clusters/
        /// folder, under the same name. It is copied into --dir; the original is not touched.
        #[arg(long)]
        config: Option<PathBuf>,
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
        command: ops::dead_letters::DeadLettersCommand,
    },
    /// The state store: `backup` writes a consistent copy of the SQLite state file, beside a
    /// running daemon.
    State {
        /// The config folder; accepted before or after `backup`.
        #[arg(long, short, global = true, env = "JOBRELAY_CONFIG")]
        config: Option<PathBuf>,
        #[command(subcommand)]
        command: ops::state::StateCommand,
    },
    /// Where every job of every watched cluster is and what each plugin did of it, asked of a
    /// running daemon's job view API.
    Jobs {
        /// The daemon's telemetry address (`telemetry.listen`), e.g. http://127.0.0.1:9464
        /// through `kubectl port-forward svc/jobrelay-metrics 9464`; accepted before or after
        /// `list` or `show`.
        #[arg(long, global = true, env = "JOBRELAY_SERVER", default_value = ops::jobs::DEFAULT_SERVER)]
        server: String,
        #[command(subcommand)]
        command: ops::jobs::JobsCommand,
    },
}

/// `jobrelay completions SHELL`: the completion script, from the same command definition.
pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<ExitCode> {
    let mut command = <Cli as clap::CommandFactory>::command();
    clap_complete::generate(shell, &mut command, "jobrelay", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}

/// Exit status 0 when everything `passed`, else 1 (a check or call failed; the command itself
/// worked).
pub(crate) fn passed(passed: bool) -> ExitCode {
    if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The exit status of a command's outcome. An error is printed, as a JSON log line under
/// `--log-format json` (every line on stderr is JSON then, the fatal one too), and exits 2.
pub fn exit_code(outcome: anyhow::Result<ExitCode>, log_format: LogFormat) -> ExitCode {
    match outcome {
        Ok(code) => code,
        Err(e) => {
            match log_format {
                LogFormat::Json => tracing::error!(error = %format!("{e:#}"), "fatal"),
                LogFormat::Human => eprintln!("error: {e:#}"),
            }
            ExitCode::from(2)
        }
    }
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

    /// `jobs` takes `--server` before or after the action, `-l` for the selector, repeated
    /// filters and a descending order written with its `-`.
    #[test]
    fn jobs_parse_as_documented() {
        use ops::jobs::{JobsCommand, ListOutput, ShowOutput};
        let cli = parse(&[
            "jobs",
            "list",
            "--server",
            "http://relay:9464",
            "--phase",
            "failed,running",
            "--phase",
            "pending",
            "-l",
            "team=nlp",
            "--sort",
            "-created",
            "-o",
            "wide",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        let Command::Jobs {
            server,
            command: JobsCommand::List(args),
        } = cli.command
        else {
            panic!("not jobs list");
        };
        assert_eq!(server, "http://relay:9464");
        assert_eq!(args.phase, ["failed,running", "pending"]);
        assert_eq!(args.selector.as_deref(), Some("team=nlp"));
        assert_eq!(args.sort.as_deref(), Some("-created"));
        assert_eq!(args.output, ListOutput::Wide);

        let cli = parse(&[
            "jobs",
            "--server",
            "127.0.0.1:1",
            "show",
            "east/ml/a",
            "-o",
            "json",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        let Command::Jobs {
            server,
            command: JobsCommand::Show(args),
        } = cli.command
        else {
            panic!("not jobs show");
        };
        assert_eq!(
            (server.as_str(), args.job.as_str()),
            ("127.0.0.1:1", "east/ml/a")
        );
        assert_eq!(args.output, ShowOutput::Json);

        assert!(parse(&["jobs", "list", "--limit", "0"]).is_err());
        assert!(parse(&["jobs", "list", "-o", "yaml"]).is_err());
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
