//! The `jobrelay` binary: parses the command line and hands each command to its module in
//! [`jobrelay::cli`], where the logic and its tests live.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
#[cfg(feature = "demo")]
use jobrelay::cli::ops::demo;
use jobrelay::cli::ops::{check, dead_letters, finalizers, jobs, run, state};
use jobrelay::cli::plugin::{PluginCommand, new, push, sample_event, test};
use jobrelay::cli::{self, Cli, Command};
use jobrelay::telemetry::logging;

/// mimalloc rather than glibc's malloc: see the dependency's comment in Cargo.toml.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let log_format = cli.log_format;
    logging::init(log_format);
    let outcome = match cli.command {
        Command::Run { config } => run::command(&config).await,
        Command::Check {
            config,
            cluster_timeout,
            no_init,
            offline,
        } => {
            let how = if offline {
                check::Reach::Offline
            } else if no_init {
                check::Reach::NoInit
            } else {
                check::Reach::Full
            };
            check::command(&config, Duration::from_secs(cluster_timeout), how).await
        }
        Command::Plugin(PluginCommand::Run { args, json }) => {
            cli::plugin::run::command(&args, json).await
        }
        Command::Plugin(PluginCommand::New { args }) => new::command(&args),
        Command::Plugin(PluginCommand::Push {
            wasm,
            target,
            plain_http,
        }) => push::command(&wasm, &target, plain_http).await,
        Command::Plugin(PluginCommand::Dev { args }) => cli::plugin::dev::command(&args).await,
        Command::Plugin(PluginCommand::Bench { args }) => cli::plugin::bench::command(&args).await,
        Command::Plugin(PluginCommand::Inspect { target, plain_http }) => {
            cli::plugin::inspect::command(&target, plain_http).await
        }
        Command::Plugin(PluginCommand::Digest { target, plain_http }) => {
            cli::plugin::digest::command(&target, plain_http).await
        }
        Command::Plugin(PluginCommand::Test { args }) => test::command(&args).await,
        Command::Plugin(PluginCommand::SampleEvent { args }) => sample_event::command(&args),
        #[cfg(feature = "demo")]
        Command::Demo {
            dir,
            plugins,
            jobs,
            interval_ms,
            listen,
            config,
        } => demo::command(dir, plugins, jobs, interval_ms, listen, config).await,
        Command::Completions { shell } => cli::completions(shell),
        Command::DeadLetters { config, command } => {
            dead_letters::command(config.as_deref(), &command).await
        }
        Command::Finalizers { command } => finalizers::command(&command).await,
        Command::State { config, command } => state::command(config.as_deref(), &command),
        Command::Jobs { server, command } => jobs::command(&server, &command).await,
    };
    cli::exit_code(outcome, log_format)
}
