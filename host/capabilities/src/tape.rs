//! Record and replay of what the host answers a plugin (`jobrelay plugin run --record FILE`,
//! `--replay FILE`, and the cases of `jobrelay plugin test`).
//!
//! What a plugin does depends on its event and on the answers its capability calls get: rows
//! from a database, a webhook's response, the bytes of a log, a key-value entry. Recording
//! those answers once against real services, and replaying them later, makes a plugin's
//! behaviour testable offline and deterministically: the same events and the same answers must
//! lead to the same calls and the same outcome.
//!
//! A tape is a list of [`Entry`]s — the call (`kv.get`, `sql.query`, `http.request`,
//! `job.annotate`, ...), its
//! arguments, the host's answer and the event being handled — in the order the plugin made
//! the calls. While recording, every call runs for real and its answer is appended. While
//! replaying, no service is touched: each call takes the next entry, which must be the same
//! call, for the same event, with the same arguments (for HTTP: method and URL, see
//! `http.rs`). Anything else is a [`Divergence`]: it is kept, the plugin gets an error answer
//! for that call, and the run fails. A recorded call the plugin no longer makes is one too.
//! Only the first divergence is reported: past it the plugin's path has left the tape's (it
//! got an error answer), so every later call would differ too and hide the one that matters.
//! Later calls get an error answer without a report. Arguments that differ are shown as the
//! paths that differ (`diff`), JSON inside a body's text included.
//!
//! Checks that need no service — grants, key and size limits, the HTTP allow-list — run in
//! both modes before the tape, so a replay still refuses what the manifest does not grant;
//! such refusals are not taped. Logging (`log.write`) is output, not an answer, and is not
//! taped.
//!
//! **The clock stands still.** Plugins put the time into what they send (a row's
//! `updated_at`, a signed webhook's timestamp, an archive manifest), which would make every
//! replay differ from its recording. So during a taped run the plugin's wall clock (WASI
//! `wall-clock`) reads one instant, the tape's: the time recording began, written in the
//! tape's first line and read back on replay. Monotonic time runs as usual (limits and
//! timeouts use it). Random numbers are not pinned: a plugin that sends random values
//! diverges on replay.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use parking_lot::{Mutex, MutexGuard};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

mod diff;

/// One call a plugin made and the answer it got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// The id of the event being handled; absent for the `init` of a load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// `interface.function`, e.g. `kv.get`, `sql.query`, `pod-logs.read`, `http.request`.
    pub call: String,
    /// The arguments, as the capability writes them.
    pub args: Value,
    /// The answer the plugin got.
    pub answer: Value,
}

/// A replay that went differently from its tape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("call {position}: {reason}")]
pub struct Divergence {
    /// The call's number on the tape, from 1.
    pub position: usize,
    /// What the plugin did and what the tape has there.
    pub reason: String,
}

/// A tape file that cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TapeError {
    /// The file could not be read (`--replay`, a test case's tape).
    #[error("cannot read the tape {path}: {source}")]
    Read {
        /// The tape's path, as given.
        path: String,
        /// Why the file system refused.
        #[source]
        source: std::io::Error,
    },
    /// The file could not be written (`--record`).
    #[error("cannot write the tape {path}: {source}")]
    Write {
        /// The tape's path, as given.
        path: String,
        /// Why the file system refused.
        #[source]
        source: std::io::Error,
    },
    /// A line that is no entry, or a first line (the header) that cannot be used.
    #[error("{path}, line {line}: not a tape entry: {reason}")]
    Parse {
        /// The tape's path, or what the text came from.
        path: String,
        /// The line's number, from 1.
        line: usize,
        /// The JSON decoder's error, or what is wrong with the header (an unknown format, a
        /// clock that is no RFC 3339 time).
        reason: String,
    },
}

