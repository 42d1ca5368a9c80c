//! The schema's version, read, judged and written once for both backends.
//!
//! Opening a store finds out what its tables are — new, at this version, at an older one, at a
//! newer one, or another program's — and brings them to this version. That judgement is one
//! rule on a file and on a server database, so it is written once, here: a newer version is
//! refused (writing into it could damage what that jobrelay stored), a version that never
//! existed is reported as damaged, an empty version table is an interrupted creation and
//! starts over, tables without a version table are another program's and refused, and
//! otherwise the scripts after the stored version run in order and this version is recorded.
//!
//! A backend supplies only what differs, as [`Dialect`]'s schema hooks: how it finds a table,
//! which tables tell that the database is another program's, its scripts (the column types
//! are where the databases differ most) and how it records a version. It also holds the lock
//! around [`migrate`] that keeps two processes opening a new store from both creating it:
//! SQLite a `BEGIN IMMEDIATE` transaction, which also makes a migration all or nothing;
//! MySQL a named lock, since its DDL commits on its own (each of its scripts is written to run
//! again after an interruption).

use super::dialect::{Conn, Dialect, Kind, Statement, Value};
use super::error::{Location, StoreError};
use super::sql_text::Tables;

/// The schema this build writes. A store with a higher version is refused; a lower one is
/// migrated forward on open.
pub const SCHEMA_VERSION: i64 = 7;

/// A backend's schema scripts, version 1 first, each a list of statements run in order: a
/// store at version N runs the scripts after the Nth.
pub type Scripts = [Vec<String>; SCHEMA_VERSION as usize];

/// What [`migrate`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Migrated {
    /// The tables were at this version already: nothing was written.
    Current,
    /// The schema was created or migrated, and this version recorded.
    Written,
}

/// What a stored version asks for.
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    Current,
    /// The scripts after this many.
    RunAfter(usize),
}

/// Creates the schema of a new store, or checks the version of an existing one and migrates
/// it forward, on `conn`, which holds the backend's schema lock. `store` names the store in
/// errors; `tables` are its tables. The caller commits (SQLite) or releases its lock (MySQL).
pub async fn migrate<D: Dialect>(
    dialect: &D,
    conn: &mut Conn<D>,
    tables: &Tables,
    store: &Location,
) -> Result<Migrated, StoreError> {
    let failed = |operation: &'static str| {
        move |source| StoreError::Query {
            store: store.clone(),
            operation,
            source,
        }
    };
    let version_table = Statement::once(D::HAS_TABLE.to_string()).text(&tables.schema_version);
    let plan = if read_int::<D>(conn, version_table)
        .await
        .map_err(failed("read the schema"))?
        .unwrap_or(0)
        > 0
    {
        let max = Statement::once(format!(
            "SELECT MAX(version) FROM {}",
            tables.schema_version
        ));
        let found = read_int::<D>(conn, max)
            .await
            .map_err(failed("read the schema version"))?;
        plan(found, store, &tables.schema_version)?
    } else {
        let others = read_int::<D>(conn, D::foreign_tables(tables))
            .await
            .map_err(failed("read the schema"))?;
        if others.unwrap_or(0) > 0 {
            return Err(not_a_state_store(store, &tables.schema_version));
        }
        Plan::RunAfter(0)
    };
    let Plan::RunAfter(done) = plan else {
        return Ok(Migrated::Current);
    };

    // Every script from the store's version on, in order: all of them for a new store.
    let scripts = dialect.schema_scripts(conn, tables).await?;
    for statement in scripts.iter().skip(done).flatten() {
        D::execute_script(conn, statement)
            .await
            .map_err(failed("create or migrate the schema"))?;
    }
    let record = Statement::once(D::record_version(&tables.schema_version)).int(SCHEMA_VERSION);
    D::execute(conn, &record)
        .await
        .map_err(failed("record the schema version"))?;
    Ok(Migrated::Written)
}

/// Judges the highest version recorded in `table` (`None`: the table is empty).
fn plan(found: Option<i64>, store: &Location, table: &str) -> Result<Plan, StoreError> {
    match found {
        Some(v) if v > SCHEMA_VERSION => Err(newer_schema(store, table, v)),
        Some(SCHEMA_VERSION) => Ok(Plan::Current),
        Some(v @ 1..SCHEMA_VERSION) => Ok(Plan::RunAfter(v as usize)),
        Some(v) => Err(StoreError::Corrupt {
            store: store.clone(),
            what: "schema version",
            detail: format!("version {v} never existed"),
        }),
        // The table exists but is empty: an earlier creation was interrupted; start again.
        None => Ok(Plan::RunAfter(0)),
    }
}

/// The one integer (or NULL) a query returns.
async fn read_int<D: Dialect>(
    conn: &mut Conn<D>,
    statement: Statement,
) -> Result<Option<i64>, sqlx::Error> {
    let rows = D::fetch(conn, &statement).await?;
    let row = rows.first().ok_or(sqlx::Error::RowNotFound)?;
    match D::decode(row, &[Kind::OptInt])?.as_slice() {
        [Value::OptInt(value)] => Ok(*value),
        _ => Err(sqlx::Error::RowNotFound),
    }
}

fn newer_schema(store: &Location, table: &str, found: i64) -> StoreError {
    match store {
        Location::File(path) => StoreError::NewerSchema {
            path: path.clone(),
            found,
            supported: SCHEMA_VERSION,
        },
        Location::Database(server) => StoreError::DatabaseNewerSchema {
            server: server.clone(),
            table: table.to_string(),
            found,
            supported: SCHEMA_VERSION,
        },
    }
}

fn not_a_state_store(store: &Location, table: &str) -> StoreError {
    match store {
        Location::File(path) => StoreError::NotAStateFile { path: path.clone() },
        Location::Database(server) => StoreError::NotAStateDatabase {
            server: server.clone(),
            table: table.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn a_stored_version_is_judged_alike_on_both_backends() {
        let file = Location::File(PathBuf::from("/var/lib/jobrelay/state.db"));
        let database = Location::Database("mysql://app@db:3306/ops".into());
        for store in [&file, &database] {
            let judge = |found| plan(found, store, "p_schema_version");
            assert_eq!(judge(None).ok(), Some(Plan::RunAfter(0)));
            assert_eq!(judge(Some(1)).ok(), Some(Plan::RunAfter(1)));
            assert_eq!(
                judge(Some(SCHEMA_VERSION - 1)).ok(),
                Some(Plan::RunAfter(SCHEMA_VERSION as usize - 1))
            );
            assert_eq!(judge(Some(SCHEMA_VERSION)).ok(), Some(Plan::Current));
            for never in [0, -1] {
                let err = judge(Some(never)).expect_err("never existed");
                assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
            }
        }
        let newer = SCHEMA_VERSION + 1;
        assert!(matches!(
            plan(Some(newer), &file, "schema_version"),
            Err(StoreError::NewerSchema { found, .. }) if found == newer
        ));
        assert!(matches!(
            plan(Some(newer), &database, "p_schema_version"),
            Err(StoreError::DatabaseNewerSchema { found, table, .. })
                if found == newer && table == "p_schema_version"
        ));
        assert!(matches!(
            not_a_state_store(&file, "schema_version"),
            StoreError::NotAStateFile { .. }
        ));
        assert!(matches!(
            not_a_state_store(&database, "p_schema_version"),
            StoreError::NotAStateDatabase { table, .. } if table == "p_schema_version"
        ));
    }
}
