//! The durable state store on both backends: real SQLite files, and real tables in the test
//! MariaDB over TCP (`JOBRELAY_TEST_MYSQL_URL`, default root@127.0.0.1:3306/test; the MySQL
//! tests fail, not skip, without it).
//!
//! Every promise of the store traits is a `contract_*` function run on both backends by
//! `on_both_backends!` (as `contracts::sqlite::NAME` and `contracts::mysql::NAME`); each
//! MySQL run uses tables of its own prefix and drops them at the end. The tests in `mysql`
//! and `sqlite` are backend-specific: files and databases the stores must refuse, migrations,
//! two processes on one file.

mod contracts;
mod mysql;
mod sqlite;
mod support;
