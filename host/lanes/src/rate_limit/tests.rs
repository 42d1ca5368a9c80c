//! The call log against a model: seeded random limits, bursts, call lengths, callers at once,
//! reloads and restarts, simulated on a clock the test moves (no time passes). What is
//! checked is the promise itself, counted over the whole history the simulation keeps, not
//! over what the log kept: no more than N calls meet any window of a limit's period, from the
//! first call on; and, with nothing unknown, each call goes as soon as that allows.

use super::*;

/// SplitMix64: a seeded generator, so every run simulates the same schedules.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// In `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.range(1, 100) <= percent
    }
}

/// One call the simulation made.
#[derive(Debug, Clone, Copy)]
struct Call {
    /// When it asked to go (the caller was free and the request had arrived).
    ready: Instant,
    start: Instant,
    end: Instant,
    /// Which generation of windows admitted it (a reload starts the next).
    generation: usize,
}

/// Random limits as a manifest would give them: 1 to 3, per second or per minute, some with
/// a burst below or above the rate.
fn random_windows(rng: &mut Rng) -> Vec<Window> {
    let mut windows = Vec::new();
    for _ in 0..rng.range(1, 3) {
        let per_minute = rng.chance(50);
        let rate = rng.range(1, 30) as u32;
        let burst = rng.chance(40).then(|| rng.range(1, 40) as u32);
        let spec = crate::settings::RateLimitSpec {
            per_second: (!per_minute).then_some(rate),
            per_minute: per_minute.then_some(rate),
            burst,
        };
        windows.extend(spec.windows());
    }
    windows
}

/// At most `window.calls` of the calls meet any stretch `window.period` long that also meets
/// `last`: the limit as the call admitted last under it saw it. (The worst stretches start at
/// an end: moving one later only loses calls until it passes the next end.)
fn check_window(calls: &[Call], last: &Call, window: Window, what: &str) {
    let candidates = calls
        .iter()
        .map(|c| c.end)
        .filter(|w| *w <= last.end && last.start < *w + window.period);
    for w in candidates {
        let meeting = calls
            .iter()
            .filter(|c| c.end >= w && c.start < w + window.period)
            .count();
        assert!(
            meeting <= window.calls as usize,
            "{what}: {meeting} calls meet a window of {:?} (limit {}) ending with the call at {:?}",
            window.period,
            window.calls,
            last.start,
        );
    }
}

/// Whether a call could go at `x` by the rule, counted over `before` (the calls admitted
/// before it): fewer than N of them running at `x` or ended after `x - P`, for each window.
fn allowed(before: &[Call], windows: &[Window], x: Instant) -> bool {
    windows.iter().all(|w| {
        let counted = before
            .iter()
            .filter(|c| c.start <= x && x.checked_sub(w.period).is_none_or(|from| c.end > from))
            .count();
        counted < w.calls as usize
    })
}

/// What one simulation does.
struct Schedule {
    /// Requests: when each arrives (from the start) and how long its call runs.
    requests: Vec<(Duration, Duration)>,
    /// Calls at once (the lane's concurrency).
    callers: usize,
    /// The windows, and the reloads: from this time on, these windows.
    windows: Vec<Window>,
    reloads: Vec<(Duration, Vec<Window>)>,
}

fn random_schedule(rng: &mut Rng) -> Schedule {
    let mut requests = Vec::new();
    // A burst at the start, then more bursts and strays over a few minutes.
    let burst = rng.range(1, 60);
    let mut at = Duration::ZERO;
    for n in 0..rng.range(burst, burst + 60) {
        if n >= burst {
            at += Duration::from_millis(if rng.chance(20) {
                rng.range(0, 40_000)
            } else {
                rng.range(0, 300)
            });
        }
        let long = if rng.chance(10) {
            rng.range(500, 5_000)
        } else {
            rng.range(0, 80)
        };
        requests.push((at, Duration::from_millis(long)));
    }
    let reloads = (0..rng.range(0, 2))
        .map(|_| {
            (
                Duration::from_millis(rng.range(0, 90_000)),
                random_windows(rng),
            )
        })
        .collect::<Vec<_>>();
    let mut reloads = reloads;
    reloads.sort_by_key(|(at, _)| *at);
    Schedule {
        requests,
        callers: rng.range(1, 4) as usize,
        windows: random_windows(rng),
        reloads,
    }
}

