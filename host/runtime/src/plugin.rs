//! One loaded plugin version, and how one call of it runs.
//!
//! A version is compiled and linked once (`InstancePre`). By default every call then gets a
//! fresh store and instance, so a trap, a runaway loop or a memory bomb can only ever fail the
//! call it happens in, and no state leaks from one event, or one plugin, to the next; the cost
//! is an instantiation per call (tens of microseconds with the pooling allocator). A manifest's
//! `instance_reuse: N` trades some of that isolation for speed: an instance that served a call
//! successfully is kept (up to 16 per version, `MAX_IDLE`) for up to N calls of the same plugin version, and
//! any failure retires it, since a trap or a timeout may have left it half-way through
//! anything. State never crosses plugins or versions either way.
//!
//! A call is bounded three ways:
//! - time: the store's epoch callback runs once per engine tick while wasm executes; past the
//!   call's deadline it stops the plugin, before that it yields the thread to other tasks, so a
//!   busy plugin cannot starve the async runtime. Time spent inside host functions is not wasm
//!   execution, so a wall-clock backstop (the limit plus a few ticks) drops the whole call if a
//!   host function holds it too long.
//! - memory: the store's limiter refuses growth past the manifest's limit (see `limits`).
//! - everything else a plugin can touch is decided by its grants (see the `jobrelay_capabilities` crate).

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::{Store, Trap, UpdateDeadline, WasmBacktrace};

use super::compile::ComponentSource;
use super::error::CallError;
use super::host_state::HostState;
use super::limits::MemoryBudget;
use super::world::{WorldInstance, WorldPre};
use jobrelay_bindings::HandlerError;
use jobrelay_capabilities as capabilities;
use jobrelay_capabilities::CallLabels;
use jobrelay_capabilities::Grants;
use jobrelay_contract::event::JobEvent;
use jobrelay_contract::text;

/// How many wasm frames a trap message carries.
const TRAP_FRAMES: usize = 6;
/// How many lines of the plugin's stderr a trap message carries.
const TRAP_STDERR_LINES: usize = 3;

/// One loaded version of one plugin: compiled, linked, its config accepted by its `init`.
/// Shared (`Arc`) by every call of that version; calls run concurrently.
pub struct PluginVersion {
    pub(crate) name: Arc<str>,
    pub(crate) version: Arc<str>,
    pub(crate) wasm_sha256: String,
    pub(crate) pre: WorldPre,
    pub(crate) timeout: Duration,
    pub(crate) memory_bytes: u64,
    /// Calls one instance may serve; 1 means a fresh instance per call.
    pub(crate) instance_reuse: u32,
    /// Instances that served a call successfully and may serve more (`instance_reuse` > 1).
    pub(crate) idle: parking_lot::Mutex<Vec<Warm>>,
    /// The most linear memory any call of this version used, in bytes.
    pub(crate) memory_high_water: std::sync::atomic::AtomicU64,
    pub(crate) config: Vec<(String, String)>,
    pub(crate) grants: Grants,
    pub(crate) services: Arc<capabilities::Services>,
    pub(crate) source: ComponentSource,
    pub(crate) epoch_tick: Duration,
}

impl std::fmt::Debug for PluginVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginVersion")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("wasm_sha256", &self.wasm_sha256)
            .field("timeout", &self.timeout)
            .field("memory_bytes", &self.memory_bytes)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// Most idle instances kept per version: enough for a lane's concurrency, few enough that
/// idle instances do not hold many pool slots.
const MAX_IDLE: usize = 16;

/// A live instance kept for its next call, with the store it lives in.
pub(crate) struct Warm {
    store: Store<HostState>,
    instance: WorldInstance,
    /// Calls it has served.
    calls: u32,
}

/// Why a load-time `init` failed, with what the host saw during it.
#[derive(Debug)]
pub(crate) struct InitFailure {
    pub error: CallError,
    /// The first "unavailable" answer a capability gave during `init` (a database down, a
    /// store unreachable): a refusal that followed it may pass once the peer is back.
    pub unavailable: Option<String>,
}

/// What the guest answered, before it is mapped to a `CallError`.
enum Answer {
    Handled,
    InitRefused(String),
    Handler(HandlerError),
}

/// Where a call failed: creating the instance (nothing of the plugin ran yet, unless its start
/// code trapped), or in the plugin's exports.
enum Failure {
    Instantiate(wasmtime::Error),
    Call(wasmtime::Error),
}

