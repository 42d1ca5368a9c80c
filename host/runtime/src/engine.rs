//! The one wasmtime `Engine` of the process, its settings and its epoch ticker.
//!
//! There is one engine for every plugin and every version: compiled code, the instance pool and
//! the epoch counter are engine-wide, and a component compiled by one engine only runs in that
//! engine. Everything a single plugin may use (time, memory) is limited per `Store` instead, so
//! one engine serves plugins with different limits.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::thread;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use wasmtime::{
    Config, Enabled, Engine, EngineWeak, InstanceAllocationStrategy, PoolingAllocationConfig,
    WasmBacktraceDetails,
};

use super::error::RuntimeError;

/// The `runtime:` section of the main config file. Read once at start: the engine cannot be
/// rebuilt under running plugins, so changing it needs a restart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "snake_case", deny_unknown_fields)]
pub struct RuntimeSettings {
    /// How many plugin instances may be alive at once, over all plugins. Every call of a plugin
    /// holds one instance for its duration, so this bounds the calls in flight; a call beyond
    /// it fails with a retryable error. Sizes the instance pool.
    pub max_instances: u32,
    /// The most linear memory any one instance may have, in MiB: the ceiling for every
    /// manifest's `memory_mb`, and the virtual address space reserved per pool slot.
    pub max_memory_mb: u64,
    /// Granularity of call deadlines: how often the engine's epoch advances. A plugin that runs
    /// past its deadline is stopped within about one tick; a long-running call also yields its
    /// thread to other tasks once per tick. Written as milliseconds (`10`) or with a unit
    /// (`10ms`, `1s`).
    #[serde(with = "duration_text")]
    pub epoch_tick: Duration,
    /// Folder for compiled components, so a restart does not recompile unchanged plugins.
    /// Must be writable by jobrelay only. None: compile on every start.
    pub cache_dir: Option<PathBuf>,
    /// The most the files of `cache_dir` may hold, in MiB; past it the least recently used
    /// are deleted (one file is one distinct component, a few MB for a release Rust plugin,
    /// tens of MB for a Python or debug one).
    pub cache_max_mb: u64,
}

impl Default for RuntimeSettings {
    fn default() -> Self {
        RuntimeSettings {
            max_instances: 256,
            max_memory_mb: 512,
            epoch_tick: Duration::from_millis(10),
            cache_dir: None,
            cache_max_mb: 1024,
        }
    }
}

impl RuntimeSettings {
    /// The per-instance memory ceiling in bytes.
    pub fn max_memory_bytes(&self) -> u64 {
        self.max_memory_mb.saturating_mul(1 << 20)
    }

    /// What building the engine refuses, checked without building it (the main file's parse
    /// calls it, so `check`, the start and a live edit refuse the same values). Each message
    /// names the field as the main file writes it.
    pub fn validate(&self) -> Result<(), RuntimeError> {
        let invalid = |what: String| Err(RuntimeError::Settings(what));
        if self.max_instances == 0 {
            return invalid("runtime.max_instances: must be at least 1, got 0".into());
        }
        // A 32-bit linear memory cannot exceed 4 GiB.
        if self.max_memory_mb == 0 || self.max_memory_mb > 4096 {
            return invalid(format!(
                "runtime.max_memory_mb: must be from 1 to 4096, got {}",
                self.max_memory_mb
            ));
        }
        if self.cache_max_mb == 0 {
            return invalid("runtime.cache_max_mb: must be at least 1, got 0".into());
        }
        if self.epoch_tick < Duration::from_millis(1) || self.epoch_tick > Duration::from_secs(1) {
            return invalid(format!(
                "runtime.epoch_tick: must be from 1ms to 1s, got {:?}",
                self.epoch_tick
            ));
        }
        Ok(())
    }
}

