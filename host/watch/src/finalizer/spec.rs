//! The main file's `finalizers:` section: jobrelay's finalizer, for kinds with
//! `finalizer: true` — its name, whether a dead letter holds a deletion, and the longest a
//! deletion is held. Written here, beside the patches that add and remove the finalizer,
//! because its name is what they write on job objects; the lanes' hold book and the daemon
//! read the other two fields as written once the host's main file has checked them.

use serde::{Deserialize, Serialize};

/// How jobrelay's finalizer behaves, for kinds that enable it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FinalizerSettings {
    /// The finalizer's name on job objects.
    #[serde(default = "default_finalizer_name")]
    pub name: String,
    /// Whether a dead-lettered deletion still holds the job (until the dead letter is replayed
    /// and delivered, or `max_hold_seconds` passes). Default: a dead letter releases it.
    #[serde(default)]
    pub dead_letter_blocks: bool,
    /// The longest jobrelay holds a job's deletion, whatever the plugins do: deletion must never
    /// hang forever because of jobrelay.
    #[serde(default = "default_max_hold")]
    pub max_hold_seconds: u64,
}

fn default_finalizer_name() -> String {
    "jobrelay.io/delivery".into()
}
fn default_max_hold() -> u64 {
    3600
}

impl Default for FinalizerSettings {
    fn default() -> Self {
        FinalizerSettings {
            name: default_finalizer_name(),
            dead_letter_blocks: false,
            max_hold_seconds: default_max_hold(),
        }
    }
}

/// Why the `finalizers:` section is refused: a name the API server would refuse as a
/// finalizer, or a hold that ends before it starts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("finalizers: `name` must be qualified (domain/name) and max_hold_seconds at least 1")]
pub struct FinalizerError;

impl FinalizerSettings {
    /// Checks that the name is qualified and that a deletion is held at least a second.
    pub fn validate(&self) -> Result<(), FinalizerError> {
        if !self.name.contains('/') || self.max_hold_seconds == 0 {
            return Err(FinalizerError);
        }
        Ok(())
    }
}
