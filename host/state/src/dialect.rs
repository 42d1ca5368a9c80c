//! What a database backend supplies to the one store in [`sql_store`](super::sql_store): the
//! few SQL phrases where SQLite and MySQL differ, the glue that runs a statement on its
//! driver, its schema's scripts and catalog (for the version logic in
//! [`schema`](super::schema)), and — the one hook a backend may leave empty — a path of its
//! own for the lanes' writes ([`Writer`]).
//!
//! Everything else — which statements run, in which transactions, how a selection of dead
//! letters is split, how replays are taken, what a deadlock retry looks like, which schema
//! version is refused or migrated — is written once, so a promise of the store traits cannot
//! hold on one backend and not on the other. Adding a backend is one file implementing
//! [`Dialect`] (plus its connection), and a branch in [`open_stores`](super::open_stores) that
//! chooses it.
//!
//! Statements carry their parameters as [`Value`]s rather than through sqlx's generic
//! `Encode`/`Decode` bounds: the store's logic then needs no bound beyond `D: Dialect`, and
//! each backend writes its glue once against its concrete driver types, where the compiler
//! already knows every type is supported.
//!
//! The writer hook exists for SQLite: the lanes' writes are the hottest of the daemon, and on
//! the file they run fastest on a thread that owns one connection and keeps its statements
//! prepared ([`sqlite_writer`](super::sqlite_writer)). The store hands those writes to the
//! dialect's writer when it has one and runs them on its pool otherwise (MySQL, whose writer
//! type has no value), so the store itself holds nothing of either backend.

use std::convert::Infallible;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use sqlx::query::Query;
use sqlx::{AssertSqlSafe, ColumnIndex, Database, Decode, Encode, Row, Type};

use super::cursor::Cursor;
use super::error::StoreError;
use super::inbox::WriteBatch;
use super::schema::Scripts;
use super::sql_text::{Statements, Tables};

/// A parameter bound into a statement, or a column read back from a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Text(String),
    /// Text shared with its owner, bound without a copy (an event's object, a kilobyte or more
    /// a take); never read back as this.
    Shared(Arc<str>),
    /// A text column that may be NULL (and, bound, NULL when `None`).
    OptText(Option<String>),
    Int(i64),
    /// An integer column that may be NULL (and, bound, NULL when `None`).
    OptInt(Option<i64>),
    Bool(bool),
    Bytes(Vec<u8>),
}

/// The kind of [`Value`] a column is read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Text,
    OptText,
    Int,
    OptInt,
    Bool,
    Bytes,
}

/// SQL text with its parameters, in order.
#[derive(Debug, Clone)]
pub struct Statement {
    pub sql: Arc<str>,
    pub args: Vec<Value>,
    /// Whether the driver keeps the prepared statement for the next run: yes for the fixed
    /// statements built at open, no for those whose text depends on a call's length (a batch,
    /// an id list), which would otherwise fill the connection's statement cache.
    pub persistent: bool,
}

impl Statement {
    /// A fixed statement, kept prepared.
    pub fn new(sql: &Arc<str>) -> Statement {
        Statement {
            sql: sql.clone(),
            args: Vec::new(),
            persistent: true,
        }
    }

    /// A statement built for one call.
    pub fn once(sql: String) -> Statement {
        Statement {
            sql: Arc::from(sql),
            args: Vec::new(),
            persistent: false,
        }
    }

    pub fn text(mut self, value: &str) -> Statement {
        self.args.push(Value::Text(value.to_string()));
        self
    }

    /// Text bound without copying it into the statement: the owner's own.
    pub fn shared(mut self, value: &Arc<str>) -> Statement {
        self.args.push(Value::Shared(value.clone()));
        self
    }

    pub fn int(mut self, value: i64) -> Statement {
        self.args.push(Value::Int(value));
        self
    }

    pub fn opt_int(mut self, value: Option<i64>) -> Statement {
        self.args.push(Value::OptInt(value));
        self
    }

    pub fn bool(mut self, value: bool) -> Statement {
        self.args.push(Value::Bool(value));
        self
    }

    pub fn bytes(mut self, value: &[u8]) -> Statement {
        self.args.push(Value::Bytes(value.to_vec()));
        self
    }
}

/// What a statement that writes reports.
#[derive(Debug, Clone, Copy)]
pub struct Done {
    pub rows_affected: u64,
    /// The key the last insert generated; `None` if the driver's value does not fit an `i64`.
    pub last_insert_id: Option<i64>,
}