/// Core instances, memories and tables budgeted per component instance. A Rust
/// `wasm32-wasip2` plugin holds its own module plus a few small shim modules, with one linear
/// memory and two tables (measured on `event-log` and `probe`); the factors leave headroom for
/// other toolchains. The pool counts are engine-wide budgets: a component needing more than
/// its share fails to instantiate only when the whole pool is full.
const CORE_INSTANCES_PER_COMPONENT: u32 = 16;
/// Bytes of a freed linear memory reset with `memset` and kept resident.
const KEEP_RESIDENT_MEMORY: usize = 1 << 20;
/// Bytes of a freed table reset with `memset` and kept resident.
const KEEP_RESIDENT_TABLE: usize = 64 << 10;
/// Slots decommitted together, one TLB shootdown per batch instead of per slot.
const DECOMMIT_BATCH: usize = 16;
const MEMORIES_PER_COMPONENT: u32 = 2;
const TABLES_PER_COMPONENT: u32 = 4;

/// Builds the engine with the pooling allocator, falling back to on-demand allocation when the
/// pool's address space cannot be reserved (a restrictive `ulimit -v`, say): slower calls beat
/// a host that does not start.
pub(crate) fn build_engine(settings: &RuntimeSettings) -> Result<Engine, RuntimeError> {
    settings.validate()?;
    let pooled = base_config(settings, Some(pooling_config(settings)));
    match Engine::new(&pooled) {
        Ok(engine) => Ok(engine),
        Err(pool_error) => {
            tracing::warn!(
                error = %format!("{pool_error:#}"),
                "cannot reserve the instance pool; falling back to on-demand instance allocation"
            );
            Engine::new(&base_config(settings, None))
                .map_err(|e| RuntimeError::Engine(format!("{e:#}")))
        }
    }
}

fn pooling_config(settings: &RuntimeSettings) -> PoolingAllocationConfig {
    let n = settings.max_instances;
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(n)
        .total_core_instances(n.saturating_mul(CORE_INSTANCES_PER_COMPONENT))
        .total_memories(n.saturating_mul(MEMORIES_PER_COMPONENT))
        .total_tables(n.saturating_mul(TABLES_PER_COMPONENT))
        .total_stacks(n)
        .max_memory_size(ceiling_usize(settings))
        // A fresh instance per call makes slot recycling the hot path. By default every freed
        // slot is reset with `madvise`, and each of those costs a TLB shootdown across cores;
        // measured on the mysql-sync benchmark this was a visible share of host time. Small
        // plugins touch well under these sizes, so zeroing with `memset` keeps the pages
        // resident and avoids the faults when the slot is reused; the rest is decommitted in
        // batches. The price is RSS: at most this much per warm slot, and warm slots track
        // the number of calls in flight.
        .linear_memory_keep_resident(KEEP_RESIDENT_MEMORY)
        .table_keep_resident(KEEP_RESIDENT_TABLE)
        // On Linux 6.7 and later, reset only the pages a call dirtied (found with the
        // PAGEMAP_SCAN ioctl) instead of `memset`ting the whole kept-resident prefix on every
        // call; older kernels keep the plain reset.
        .pagemap_scan(Enabled::Auto)
        .decommit_batch_size(DECOMMIT_BATCH);
    pool
}

fn ceiling_usize(settings: &RuntimeSettings) -> usize {
    usize::try_from(settings.max_memory_bytes()).unwrap_or(usize::MAX)
}

