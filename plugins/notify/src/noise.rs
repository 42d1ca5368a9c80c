//! Noise control: a digest window and quiet hours, as pure state the notifier keeps in its kv
//! store between calls.
//!
//! **Digest** (`digest_window`): at most one message per window for each namespace × phase.
//! The first transition after a quiet window is sent at once; the ones that follow within the
//! window are listed in the [`Window`]'s pending list and their events deferred to the
//! window's end (the host's `deferral`: no retry attempt spent, nothing lost across a restart).
//! The first of them to come back sends one message listing every pending job and marks each
//! listed transition sent; the others then find theirs sent and return. A digest lists at most
//! [`MAX_PENDING`] jobs; more wait for the next window.
//!
//! **Quiet hours** (`quiet_hours`, `quiet_utc_offset`): between the two times nothing is sent;
//! each event is deferred to the end of the quiet period (and, with a digest window, listed,
//! so the morning brings one digest per namespace × phase instead of the night's every card).
//!
//! Everything here is arithmetic on the times given: the glue in `lib.rs` reads the clock and
//! the store.

use serde::{Deserialize, Serialize};

/// Jobs one digest lists at most.
pub const MAX_PENDING: usize = 50;

/// The noise settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Noise {
    /// The digest window, in seconds.
    pub digest_seconds: Option<u32>,
    pub quiet: Option<Quiet>,
}

/// A daily quiet period, in minutes of the day at a fixed UTC offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quiet {
    start: u32,
    end: u32,
    offset_minutes: i32,
}

const DAY_MINUTES: i64 = 24 * 60;

impl Quiet {
    /// Parses `HH:MM-HH:MM` (the period may cross midnight) and an offset `±HH:MM` (default
    /// UTC).
    pub fn parse(hours: &str, offset: Option<&str>) -> Result<Quiet, String> {
        let (start, end) = hours
            .split_once('-')
            .ok_or_else(|| format!("config `quiet_hours`: `{hours}` is not `HH:MM-HH:MM`"))?;
        let minute = |text: &str| {
            let (h, m) = text.trim().split_once(':')?;
            let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
            (h < 24 && m < 60).then_some(h * 60 + m)
        };
        let (Some(start), Some(end)) = (minute(start), minute(end)) else {
            return Err(format!(
                "config `quiet_hours`: `{hours}` is not `HH:MM-HH:MM` (00:00 to 23:59)"
            ));
        };
        if start == end {
            return Err(format!(
                "config `quiet_hours`: `{hours}` starts and ends at the same time"
            ));
        }
        let offset_minutes = match offset.map(str::trim) {
            None | Some("Z") => 0,
            Some(text) => parse_offset(text).ok_or_else(|| {
                format!("config `quiet_utc_offset`: `{text}` is not `+HH:MM` or `-HH:MM`")
            })?,
        };
        Ok(Quiet {
            start,
            end,
            offset_minutes,
        })
    }

    /// While `now_ms` (unix milliseconds) is in the quiet period: the seconds until it ends
    /// (at least 1).
    pub fn seconds_left(&self, now_ms: i64) -> Option<u32> {
        let local_ms = now_ms + i64::from(self.offset_minutes) * 60_000;
        let day_ms = DAY_MINUTES * 60_000;
        let of_day = local_ms.rem_euclid(day_ms);
        let (start, end) = (i64::from(self.start) * 60_000, i64::from(self.end) * 60_000);
        let inside = if start < end {
            (start..end).contains(&of_day)
        } else {
            of_day >= start || of_day < end
        };
        if !inside {
            return None;
        }
        let left_ms = (end - of_day).rem_euclid(day_ms);
        Some(seconds_up(left_ms))
    }
}

fn parse_offset(text: &str) -> Option<i32> {
    let (sign, rest) = match text.as_bytes().first()? {
        b'+' => (1, &text[1..]),
        b'-' => (-1, &text[1..]),
        _ => return None,
    };
    let (h, m) = rest.split_once(':')?;
    let (h, m): (i32, i32) = (h.parse().ok()?, m.parse().ok()?);
    (h <= 14 && (0..60).contains(&m)).then_some(sign * (h * 60 + m))
}

/// Milliseconds as whole seconds, rounded up, at least 1.
fn seconds_up(ms: i64) -> u32 {
    u32::try_from((ms + 999) / 1000).unwrap_or(u32::MAX).max(1)
}

/// Parses a window such as `30s`, `10m` or `1h` into seconds (1 s to a day).
pub fn parse_window(key: &str, text: &str) -> Result<u32, String> {
    let text = text.trim();
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => 0,
    };
    number
        .parse::<u32>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .filter(|s| (1..=86_400).contains(s))
        .ok_or_else(|| {
            format!(
                "config `{key}`: `{text}` is not a duration like `30s`, `10m` or `1h` (1 s to 24 h)"
            )
        })
}

/// One job waiting in a digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// The transition's key: marked sent when the digest goes.
    pub key: String,
    /// How the digest lists the job.
    pub line: String,
}

/// The digest state of one namespace × phase.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Window {
    /// When the last message of this namespace × phase went (unix milliseconds).
    pub last_sent_ms: Option<i64>,
    pub pending: Vec<Pending>,
}

/// What to do with a transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Not now: listed (unless the list is full), come back after `seconds`.
    Hold { seconds: u32 },
    /// Send one message for these jobs (the transition itself alone: its normal message).
    /// With a full list the transition decided on may not be among them: it then waits for
    /// the next window ([`Window::hold`] after [`Window::sent`]).
    Send { batch: Vec<Pending> },
}

