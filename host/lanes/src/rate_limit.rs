//! A lane's rate limits as sliding windows over the calls it made: a limit of N a period never
//! lets more than N calls meet any window of that length, from the lane's first call on,
//! across a reload that changes the limits, and across a restart (see below).
//!
//! Why not a token bucket (GCRA, what `governor` gives): a bucket of N a minute starts full
//! and refills while it drains, so its first minute lets N plus the minute's refill through —
//! about 27 for 20 a minute, where DingTalk and WeCom answer the 21st of any sixty seconds
//! with a throttle. A window over the calls themselves is the services' own rule.
//!
//! **What counts.** A call counts from the moment it is admitted (it starts at once) until it
//! ends; a window [`Window`] of N per P admits a call at `t` only while fewer than N calls
//! are running or ended after `t - P`. Counting up to the end, not only the start, is what
//! makes the limit hold for the requests a plugin makes anywhere within its calls: of any
//! N + 1 calls whose running times meet one window of length P, the last admitted found the
//! other N running or ended less than P before — so it was not admitted. Only calls made are
//! counted: a worker is admitted at the moment it calls, after it holds a permit of the
//! lane's concurrency and after every check that could still stop it.
//!
//! **Memory.** The log keeps the end times of the calls that ended within the last
//! [`LONGEST_PERIOD`] (no limit has a longer one), at most [`CallLog::capacity`] of them;
//! a call dropped for room leaves its end time as [`CallLog`]'s *unknown* mark, and a window
//! that needs more calls than the log holds treats every call it does not know of as ended at
//! that mark — later than it did, so it waits longer, never less.
//!
//! **A restart** loses the log. A lane that opens for a plugin some process may have called
//! before (the store knows its install) starts with the unknown mark at its opening: each
//! window counts as full at that moment, so the lane's first call waits one period of its
//! longest limit (at most a minute). A plugin installed at that opening has no calls behind
//! it and starts with an empty log.

use std::collections::VecDeque;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The longest period a limit can have (`per_minute`): an end older than this counts in no
/// window, so the log forgets it.
pub const LONGEST_PERIOD: Duration = Duration::from_secs(60);

/// Ends the log keeps at least, whatever the limits: enough that a reload raising or adding a
/// limit of up to this many calls still sees exactly the calls made before it.
pub const LOG_FLOOR: usize = 256;

/// One sliding window: at most `calls` calls meet any stretch of time `period` long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The most calls in one window; at least 1.
    pub calls: u32,
    /// The window's length; at most [`LONGEST_PERIOD`].
    pub period: Duration,
}

/// What a call that may not go now waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// This instant (another call may take the room first: ask again then).
    Until(Instant),
    /// One of the calls running now to end: as many are running as a window allows.
    ForAnEnd,
}

/// The calls a lane made, as far as its windows need them, and its windows: the pure part of
/// the rate limits, with the clock passed in, so a test can drive it with any times.
#[derive(Debug)]
pub struct CallLog {
    windows: Vec<Window>,
    /// Calls admitted and not ended: each counts in every window until it ends.
    running: u32,
    /// End times of calls, oldest first (recorded in the order they were told, the clock
    /// never going back).
    ended: VecDeque<Instant>,
    /// Calls may have ended up to this instant that `ended` does not hold (dropped for room,
    /// or made before a restart); `None`: the log holds every call that can still count.
    unknown_until: Option<Instant>,
}

impl CallLog {
    /// A log with no calls: `unknown_until` is `Some` when calls this log cannot know of may
    /// have ended up to then (a restart: the lane's opening).
    pub fn new(windows: Vec<Window>, unknown_until: Option<Instant>) -> CallLog {
        CallLog {
            windows,
            running: 0,
            ended: VecDeque::new(),
            unknown_until,
        }
    }

    /// The windows in force.
    pub fn windows(&self) -> &[Window] {
        &self.windows
    }

    /// Replaces the windows (a reload): the calls already made count under the new ones, so
    /// a limit lowered or added mid-burst holds for the windows that straddle the reload.
    pub fn set_windows(&mut self, windows: Vec<Window>) {
        self.windows = windows;
        self.keep_within(self.capacity());
    }

    /// The most ends kept: the largest window's count, and at least [`LOG_FLOOR`].
    pub fn capacity(&self) -> usize {
        self.windows
            .iter()
            .map(|w| w.calls as usize)
            .max()
            .unwrap_or(0)
            .max(LOG_FLOOR)
    }

    /// Calls admitted and not yet ended.
    pub fn running(&self) -> u32 {
        self.running
    }

