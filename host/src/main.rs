//! The `jobrelay` binary.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use jobrelay::cli::plugin_new::plugin_new;
use jobrelay::cli::plugin_run::plugin_run;
use jobrelay::cli::plugin_test::plugin_test;
use jobrelay::cli::{Cli, Command, FinalizersCommand, PluginCommand, check, sample_event};
use jobrelay::daemon::Daemon;
use jobrelay::telemetry::logging;

/// mimalloc rather than glibc's malloc: see the dependency's comment in Cargo.toml.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How long calls in flight may take to finish after a stop signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);
/// Exit status after losing the Lease (leader election): not a crash, but not a clean stop.
const LOST_LEASE_EXIT: u8 = 3;

/// `plugin push`: prints the pinned reference.
async fn push(wasm: &std::path::Path, target: &str, plain_http: bool) -> anyhow::Result<ExitCode> {
    let (registry, repository, tag) =
        jobrelay::oci::OciRef::parse_target(target).map_err(anyhow::Error::msg)?;
    let bytes = std::fs::read(wasm)
        .map_err(|e| anyhow::anyhow!("cannot read the component {}: {e}", wasm.display()))?;
    let mut settings = jobrelay::oci::OciSettings {
        plain_http: if plain_http {
            vec![registry.clone()]
        } else {
            Vec::new()
        },
        ..Default::default()
    };
    // Credentials from the environment, never the command line (it shows in `ps`).
    if let (Ok(username), Ok(password)) = (
        std::env::var("JOBRELAY_OCI_USERNAME"),
        std::env::var("JOBRELAY_OCI_PASSWORD"),
    ) {
        settings.credentials.insert(
            registry.clone(),
            jobrelay::oci::registry::OciCredential { username, password },
        );
    }
    let pinned = jobrelay::oci::registry::push(&settings, &registry, &repository, &tag, &bytes)
        .await
        .map_err(|e| anyhow::anyhow!("{target}: {e}"))?;
    println!("{pinned}");
    Ok(ExitCode::SUCCESS)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let log_format = cli.log_format;
    logging::init(log_format);
    let result = match cli.command {
        Command::Run { config } => run(&config).await,
        Command::Check {
            config,
            cluster_timeout,
            no_init,
        } => check::check(&config, Duration::from_secs(cluster_timeout), !no_init).await,
        Command::Plugin(PluginCommand::Run { args, json }) => {
            let given = args.manifest.is_some();
            plugin_run(&args).await.map(|outcome| {
                if let (false, Some(found)) = (given, &outcome.manifest) {
                    eprintln!("manifest: {} (found beside the component)", found.display());
                }
                if json {
                    for line in outcome.json_lines() {
                        println!("{line}");
                    }
                } else {
                    println!("{outcome}");
                }
                if outcome.is_ok() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            })
        }
        Command::Plugin(PluginCommand::New { args }) => plugin_new(&args).map(|project| {
            let dir = project.dir.display();
            println!("created {dir} ({} files); next:", project.files.len());
            println!("  cd {dir} && ./build.sh");
            println!("  jobrelay plugin run {}.wasm --event events/", args.name);
            println!(
                "  jobrelay plugin test tests/cases --wasm {}.wasm",
                args.name
            );
            ExitCode::SUCCESS
        }),
        Command::Plugin(PluginCommand::Push {
            wasm,
            target,
            plain_http,
        }) => push(&wasm, &target, plain_http).await,
        Command::Plugin(PluginCommand::Test { args }) => plugin_test(&args).await.map(|suite| {
            println!("{suite}");
            if suite.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }),
        Command::Plugin(PluginCommand::SampleEvent {
            kind,
            phase,
            cluster,
            previous,
        }) => sample_event::parse_phase(&phase)
            .and_then(|phase| {
                let previous = previous
                    .as_deref()
                    .map(sample_event::parse_phase)
                    .transpose()?;
                sample_event::sample_event(&kind, phase, &cluster, previous)
            })
            .and_then(|event| Ok(serde_json::to_string_pretty(&event)?))
            .map(|json| {
                println!("{json}");
                ExitCode::SUCCESS
            }),
        #[cfg(feature = "demo")]
        Command::Demo {
            dir,
            plugins,
            jobs,
            interval_ms,
            listen,
        } => {
            let args = jobrelay::cli::demo::DemoArgs {
                dir,
                plugins: plugins.unwrap_or_else(jobrelay::cli::demo::default_plugins_dir),
                jobs,
                interval: Duration::from_millis(interval_ms.max(1)),
                listen,
            };
            jobrelay::cli::demo::demo(&args)
                .await
                .map(|()| ExitCode::SUCCESS)
        }
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "jobrelay", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        Command::DeadLetters { config, command } => match config {
            Some(config) => dead_letters(&config, &command).await,
            None => Err(anyhow::anyhow!(
                "dead-letters needs the config folder: --config DIR (or JOBRELAY_CONFIG)"
            )),
        },
        Command::Finalizers {
            command:
                FinalizersCommand::Release {
                    config,
                    cluster_timeout,
                },
        } => jobrelay::cli::finalizers::release(&config, Duration::from_secs(cluster_timeout))
            .await
            .map(|(report, ok)| {
                print!("{report}");
                if ok {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // Under `--log-format json` every line on stderr is JSON, the fatal one too.
            match log_format {
                logging::LogFormat::Json => tracing::error!(error = %format!("{e:#}"), "fatal"),
                logging::LogFormat::Human => eprintln!("error: {e:#}"),
            }
            ExitCode::from(2)
        }
    }
}

async fn run(config: &std::path::Path) -> anyhow::Result<ExitCode> {
    // Listening from the very start: a stop signal during start-up is a clean stop too, not
    // the signal's default action.
    let mut stop = StopSignals::install()?;
    tracing::info!(config = %config.display(), "starting");
    let daemon = tokio::select! {
        started = Daemon::start(config) => started?,
        _ = stop.next() => {
            tracing::info!("stop signal during start-up; exiting");
            return Ok(ExitCode::SUCCESS);
        }
    };
    tokio::select! {
        _ = stop.next() => {}
        _ = daemon.lost_leadership() => {
            // Another replica may take the Lease soon: stop, and come back as a follower.
            let grace = daemon.loss_grace();
            daemon.shutdown(grace).await;
            tracing::error!("exiting after losing the Lease; a restart rejoins as a follower");
            return Ok(ExitCode::from(LOST_LEASE_EXIT));
        }
    }
    tracing::info!("stop signal received; shutting down (a second signal exits at once)");
    tokio::select! {
        _ = daemon.shutdown(SHUTDOWN_GRACE) => {}
        _ = stop.next() => {
            tracing::warn!("second stop signal; exiting now");
            return Ok(ExitCode::from(130));
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn dead_letters(
    config: &std::path::Path,
    command: &jobrelay::cli::dead_letters::DeadLettersCommand,
) -> anyhow::Result<ExitCode> {
    let (state, _) = jobrelay::config::state::ConfigState::load(config)
        .map_err(|(path, e)| anyhow::anyhow!("{}: {e}", path.display()))?;
    let store = jobrelay_state::open_store(&state.main().state).await?;
    let out = jobrelay::cli::dead_letters::run(store.as_ref(), command).await;
    store.close().await;
    let done = out?;
    stdout(&done.text)?;
    Ok(if done.missing {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Writes `text` to standard output. A reader that went away (`jobrelay dead-letters list |
/// head`) is not an error: what it wanted, it got.
fn stdout(text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// SIGTERM and SIGINT. Each is registered when installed, so none is missed in between.
struct StopSignals {
    term: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn install() -> anyhow::Result<StopSignals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(StopSignals {
            term: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    /// The next stop signal.
    async fn next(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}
