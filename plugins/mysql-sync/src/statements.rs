//! The SQL text, per dialect. Table names come from validated settings; every value is a `?`
//! placeholder bound by the host.
//!
//! One event is two statements, both idempotent, so no transaction is needed and a retried or
//! replayed event changes nothing:
//! - `INSERT IGNORE` of the transition row, keyed by the event id and, uniquely, by the
//!   transition key (so a transition delivered live and again as a reconstruction after a gap
//!   is one row); when it writes nothing, the stored row of that key is read, and one recorded
//!   from another phase is reported as a warning (see `check_repeat`);
//! - an upsert of the job row that only takes effect when the event's version is newer than
//!   the stored one (`version_major`, `version_minor`; see `row::VersionKey`), so an older event
//!   arriving late (a replayed dead letter) never overwrites a newer state.

/// Which SQL to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    MySql,
    Sqlite,
}

/// One column of the jobs table: everything the statements below say of it, so a new column is
/// written here once.
#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub name: &'static str,
    /// Its type on MySQL, as `CREATE TABLE` and the migration's `ADD COLUMN` declare it.
    pub mysql: &'static str,
    /// Its type on SQLite, likewise.
    pub sqlite: &'static str,
    /// A fact of the job's story: the latest known is kept (`COALESCE`), never blanked by a
    /// later event without a story.
    pub story: bool,
    /// Added after the jobs table's first release: [`migrate_jobs`] adds it to an older table
    /// that lacks it.
    pub added: bool,
}

impl Column {
    /// A column of the first release's table.
    const fn first(name: &'static str, mysql: &'static str, sqlite: &'static str) -> Column {
        Column {
            name,
            mysql,
            sqlite,
            story: false,
            added: false,
        }
    }

    /// A column added since.
    const fn added(name: &'static str, mysql: &'static str, sqlite: &'static str) -> Column {
        Column {
            added: true,
            ..Column::first(name, mysql, sqlite)
        }
    }

    /// A column of the job's story (its kind's `story` in jobrelay's main file; NULL without
    /// one), added with the story.
    const fn story(name: &'static str, mysql: &'static str, sqlite: &'static str) -> Column {
        Column {
            story: true,
            ..Column::added(name, mysql, sqlite)
        }
    }

    /// Its type in `dialect`.
    pub fn ty(&self, dialect: Dialect) -> &'static str {
        match dialect {
            Dialect::MySql => self.mysql,
            Dialect::Sqlite => self.sqlite,
        }
    }
}

