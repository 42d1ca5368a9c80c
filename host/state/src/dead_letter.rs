//! Dead letters: events a plugin gave up on, kept until an operator replays or drops them.

use serde::Serialize;

use super::error::StoreError;
use jobrelay_contract::event::JobEvent;

/// An event that a plugin failed to handle for good (it gave up, or every retry failed).
///
/// Serialises as one JSON object (the form of `jobrelay dead-letters list --json`), with the
/// event in its usual JSON form.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeadLetter {
    /// Unique in the file and never reused, even after a drop, so an id an operator copied
    /// from `list` can never hit a different dead letter later.
    pub seq: i64,
    /// The plugin that gave up on it; a replay delivers it to this plugin's lane only.
    pub plugin: String,
    /// The event as it was offered, so a replay delivers exactly what failed.
    pub event: JobEvent,
    /// The last error, as the plugin or the host reported it.
    pub error: String,
    /// How many deliveries were tried.
    pub attempts: u32,
    /// RFC 3339 time the event was dead-lettered.
    pub at: String,
    /// An operator asked for a replay that the daemon has not taken yet.
    pub replay_requested: bool,
}

/// Which dead letters an operator's `drop` or `replay` applies to, after validation.
///
/// The rules: explicit seqs select those seqs (only within `plugin` if one is given);
/// no seqs with a plugin selects all of that plugin; no seqs and no plugin selects everything,
/// but only when `all` says so explicitly. Seqs together with `all` are refused as ambiguous.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection<'a> {
    /// Restrict to this plugin.
    pub plugin: Option<&'a str>,
    /// None: every dead letter (of `plugin`, if given). Some: exactly these seqs.
    pub seqs: Option<&'a [i64]>,
}

impl<'a> Selection<'a> {
    /// Validates the arguments of [`DeliveryStore::drop_dead_letters`] and
    /// [`DeliveryStore::request_replay`].
    ///
    /// [`DeliveryStore::drop_dead_letters`]: super::DeliveryStore::drop_dead_letters
    /// [`DeliveryStore::request_replay`]: super::DeliveryStore::request_replay
    pub fn new(plugin: Option<&'a str>, seqs: &'a [i64], all: bool) -> Result<Self, StoreError> {
        match (seqs.is_empty(), plugin, all) {
            (false, _, true) => Err(StoreError::InvalidSelection(
                "give either dead-letter ids or --all, not both".into(),
            )),
            (false, _, false) => Ok(Selection {
                plugin,
                seqs: Some(seqs),
            }),
            (true, Some(_), _) | (true, None, true) => Ok(Selection { plugin, seqs: None }),
            (true, None, false) => Err(StoreError::InvalidSelection(
                "no dead letters selected: give their ids, or --all (with --plugin to limit it to one plugin)"
                    .into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_rules() {
        let ids = [1_i64, 2];
        let s = Selection::new(Some("p"), &ids, false).expect("ids with plugin");
        assert_eq!(s.seqs, Some(&ids[..]));
        assert_eq!(s.plugin, Some("p"));
        let s = Selection::new(None, &ids, false).expect("ids alone");
        assert_eq!(s.plugin, None);
        let s = Selection::new(Some("p"), &[], false).expect("a whole plugin");
        assert_eq!(s.seqs, None);
        let s = Selection::new(None, &[], true).expect("everything, explicitly");
        assert_eq!(
            s,
            Selection {
                plugin: None,
                seqs: None
            }
        );
        assert!(matches!(
            Selection::new(None, &[], false),
            Err(StoreError::InvalidSelection(_))
        ));
        assert!(matches!(
            Selection::new(None, &ids, true),
            Err(StoreError::InvalidSelection(_))
        ));
    }
}
