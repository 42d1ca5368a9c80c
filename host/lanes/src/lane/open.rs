//! Opening a lane: the plugin's stored cursors read a page at a time into its queues, its
//! install time recorded (which jobs get their history), its writer started. Nothing is
//! resumed from the inbox here (`lane/inbox.rs` does that once the lane is open).

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use arc_swap::{ArcSwap, ArcSwapOption};
use parking_lot::Mutex;
use tokio::sync::{Notify, Semaphore};
use tokio_util::task::TaskTracker;

use super::stops::Stops;
use super::worker::NotLoaded;
use super::writer::LaneWriter;
use super::{Inner, Lane};
use crate::budget::MemoryBudget;
use crate::finalizer_book::FinalizerBook;
use crate::handler::Handler;
use crate::queue::Queues;
use crate::rate_limit::{RateLimits, Window};
use crate::read_back::ReadBacks;
use crate::settings::LaneSettings;
use crate::trace::DeliveryTrace;
use jobrelay_state::{DeliveryStore, StoreError};

/// Cursors read per page while a lane opens.
const CURSOR_PAGE: u32 = 10_000;

/// Stands for "installed before any job": the install time of a plugin that already had
/// cursors when install times began to be kept.
const BEFORE_ANY_JOB: &str = "1970-01-01T00:00:00Z";

/// The sliding windows of a lane's rate limits, all of them; a `burst` above its rate is
/// warned of (it asks for more than the window lets through, so it has no effect).
pub(super) fn windows(plugin: &str, settings: &LaneSettings) -> Vec<Window> {
    let mut windows = Vec::new();
    for (i, spec) in settings.rate_limits.iter().enumerate() {
        if spec.burst_above_rate() {
            tracing::warn!(
                plugin,
                limit = i,
                burst = spec.burst,
                per_second = spec.per_second,
                per_minute = spec.per_minute,
                "rate_limits: a burst above the rate has no effect; no more calls than the \
                 rate meet any one window"
            );
        }
        windows.extend(spec.windows());
    }
    windows
}

impl Lane {
    /// A lane starting from the plugin's stored cursors.
    pub async fn open(
        name: &str,
        plugin: Arc<dyn Handler>,
        settings: LaneSettings,
        store: Arc<dyn DeliveryStore>,
        book: Option<Arc<FinalizerBook>>,
    ) -> Result<Lane, StoreError> {
        Lane::open_with(
            name,
            Some(plugin),
            settings,
            store,
            book,
            MemoryBudget::unbounded(),
        )
        .await
    }

    /// A lane for a plugin that has no version yet: it takes and queues events like any lane
    /// (so finalizer holds wait for it and nothing is dropped), but calls nothing until
    /// [`reconfigure`](Lane::reconfigure) installs a version.
    pub async fn open_waiting(
        name: &str,
        settings: LaneSettings,
        store: Arc<dyn DeliveryStore>,
        book: Option<Arc<FinalizerBook>>,
    ) -> Result<Lane, StoreError> {
        Lane::open_with(name, None, settings, store, book, MemoryBudget::unbounded()).await
    }

    /// [`open`](Lane::open) with a handler, or [`open_waiting`](Lane::open_waiting) without;
    /// the events it keeps in memory count against `budget` (shared by every lane of the
    /// process), and wait only in the store's inbox when it has no room.
    pub async fn open_with(
        name: &str,
        plugin: Option<Arc<dyn Handler>>,
        settings: LaneSettings,
        store: Arc<dyn DeliveryStore>,
        book: Option<Arc<FinalizerBook>>,
        budget: Arc<MemoryBudget>,
    ) -> Result<Lane, StoreError> {
        let serving = plugin.is_some();
        let plugin = plugin.unwrap_or_else(|| Arc::new(NotLoaded(name.to_string())));
        // A page at a time: a million cursors read whole would hold several times the memory
        // the lane keeps of them.
        let mut queues = Queues::within(budget.clone(), name, &[]);
        let mut after: Option<(String, String)> = None;
        loop {
            let at = after.as_ref().map(|(c, u)| (c.as_str(), u.as_str()));
            let page = store.cursors_page(name, at, CURSOR_PAGE).await?;
            queues.add_cursors(|_| true, &page);
            if page.len() < CURSOR_PAGE as usize {
                break;
            }
            after = page.last().map(|c| (c.cluster.clone(), c.uid.clone()));
        }
        let (installed_at, first_install) =
            install_time(name, queues.jobs() > 0, store.as_ref()).await?;
        // A plugin some process may have called before: its calls of the last minute are not
        // known here, so every window counts as full at this opening (see
        // `crate::rate_limit`). One installed now has none behind it.
        let unknown_until = (!first_install).then(tokio::time::Instant::now);
        let concurrency = settings.concurrency.max(1);
        Ok(Lane {
            inner: Arc::new(Inner {
                name: name.to_string(),
                plugin: ArcSwap::from_pointee(plugin),
                limits: RateLimits::new(windows(name, &settings), unknown_until),
                settings: ArcSwap::from_pointee(settings),
                permits: ArcSwap::from_pointee(Semaphore::new(concurrency)),
                concurrency: AtomicUsize::new(concurrency),
                queues: Mutex::new(queues),
                writer: LaneWriter::start(name, store.clone(), budget),
                read_backs: ReadBacks::start(store.clone()),
                store,
                installed_at,
                filter_changed_at: ArcSwapOption::empty(),
                book,
                workers: TaskTracker::new(),
                stops: Stops::new(serving),
                counters: Default::default(),
                filter_warned: Mutex::new(None),
                trace: DeliveryTrace::default(),
                settled: Notify::new(),
                overflow: Default::default(),
            }),
        })
    }
}

/// The plugin's install time, recorded now if the store has none, and whether it was recorded
/// now (no process of this store has called the plugin before, so its rate limits start with
/// no calls behind them). A plugin that has cursors but no install time was installed by a
/// release that did not record it, long before the jobs it has not seen yet: those get their
/// history. A stored time that does not parse is logged and treated the same way.
///
/// "Recorded now" is the stored time being the one this opening offered, to the second: two
/// processes opening the same new plugin within one second take it as theirs both.
async fn install_time(
    plugin: &str,
    has_cursors: bool,
    store: &dyn DeliveryStore,
) -> Result<(Option<chrono::DateTime<chrono::FixedOffset>>, bool), StoreError> {
    let now = if !has_cursors {
        chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    } else {
        BEFORE_ANY_JOB.to_string()
    };
    let stored = store.install_time(plugin, &now).await?;
    let first_install = !has_cursors && stored == now;
    match chrono::DateTime::parse_from_rfc3339(&stored) {
        Ok(at) => Ok((Some(at), first_install)),
        Err(e) => {
            tracing::warn!(plugin, installed_at = %stored, error = %e,
                "the stored install time does not parse; every job gets its recorded history");
            Ok((None, false))
        }
    }
}