/// Runs `schedule` on `log` from `start`, the log's clock moved by the simulation alone;
/// returns the calls made, in the order they were admitted.
fn simulate(log: &mut CallLog, start: Instant, schedule: &Schedule) -> Vec<Call> {
    let mut calls: Vec<Call> = Vec::new();
    let mut running: Vec<usize> = Vec::new();
    let mut next_request = 0;
    let mut reloads = schedule.reloads.iter().peekable();
    let mut generation = 0;
    let mut now = start;
    // When each waiting request became ready: it arrived and a caller was free.
    let mut ready: Option<Instant> = None;
    loop {
        while let Some((at, windows)) = reloads.peek() {
            if start + *at > now {
                break;
            }
            log.set_windows(windows.clone());
            generation += 1;
            reloads.next();
        }
        // Ends first, in the order they happen.
        running.sort_by_key(|i| calls[*i].end);
        while let Some(i) = running.first().copied() {
            if calls[i].end > now {
                break;
            }
            log.end(calls[i].end);
            running.remove(0);
        }
        let mut wait = None;
        while next_request < schedule.requests.len() && running.len() < schedule.callers {
            let (arrives, length) = schedule.requests[next_request];
            if start + arrives > now {
                break;
            }
            let since = *ready.get_or_insert(now);
            match log.admit(now) {
                Ok(()) => {
                    calls.push(Call {
                        ready: since,
                        start: now,
                        end: now + length,
                        generation,
                    });
                    running.push(calls.len() - 1);
                    next_request += 1;
                    ready = None;
                }
                Err(w) => {
                    wait = Some(w);
                    break;
                }
            }
        }
        if next_request == schedule.requests.len() && running.is_empty() {
            return calls;
        }
        // A call that took no time ends at once: its end first, then ask again.
        if running.iter().any(|i| calls[*i].end <= now) {
            continue;
        }
        let mut next: Vec<Instant> = running.iter().map(|i| calls[*i].end).collect();
        if let Some((at, _)) = reloads.peek() {
            next.push(start + *at);
        }
        match wait {
            Some(Wait::Until(at)) => next.push(at),
            Some(Wait::ForAnEnd) => {}
            None if running.len() < schedule.callers => {
                if let Some((arrives, _)) = schedule.requests.get(next_request) {
                    next.push(start + *arrives);
                }
            }
            None => {}
        }
        let later = next.into_iter().filter(|t| *t > now).min();
        now = later.expect("something to wait for");
    }
}

/// The windows in force for each generation of `schedule`.
fn generations(schedule: &Schedule) -> Vec<Vec<Window>> {
    std::iter::once(schedule.windows.clone())
        .chain(schedule.reloads.iter().map(|(_, w)| w.clone()))
        .collect()
}

/// Every call, against the windows that admitted it, over all of `calls`.
fn check_history(calls: &[Call], generations: &[Vec<Window>], what: &str) {
    for (k, last) in calls.iter().enumerate() {
        for window in &generations[last.generation] {
            check_window(&calls[..=k], last, *window, what);
        }
    }
}

#[test]
fn no_window_ever_meets_more_calls_than_its_limit_and_each_call_goes_as_soon_as_it_may() {
    for seed in 0..300 {
        let mut rng = Rng(seed);
        let schedule = random_schedule(&mut rng);
        let start = Instant::now();
        let mut log = CallLog::new(schedule.windows.clone(), None);
        let calls = simulate(&mut log, start, &schedule);
        assert_eq!(calls.len(), schedule.requests.len(), "seed {seed}");
        let generations = generations(&schedule);
        check_history(&calls, &generations, &format!("seed {seed}"));
        // As soon as it may: a call that waited could not have gone a nanosecond earlier
        // (counted over the calls that had started by then, under the windows of its own
        // generation; one a reload freed goes at the reload, which the simulation steps on).
        let reload_times: Vec<Instant> =
            schedule.reloads.iter().map(|(at, _)| start + *at).collect();
        for (k, call) in calls.iter().enumerate() {
            if call.start == call.ready || reload_times.contains(&call.start) {
                continue;
            }
            let earlier = call.start - Duration::from_nanos(1);
            let before: Vec<Call> = calls[..k]
                .iter()
                .filter(|c| c.start <= earlier)
                .copied()
                .collect();
            assert!(
                !allowed(&before, &generations[call.generation], earlier),
                "seed {seed}: call {k} waited until {:?} though it could go a nanosecond before",
                call.start - start
            );
        }
    }
}

#[test]
fn a_burst_at_the_start_gets_the_limit_at_once_and_the_rest_a_period_later() {
    // DingTalk's and WeCom's 20 a minute, and 27 messages at once: 20 go, 7 wait for the
    // minute — where a full token bucket let about 27 through in the first minute.
    let windows = crate::settings::RateLimitSpec {
        per_second: None,
        per_minute: Some(20),
        burst: None,
    }
    .windows();
    let schedule = Schedule {
        requests: vec![(Duration::ZERO, Duration::from_millis(30)); 27],
        callers: 4,
        windows: windows.clone(),
        reloads: Vec::new(),
    };
    let start = Instant::now();
    let mut log = CallLog::new(windows.clone(), None);
    let calls = simulate(&mut log, start, &schedule);
    let first_minute = calls
        .iter()
        .filter(|c| c.start < start + Duration::from_secs(60))
        .count();
    assert_eq!(first_minute, 20);
    check_history(&calls, &[windows], "27 at once");
    // The 21st goes a minute after the first call's end: the first to leave the window.
    assert_eq!(calls[20].start, calls[0].end + Duration::from_secs(60));
}