/// The jobs table, its columns in insert (and `CREATE TABLE`) order; the first two are the
/// key. The version columns come last: MySQL applies `ON DUPLICATE KEY UPDATE` assignments
/// left to right, and every assignment's guard must still see the old version.
pub const JOBS: &[Column] = &[
    Column::first("cluster", "VARCHAR(253) NOT NULL", "TEXT NOT NULL"),
    Column::first("uid", "VARCHAR(64) NOT NULL", "TEXT NOT NULL"),
    Column::first("namespace", "VARCHAR(253) NOT NULL", "TEXT NOT NULL"),
    Column::first("name", "VARCHAR(253) NOT NULL", "TEXT NOT NULL"),
    Column::first("api_version", "VARCHAR(253) NOT NULL", "TEXT NOT NULL"),
    Column::first("kind", "VARCHAR(128) NOT NULL", "TEXT NOT NULL"),
    Column::first("phase", "VARCHAR(16) NOT NULL", "TEXT NOT NULL"),
    Column::first("raw_phase", "VARCHAR(256) NOT NULL", "TEXT NOT NULL"),
    Column::first("reason", "VARCHAR(1024) NULL", "TEXT"),
    Column::first("message", "MEDIUMTEXT NULL", "TEXT"),
    Column::first("start_time", "DATETIME(3) NULL", "TEXT"),
    Column::first("finish_time", "DATETIME(3) NULL", "TEXT"),
    Column::first("duration_seconds", "BIGINT NULL", "INTEGER"),
    Column::first("labels_json", "MEDIUMTEXT NOT NULL", "TEXT NOT NULL"),
    Column::first("resource_version", "VARCHAR(128) NOT NULL", "TEXT NOT NULL"),
    Column::first("transition_time", "DATETIME(3) NULL", "TEXT"),
    Column::first("updated_at", "DATETIME(3) NOT NULL", "TEXT NOT NULL"),
    Column::added("outcome", "VARCHAR(16) NULL", "TEXT"),
    Column::added("deleted_at", "DATETIME(3) NULL", "TEXT"),
    Column::story("team", "VARCHAR(253) NULL", "TEXT"),
    // Set by `count_restarts`, never by the upsert (which writes NULL: the stored count stays).
    Column::story("restarts", "BIGINT NULL", "INTEGER"),
    Column::story("local_queue", "VARCHAR(253) NULL", "TEXT"),
    Column::story("cluster_queue", "VARCHAR(253) NULL", "TEXT"),
    Column::story("queue_state", "VARCHAR(16) NULL", "TEXT"),
    Column::story("queued_since", "DATETIME(3) NULL", "TEXT"),
    Column::story("admitted_at", "DATETIME(3) NULL", "TEXT"),
    Column::story("queued_seconds", "BIGINT NULL", "INTEGER"),
    Column::story("preemptions", "BIGINT NULL", "INTEGER"),
    Column::story("requeues", "BIGINT NULL", "INTEGER"),
    Column::story("accelerators_json", "TEXT NULL", "TEXT"),
    Column::story("admitted_seconds", "BIGINT NULL", "INTEGER"),
    Column::story("accelerator_seconds_json", "TEXT NULL", "TEXT"),
    Column::story("failure_reason", "VARCHAR(128) NULL", "TEXT"),
    Column::story("failure_exit_code", "BIGINT NULL", "INTEGER"),
    Column::story("failure_container", "VARCHAR(253) NULL", "TEXT"),
    // Last (see above).
    Column::first("version_minor", "BIGINT NOT NULL", "INTEGER NOT NULL"),
    Column::first("version_major", "BIGINT NOT NULL", "INTEGER NOT NULL"),
];

/// Which of [`JOBS`] a list of names takes.
#[derive(Clone, Copy)]
enum Which {
    All,
    Story,
}

const fn takes(which: Which, column: &Column) -> bool {
    match which {
        Which::All => true,
        Which::Story => column.story,
    }
}

const fn count(which: Which) -> usize {
    let (mut i, mut n) = (0, 0);
    while i < JOBS.len() {
        if takes(which, &JOBS[i]) {
            n += 1;
        }
        i += 1;
    }
    n
}

/// The names of the columns of [`JOBS`] that `which` takes, in table order.
const fn names<const N: usize>(which: Which) -> [&'static str; N] {
    let mut names = [""; N];
    let (mut i, mut n) = (0, 0);
    while i < JOBS.len() {
        if takes(which, &JOBS[i]) {
            names[n] = JOBS[i].name;
            n += 1;
        }
        i += 1;
    }
    assert!(n == N);
    names
}

/// Columns of the jobs table in insert order (of [`JOBS`]).
pub const JOB_COLUMNS: &[&str] = &names::<{ count(Which::All) }>(Which::All);

/// The columns of the job's story, each kept until a later event knows better (of [`JOBS`]).
pub const STORY_COLUMNS: &[&str] = &names::<{ count(Which::Story) }>(Which::Story);

/// Columns of the transitions table in insert order.
pub const TRANSITION_COLUMNS: &[&str] = &[
    "event_id",
    "cluster",
    "uid",
    "namespace",
    "name",
    "kind",
    "from_phase",
    "to_phase",
    "raw_phase",
    "reason",
    "message",
    "transition_time",
    "synthetic",
    "recorded_at",
    "transition_key",
];

/// The jobs table's column declarations in `CREATE TABLE`, from [`JOBS`]: each on a line of its
/// own, indented like the rest of the statement.
fn declared(dialect: Dialect) -> String {
    JOBS.iter()
        .map(|c| format!("\n                    {} {},", c.name, c.ty(dialect)))
        .collect()
}