impl PluginVersion {
    /// The plugin's name (its manifest's file stem).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The caller-provided version id.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Hex sha256 of the component bytes.
    pub fn wasm_sha256(&self) -> &str {
        &self.wasm_sha256
    }

    /// The package of the plugin world the component targets (`jobrelay:plugin@0.2.2`).
    pub fn package(&self) -> &'static str {
        self.pre.package()
    }

    /// Whether the plugin takes fleet events: its component targets `jobrelay:plugin@0.2.1` or
    /// later, so it exports `handle-fleet`. A carrier of a fleet event given to [`handle`]
    /// of a plugin that does not is given up without calling it.
    ///
    /// [`handle`]: PluginVersion::handle
    pub fn takes_fleet_events(&self) -> bool {
        self.pre.takes_fleet_events()
    }

    /// Where the compiled code came from when this version was loaded.
    pub fn source(&self) -> ComponentSource {
        self.source
    }

    /// Whether the compiled code came from a cache (memory or disk) instead of a compilation.
    pub fn from_cache(&self) -> bool {
        self.source != ComponentSource::Compiled
    }

    /// The time limit of one call.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The memory limit of one call, in bytes.
    pub fn memory_limit_bytes(&self) -> u64 {
        self.memory_bytes
    }

    /// The most linear memory one call (instance) of this version has used so far, in bytes.
    pub fn memory_high_water_bytes(&self) -> u64 {
        self.memory_high_water
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Notes the memory a finished call used.
    fn note_memory(&self, state: &HostState) {
        self.memory_high_water.fetch_max(
            u64::try_from(state.memory.used_bytes()).unwrap_or(u64::MAX),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The grants as prepared at load (absolute, resolved host paths).
    pub fn grants(&self) -> &Grants {
        &self.grants
    }

    /// Handles one event: `init(config)` then `handle(event)` on a fresh instance, or
    /// `handle(event)` on a kept one that has already run `init` (`instance_reuse` > 1). For
    /// the carrier of a fleet event (`jobrelay_contract::fleet::is_fleet`) the export called is
    /// `handle-fleet`, with the fleet event it holds.
    ///
    /// Never panics on anything the plugin does; every failure is a `CallError` for this call
    /// only.
    pub async fn handle(&self, event: &JobEvent) -> Result<(), CallError> {
        self.run(Some(event)).await
    }

    /// Runs `init` alone on a throwaway instance; used at load to vet the configuration. On
    /// failure, also says whether a capability answered "unavailable" during it (see
    /// [`InitFailure`]).
    pub(crate) async fn check_init(&self) -> Result<(), InitFailure> {
        let (result, unavailable) = self.run_fresh(None).await;
        result.map_err(|error| InitFailure { error, unavailable })
    }

    async fn run(&self, event: Option<&JobEvent>) -> Result<(), CallError> {
        if let (Some(event), true) = (event, self.instance_reuse > 1) {
            return self.run_reusing(event).await;
        }
        self.run_fresh(event).await.0
    }

    /// One call on a fresh instance; also returns the first "unavailable" answer a capability
    /// gave during it.
    async fn run_fresh(&self, event: Option<&JobEvent>) -> (Result<(), CallError>, Option<String>) {
        let labels = CallLabels {
            plugin: self.name.clone(),
            version: self.version.clone(),
            event: event.map(|e| Arc::from(e.id.as_str())),
        };
        let mut store = match self.new_store(labels, event) {
            Ok(store) => store,
            Err(e) => return (Err(e), None),
        };
        let backstop = self.timeout + self.epoch_tick * 4;
        let answer = tokio::time::timeout(backstop, self.call(&mut store, event)).await;
        let state = store.data();
        state.caps.finish(&state.labels);
        self.note_memory(state);
        tracing::trace!(
            plugin = %state.labels.plugin,
            version = %state.labels.version,
            event = %state.labels.event_or_dash(),
            memory_bytes = state.memory.used_bytes(),
            "plugin call finished"
        );
        let unavailable = state.caps.unavailable().map(str::to_string);
        let result = match answer {
            Err(_elapsed) => Err(CallError::Timeout(self.timeout)),
            Ok(Ok(Answer::Handled)) => Ok(()),
            Ok(Ok(Answer::InitRefused(reason))) => {
                Err(CallError::InitRefused(text::reason(&reason)))
            }
            Ok(Ok(Answer::Handler(HandlerError::Retry(reason)))) => Err(retry(state, &reason)),
            Ok(Ok(Answer::Handler(HandlerError::GiveUp(reason)))) => {
                Err(CallError::GiveUp(text::reason(&reason)))
            }
            Ok(Err(failure)) => Err(self.classify(failure, state)),
        };
        (result, unavailable)
    }

    /// One call on a kept instance when there is one, else on a new one that is kept
    /// afterwards if the call succeeds and it has calls left. Any failure retires the
    /// instance: a trap or a timeout may have left it half-way through anything.
    async fn run_reusing(&self, event: &JobEvent) -> Result<(), CallError> {
        let labels = CallLabels {
            plugin: self.name.clone(),
            version: self.version.clone(),
            event: Some(Arc::from(event.id.as_str())),
        };
        let warm = self.idle.lock().pop();
        let (mut store, instance, calls) = match warm {
            Some(mut warm) => {
                self.renew(&mut warm.store, labels, event)?;
                (warm.store, Some(warm.instance), warm.calls)
            }
            None => (self.new_store(labels, Some(event))?, None, 0),
        };
        let backstop = self.timeout + self.epoch_tick * 4;
        let answer = tokio::time::timeout(backstop, async {
            let instance = match instance {
                Some(instance) => instance,
                None => match self.start(&mut store).await? {
                    Ok(instance) => instance,
                    Err(reason) => return Ok((Answer::InitRefused(reason), None)),
                },
            };
            let answer = self.call_handle(&mut store, &instance, event).await?;
            Ok((answer, Some(instance)))
        })
        .await;
        let state = store.data();
        state.caps.finish(&state.labels);
        self.note_memory(state);
        match answer {
            Err(_elapsed) => Err(CallError::Timeout(self.timeout)),
            Ok(Ok((Answer::Handled, instance))) => {
                if let Some(instance) = instance
                    && calls + 1 < self.instance_reuse
                {
                    store.data().caps.stdio.clear();
                    let mut idle = self.idle.lock();
                    if idle.len() < MAX_IDLE {
                        idle.push(Warm {
                            store,
                            instance,
                            calls: calls + 1,
                        });
                    }
                }
                Ok(())
            }
            Ok(Ok((Answer::InitRefused(reason), _))) => {
                Err(CallError::InitRefused(text::reason(&reason)))
            }
            Ok(Ok((Answer::Handler(HandlerError::Retry(reason)), _))) => Err(retry(state, &reason)),
            Ok(Ok((Answer::Handler(HandlerError::GiveUp(reason)), _))) => {
                Err(CallError::GiveUp(text::reason(&reason)))
            }
            Ok(Err(failure)) => Err(self.classify(failure, state)),
        }
    }

    /// Prepares a kept store for its next call: fresh capability state for this event (the
    /// captured output and the WASI context stay: the instance holds handles into them), a
    /// new deadline, and the epoch check armed again.
    fn renew(
        &self,
        store: &mut Store<HostState>,
        labels: CallLabels,
        event: &JobEvent,
    ) -> Result<(), CallError> {
        let deadline = Instant::now() + self.timeout;
        let scope = capabilities::CallScope {
            plugin: &self.name,
            grants: &self.grants,
            services: &self.services,
            event: Some(event),
            deadline,
        };
        let setup = capabilities::configure_all(&scope, false)
            .map_err(|e| CallError::Host(e.to_string()))?;
        store.data_mut().renew(setup.state, labels, deadline);
        store.set_epoch_deadline(1);
        Ok(())
    }

    fn new_store(
        &self,
        labels: CallLabels,
        event: Option<&JobEvent>,
    ) -> Result<Store<HostState>, CallError> {
        let deadline = Instant::now() + self.timeout;
        let scope = capabilities::CallScope {
            plugin: &self.name,
            grants: &self.grants,
            services: &self.services,
            event,
            deadline,
        };
        let setup = capabilities::configure_all(&scope, true)
            .map_err(|e| CallError::Host(e.to_string()))?;
        let mut wasi = setup.wasi.unwrap_or_default();
        let state = HostState::new(
            wasi.build(),
            setup.state,
            labels,
            MemoryBudget::new(self.memory_bytes),
            deadline,
        );
        let mut store = Store::new(self.pre.engine(), state);
        store.limiter(|state| &mut state.memory);
        // Check at the next tick, then every tick: stop past the deadline, else yield.
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|mut cx| {
            let state = cx.data_mut();
            if Instant::now() >= state.deadline {
                state.timed_out = true;
                Ok(UpdateDeadline::Interrupt)
            } else {
                Ok(UpdateDeadline::Yield(1))
            }
        });
        Ok(store)
    }

    async fn call(
        &self,
        store: &mut Store<HostState>,
        event: Option<&JobEvent>,
    ) -> Result<Answer, Failure> {
        let instance = match self.start(store).await? {
            Ok(instance) => instance,
            Err(reason) => return Ok(Answer::InitRefused(reason)),
        };
        match event {
            Some(event) => self.call_handle(store, &instance, event).await,
            None => Ok(Answer::Handled),
        }
    }

    /// A new instance with `init(config)` run; the inner error is `init`'s refusal.
    async fn start(
        &self,
        store: &mut Store<HostState>,
    ) -> Result<Result<WorldInstance, String>, Failure> {
        let instance = self
            .pre
            .instantiate_async(&mut *store)
            .await
            .map_err(Failure::Instantiate)?;
        let config: Vec<(&str, &str)> = self
            .config
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let init = instance.call_init(&mut *store, &config).await;
        Ok(init.map_err(Failure::Call)?.map(|()| instance))
    }

    async fn call_handle(
        &self,
        store: &mut Store<HostState>,
        instance: &WorldInstance,
        event: &JobEvent,
    ) -> Result<Answer, Failure> {
        let handled = instance.call_handle(&mut *store, event).await;
        match handled.map_err(Failure::Call)? {
            Ok(()) => Ok(Answer::Handled),
            Err(error) => Ok(Answer::Handler(error)),
        }
    }

    /// Maps a failed call (a trap, or an instantiation that did not happen) to its cause, using
    /// what the store saw: the deadline callback's flag and the memory limiter's refusal.
    fn classify(&self, failure: Failure, state: &HostState) -> CallError {
        let (error, instantiating) = match &failure {
            Failure::Instantiate(error) => (error, true),
            Failure::Call(error) => (error, false),
        };
        if state.timed_out || error.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
            return CallError::Timeout(self.timeout);
        }
        if state.memory.refused() {
            return CallError::MemoryLimit {
                limit_bytes: self.memory_bytes,
            };
        }
        let raised_by_wasm = error.downcast_ref::<Trap>().is_some()
            || error.downcast_ref::<WasmBacktrace>().is_some();
        if instantiating && !raised_by_wasm {
            // The instance could not be created (the pool is exhausted, say).
            return CallError::Host(format!("{error:#}"));
        }
        // Everything else is the plugin's doing, including values it returned that do not
        // fit the contract (invalid UTF-8, a bad variant), which wasmtime reports without a
        // trap code.
        CallError::Trap(text::reason(&describe_trap(
            error,
            &state.caps.stdio.stderr_tail(TRAP_STDERR_LINES),
        )))
    }
}