/// Why a value on a tape cannot be read back as the answer it stands for. A replay keeps it
/// as a [`Divergence`], never a panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The value has another shape; the text says which one was expected.
    #[error("expected {0}")]
    Expected(&'static str),
    /// An object lacks a field.
    #[error("field `{0}` is missing")]
    MissingField(String),
    /// `{"base64": ...}` whose text is not Base64.
    #[error("bad base64: {0}")]
    Base64(#[from] base64::DecodeError),
    /// A variant whose message is not a string.
    #[error("the message of `{0}` is not a string")]
    MessageNotText(String),
    /// A variant the interface does not have; `of` names the interface's error, as in
    /// "an sql error".
    #[error("`{case}` is not {of}")]
    UnknownCase {
        /// The case as the tape names it.
        case: String,
        /// The interface's error, as in "an sql error".
        of: &'static str,
    },
    /// JSON that is no SQL value.
    #[error("{0} is not a value")]
    NotAValue(String),
    /// `{"float": ...}` whose text is not a number.
    #[error("`float` must be a number written as a string")]
    BadFloat,
    /// An HTTP header that is not a `[name, value]` pair.
    #[error("a header is [name, value]")]
    BadHeader,
    /// An HTTP status outside `u16`.
    #[error("status {0}")]
    BadStatus(u64),
    /// A whole number too large for its field.
    #[error("`{0}` is too large")]
    TooLarge(&'static str),
}

/// A tape as a file holds it: the instant the plugin's clock reads, and the calls.
#[derive(Debug, Clone, PartialEq)]
pub struct TapeFile {
    /// Time since the Unix epoch (whole milliseconds).
    pub clock: Duration,
    /// The calls, in the order the plugin made them.
    pub entries: Vec<Entry>,
}

/// The first line of a tape file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    /// The format's version: 1.
    tape: u32,
    /// The instant the plugin's wall clock reads, RFC 3339.
    clock: String,
}

/// Reads a tape file: a header line `{"tape": 1, "clock": "2026-11-26T05:00:00.000Z"}`, then
/// one entry per line; blank lines are skipped. Without the header, the clock reads the Unix
/// epoch.
pub fn read_file(path: &Path) -> Result<TapeFile, TapeError> {
    let text = std::fs::read_to_string(path).map_err(|source| TapeError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse(&text, &path.display().to_string())
}

/// A tape's text; `origin` names it in errors.
pub fn parse(text: &str, origin: &str) -> Result<TapeFile, TapeError> {
    let bad = |line: usize, reason: String| TapeError::Parse {
        path: origin.to_string(),
        line,
        reason,
    };
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .peekable();
    let mut clock = Duration::ZERO;
    if let Some((index, line)) = lines.peek().copied()
        && line.contains("\"tape\"")
    {
        lines.next();
        let header: Header =
            serde_json::from_str(line).map_err(|e| bad(index + 1, e.to_string()))?;
        if header.tape != 1 {
            return Err(bad(
                index + 1,
                format!("tape format {} is not known", header.tape),
            ));
        }
        let instant = chrono::DateTime::parse_from_rfc3339(&header.clock)
            .map_err(|e| bad(index + 1, format!("`clock`: {e}")))?;
        clock = Duration::from_millis(u64::try_from(instant.timestamp_millis()).unwrap_or(0));
    }
    let entries = lines
        .map(|(index, line)| serde_json::from_str(line).map_err(|e| bad(index + 1, e.to_string())))
        .collect::<Result<_, _>>()?;
    Ok(TapeFile { clock, entries })
}

/// Writes a tape file: its header, then the entries as JSON lines.
pub fn write_file(path: &Path, tape: &TapeFile) -> Result<(), TapeError> {
    let millis = i64::try_from(tape.clock.as_millis()).unwrap_or(i64::MAX);
    let clock = chrono::DateTime::from_timestamp_millis(millis)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let header = Header { tape: 1, clock };
    let mut text = serde_json::to_string(&header).unwrap_or_default();
    text.push('\n');
    for entry in &tape.entries {
        // An entry holds only strings and JSON values: it always encodes.
        text.push_str(&serde_json::to_string(entry).unwrap_or_default());
        text.push('\n');
    }
    std::fs::write(path, text).map_err(|source| TapeError::Write {
        path: path.display().to_string(),
        source,
    })
}

/// A tape being recorded or replayed, shared by every call of a run.
#[derive(Debug)]
pub struct Tape {
    replay: bool,
    /// On replay, what a call with other arguments than the tape's (same call, same event)
    /// is.
    other_arguments: OtherArguments,
    /// The instant the plugin's wall clock reads during the run.
    clock: Duration,
    state: Mutex<State>,
}

/// What a replayed call whose arguments differ from the tape's is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OtherArguments {
    /// A divergence (`plugin run --replay`, `plugin test`).
    Diverge,
    /// A change to the tape: answered as recorded, kept with its new arguments, noted
    /// (`plugin test --update`).
    Change,
    /// Answered as recorded, unremarked: the case asserts on its calls instead.
    Accept,
}

#[derive(Debug, Default)]
struct State {
    /// The tape being replayed (empty while recording).
    tape: Vec<Entry>,
    /// The calls made so far, with the answers given.
    made: Vec<Entry>,
    divergences: Vec<Divergence>,
    /// While updating: what the new tape changes of the old, one line each.
    changes: Vec<String>,
}

impl Tape {
    /// A tape that records every call as it runs; the clock reads now (whole milliseconds).
    pub fn recorder() -> Tape {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Tape {
            replay: false,
            other_arguments: OtherArguments::Diverge,
            clock: Duration::from_millis(u64::try_from(now.as_millis()).unwrap_or(0)),
            state: Mutex::default(),
        }
    }

    /// A tape that answers every call from `file`, in order, at its clock.
    pub fn player(file: TapeFile) -> Tape {
        Tape {
            replay: true,
            other_arguments: OtherArguments::Diverge,
            clock: file.clock,
            state: Mutex::new(State {
                tape: file.entries,
                ..State::default()
            }),
        }
    }

    /// A player that rewrites `file` as it goes: the same call for the same event with other
    /// arguments is answered as recorded and kept with its new arguments (a [`change`]);
    /// recorded calls the plugin no longer makes are dropped. Anything else — another call,
    /// more calls than recorded — has no recorded answer and stays a divergence: only a new
    /// recording can answer it.
    ///
    /// [`change`]: Tape::changes
    pub fn updater(file: TapeFile) -> Tape {
        Tape {
            other_arguments: OtherArguments::Change,
            ..Tape::player(file)
        }
    }

    /// A player that compares only which calls are made, for which event, in which order:
    /// their arguments may differ from the recorded ones, which answer them all the same.
    pub fn answers_only(file: TapeFile) -> Tape {
        Tape {
            other_arguments: OtherArguments::Accept,
            ..Tape::player(file)
        }
    }

    /// While updating: what the tape of the calls made ([`Tape::file`]) changes of the
    /// recorded one, one line each (after [`Tape::finish`]).
    pub fn changes(&self) -> Vec<String> {
        self.lock().changes.clone()
    }

    /// The instant the plugin's wall clock reads, since the Unix epoch.
    pub fn clock(&self) -> Duration {
        self.clock
    }

    /// The calls made so far at the tape's clock: the file `--record` writes.
    pub fn file(&self) -> TapeFile {
        TapeFile {
            clock: self.clock,
            entries: self.made(),
        }
    }

    /// Whether calls are answered from the tape (no service is touched).
    pub fn is_replay(&self) -> bool {
        self.replay
    }

    /// The calls made so far and the answers they got: the new tape when recording.
    pub fn made(&self) -> Vec<Entry> {
        self.lock().made.clone()
    }

    /// How many calls have been made so far.
    pub fn made_count(&self) -> usize {
        self.lock().made.len()
    }

    /// The calls made after the first `start`, with their answers.
    pub fn made_since(&self, start: usize) -> Vec<Entry> {
        self.lock()
            .made
            .get(start..)
            .map(<[Entry]>::to_vec)
            .unwrap_or_default()
    }

    /// Where a replay went differently so far.
    pub fn divergences(&self) -> Vec<Divergence> {
        self.lock().divergences.clone()
    }

    /// Ends a replay: every recorded call the plugin did not make is a divergence.
    pub fn finish(&self) {
        let mut state = self.lock();
        if !state.divergences.is_empty() {
            return; // the calls after the first divergence are not compared
        }
        let made = state.made.len();
        let left = state.tape.len().saturating_sub(made);
        if self.other_arguments == OtherArguments::Change {
            if left > 0 {
                state.changes.push(format!(
                    "{left} recorded call{} from call {} on dropped: the plugin no longer \
                     makes {}",
                    if left == 1 { "" } else { "s" },
                    made + 1,
                    if left == 1 { "it" } else { "them" }
                ));
            }
            return;
        }
        let missing = state.tape.get(made).map(|entry| Divergence {
            position: made + 1,
            reason: format!(
                "the tape has {} {} {}, which the plugin did not make{}",
                entry.call,
                entry.args,
                for_event(entry.event.as_deref()),
                match left {
                    0 | 1 => String::new(),
                    n => format!(" (nor the {} calls after it)", n - 1),
                }
            ),
        });
        state.divergences.extend(missing);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a list that every holder leaves whole: a panic elsewhere cannot tear it.
        self.state.lock()
    }
}

fn for_event(event: Option<&str>) -> String {
    match event {
        Some(id) => format!("for event {id}"),
        None => "at load".to_string(),
    }
}

/// The tape as one call's capabilities see it: the tape and the event being handled.
#[derive(Debug, Clone)]
pub struct CallTape {
    tape: Arc<Tape>,
    event: Option<Arc<str>>,
}

impl CallTape {
    /// The view of `tape` for a call that handles `event` (its id), or for a load's `init`.
    pub fn new(tape: &Arc<Tape>, event: Option<&str>) -> CallTape {
        CallTape {
            tape: tape.clone(),
            event: event.map(Arc::from),
        }
    }

    /// Whether calls are answered from the tape.
    pub fn replaying(&self) -> bool {
        self.tape.replay
    }

    /// Replay: the recorded answer to this call, or, when the call differs from the tape's
    /// next entry, a divergence kept on the tape and answered with `A::diverged`.
    pub fn replay<A: Answer>(&self, call: &str, args: Value) -> A {
        let mut state = self.tape.lock();
        let position = state.made.len() + 1;
        let event = self.event.as_deref().map(str::to_string);
        let expected = state.tape.get(position - 1).cloned();
        let outcome = match &expected {
            // Past the first divergence nothing is compared: the plugin's path has left the
            // tape's.
            _ if !state.divergences.is_empty() => {
                let first = state.divergences[0].position;
                Ok(A::diverged(format!("replay left the tape at call {first}")))
            }
            None => Err(format!(
                "the plugin called {call} {args} {}; the tape has no more calls",
                for_event(event.as_deref())
            )),
            Some(entry) if entry.call != call || entry.event != event => Err(format!(
                "the plugin called {call} {args} {}; the tape has {} {} {}",
                for_event(event.as_deref()),
                entry.call,
                entry.args,
                for_event(entry.event.as_deref())
            )),
            Some(entry)
                if entry.args != args && self.tape.other_arguments == OtherArguments::Diverge =>
            {
                let lines = diff::differences(&entry.args, &args, diff::Said::Replay);
                Err(format!(
                    "the plugin called {call} {}, as the tape does, with other arguments:\n    {}",
                    for_event(event.as_deref()),
                    lines.join("\n    ")
                ))
            }
            Some(entry) => {
                if entry.args != args && self.tape.other_arguments == OtherArguments::Change {
                    let lines = diff::differences(&entry.args, &args, diff::Said::Update);
                    state
                        .changes
                        .push(format!("call {position} ({call}): {}", lines.join("; ")));
                }
                A::from_tape(&entry.answer).map_err(|why| {
                    format!(
                        "the tape's answer to {call} cannot be read: {why}: {}",
                        entry.answer
                    )
                })
            }
        };
        let answer = outcome.unwrap_or_else(|reason| {
            state.divergences.push(Divergence { position, reason });
            // Short: the plugin may echo it into its own messages; the run reports the why.
            A::diverged(format!(
                "replay diverged at call {position} (the run's report says how)"
            ))
        });
        state.made.push(Entry {
            event,
            call: call.to_string(),
            args,
            answer: answer.to_tape(),
        });
        answer
    }

    /// Record: keeps the call and the answer it got.
    pub fn record<A: Taped>(&self, call: &str, args: Value, answer: &A) {
        let entry = Entry {
            event: self.event.as_deref().map(str::to_string),
            call: call.to_string(),
            args,
            answer: answer.to_tape(),
        };
        self.tape.lock().made.push(entry);
    }
}

/// Runs one call through the tape, if there is one: replaying, `real` is not run and the tape
/// answers; recording, `real` runs and its answer is kept; without a tape, `real` just runs.
/// `args` is built only when there is a tape.
pub async fn through<A: Answer>(
    tape: Option<&CallTape>,
    call: &str,
    args: impl FnOnce() -> Value,
    real: impl Future<Output = A>,
) -> A {
    match tape {
        None => real.await,
        Some(tape) if tape.replaying() => tape.replay(call, args()),
        Some(tape) => {
            let args = args();
            let answer = real.await;
            tape.record(call, args, &answer);
            answer
        }
    }
}

/// A value as it is written on a tape, and read back.
pub trait Taped: Sized {
    /// The value as JSON on the tape.
    fn to_tape(&self) -> Value;
    /// The value a tape's JSON stands for; an error names what does not fit.
    fn from_tape(value: &Value) -> Result<Self, DecodeError>;
}

/// An answer a call can give when its replay diverged: the interface's own error, so the
/// plugin goes on as it would after a failed call, and the run reports the divergence.
pub trait Answer: Taped {
    /// The error answer the plugin gets for a call that diverged, carrying `reason`.
    fn diverged(reason: String) -> Self;
}

/// An interface's error type, made from a divergence's reason.
pub trait FromDivergence {
    /// The error, as the interface would report a failed call, carrying `reason`.
    fn from_divergence(reason: String) -> Self;
}

/// `{"ok": T}` or `{"err": E}`.
impl<T: Taped, E: Taped> Taped for Result<T, E> {
    fn to_tape(&self) -> Value {
        match self {
            Ok(value) => json!({ "ok": value.to_tape() }),
            Err(error) => json!({ "err": error.to_tape() }),
        }
    }

    fn from_tape(value: &Value) -> Result<Self, DecodeError> {
        match (value.get("ok"), value.get("err")) {
            (Some(ok), None) => T::from_tape(ok).map(Ok),
            (None, Some(err)) => E::from_tape(err).map(Err),
            _ => Err(DecodeError::Expected("{\"ok\": ...} or {\"err\": ...}")),
        }
    }
}

impl<T: Taped, E: Taped + FromDivergence> Answer for Result<T, E> {
    fn diverged(reason: String) -> Self {
        Err(E::from_divergence(reason))
    }
}

impl FromDivergence for String {
    fn from_divergence(reason: String) -> String {
        reason
    }
}

/// `null`.
impl Taped for () {
    fn to_tape(&self) -> Value {
        Value::Null
    }

    fn from_tape(value: &Value) -> Result<(), DecodeError> {
        match value {
            Value::Null => Ok(()),
            _ => Err(DecodeError::Expected("null")),
        }
    }
}

impl Taped for bool {
    fn to_tape(&self) -> Value {
        Value::Bool(*self)
    }

    fn from_tape(value: &Value) -> Result<bool, DecodeError> {
        value
            .as_bool()
            .ok_or(DecodeError::Expected("true or false"))
    }
}

/// A plain answer with no error (`truncated`): a divergence answers `false`.
impl Answer for bool {
    fn diverged(_reason: String) -> bool {
        false
    }
}

impl Taped for u64 {
    fn to_tape(&self) -> Value {
        json!(self)
    }

    fn from_tape(value: &Value) -> Result<u64, DecodeError> {
        value
            .as_u64()
            .ok_or(DecodeError::Expected("a whole number"))
    }
}

impl Taped for String {
    fn to_tape(&self) -> Value {
        Value::String(self.clone())
    }

    fn from_tape(value: &Value) -> Result<String, DecodeError> {
        value
            .as_str()
            .map(str::to_string)
            .ok_or(DecodeError::Expected("a string"))
    }
}

/// Bytes: `{"text": "..."}` when they are UTF-8 (most logs and bodies, readable on the tape),
/// `{"base64": "..."}` otherwise.
impl Taped for Vec<u8> {
    fn to_tape(&self) -> Value {
        bytes_to_tape(self)
    }

    fn from_tape(value: &Value) -> Result<Vec<u8>, DecodeError> {
        bytes_from_tape(value)
    }
}

impl Taped for Vec<u64> {
    fn to_tape(&self) -> Value {
        json!(self)
    }

    fn from_tape(value: &Value) -> Result<Vec<u64>, DecodeError> {
        list_from_tape(value, u64::from_tape)
    }
}

/// `null` or the value.
impl<T: Taped> Taped for Option<T> {
    fn to_tape(&self) -> Value {
        self.as_ref().map_or(Value::Null, Taped::to_tape)
    }

    fn from_tape(value: &Value) -> Result<Option<T>, DecodeError> {
        match value {
            Value::Null => Ok(None),
            value => T::from_tape(value).map(Some),
        }
    }
}

/// Bytes as written on a tape (see the `Vec<u8>` impl).
pub fn bytes_to_tape(bytes: &[u8]) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(text) => json!({ "text": text }),
        Err(_) => base64_to_tape(bytes),
    }
}