fn base_config(settings: &RuntimeSettings, pool: Option<PoolingAllocationConfig>) -> Config {
    let mut config = Config::new();
    config
        // Deadlines: generated code checks the epoch at loop heads and function entries.
        .epoch_interruption(true)
        // Memory images are mapped copy-on-write, so a fresh instance per call does not copy
        // the plugin's data segments.
        .memory_init_cow(true)
        // Reserve only the ceiling per memory, not the 4 GiB default: with hundreds of pool
        // slots the default reserves terabytes of address space. The price is explicit bounds
        // checks in compiled code, small next to what a plugin call spends in host calls.
        .memory_reservation(settings.max_memory_bytes())
        // Trap messages carry function names from the name section; DWARF parsing is off so
        // behaviour does not depend on the environment (WASMTIME_BACKTRACE_DETAILS).
        .wasm_backtrace_max_frames(NonZeroUsize::new(16))
        .wasm_backtrace_details(WasmBacktraceDetails::Disable);
    if let Some(pool) = pool {
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    config
}

/// Advances the engine's epoch every tick on a plain thread, so deadlines work whether or not
/// the caller runs a tokio runtime. The thread holds a weak reference only and ends by itself
/// after the last clone of the engine is dropped.
pub(crate) fn start_epoch_ticker(engine: &Engine, tick: Duration) -> Result<(), RuntimeError> {
    let weak: EngineWeak = engine.weak();
    thread::Builder::new()
        .name("jobrelay-epoch".into())
        .spawn(move || {
            loop {
                thread::sleep(tick);
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            }
        })
        .map(|_| ())
        .map_err(|e| RuntimeError::Engine(format!("cannot start the epoch ticker thread: {e}")))
}

/// `Duration` as text in the config file: a bare integer is milliseconds, or an integer with
/// one of the units `us`, `ms`, `s`.
mod duration_text {
    use std::time::Duration;

    use serde::de::{self, Deserializer, Visitor};
    use serde::ser::Serializer;

    pub fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        let micros = value.as_micros();
        if micros.is_multiple_of(1000) {
            s.serialize_str(&format!("{}ms", micros / 1000))
        } else {
            s.serialize_str(&format!("{micros}us"))
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        d.deserialize_any(DurationVisitor)
    }

    struct DurationVisitor;

    impl Visitor<'_> for DurationVisitor {
        type Value = Duration;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("milliseconds, or a duration such as `10ms`, `500us` or `1s`")
        }

        fn visit_u64<E: de::Error>(self, ms: u64) -> Result<Duration, E> {
            Ok(Duration::from_millis(ms))
        }

        fn visit_i64<E: de::Error>(self, ms: i64) -> Result<Duration, E> {
            u64::try_from(ms)
                .map(Duration::from_millis)
                .map_err(|_| E::custom("a duration cannot be negative"))
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Duration, E> {
            parse(text).ok_or_else(|| E::invalid_value(de::Unexpected::Str(text), &self))
        }
    }

    pub(super) fn parse(text: &str) -> Option<Duration> {
        let text = text.trim();
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let number: u64 = number.parse().ok()?;
        match unit.trim() {
            "" | "ms" => Some(Duration::from_millis(number)),
            "us" => Some(Duration::from_micros(number)),
            "s" => Some(Duration::from_secs(number)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_with_defaults_and_units() {
        let s: RuntimeSettings =
            serde_yaml_ng::from_str("max_instances: 8\nepoch_tick: 5ms\n").expect("parses");
        assert_eq!(s.max_instances, 8);
        assert_eq!(s.max_memory_mb, 512);
        assert_eq!(s.epoch_tick, Duration::from_millis(5));
        let s: RuntimeSettings = serde_yaml_ng::from_str("epoch_tick: 20").expect("parses");
        assert_eq!(s.epoch_tick, Duration::from_millis(20));
        assert_eq!(duration_text::parse("1s"), Some(Duration::from_secs(1)));
        assert_eq!(
            duration_text::parse("250us"),
            Some(Duration::from_micros(250))
        );
        assert_eq!(duration_text::parse("1h"), None);
    }

    #[test]
    fn settings_refuse_unknown_fields_and_bad_values() {
        assert!(serde_yaml_ng::from_str::<RuntimeSettings>("max_instance: 8").is_err());
        let bad = RuntimeSettings {
            max_memory_mb: 0,
            ..RuntimeSettings::default()
        };
        assert!(bad.validate().is_err());
        let bad = RuntimeSettings {
            epoch_tick: Duration::ZERO,
            ..RuntimeSettings::default()
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn settings_round_trip() {
        let s = RuntimeSettings::default();
        let text = serde_yaml_ng::to_string(&s).expect("serialises");
        let back: RuntimeSettings = serde_yaml_ng::from_str(&text).expect("parses");
        assert_eq!(back, s);
    }
}