/// `<trap>; stderr: <last lines>; wasm backtrace: <frame> <- <frame> ...`, on one line. The
/// stderr tail comes first: for a Rust plugin it holds the panic message and location, while
/// frames of a stripped release build are only function indices.
/// A `retry` answer: a deferral when the call asked for one (`deferral.defer`), else a
/// failure to retry with backoff.
fn retry(state: &HostState, reason: &str) -> CallError {
    let reason = text::reason(reason);
    match state.caps.deferral.after() {
        Some(after) => CallError::Deferred { after, reason },
        None => CallError::Retry(reason),
    }
}

fn describe_trap(error: &wasmtime::Error, stderr_tail: &str) -> String {
    let mut text = match error.downcast_ref::<Trap>() {
        Some(trap) => trap.to_string(),
        None => error.root_cause().to_string(),
    };
    if !stderr_tail.is_empty() {
        let _ = write!(text, "; stderr: {stderr_tail}");
    }
    if let Some(trace) = error.downcast_ref::<WasmBacktrace>() {
        let rendered = trace.to_string();
        let frames: Vec<String> = rendered
            .lines()
            .skip(1) // "error while executing at wasm backtrace:"
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("at "))
            .take(TRAP_FRAMES)
            .map(compact_frame)
            .collect();
        if !frames.is_empty() {
            let _ = write!(text, "; wasm backtrace: {}", frames.join(" <- "));
            if trace.frames().len() > TRAP_FRAMES {
                text.push_str(" <- ...");
            }
        }
    }
    text
}

/// `"  3:   0x8626 - <unknown>!<wasm function 117>"` → `"0x8626 <wasm function 117>"`.
fn compact_frame(line: &str) -> String {
    let without_index = match line.split_once(':') {
        Some((index, rest)) if index.trim().chars().all(|c| c.is_ascii_digit()) => rest,
        _ => line,
    };
    without_index
        .trim()
        .replacen(" - ", " ", 1)
        .replacen("<unknown>!", "", 1)
}