/// The schema, one statement per entry. `CREATE ... IF NOT EXISTS` throughout: run at every
/// load, it creates what is missing and leaves existing tables alone.
pub fn schema(dialect: Dialect, jobs: &str, transitions: &str) -> Vec<String> {
    match dialect {
        Dialect::MySql => vec![
            format!(
                "CREATE TABLE IF NOT EXISTS {jobs} ({}
                    PRIMARY KEY (cluster, uid),
                    KEY {jobs}_by_name (namespace, name),
                    KEY {jobs}_by_phase (phase)
                ) DEFAULT CHARSET = utf8mb4",
                declared(dialect)
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {transitions} (
                    event_id VARCHAR(512) NOT NULL,
                    cluster VARCHAR(253) NOT NULL,
                    uid VARCHAR(64) NOT NULL,
                    namespace VARCHAR(253) NOT NULL,
                    name VARCHAR(253) NOT NULL,
                    kind VARCHAR(128) NOT NULL,
                    from_phase VARCHAR(16) NULL,
                    to_phase VARCHAR(16) NOT NULL,
                    raw_phase VARCHAR(256) NOT NULL,
                    reason VARCHAR(1024) NULL,
                    message MEDIUMTEXT NULL,
                    transition_time DATETIME(3) NULL,
                    synthetic TINYINT NOT NULL,
                    recorded_at DATETIME(3) NOT NULL,
                    transition_key VARCHAR(512) NULL,
                    PRIMARY KEY (event_id),
                    UNIQUE KEY {transitions}_by_transition (transition_key),
                    KEY {transitions}_by_job (cluster, uid)
                ) DEFAULT CHARSET = utf8mb4"
            ),
        ],
        Dialect::Sqlite => vec![
            format!(
                "CREATE TABLE IF NOT EXISTS {jobs} ({}
                    PRIMARY KEY (cluster, uid)
                )",
                declared(dialect)
            ),
            format!("CREATE INDEX IF NOT EXISTS {jobs}_by_name ON {jobs} (namespace, name)"),
            format!("CREATE INDEX IF NOT EXISTS {jobs}_by_phase ON {jobs} (phase)"),
            format!(
                "CREATE TABLE IF NOT EXISTS {transitions} (
                    event_id TEXT NOT NULL PRIMARY KEY,
                    cluster TEXT NOT NULL,
                    uid TEXT NOT NULL,
                    namespace TEXT NOT NULL,
                    name TEXT NOT NULL,
                    kind TEXT NOT NULL,
                    from_phase TEXT,
                    to_phase TEXT NOT NULL,
                    raw_phase TEXT NOT NULL,
                    reason TEXT,
                    message TEXT,
                    transition_time TEXT,
                    synthetic INTEGER NOT NULL,
                    recorded_at TEXT NOT NULL,
                    transition_key TEXT
                )"
            ),
            format!(
                "CREATE INDEX IF NOT EXISTS {transitions}_by_job ON {transitions} (cluster, uid)"
            ),
        ],
    }
}

fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

/// Inserts a transition row unless one with the same event id or transition key exists.
pub fn insert_transition(dialect: Dialect, table: &str) -> String {
    let verb = match dialect {
        Dialect::MySql => "INSERT IGNORE",
        Dialect::Sqlite => "INSERT OR IGNORE",
    };
    format!(
        "{verb} INTO {table} ({}) VALUES ({})",
        TRANSITION_COLUMNS.join(", "),
        placeholders(TRANSITION_COLUMNS.len())
    )
}

/// The event id and origin (`from_phase`) of the transition row with a given key.
pub fn transition_by_key(table: &str) -> String {
    format!("SELECT event_id, from_phase FROM {table} WHERE transition_key = ?")
}