impl Window {
    /// Decides on `job` at `now_ms`, listing it when it has to wait. `window` is in seconds.
    pub fn decide(&mut self, now_ms: i64, window: u32, job: Pending) -> Decision {
        if let Some(last) = self.last_sent_ms {
            let opens = last + i64::from(window) * 1000;
            if now_ms < opens {
                self.hold(job);
                return Decision::Hold {
                    seconds: seconds_up(opens - now_ms),
                };
            }
        }
        let mut batch: Vec<Pending> = self.pending.iter().take(MAX_PENDING).cloned().collect();
        if batch.len() < MAX_PENDING && !batch.iter().any(|p| p.key == job.key) {
            batch.push(job);
        }
        Decision::Send { batch }
    }

    /// Lists `job` to wait for the window's end (once; not beyond [`MAX_PENDING`]).
    pub fn hold(&mut self, job: Pending) {
        if self.pending.len() < MAX_PENDING && !self.pending.iter().any(|p| p.key == job.key) {
            self.pending.push(job);
        }
    }

    /// The batch went at `now_ms`: the window starts again and its jobs leave the list.
    pub fn sent(&mut self, now_ms: i64, batch: &[Pending]) {
        self.last_sent_ms = Some(now_ms);
        self.pending
            .retain(|p| !batch.iter().any(|b| b.key == p.key));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(n: u32) -> Pending {
        Pending {
            key: format!("east/u{n}/failed@t"),
            line: format!("job-{n}"),
        }
    }

    #[test]
    fn one_message_per_window_then_a_digest() {
        let mut w = Window::default();
        // The first goes at once.
        let Decision::Send { batch } = w.decide(0, 60, job(1)) else {
            panic!("the first is sent");
        };
        assert_eq!(batch, vec![job(1)]);
        w.sent(0, &batch);
        // The next two within the window wait for its end, listed once each.
        assert_eq!(w.decide(10_000, 60, job(2)), Decision::Hold { seconds: 50 });
        assert_eq!(w.decide(59_500, 60, job(3)), Decision::Hold { seconds: 1 });
        assert_eq!(w.decide(20_000, 60, job(2)), Decision::Hold { seconds: 40 });
        assert_eq!(w.pending, vec![job(2), job(3)]);
        // After it, the first to come back sends them all.
        let Decision::Send { batch } = w.decide(60_000, 60, job(3)) else {
            panic!("the window is over");
        };
        assert_eq!(batch, vec![job(2), job(3)]);
        w.sent(60_000, &batch);
        assert!(w.pending.is_empty());
        assert_eq!(w.last_sent_ms, Some(60_000));
        // Without a message in the last window, a job goes at once again.
        assert!(
            matches!(w.decide(200_000, 60, job(4)), Decision::Send { batch } if batch == vec![job(4)])
        );
    }

    #[test]
    fn a_full_list_waits_for_the_next_window() {
        let mut w = Window {
            last_sent_ms: Some(0),
            pending: Vec::new(),
        };
        for n in 0..(MAX_PENDING as u32 + 5) {
            w.decide(1000, 60, job(n));
        }
        assert_eq!(w.pending.len(), MAX_PENDING);
        let extra = job(MAX_PENDING as u32 + 1);
        let Decision::Send { batch } = w.decide(61_000, 60, extra.clone()) else {
            panic!("the window is over");
        };
        assert_eq!(batch.len(), MAX_PENDING);
        assert!(!batch.contains(&extra), "the list is full: it waits");
        w.sent(61_000, &batch);
        assert!(w.pending.is_empty());
        assert_eq!(
            w.decide(62_000, 60, extra.clone()),
            Decision::Hold { seconds: 59 }
        );
        assert_eq!(w.pending, vec![extra]);
    }

    #[test]
    fn quiet_hours_cross_midnight_at_an_offset() {
        let quiet = Quiet::parse("22:00-08:00", Some("+08:00")).expect("valid");
        // 2026-11-27 13:00 UTC is 21:00 at +08:00: not quiet.
        let t = 1_795_784_400_000;
        assert_eq!(quiet.seconds_left(t), None);
        // 14:30 UTC is 22:30 local: quiet for 9.5 hours.
        assert_eq!(quiet.seconds_left(t + 90 * 60_000), Some(9 * 3600 + 1800));
        // 23:59:59.5 UTC is 07:59:59.5 local: half a second left, rounded up.
        assert_eq!(quiet.seconds_left(t + 11 * 3_600_000 - 500), Some(1));
        assert_eq!(quiet.seconds_left(t + 11 * 3_600_000), None);

        let day = Quiet::parse("12:00-13:30", None).expect("valid");
        assert_eq!(day.seconds_left(12 * 3_600_000), Some(5400));
        assert_eq!(day.seconds_left(11 * 3_600_000), None);
        for bad in ["22:00", "25:00-01:00", "22:00-22:00", "a-b"] {
            assert!(Quiet::parse(bad, None).is_err(), "{bad}");
        }
        let error = Quiet::parse("22:00-08:00", Some("CST")).expect_err("offset");
        assert!(error.contains("`quiet_utc_offset`"), "{error}");
    }

    #[test]
    fn windows() {
        assert_eq!(parse_window("digest_window", "30s"), Ok(30));
        assert_eq!(parse_window("digest_window", "10m"), Ok(600));
        assert_eq!(parse_window("digest_window", " 1h "), Ok(3600));
        for bad in ["0s", "10", "2d", "25h", "m", "-1m"] {
            let error = parse_window("digest_window", bad).expect_err(bad);
            assert!(error.contains("`digest_window`"), "{error}");
        }
    }
}