/// A connection of dialect `D`'s driver.
pub type Conn<D> = <<D as Dialect>::Db as Database>::Connection;
/// A row of dialect `D`'s driver.
pub type DbRow<D> = <<D as Dialect>::Db as Database>::Row;

/// A database backend of the store: the SQL that differs, and its driver glue.
pub trait Dialect: Send + Sync + Sized + 'static {
    /// The sqlx driver.
    type Db: Database;

    /// How a transaction that will write begins; `None` for the driver's plain `BEGIN`.
    const BEGIN_WRITE: Option<&'static str>;

    /// Appended to a `SELECT` inside a transaction to hold the selected rows until it ends, so
    /// two transactions cannot both take them; empty where the write transaction's lock
    /// already keeps every other writer out.
    const LOCK_ROWS: &'static str;

    /// The current time in Unix seconds by the database's clock.
    const NOW: &'static str;

    /// Written after a table name in `FROM`: read the table by its primary key (for the
    /// inbox's marks, `seq`), in order, and no secondary index. A page of a plugin's marks
    /// (`plugin = ? AND seq > ? ORDER BY seq LIMIT ?`) must be a range of the key that stops
    /// after the page: the planners preferred the `(plugin, event_id)` key, which reads every
    /// mark of the plugin and sorts them for each page — a million-event inbox read back a
    /// thousand at a time took hours.
    const BY_PRIMARY_KEY: &'static str;

    /// `INSERT INTO table (columns) VALUES row, row, …` (`rows` times `row`) that, where a row's
    /// `key` exists, sets every other column to the new row's value instead. A key repeated
    /// within the statement ends with its last row.
    fn upsert(table: &str, columns: &str, key: &[&str], row: &str, rows: usize) -> String;

    /// `INSERT INTO table (columns) VALUES row` that keeps a row whose `key` exists; `row` may
    /// be several rows, comma-separated.
    fn insert_or_keep(table: &str, columns: &str, key: &[&str], row: &str) -> String;

    /// The length in bytes (not characters) of a text column.
    fn byte_length(column: &str) -> String;

    /// An aggregate as a 64-bit integer column.
    fn integer(expression: &str) -> String;

    /// Deletes at most `limit` rows of `table` whose `expires_at` has passed.
    fn delete_expired(table: &str, limit: u32) -> String;

    /// Whether a failed statement rolled its whole transaction back and may simply run again
    /// (InnoDB's deadlock victim).
    fn is_retryable(error: &sqlx::Error) -> bool;

    /// Runs a statement that returns no rows.
    fn execute<'c>(
        conn: &'c mut Conn<Self>,
        statement: &'c Statement,
    ) -> impl Future<Output = Result<Done, sqlx::Error>> + Send + 'c;

    /// Runs a query and returns its rows.
    fn fetch<'c>(
        conn: &'c mut Conn<Self>,
        statement: &'c Statement,
    ) -> impl Future<Output = Result<Vec<DbRow<Self>>, sqlx::Error>> + Send + 'c;

    /// Reads a row's columns, in order, as `shape` says.
    fn decode(row: &DbRow<Self>, shape: &[Kind]) -> Result<Vec<Value>, sqlx::Error>;

    // The schema, for `schema::migrate`.

    /// A query of one integer, its one parameter a table name: how many tables of that name
    /// the database has (0 or 1).
    const HAS_TABLE: &'static str;

    /// A query of one integer, run when the version table is missing: how many tables show
    /// that the database is another program's, which is then refused.
    fn foreign_tables(tables: &Tables) -> Statement;

    /// Records the version bound as the one parameter in the version table `table`.
    fn record_version(table: &str) -> String;

    /// The schema scripts for `tables`, read on `conn` where they depend on the server.
    fn schema_scripts<'c>(
        &'c self,
        conn: &'c mut Conn<Self>,
        tables: &'c Tables,
    ) -> impl Future<Output = Result<Scripts, StoreError>> + Send + 'c;

    /// Runs one entry of a schema script as it is written (no parameters, not prepared).
    fn execute_script<'c>(
        conn: &'c mut Conn<Self>,
        sql: &'c str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'c;

    // The lanes' writes.

    /// The backend's own path for the lanes' writes; [`Infallible`] where it has none and the
    /// store runs them on its pool.
    type Writer: Writer;

    /// Starts the writer of a store just opened (its schema in place), with the store's
    /// statements; `None` where the backend has no writer. Called once, by the store's open.
    fn start_writer(&self, sql: &Statements<Self>) -> Result<Option<Self::Writer>, StoreError>;
}