/// Sets a job's `restarts` to the restarting transitions stored for it: counted from the
/// rows, so a replayed or repeated event (whose row is not inserted twice) counts once, and a
/// write lost to a crash is made good by the job's next restart.
pub fn count_restarts(jobs: &str, transitions: &str) -> String {
    format!(
        "UPDATE {jobs} SET restarts = (SELECT COUNT(*) FROM {transitions} \
         WHERE cluster = ? AND uid = ? AND to_phase = 'restarting') WHERE cluster = ? AND uid = ?"
    )
}

/// Inserts the job row, or updates it if the event is newer than what is stored.
///
/// A later event never blanks what an earlier one recorded: a start or finish time, a
/// duration, a raw phase, a reason or a message the event does not carry keeps the stored
/// one; a deletion keeps the labels (a deletion noticed on a re-list has no object left);
/// `outcome` and `deleted_at` are only ever set. The duration is computed from whichever
/// start time results, so a `succeeded` event whose status lacks a start time still gets one.
pub fn upsert_job(dialect: Dialect, table: &str) -> String {
    let columns = JOB_COLUMNS.join(", ");
    let values = placeholders(JOB_COLUMNS.len());
    let updated = &JOB_COLUMNS[2..];
    // The event's value and the stored one, in each dialect's words. On MySQL a column
    // assigned earlier in the same statement reads as its new value; every expression below
    // only reads columns assigned before it on purpose (`start_time` for the duration) or not
    // at all.
    let (new, old): (fn(&str) -> String, String) = match dialect {
        Dialect::MySql => (|c| format!("VALUES({c})"), String::new()),
        Dialect::Sqlite => (|c| format!("excluded.{c}"), format!("{table}.")),
    };
    let merged = |column: &str| -> String {
        let n = new(column);
        let o = format!("{old}{column}");
        match column {
            "raw_phase" => format!("COALESCE(NULLIF({n}, ''), {o})"),
            "start_time" | "finish_time" | "reason" | "message" | "outcome" | "deleted_at" => {
                format!("COALESCE({n}, {o})")
            }
            // A story's facts: the latest known, never blanked by an event without a story.
            c if STORY_COLUMNS.contains(&c) => format!("COALESCE({n}, {o})"),
            "labels_json" => format!(
                "CASE WHEN {} = 'deleted' THEN {o} ELSE {n} END",
                new("phase")
            ),
            "duration_seconds" => {
                let computed = match dialect {
                    Dialect::MySql => {
                        "TIMESTAMPDIFF(SECOND, start_time, VALUES(finish_time))".to_string()
                    }
                    Dialect::Sqlite => format!(
                        "CAST(ROUND((julianday(excluded.finish_time) - julianday(COALESCE(\
                         excluded.start_time, {table}.start_time))) * 86400) AS INTEGER)"
                    ),
                };
                format!("COALESCE({n}, {computed}, {o})")
            }
            _ => n,
        }
    };
    match dialect {
        Dialect::MySql => {
            let newer = "(VALUES(version_major) > version_major OR \
                         (VALUES(version_major) = version_major AND \
                          VALUES(version_minor) > version_minor))";
            let assignments: Vec<String> = updated
                .iter()
                .map(|column| format!("{column} = IF({newer}, {}, {column})", merged(column)))
                .collect();
            format!(
                "INSERT INTO {table} ({columns}) VALUES ({values}) ON DUPLICATE KEY UPDATE {}",
                assignments.join(", ")
            )
        }
        Dialect::Sqlite => {
            let assignments: Vec<String> = updated
                .iter()
                .map(|column| format!("{column} = {}", merged(column)))
                .collect();
            format!(
                "INSERT INTO {table} ({columns}) VALUES ({values}) \
                 ON CONFLICT (cluster, uid) DO UPDATE SET {} \
                 WHERE excluded.version_major > {table}.version_major OR \
                 (excluded.version_major = {table}.version_major AND \
                  excluded.version_minor > {table}.version_minor)",
                assignments.join(", ")
            )
        }
    }
}

/// The query listing a table's columns (one bound parameter: the table name).
pub fn column_names(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::MySql => {
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?"
        }
        Dialect::Sqlite => "SELECT name FROM pragma_table_info(?)",
    }
}

