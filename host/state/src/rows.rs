//! Reading cursors and dead letters back from rows: the same for every backend, so a row that
//! one backend refuses as damaged the other refuses too.

use std::fmt::Display;

use sqlx::{ColumnIndex, Decode, Row, Type};

use super::cursor::Cursor;
use super::dead_letter::DeadLetter;
use super::error::StoreError;
use jobrelay_contract::event::{JobEvent, Phase};

/// How a backend reports a stored row it cannot read (naming its file or server): what kind of
/// row, and what is wrong with it.
pub(super) type Corrupt<'a> = &'a dyn Fn(&'static str, String) -> StoreError;

/// A cursor from the columns `plugin, cluster, uid, api_version, kind, namespace, name,
/// resource_version, phase, transition_time, deleted`.
pub(super) fn cursor<R>(row: &R, corrupt: Corrupt) -> Result<Cursor, StoreError>
where
    R: Row,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> bool: Decode<'r, R::Database> + Type<R::Database>,
    for<'c> &'c str: ColumnIndex<R>,
{
    let text = |column: &'static str| -> Result<String, StoreError> {
        row.try_get::<String, _>(column)
            .map_err(|e| corrupt("cursor", e.to_string()))
    };
    let phase_text = text("phase")?;
    let phase = parse_phase(&phase_text)
        .ok_or_else(|| corrupt("cursor", format!("unknown phase {phase_text:?}")))?;
    Ok(Cursor {
        plugin: text("plugin")?,
        cluster: text("cluster")?,
        uid: text("uid")?,
        api_version: text("api_version")?,
        kind: text("kind")?,
        namespace: text("namespace")?,
        name: text("name")?,
        resource_version: text("resource_version")?,
        phase,
        transition_time: text("transition_time")?,
        deleted: row
            .try_get::<bool, _>("deleted")
            .map_err(|e| corrupt("cursor", e.to_string()))?,
    })
}

/// A dead letter from the columns `seq, plugin, event_json, error, attempts, at,
/// replay_requested`; `A` is how the backend stores `attempts`.
pub(super) fn dead_letter<R, A>(row: &R, corrupt: Corrupt) -> Result<DeadLetter, StoreError>
where
    R: Row,
    A: Copy + Display,
    u32: TryFrom<A>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> bool: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> A: Decode<'r, R::Database> + Type<R::Database>,
    for<'c> &'c str: ColumnIndex<R>,
{
    let bad = |e: sqlx::Error| corrupt("dead letter", e.to_string());
    let seq: i64 = row.try_get("seq").map_err(bad)?;
    let event_json: String = row.try_get("event_json").map_err(bad)?;
    let event: JobEvent = serde_json::from_str(&event_json)
        .map_err(|e| corrupt("dead letter", format!("seq {seq}: event: {e}")))?;
    let attempts: A = row.try_get("attempts").map_err(bad)?;
    let attempts = u32::try_from(attempts).map_err(|_| {
        corrupt(
            "dead letter",
            format!("seq {seq}: attempts {attempts} out of range"),
        )
    })?;
    Ok(DeadLetter {
        seq,
        plugin: row.try_get("plugin").map_err(bad)?,
        event,
        error: row.try_get("error").map_err(bad)?,
        attempts,
        at: row.try_get("at").map_err(bad)?,
        replay_requested: row.try_get("replay_requested").map_err(bad)?,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_phase_round_trips_through_its_stored_text() {
        for phase in [
            Phase::Pending,
            Phase::Running,
            Phase::Restarting,
            Phase::Suspended,
            Phase::Succeeded,
            Phase::Failed,
            Phase::Terminating,
            Phase::Deleted,
            Phase::Unknown,
        ] {
            assert_eq!(parse_phase(phase.as_str()), Some(phase));
        }
        assert_eq!(parse_phase("Running"), None);
    }
}