#[test]
fn a_restart_counts_the_last_run_as_having_filled_every_window() {
    for seed in 0..200 {
        let mut rng = Rng(1_000 + seed);
        let schedule = random_schedule(&mut rng);
        let start = Instant::now();
        let mut first = CallLog::new(schedule.windows.clone(), None);
        let mut calls = simulate(&mut first, start, &schedule);
        // The process stops when its last call ends, or is killed mid-call at a random time
        // (a killed call ends then: the requests it made went out before).
        let last_end = calls.iter().map(|c| c.end).max().unwrap_or(start);
        let killed_at = start + Duration::from_millis(rng.range(0, 120_000));
        let stopped = killed_at.min(last_end);
        calls.retain(|c| c.start <= stopped);
        for call in &mut calls {
            call.end = call.end.min(stopped);
            call.generation = 0;
        }
        // The next process opens later (or at once) with the windows of the last generation,
        // knowing nothing of the calls before.
        let windows = generations(&schedule).pop().unwrap_or_default();
        let opened = stopped + Duration::from_millis(rng.range(0, 3_000));
        let next = Schedule {
            requests: schedule
                .requests
                .iter()
                .map(|(_, length)| (Duration::ZERO, *length))
                .collect(),
            callers: schedule.callers,
            windows: windows.clone(),
            reloads: Vec::new(),
        };
        let mut second = CallLog::new(windows.clone(), Some(opened));
        let after = simulate(&mut second, opened, &next);
        let longest = windows.iter().map(|w| w.period).max().unwrap_or_default();
        assert!(
            after.first().is_none_or(|c| c.start >= opened + longest),
            "seed {seed}: the first call after a restart waits one longest period"
        );
        let before_restart = calls.len();
        calls.extend(after.into_iter().map(|c| Call { generation: 1, ..c }));
        for (k, last) in calls.iter().enumerate().skip(before_restart) {
            for window in &windows {
                check_window(
                    &calls[..=k],
                    last,
                    *window,
                    &format!("seed {seed}, restart"),
                );
            }
        }
    }
}

#[test]
fn ends_dropped_for_room_count_as_late_as_they_could_have_been() {
    let minute = Duration::from_secs(60);
    let window = |calls| Window {
        calls,
        period: minute,
    };
    let start = Instant::now();
    let mut log = CallLog::new(vec![window(500)], None);
    for n in 0..500 {
        let at = start + Duration::from_millis(n);
        log.admit(at).expect("room for 500");
        log.end(at);
    }
    assert_eq!(
        log.admit(start + Duration::from_secs(1)),
        Err(Wait::Until(start + minute))
    );
    // Lowered: the log keeps its floor, the latest of those it drops as the unknown mark.
    log.set_windows(vec![window(10)]);
    assert_eq!(log.capacity(), LOG_FLOOR);
    // Raised again past what it kept: the calls it no longer knows count as ended at the mark
    // (the 244th call, at 243 ms), later than the 400th latest really did (at 100 ms).
    log.set_windows(vec![window(400)]);
    let mark = start + Duration::from_millis(243);
    assert_eq!(
        log.admit(start + Duration::from_secs(2)),
        Err(Wait::Until(mark + minute))
    );
    assert!(log.admit(mark + minute).is_ok());
}

#[test]
fn running_calls_hold_their_room_until_they_end() {
    let start = Instant::now();
    let second = Duration::from_secs(1);
    let mut log = CallLog::new(
        vec![Window {
            calls: 2,
            period: second,
        }],
        None,
    );
    assert!(log.admit(start).is_ok() && log.admit(start).is_ok());
    assert_eq!(log.running(), 2);
    // Both still running ten seconds on: a third waits for an end, not for a time.
    assert_eq!(log.admit(start + 10 * second), Err(Wait::ForAnEnd));
    log.end(start + 10 * second);
    let from = start + 10 * second;
    assert_eq!(log.admit(from), Err(Wait::Until(from + second)));
    assert!(log.admit(from + second).is_ok());
    // A log without windows admits everything, and still counts (for a reload adding one).
    let mut open = CallLog::new(Vec::new(), None);
    for _ in 0..1_000 {
        assert!(open.admit(start).is_ok());
        open.end(start);
    }
    open.set_windows(vec![Window {
        calls: 5,
        period: second,
    }]);
    assert_eq!(open.admit(start), Err(Wait::Until(start + second)));
}
