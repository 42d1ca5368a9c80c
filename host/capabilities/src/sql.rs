//! The `jobrelay:plugin/sql` interface: statements on named connections the host owns.
//!
//! The main file defines connections by name (`sql.connections`); a manifest grants names
//! (`grants.sql: [main]`). The host builds one pool per connection at start and hands a plugin
//! only the pools of the names it was granted, so a plugin never sees a URL or a password and
//! cannot reach a database nobody granted it. One connection always exists: `embedded`, an
//! SQLite file of the plugin's own next to the state file (`embedded/<plugin>.db`), so a
//! plugin that needs a table works without any database server, and no plugin sees, fills or
//! locks another's tables through it.
//!
//! Values are bound, never spliced; `?` is the placeholder on both dialects. Results are
//! capped ([`MAX_ROWS`], [`MAX_RESULT_BYTES`]) so a careless `SELECT *` cannot blow up host
//! memory. Errors come back as values sorted into "denied", "unavailable" (worth a retry) and
//! "rejected" (the statement itself is wrong), which maps directly onto the handler's retry
//! or give-up.
//!
//! Its parts, one concept a file: `settings` (the main file's `sql:` section), `pools` (the
//! process's pools and the per-plugin `embedded` files), `driver` (statements on either
//! dialect), `decode` (columns as plugin values), `taped` (SQL calls on a tape), `interface`
//! (the calls as plugins make them now) and `v0_1` (the same calls for 0.1.0 plugins). This
//! file keeps what ties them together: the grant check and the per-call state.

mod decode;
mod driver;
mod interface;
mod pools;
mod settings;
mod taped;
mod v0_1;

use std::time::Instant;

use wasmtime::component::{HasSelf, Linker};

use super::Grants;
use super::tape::CallTape;
use super::{CallScope, Capability, GrantProblem, LoadScope, StoreSetup};
use jobrelay_bindings::jobrelay::plugin::sql as wit;
use jobrelay_bindings::v0_1::jobrelay::plugin::sql as older;

use wit::Error as SqlError;

pub use self::pools::{Database, Databases, EMBEDDED, EMBEDDED_CONNECTIONS, embedded_file_name};
pub use self::settings::{SqlConnection, SqlSettings};

/// Rows one query may return.
pub const MAX_ROWS: usize = 10_000;
/// Bytes of values one query may return (text and blobs counted by length, others as 8).
pub const MAX_RESULT_BYTES: usize = 16 << 20;
/// Statements one transaction may hold.
pub const MAX_STATEMENTS: usize = 1_000;

/// The SQL capability.
pub struct Sql;

impl Capability for Sql {
    fn name(&self) -> &'static str {
        "sql"
    }

    fn prepare(&self, grants: &mut Grants, load: &LoadScope<'_>) -> Result<(), GrantProblem> {
        for name in &grants.sql {
            if !load.services.sql.has(name) {
                return Err(format!(
                    "connection `{name}` is not defined in the main file's `sql.connections` \
                     (defined: {:?})",
                    load.services.sql
                )
                .into());
            }
        }
        Ok(())
    }

    fn configure(&self, call: &CallScope<'_>, setup: &mut StoreSetup) -> Result<(), GrantProblem> {
        let mut granted = Vec::new();
        for name in &call.grants.sql {
            if let Some(database) = call.services.sql.for_plugin(name, call.plugin)? {
                granted.push((name.clone(), database));
            }
        }
        setup.state.sql = SqlAccess {
            granted,
            deadline: call.deadline,
            unavailable: None,
            tape: call.tape(),
        };
        Ok(())
    }
}

/// The pools one call may use.
pub struct SqlAccess {
    granted: Vec<(String, Database)>,
    /// The call's deadline: no SQLite statement runs past it.
    deadline: Instant,
    /// The first "unavailable" answer of the call (see [`super::CapabilityState::unavailable`]).
    unavailable: Option<String>,
    /// The run's tape, if calls are recorded or replayed.
    tape: Option<CallTape>,
}

impl Default for SqlAccess {
    fn default() -> SqlAccess {
        SqlAccess {
            granted: Vec::new(),
            deadline: Instant::now(),
            unavailable: None,
            tape: None,
        }
    }
}

/// Links the interface (both served versions) into a linker whose store data gives the
/// call's [`SqlAccess`] through `get`.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut SqlAccess,
) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, HasSelf<SqlAccess>>(linker, get)?;
    older::add_to_linker::<T, HasSelf<SqlAccess>>(linker, get)
}

impl SqlAccess {
    /// The first answer of the call that said a database could not be reached.
    pub fn unavailable(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }

    /// Passes an answer through, noting it if it says "unavailable".
    fn note<T>(&mut self, answer: Result<T, SqlError>) -> Result<T, SqlError> {
        if let Err(e @ SqlError::Unavailable(_)) = &answer
            && self.unavailable.is_none()
        {
            self.unavailable = Some(e.to_string());
        }
        answer
    }

    fn database(&self, name: &str) -> Result<&Database, SqlError> {
        self.granted
            .iter()
            .find(|(granted, _)| granted == name)
            .map(|(_, database)| database)
            .ok_or_else(|| {
                SqlError::Denied(format!(
                    "connection `{name}` is not granted to this plugin (grants.sql)"
                ))
            })
    }
}