/// A backend's own path for the lanes' writes — the saves of acknowledged cursors, the jobs
/// seen first, a lane's [`WriteBatch`] — which the store hands over in place of running them
/// on its pool. A writer keeps every promise the store's method makes (see
/// [`DeliveryStore`](super::DeliveryStore)): all or nothing, answered once committed.
pub trait Writer: Debug + Send + Sync + 'static {
    /// [`DeliveryStore::save_cursors`](super::DeliveryStore::save_cursors), never empty.
    fn save(&self, cursors: Vec<Cursor>) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// [`DeliveryStore::note_first_sights`](super::DeliveryStore::note_first_sights).
    fn note_first_sight(
        &self,
        cursors: &[Cursor],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// [`DeliveryStore::write`](super::DeliveryStore::write), never empty.
    fn write(&self, batch: WriteBatch) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Ends the writer once it has carried out what it was sent, and waits for that; later
    /// writes fail. The store calls it on close, before it closes its pool.
    fn stop(&self) -> impl Future<Output = ()> + Send;
}

/// No writer: a backend whose [`Dialect::Writer`] this is never starts one, so none of these
/// can be called.
impl Writer for Infallible {
    async fn save(&self, _: Vec<Cursor>) -> Result<(), StoreError> {
        match *self {}
    }

    async fn note_first_sight(&self, _: &[Cursor]) -> Result<(), StoreError> {
        match *self {}
    }

    async fn write(&self, _: WriteBatch) -> Result<(), StoreError> {
        match *self {}
    }

    async fn stop(&self) {
        match *self {}
    }
}

/// `statement` as a sqlx query of driver `DB`, its parameters bound. For the glue of a
/// dialect, whose concrete driver meets the bounds.
///
/// The values are bound by reference: the driver encodes each into its arguments as it is
/// bound, so a copy of each text first (an event's object and head, a take) would be made
/// only to be dropped.
pub fn query<'q, DB>(statement: &'q Statement) -> Query<'q, DB, <DB as Database>::Arguments>
where
    DB: Database + sqlx::database::HasStatementCache,
    &'q str: Encode<'q, DB> + Type<DB>,
    Option<&'q str>: Encode<'q, DB> + Type<DB>,
    i64: Encode<'q, DB> + Type<DB>,
    Option<i64>: Encode<'q, DB> + Type<DB>,
    bool: Encode<'q, DB> + Type<DB>,
    &'q [u8]: Encode<'q, DB> + Type<DB>,
{
    let mut query =
        sqlx::query(AssertSqlSafe(statement.sql.clone())).persistent(statement.persistent);
    for value in &statement.args {
        query = match value {
            Value::Text(v) => query.bind(v.as_str()),
            Value::Shared(v) => query.bind(&**v),
            Value::OptText(v) => query.bind(v.as_deref()),
            Value::Int(v) => query.bind(*v),
            Value::OptInt(v) => query.bind(*v),
            Value::Bool(v) => query.bind(*v),
            Value::Bytes(v) => query.bind(v.as_slice()),
        };
    }
    query
}

/// A row's columns read as `shape` says. An integer column that the driver reports as
/// unsigned (MySQL's `INT UNSIGNED`) is read through `u32`.
pub fn decode<R>(row: &R, shape: &[Kind]) -> Result<Vec<Value>, sqlx::Error>
where
    R: Row,
    usize: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> Option<String>: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> u32: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> Option<i64>: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> bool: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> Vec<u8>: Decode<'r, R::Database> + Type<R::Database>,
{
    shape
        .iter()
        .enumerate()
        .map(|(i, kind)| {
            Ok(match kind {
                Kind::Text => Value::Text(row.try_get(i)?),
                Kind::OptText => Value::OptText(row.try_get(i)?),
                Kind::Int => Value::Int(
                    row.try_get::<i64, _>(i)
                        .or_else(|_| row.try_get::<u32, _>(i).map(i64::from))?,
                ),
                Kind::OptInt => Value::OptInt(row.try_get(i)?),
                Kind::Bool => Value::Bool(row.try_get(i)?),
                Kind::Bytes => Value::Bytes(row.try_get(i)?),
            })
        })
        .collect()
}

/// `column = NEW, …` for every column of `columns` (comma-separated) that is not in `key`,
/// with `new` saying how a dialect names the inserted row's value: the SET list of an upsert.
pub fn set_non_key(columns: &str, key: &[&str], new: impl Fn(&str) -> String) -> String {
    columns
        .split(',')
        .map(str::trim)
        .filter(|c| !key.contains(c))
        .map(|c| format!("{c} = {}", new(c)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `?, ?, …`, `n` times.
pub fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}