/// The statements that bring an existing jobs table up to date, given the columns it has:
/// the missing columns are added (plain `ADD COLUMN`: MySQL has no `IF NOT EXISTS` for it),
/// then filled for the rows written before they existed: `outcome` from the job's last
/// terminal transition (or its phase, while not deleted), `deleted_at` from the time of a
/// `deleted` row. Empty when nothing is missing, so a load of an up-to-date table writes
/// nothing.
pub fn migrate_jobs(
    dialect: Dialect,
    jobs: &str,
    transitions: &str,
    existing: &[String],
) -> Vec<String> {
    let has = |c: &str| existing.iter().any(|e| e.eq_ignore_ascii_case(c));
    let missing: Vec<&Column> = JOBS.iter().filter(|c| c.added && !has(c.name)).collect();
    let mut statements: Vec<String> = missing
        .iter()
        .map(|c| format!("ALTER TABLE {jobs} ADD COLUMN {} {}", c.name, c.ty(dialect)))
        .collect();
    if missing.iter().any(|c| c.name == "outcome") {
        statements.push(format!(
            "UPDATE {jobs} SET outcome = COALESCE((SELECT t.to_phase FROM {transitions} t \
             WHERE t.cluster = {jobs}.cluster AND t.uid = {jobs}.uid \
             AND t.to_phase IN ('succeeded', 'failed') \
             ORDER BY t.transition_time DESC LIMIT 1), \
             CASE WHEN phase IN ('succeeded', 'failed') THEN phase END) \
             WHERE outcome IS NULL"
        ));
    }
    if missing.iter().any(|c| c.name == "deleted_at") {
        statements.push(format!(
            "UPDATE {jobs} SET deleted_at = COALESCE(transition_time, updated_at) \
             WHERE phase = 'deleted' AND deleted_at IS NULL"
        ));
    }
    statements
}

/// The statements that bring an existing transitions table up to date, given the columns it
/// has: `transition_key` is added, filled with the event id for the rows written before it
/// existed (each was its own transition then), and made unique. Empty when nothing is missing.
pub fn migrate_transitions(
    dialect: Dialect,
    transitions: &str,
    existing: &[String],
) -> Vec<String> {
    if existing
        .iter()
        .any(|e| e.eq_ignore_ascii_case("transition_key"))
    {
        return Vec::new();
    }
    let ty = match dialect {
        Dialect::MySql => "VARCHAR(512) NULL",
        Dialect::Sqlite => "TEXT",
    };
    vec![
        format!("ALTER TABLE {transitions} ADD COLUMN transition_key {ty}"),
        format!("UPDATE {transitions} SET transition_key = event_id WHERE transition_key IS NULL"),
        format!(
            "CREATE UNIQUE INDEX {transitions}_by_transition ON {transitions} (transition_key)"
        ),
    ]
}