/// Bytes always as `{"base64": ...}`, for values that must not read back as text (an SQL blob).
pub fn base64_to_tape(bytes: &[u8]) -> Value {
    json!({ "base64": BASE64.encode(bytes) })
}

/// Bytes read from a tape.
pub fn bytes_from_tape(value: &Value) -> Result<Vec<u8>, DecodeError> {
    if let Some(text) = value.get("text").and_then(Value::as_str) {
        return Ok(text.as_bytes().to_vec());
    }
    if let Some(encoded) = value.get("base64").and_then(Value::as_str) {
        return Ok(BASE64.decode(encoded)?);
    }
    Err(DecodeError::Expected(
        "{\"text\": ...} or {\"base64\": ...}",
    ))
}

/// A JSON list read item by item.
pub fn list_from_tape<T>(
    value: &Value,
    item: impl Fn(&Value) -> Result<T, DecodeError>,
) -> Result<Vec<T>, DecodeError> {
    value
        .as_array()
        .ok_or(DecodeError::Expected("a list"))?
        .iter()
        .map(item)
        .collect()
}

/// A WIT variant with a message, as `{"case": "message"}`.
pub fn case_to_tape(case: &str, message: &str) -> Value {
    json!({ case: message })
}

/// The case and message of a variant written by [`case_to_tape`].
pub fn case_from_tape(value: &Value) -> Result<(&str, &str), DecodeError> {
    let object = value
        .as_object()
        .filter(|o| o.len() == 1)
        .ok_or(DecodeError::Expected("{\"case\": \"message\"}"))?;
    let (case, message) = object
        .iter()
        .next()
        .ok_or(DecodeError::Expected("one case"))?;
    let message = message
        .as_str()
        .ok_or_else(|| DecodeError::MessageNotText(case.clone()))?;
    Ok((case.as_str(), message))
}

