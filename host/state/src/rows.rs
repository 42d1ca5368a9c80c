//! Reading cursors and dead letters back from rows: the same for every backend, so a row that
//! one backend refuses as damaged the other refuses too.

use super::cursor::Cursor;
use super::dead_letter::DeadLetter;
use super::dialect::{Kind, Value};
use jobrelay_contract::event::{JobEvent, Phase};

/// The columns of a cursor, in the order [`cursor`] reads them.
pub(super) const CURSOR_COLUMNS: &str = "plugin, cluster, uid, api_version, kind, namespace, \
                                         name, resource_version, phase, transition_time, deleted";
pub(super) const CURSOR_SHAPE: [Kind; 11] = [
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Bool,
];

/// The columns of a dead letter, in the order [`dead_letter`] reads them.
pub(super) const DEAD_LETTER_COLUMNS: &str =
    "seq, plugin, event_json, error, attempts, at, replay_requested";
pub(super) const DEAD_LETTER_SHAPE: [Kind; 7] = [
    Kind::Int,
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Int,
    Kind::Text,
    Kind::Bool,
];

/// What is wrong with a stored row (the store reports it as
/// [`StoreError::Corrupt`](super::StoreError::Corrupt), naming the store and the row's kind).
#[derive(Debug, thiserror::Error)]
pub(super) enum RowError {
    /// A column holds another type than the row's shape says (`found` is the value as read).
    #[error("expected {expected}, found {found}")]
    Column {
        expected: &'static str,
        found: String,
    },
    /// The phase is not one jobrelay knows.
    #[error("unknown phase {0:?}")]
    UnknownPhase(String),
    /// A dead letter's event JSON does not decode.
    #[error("seq {seq}: event: {source}")]
    Event {
        seq: i64,
        #[source]
        source: serde_json::Error,
    },
    /// A dead letter's attempt count does not fit.
    #[error("seq {seq}: attempts {attempts} out of range")]
    Attempts { seq: i64, attempts: i64 },
}

/// The values of one row, taken in column order.
struct Columns(std::vec::IntoIter<Value>);

impl Columns {
    fn text(&mut self) -> Result<String, RowError> {
        match self.0.next() {
            Some(Value::Text(v)) => Ok(v),
            other => Err(wrong("text", other)),
        }
    }

    fn int(&mut self) -> Result<i64, RowError> {
        match self.0.next() {
            Some(Value::Int(v)) => Ok(v),
            other => Err(wrong("an integer", other)),
        }
    }

    fn bool(&mut self) -> Result<bool, RowError> {
        match self.0.next() {
            Some(Value::Bool(v)) => Ok(v),
            other => Err(wrong("a boolean", other)),
        }
    }
}

fn wrong(expected: &'static str, found: Option<Value>) -> RowError {
    RowError::Column {
        expected,
        found: format!("{found:?}"),
    }
}

/// A cursor from the values of [`CURSOR_COLUMNS`]. The error says what is wrong with it.
pub(super) fn cursor(values: Vec<Value>) -> Result<Cursor, RowError> {
    let mut c = Columns(values.into_iter());
    let (plugin, cluster, uid) = (c.text()?, c.text()?, c.text()?);
    let (api_version, kind, namespace, name) = (c.text()?, c.text()?, c.text()?, c.text()?);
    let resource_version = c.text()?;
    let phase_text = c.text()?;
    let phase = parse_phase(&phase_text).ok_or(RowError::UnknownPhase(phase_text))?;
    Ok(Cursor {
        plugin,
        cluster,
        uid,
        api_version,
        kind,
        namespace,
        name,
        resource_version,
        phase,
        transition_time: c.text()?,
        deleted: c.bool()?,
    })
}

/// A dead letter from the values of [`DEAD_LETTER_COLUMNS`]. The error says what is wrong
/// with it.
pub(super) fn dead_letter(values: Vec<Value>) -> Result<DeadLetter, RowError> {
    let mut c = Columns(values.into_iter());
    let seq = c.int()?;
    let plugin = c.text()?;
    let event: JobEvent =
        serde_json::from_str(&c.text()?).map_err(|source| RowError::Event { seq, source })?;
    let error = c.text()?;
    let attempts = c.int()?;
    let attempts = u32::try_from(attempts).map_err(|_| RowError::Attempts { seq, attempts })?;
    Ok(DeadLetter {
        seq,
        plugin,
        event,
        error,
        attempts,
        at: c.text()?,
        replay_requested: c.bool()?,
    })
}

/// A stored phase name back to its phase: phases are stored by their serde name, the same
/// text as in event JSON.
pub(super) fn parse_phase(text: &str) -> Option<Phase> {
    use serde::Deserialize;
    use serde::de::IntoDeserializer;
    let de: serde::de::value::StrDeserializer<'_, serde::de::value::Error> =
        text.into_deserializer();
    Phase::deserialize(de).ok()
}

/// An inbox event from its row: `json` and `object` as version 6 writes them (the event
/// without its object, and the object's text), or, with no `object`, the whole event as rows
/// written before version 6 have it.
pub(super) fn stored_event(
    json: &str,
    object: Option<&str>,
) -> Result<JobEvent, serde_json::Error> {
    match object {
        Some(object) => JobEvent::from_parts(json, object.into()),
        None => serde_json::from_str(json),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_phase_round_trips_through_its_stored_text() {
        for phase in Phase::ALL {
            assert_eq!(parse_phase(phase.as_str()), Some(phase));
        }
        assert_eq!(parse_phase("Running"), None);
    }
}