    /// Admits a call at `now` if every window lets it go, and counts it as running from now
    /// until [`end`](Self::end); otherwise says what to wait for.
    pub fn admit(&mut self, now: Instant) -> Result<(), Wait> {
        let now = self.not_before_last(now);
        self.forget_before(now);
        let mut until: Option<Instant> = None;
        for window in &self.windows {
            match self.free_at(*window) {
                Free::Never => return Err(Wait::ForAnEnd),
                Free::At(at) if at > now => until = Some(until.map_or(at, |u| u.max(at))),
                Free::At(_) | Free::Now => {}
            }
        }
        match until {
            Some(at) => Err(Wait::Until(at)),
            None => {
                self.running += 1;
                Ok(())
            }
        }
    }

    /// A call admitted earlier ended at `now`.
    pub fn end(&mut self, now: Instant) {
        let now = self.not_before_last(now);
        self.running = self.running.saturating_sub(1);
        self.ended.push_back(now);
        self.forget_before(now);
        self.keep_within(self.capacity());
    }

    /// When `window` lets one more call go, from what the log holds.
    fn free_at(&self, window: Window) -> Free {
        let calls = window.calls.max(1);
        if self.running >= calls {
            return Free::Never;
        }
        // The (calls - running)-th latest end: a call may go once it is `period` old.
        let needed = (calls - self.running) as usize;
        let known = self.ended.len();
        let nth_latest = if known >= needed {
            self.ended.get(known - needed).copied()
        } else {
            // Calls the log does not know of ended at `unknown_until` at the latest.
            self.unknown_until
        };
        nth_latest.map_or(Free::Now, |end| Free::At(end + window.period))
    }

    /// Drops what no window can count any more at `now`.
    fn forget_before(&mut self, now: Instant) {
        let counts = |end: &Instant| now.saturating_duration_since(*end) < LONGEST_PERIOD;
        while self.ended.front().is_some_and(|e| !counts(e)) {
            self.ended.pop_front();
        }
        if self.unknown_until.is_some_and(|u| !counts(&u)) {
            self.unknown_until = None;
        }
    }

    /// Drops the oldest ends beyond `most`, keeping the latest dropped as the unknown mark.
    fn keep_within(&mut self, most: usize) {
        while self.ended.len() > most {
            if let Some(end) = self.ended.pop_front() {
                self.unknown_until = Some(self.unknown_until.map_or(end, |u| u.max(end)));
            }
        }
    }

    /// `now`, or the last end recorded if that is later: ends stay in order even when two
    /// callers read the clock in one order and reach the log in the other.
    fn not_before_last(&self, now: Instant) -> Instant {
        self.ended.back().map_or(now, |last| now.max(*last))
    }
}

/// When one window has room.
enum Free {
    Now,
    At(Instant),
    /// Not until a running call ends.
    Never,
}

/// A lane's rate limits: its [`CallLog`] behind a lock, read with the runtime's clock, and
/// the signal of a call ending, which the calls waiting for a running one to end wait on.
#[derive(Debug)]
pub(crate) struct RateLimits {
    log: Mutex<CallLog>,
    ended: Notify,
}

impl RateLimits {
    /// Limits with `windows` and no calls yet; `unknown_until` as [`CallLog::new`] takes it.
    pub(crate) fn new(windows: Vec<Window>, unknown_until: Option<Instant>) -> RateLimits {
        RateLimits {
            log: Mutex::new(CallLog::new(windows, unknown_until)),
            ended: Notify::new(),
        }
    }

    /// Replaces the windows, keeping the calls made (see [`CallLog::set_windows`]).
    pub(crate) fn set_windows(&self, windows: Vec<Window>) {
        self.log.lock().set_windows(windows);
    }

    /// Admits a call now, or says what to wait for. The clock is read under the lock, so the
    /// log's times are in the order the calls were admitted and ended.
    pub(crate) fn admit(&self) -> Result<CallSlot<'_>, Wait> {
        let mut log = self.log.lock();
        log.admit(Instant::now())?;
        Ok(CallSlot { limits: self })
    }

    /// Woken when a call ends; register (`enable`) before [`admit`](Self::admit), so an end
    /// in between is not missed.
    pub(crate) fn an_end(&self) -> tokio::sync::futures::Notified<'_> {
        self.ended.notified()
    }
}

/// A call admitted by the rate limits: it counts as running until this is dropped, when its
/// end is recorded — also when the call's future is dropped half way.
#[derive(Debug)]
pub(crate) struct CallSlot<'a> {
    limits: &'a RateLimits,
}

impl Drop for CallSlot<'_> {
    fn drop(&mut self) {
        self.limits.log.lock().end(Instant::now());
        self.limits.ended.notify_waiters();
    }
}

#[cfg(test)]
mod tests;