/// A field of a JSON object.
pub fn field<'a>(value: &'a Value, name: &str) -> Result<&'a Value, DecodeError> {
    value
        .get(name)
        .ok_or_else(|| DecodeError::MissingField(name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(tape: &CallTape, call: &str, key: &str) -> Result<Option<Vec<u8>>, String> {
        tape.replay(call, json!({ "key": key }))
    }

    #[test]
    fn a_replay_answers_in_order_and_reports_what_differs() {
        let entries = vec![
            Entry {
                event: Some("e1".into()),
                call: "kv.get".into(),
                args: json!({"key": "a"}),
                answer: json!({"ok": {"text": "one"}}),
            },
            Entry {
                event: Some("e1".into()),
                call: "kv.get".into(),
                args: json!({"key": "b"}),
                answer: json!({"ok": null}),
            },
            Entry {
                event: Some("e1".into()),
                call: "kv.delete".into(),
                args: json!({"key": "c"}),
                answer: json!({"ok": true}),
            },
        ];
        let tape = Arc::new(Tape::player(TapeFile {
            clock: Duration::ZERO,
            entries,
        }));
        let call = CallTape::new(&tape, Some("e1"));
        assert_eq!(answer(&call, "kv.get", "a"), Ok(Some(b"one".to_vec())));
        // Another key than recorded: a divergence, answered with the interface's error.
        let diverged = answer(&call, "kv.get", "x");
        assert!(diverged.is_err_and(|e| e.contains("replay diverged at call 2")));
        // Past the first divergence, calls are answered with an error and not compared: the
        // tape's third call, never made, is not reported either.
        let after = answer(&call, "kv.get", "c");
        assert!(after.is_err_and(|e| e.contains("left the tape at call 2")));
        tape.finish();
        let divergences = tape.divergences();
        assert_eq!(divergences.len(), 1, "{divergences:?}");
        assert_eq!(divergences[0].position, 2);
        assert!(
            divergences[0]
                .reason
                .contains(r#".key: the tape has "b", the plugin sent "x""#),
            "{divergences:?}"
        );
        assert_eq!(tape.made().len(), 3);

        // A plugin that makes fewer calls (and nothing else differs): the first call it did
        // not make is reported.
        let tape = Arc::new(Tape::player(TapeFile {
            clock: Duration::ZERO,
            entries: tape.made()[..1].to_vec(),
        }));
        tape.finish();
        let divergences = tape.divergences();
        assert_eq!(divergences.len(), 1, "{divergences:?}");
        assert!(divergences[0].reason.contains("did not make"));
    }

    #[test]
    fn the_event_is_part_of_the_match() {
        let tape = Arc::new(Tape::player(TapeFile {
            clock: Duration::ZERO,
            entries: vec![Entry {
                event: Some("e1".into()),
                call: "kv.get".into(),
                args: json!({"key": "a"}),
                answer: json!({"ok": null}),
            }],
        }));
        let call = CallTape::new(&tape, Some("e2"));
        assert!(answer(&call, "kv.get", "a").is_err());
        assert_eq!(tape.divergences().len(), 1);
    }

    #[test]
    fn an_unreadable_answer_is_a_divergence_not_a_panic() {
        let tape = Arc::new(Tape::player(TapeFile {
            clock: Duration::ZERO,
            entries: vec![Entry {
                event: None,
                call: "kv.get".into(),
                args: json!({"key": "a"}),
                answer: json!({"ok": 7}),
            }],
        }));
        let call = CallTape::new(&tape, None);
        assert!(answer(&call, "kv.get", "a").is_err());
        assert!(tape.divergences()[0].reason.contains("cannot be read"));
    }

    #[test]
    fn bytes_keep_text_readable_and_round_trip_anything() {
        assert_eq!(bytes_to_tape(b"hello"), json!({"text": "hello"}));
        let binary = vec![0u8, 159, 146, 150, 255];
        let written = bytes_to_tape(&binary);
        assert!(written.get("base64").is_some());
        assert_eq!(bytes_from_tape(&written), Ok(binary));
        assert!(bytes_from_tape(&json!({"base64": "***"})).is_err());
    }

    #[test]
    fn files_round_trip_with_their_clock_and_a_bad_line_is_named() {
        let dir = tempfile::tempdir().expect("temporary folder");
        let path = dir.path().join("tape.jsonl");
        let tape = TapeFile {
            clock: Duration::from_millis(1_795_000_000_123),
            entries: vec![Entry {
                event: None,
                call: "sql.execute".into(),
                args: json!({"connection": "embedded"}),
                answer: json!({"ok": 1}),
            }],
        };
        write_file(&path, &tape).expect("written");
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(
            text.starts_with(r#"{"tape":1,"clock":"2026-11-18T"#),
            "{text}"
        );
        assert_eq!(read_file(&path).expect("read"), tape);
        // Without a header the clock reads the epoch.
        let bare = parse(
            r#"{"call":"kv.get","args":{},"answer":{"ok":null}}"#,
            "bare",
        )
        .expect("a tape without its header");
        assert_eq!(bare.clock, Duration::ZERO);
        std::fs::write(&path, "\n{\"call\": 1}\n").expect("written");
        let error = read_file(&path).expect_err("a bad entry").to_string();
        assert!(error.contains("line 2"), "{error}");
        let error = parse(r#"{"tape":2,"clock":"2026-01-01T00:00:00Z"}"#, "future")
            .expect_err("an unknown format")
            .to_string();
        assert!(error.contains("format 2"), "{error}");
    }
}
