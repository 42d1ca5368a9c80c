//! What a plugin's SQLite connection may do: its own database file and nothing beyond it, and
//! nothing past the call's time limit.
//!
//! SQLite is an in-process library that will happily open any file the host can: `ATTACH`
//! reaches another database (the daemon's state file with every plugin's key-value secrets,
//! cursors and dead letters), `VACUUM INTO` writes a copy anywhere, some pragmas change where
//! or how files are written or how much memory the connection keeps. Each connection a plugin
//! uses is therefore fenced when it is opened:
//!
//! - **No other databases**: the attached-database limit is 0 (`ATTACH`, and `VACUUM`, which
//!   attaches internally, fail), and an authorizer denies `ATTACH` and `DETACH` as well.
//! - **Harmless pragmas only**: the authorizer lets through the schema-reading pragmas a
//!   plugin needs to inspect its own tables and a few settings of the connection's behaviour;
//!   every other pragma is denied.
//! - **No extensions**: `load_extension` is denied and extension loading is off.
//! - **Defensive mode**: the schema cannot be corrupted on purpose (`writable_schema` and
//!   friends are off even for the host's own statements).
//!
//! A statement that runs past the call's deadline is interrupted by a progress handler
//! ([`bound_to`]), so a runaway query stops with its call instead of keeping a core busy and
//! its pool connection taken.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::time::Instant;

use libsqlite3_sys as ffi;
use sqlx::sqlite::SqliteConnection;

/// Pragmas a plugin may run: schema reading and harmless per-connection behaviour.
const ALLOWED_PRAGMAS: &[&str] = &[
    "table_info",
    "table_xinfo",
    "table_list",
    "index_list",
    "index_info",
    "index_xinfo",
    "foreign_key_list",
    "foreign_key_check",
    "foreign_keys",
    "user_version",
    "application_id",
    "case_sensitive_like",
    "recursive_triggers",
    "defer_foreign_keys",
    "integrity_check",
    "quick_check",
    "collation_list",
    "function_list",
    "pragma_list",
    "page_count",
    "page_size",
    "freelist_count",
    "schema_version",
    "data_version",
    "encoding",
];

/// Functions a plugin may not call.
const DENIED_FUNCTIONS: &[&str] = &["load_extension", "fts3_tokenizer"];

/// Numbers of SQLite VM steps between deadline checks: cheap (a clock read per thousand
/// steps), and a runaway statement stops within a few milliseconds of the deadline.
const STEPS_PER_CHECK: c_int = 1_000;

/// Fences a freshly opened connection (see the module docs). Run once per connection, after
/// the driver's own setup.
pub async fn fence(conn: &mut SqliteConnection) -> Result<(), sqlx::Error> {
    let mut handle = conn.lock_handle().await?;
    let db = handle.as_raw_handle().as_ptr();
    // SAFETY: `db` is the live handle of this connection, and the locked handle guarantees no
    // other thread uses it meanwhile. The authorizer is a plain function with no user data,
    // so nothing it points to can dangle.
    let rc = unsafe {
        ffi::sqlite3_limit(db, ffi::SQLITE_LIMIT_ATTACHED, 0);
        let mut done: c_int = 0;
        ffi::sqlite3_db_config(
            db,
            ffi::SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION,
            0 as c_int,
            &mut done as *mut c_int,
        );
        ffi::sqlite3_db_config(
            db,
            ffi::SQLITE_DBCONFIG_DEFENSIVE,
            1 as c_int,
            &mut done as *mut c_int,
        );
        ffi::sqlite3_set_authorizer(db, Some(authorize), std::ptr::null_mut())
    };
    if rc != ffi::SQLITE_OK {
        return Err(sqlx::Error::Protocol(format!(
            "cannot install the SQLite authorizer (code {rc})"
        )));
    }
    Ok(())
}

/// Makes every statement on `conn` stop once `deadline` has passed, until the next call
/// replaces it: a pooled connection serves one call at a time, and each call sets its own.
pub async fn bound_to(conn: &mut SqliteConnection, deadline: Instant) -> Result<(), sqlx::Error> {
    let mut handle = conn.lock_handle().await?;
    handle.set_progress_handler(STEPS_PER_CHECK, move || Instant::now() < deadline);
    Ok(())
}

/// The authorizer: what a statement being prepared may do.
unsafe extern "C" fn authorize(
    _user: *mut c_void,
    action: c_int,
    arg1: *const c_char,
    arg2: *const c_char,
    _database: *const c_char,
    _trigger: *const c_char,
) -> c_int {
    // SAFETY: SQLite passes NUL-terminated strings or null.
    let text = |arg: *const c_char| unsafe {
        (!arg.is_null()).then(|| CStr::from_ptr(arg).to_string_lossy())
    };
    let allowed = match action {
        ffi::SQLITE_ATTACH | ffi::SQLITE_DETACH => false,
        // (pragma name, value)
        ffi::SQLITE_PRAGMA => text(arg1).is_some_and(|p| {
            let p = p.to_ascii_lowercase();
            ALLOWED_PRAGMAS.contains(&p.as_str())
        }),
        // (null, function name)
        ffi::SQLITE_FUNCTION => text(arg2).is_none_or(|f| {
            let f = f.to_ascii_lowercase();
            !DENIED_FUNCTIONS.contains(&f.as_str())
        }),
        _ => true,
    };
    if allowed {
        ffi::SQLITE_OK
    } else {
        ffi::SQLITE_DENY
    }
}
