//! The main file's `sql:` section: named connections, their URLs and pool limits.
//!
//! Apart from the pools built from it because it is configuration: it is read and checked with
//! the rest of the main file, and printed in its debug form, before any pool exists.

use serde::{Deserialize, Serialize};

/// The `sql:` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqlSettings {
    /// Connections by name; plugins are granted names, never URLs.
    #[serde(default)]
    pub connections: std::collections::BTreeMap<String, SqlConnection>,
}

/// One named SQL connection pool.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqlConnection {
    /// `mysql://user:password@host:3306/db` (MySQL, MariaDB) or `sqlite:///path/file.db`.
    /// May be a secret reference, `env:NAME` or `file:/path`, so the password stays out of
    /// the config folder.
    pub url: String,
    /// Most connections the pool opens (default 8).
    #[serde(default = "default_sql_max_connections")]
    pub max_connections: u32,
    /// How long a statement waits for a free connection, in milliseconds (default 5000).
    #[serde(default = "default_sql_acquire_timeout")]
    pub acquire_timeout_ms: u64,
    /// MySQL/MariaDB: the longest a statement may run on the server, in milliseconds (default
    /// 60000; 0: no limit). A plugin call that times out stops waiting for its statement, but
    /// the server would run it to its end; this limit ends it there. Set on each connection
    /// (`max_statement_time` on MariaDB; `max_execution_time` on MySQL, which bounds only
    /// `SELECT`).
    #[serde(default = "default_sql_max_statement_ms")]
    pub max_statement_ms: u64,
}

impl std::fmt::Debug for SqlConnection {
    /// Never prints the URL: it may hold a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlConnection")
            .field("max_connections", &self.max_connections)
            .field("acquire_timeout_ms", &self.acquire_timeout_ms)
            .field("max_statement_ms", &self.max_statement_ms)
            .finish_non_exhaustive()
    }
}

impl SqlConnection {
    /// A connection to `url` with the default limits.
    pub fn new(url: String) -> SqlConnection {
        SqlConnection {
            url,
            max_connections: default_sql_max_connections(),
            acquire_timeout_ms: default_sql_acquire_timeout(),
            max_statement_ms: default_sql_max_statement_ms(),
        }
    }
}

fn default_sql_max_connections() -> u32 {
    8
}
fn default_sql_acquire_timeout() -> u64 {
    5_000
}
fn default_sql_max_statement_ms() -> u64 {
    60_000
}