/// Indexes on columns an older table gets only from the migration, so created after it:
/// SQLite's transition-key index (MySQL declares it in `CREATE TABLE`, and the migration adds
/// it to an older table).
pub fn indexes_after_migration(dialect: Dialect, transitions: &str) -> Vec<String> {
    match dialect {
        Dialect::MySql => Vec::new(),
        Dialect::Sqlite => vec![format!(
            "CREATE UNIQUE INDEX IF NOT EXISTS {transitions}_by_transition \
             ON {transitions} (transition_key)"
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_columns_are_assigned_last_on_mysql() {
        let sql = upsert_job(Dialect::MySql, "jobs");
        let minor = sql.rfind("version_minor = IF").expect("minor assigned");
        let major = sql.rfind("version_major = IF").expect("major assigned");
        let phase = sql.find("phase = IF").expect("phase assigned");
        assert!(phase < minor && minor < major, "{sql}");
        assert_eq!(sql.matches('?').count(), JOB_COLUMNS.len());
    }

    #[test]
    fn later_events_never_blank_what_was_recorded() {
        for dialect in [Dialect::MySql, Dialect::Sqlite] {
            let sql = upsert_job(dialect, "jobs");
            for kept in ["NULLIF(", "finish_time", "outcome", "deleted_at", "reason"] {
                assert!(sql.contains(kept), "{dialect:?}: {kept} in {sql}");
            }
            assert!(sql.contains("= 'deleted' THEN"), "{sql}");
        }
    }

    #[test]
    fn migration_adds_only_what_is_missing() {
        let added = JOBS.iter().filter(|c| c.added).count();
        let old: Vec<String> = JOBS
            .iter()
            .filter(|c| !c.added)
            .map(|c| c.name.to_string())
            .collect();
        let all: Vec<String> = JOB_COLUMNS.iter().map(|c| c.to_uppercase()).collect();
        for dialect in [Dialect::MySql, Dialect::Sqlite] {
            assert!(migrate_jobs(dialect, "jobs", "t", &all).is_empty());
            let steps = migrate_jobs(dialect, "jobs", "t", &old);
            // Every added column, then the two back-fills of outcome and deleted_at.
            assert_eq!(steps.len(), added + 2, "{steps:?}");
            assert!(steps[0].starts_with("ALTER TABLE jobs ADD COLUMN outcome"));
            // A table of the release before the story: only the story's columns are added.
            let before_story: Vec<String> = JOB_COLUMNS
                .iter()
                .filter(|c| !STORY_COLUMNS.contains(c))
                .map(|c| c.to_string())
                .collect();
            let steps = migrate_jobs(dialect, "jobs", "t", &before_story);
            assert_eq!(steps.len(), STORY_COLUMNS.len(), "{steps:?}");
            for (step, column) in steps.iter().zip(STORY_COLUMNS) {
                assert!(
                    step.starts_with(&format!("ALTER TABLE jobs ADD COLUMN {column} ")),
                    "{step}"
                );
            }
        }
    }

    #[test]
    fn every_story_column_is_created_inserted_and_kept() {
        for dialect in [Dialect::MySql, Dialect::Sqlite] {
            let created = schema(dialect, "jobs", "t").join("\n");
            let upsert = upsert_job(dialect, "jobs");
            for column in STORY_COLUMNS {
                assert!(JOB_COLUMNS.contains(column), "{column} inserted");
                assert!(
                    created.contains(&format!("{column} ")),
                    "{dialect:?}: {column} created"
                );
                assert!(
                    upsert.contains(&format!(
                        "COALESCE({}",
                        match dialect {
                            Dialect::MySql => format!("VALUES({column})"),
                            Dialect::Sqlite => format!("excluded.{column}"),
                        }
                    )),
                    "{dialect:?}: {column} kept when an event knows nothing of it"
                );
            }
        }
    }

    #[test]
    fn transitions_migration_adds_the_key_once() {
        let old: Vec<String> = TRANSITION_COLUMNS[..TRANSITION_COLUMNS.len() - 1]
            .iter()
            .map(|c| c.to_string())
            .collect();
        let all: Vec<String> = TRANSITION_COLUMNS
            .iter()
            .map(|c| c.to_uppercase())
            .collect();
        for dialect in [Dialect::MySql, Dialect::Sqlite] {
            assert!(migrate_transitions(dialect, "t", &all).is_empty());
            let steps = migrate_transitions(dialect, "t", &old);
            assert_eq!(steps.len(), 3);
            assert!(steps[0].starts_with("ALTER TABLE t ADD COLUMN transition_key"));
            assert!(steps[2].starts_with("CREATE UNIQUE INDEX"));
        }
    }

    #[test]
    fn placeholders_match_columns() {
        for dialect in [Dialect::MySql, Dialect::Sqlite] {
            assert_eq!(
                insert_transition(dialect, "t").matches('?').count(),
                TRANSITION_COLUMNS.len()
            );
            assert_eq!(
                upsert_job(dialect, "jobs").matches('?').count(),
                JOB_COLUMNS.len()
            );
        }
    }
}
