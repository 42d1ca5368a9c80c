//! `jobrelay plugin bench PLUGIN.wasm --event EVENTS`: how fast a plugin handles events, and
//! how much memory one call takes — with a fresh instance per call (the default) and with
//! instances reused (`instance_reuse: 256`), so an author sees what reuse buys before setting
//! it. The plugin is loaded as `plugin run` loads it; its capability calls are real (a
//! notifier posts): point its config at a local receiver, or bench it without grants.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use jobrelay_contract::event::JobEvent;
use jobrelay_runtime::PluginVersion;

use super::run::{PluginRunArgs, load, read_events};

/// Arguments of `plugin bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct PluginBenchArgs {
    /// The plugin component (.wasm).
    pub wasm: PathBuf,
    /// The events to call it with, in turn (as for `plugin run --event`).
    #[arg(long)]
    pub event: PathBuf,
    /// A plugin manifest for its config, limits and grants. Default: NAME.yaml beside the
    /// component NAME.wasm, if it exists.
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    /// Calls measured in each mode (after 10 not measured, to warm up).
    #[arg(long, default_value_t = 1000)]
    pub calls: u32,
    /// A SQL connection the manifest may grant, as NAME=URL; repeatable.
    #[arg(long = "sql", value_name = "NAME=URL", value_parser = super::run::parse_sql_arg)]
    pub sql: Vec<(String, String)>,
}

/// The calls made warming up, not measured: the first calls pay for lazy work (the instance
/// pool, page faults of the compiled code).
const WARM_UP: u32 = 10;

/// How one mode went.
#[derive(Debug, Clone)]
pub struct BenchResult {
    /// `fresh instance per call` or `instances reused (256)`.
    pub mode: String,
    pub calls: u32,
    pub failed: u32,
    /// Why the first failed call failed.
    pub first_failure: Option<String>,
    pub elapsed: Duration,
    /// Per call, sorted.
    pub latencies: Vec<Duration>,
    /// The most linear memory one instance used.
    pub memory_high_water_bytes: u64,
}

impl BenchResult {
    pub fn per_second(&self) -> f64 {
        f64::from(self.calls) / self.elapsed.as_secs_f64().max(f64::EPSILON)
    }

    fn quantile(&self, q: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let index = ((self.latencies.len() - 1) as f64 * q).round() as usize;
        self.latencies[index.min(self.latencies.len() - 1)]
    }
}

impl std::fmt::Display for BenchResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mean = self.elapsed / self.calls.max(1);
        write!(
            f,
            "{}: {} calls in {:.2} s = {:.0} calls/s; per call mean {} µs, p50 {} µs, p99 {} µs; \
             {} failed; linear memory high water {:.1} MiB",
            self.mode,
            self.calls,
            self.elapsed.as_secs_f64(),
            self.per_second(),
            mean.as_micros(),
            self.quantile(0.5).as_micros(),
            self.quantile(0.99).as_micros(),
            self.failed,
            self.memory_high_water_bytes as f64 / f64::from(1 << 20)
        )?;
        if let Some(why) = &self.first_failure {
            write!(f, "\n  the first failed call: {why}")?;
        }
        Ok(())
    }
}

/// `jobrelay plugin bench` as the binary runs it: one line per mode.
pub async fn command(args: &PluginBenchArgs) -> anyhow::Result<ExitCode> {
    for result in plugin_bench(args).await? {
        println!("{result}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Loads the plugin twice — a fresh instance per call, then instances reused 256 times — and
/// calls each `args.calls` times with the events in turn.
pub async fn plugin_bench(args: &PluginBenchArgs) -> anyhow::Result<Vec<BenchResult>> {
    if args.calls == 0 {
        bail!("--calls must be at least 1");
    }
    let events = read_events(&args.event)?;
    let run = PluginRunArgs {
        manifest: args.manifest.clone(),
        sql: args.sql.clone(),
        ..PluginRunArgs::new(args.wasm.clone(), args.event.clone())
    };
    let mut results = Vec::new();
    for (mode, reuse) in [
        ("fresh instance per call", 1),
        ("instances reused (256)", 256),
    ] {
        let loaded = load(&run, &events, None, Some(reuse)).await?;
        results.push(measure(mode, &loaded.version, &events, args.calls).await);
    }
    Ok(results)
}

async fn measure(
    mode: &str,
    version: &Arc<PluginVersion>,
    events: &[JobEvent],
    calls: u32,
) -> BenchResult {
    let mut turn = events.iter().cycle();
    for _ in 0..WARM_UP {
        if let Some(event) = turn.next() {
            let _ = version.handle(event).await;
        }
    }
    let mut latencies = Vec::with_capacity(calls as usize);
    let mut failed = 0;
    let mut first_failure = None;
    let started = Instant::now();
    for _ in 0..calls {
        let Some(event) = turn.next() else { break };
        let call = Instant::now();
        if let Err(e) = version.handle(event).await {
            failed += 1;
            first_failure.get_or_insert_with(|| e.to_string());
        }
        latencies.push(call.elapsed());
    }
    let elapsed = started.elapsed();
    latencies.sort();
    BenchResult {
        mode: mode.to_string(),
        calls,
        failed,
        first_failure,
        elapsed,
        latencies,
        memory_high_water_bytes: version.memory_high_water_bytes(),
    }
}
