//! Archive calls on a tape (see `tape.rs`): how the archive's errors are written down and read
//! back, and what a diverged replay answers.
//!
//! Apart from the interface so that the tape's format for the archive is in one place.

use crate::tape::{self, DecodeError, FromDivergence, Taped};
use jobrelay_bindings::jobrelay::plugin::archive::Error as ArchiveError;

/// `{"invalid-key": "..."}`, `{"too-large": "..."}` or `{"unavailable": "..."}`.
impl Taped for ArchiveError {
    fn to_tape(&self) -> serde_json::Value {
        match self {
            ArchiveError::InvalidKey(m) => tape::case_to_tape("invalid-key", m),
            ArchiveError::TooLarge(m) => tape::case_to_tape("too-large", m),
            ArchiveError::Unavailable(m) => tape::case_to_tape("unavailable", m),
        }
    }

    fn from_tape(value: &serde_json::Value) -> Result<ArchiveError, DecodeError> {
        match tape::case_from_tape(value)? {
            ("invalid-key", m) => Ok(ArchiveError::InvalidKey(m.into())),
            ("too-large", m) => Ok(ArchiveError::TooLarge(m.into())),
            ("unavailable", m) => Ok(ArchiveError::Unavailable(m.into())),
            (other, _) => Err(DecodeError::UnknownCase {
                case: other.into(),
                of: "an archive error",
            }),
        }
    }
}

impl FromDivergence for ArchiveError {
    fn from_divergence(reason: String) -> ArchiveError {
        ArchiveError::Unavailable(reason)
    }
}
