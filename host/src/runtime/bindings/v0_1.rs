//! The `plugin` world of `jobrelay:plugin@0.1.0` (`wit/0.1.0/plugin.wit`), still served so
//! plugins built before 0.2.0 keep running.
//!
//! 0.2.0 only added `job-event.transition-key`; every import is the same interface under
//! another version, and a component links against the version it was built for (versions 0.1
//! and 0.2 are not interchangeable in the linker). So each 0.1.0 type except `job-event` is
//! mapped onto the current bindings' type, and each 0.1.0 import forwards to the current
//! implementation: the capabilities exist once, with their grants and limits, whichever world
//! a plugin targets.
#![allow(unused_variables)]

use wasmtime::component::Resource;

use super::jobrelay::plugin as now;
use super::{HandlerError as HandlerErrorNow, Level, Phase};
use crate::capabilities::archive::ObjectWriter;
use crate::capabilities::pod_logs::LogReader;
use crate::runtime::HostState;

wasmtime::component::bindgen!({
    world: "plugin",
    path: "../wit/0.1.0/plugin.wit",
    imports: { default: async },
    exports: { default: async },
    ownership: Borrowing { duplicate_if_necessary: true },
    with: {
        "jobrelay:plugin/pod-logs.log": crate::capabilities::pod_logs::LogReader,
        "jobrelay:plugin/archive.writer": crate::capabilities::archive::ObjectWriter,
    },
});

use self::jobrelay::plugin as then;

impl then::types::Host for HostState {}

impl then::log::Host for HostState {
    async fn write(&mut self, level: then::log::Level, message: String) {
        now::log::Host::write(self, level.into(), message).await
    }
}

impl then::lifecycle::Host for HostState {
    async fn loading(&mut self) -> bool {
        now::lifecycle::Host::loading(self).await
    }
}

impl then::sql::Host for HostState {
    async fn connection_dialect(
        &mut self,
        connection: String,
    ) -> Result<then::sql::Dialect, then::sql::Error> {
        now::sql::Host::connection_dialect(self, connection)
            .await
            .map(Into::into)
            .map_err(Into::into)
    }

    async fn execute(
        &mut self,
        connection: String,
        statement: then::sql::Statement,
    ) -> Result<u64, then::sql::Error> {
        now::sql::Host::execute(self, connection, statement.into())
            .await
            .map_err(Into::into)
    }

    async fn query(
        &mut self,
        connection: String,
        statement: then::sql::Statement,
    ) -> Result<then::sql::Rows, then::sql::Error> {
        now::sql::Host::query(self, connection, statement.into())
            .await
            .map(Into::into)
            .map_err(Into::into)
    }

    async fn transaction(
        &mut self,
        connection: String,
        statements: Vec<then::sql::Statement>,
    ) -> Result<Vec<u64>, then::sql::Error> {
        let statements = statements.into_iter().map(Into::into).collect();
        now::sql::Host::transaction(self, connection, statements)
            .await
            .map_err(Into::into)
    }
}

impl then::kv::Host for HostState {
    async fn get(&mut self, key: String) -> Result<Option<Vec<u8>>, String> {
        now::kv::Host::get(self, key).await
    }

    async fn set(
        &mut self,
        key: String,
        value: Vec<u8>,
        ttl_seconds: Option<u32>,
    ) -> Result<(), String> {
        now::kv::Host::set(self, key, value, ttl_seconds).await
    }

    async fn delete(&mut self, key: String) -> Result<bool, String> {
        now::kv::Host::delete(self, key).await
    }
}

impl then::pod_logs::Host for HostState {
    async fn pods(&mut self) -> Result<Vec<then::pod_logs::Pod>, then::pod_logs::Error> {
        now::pod_logs::Host::pods(self)
            .await
            .map(|pods| pods.into_iter().map(Into::into).collect())
            .map_err(Into::into)
    }

    async fn open(
        &mut self,
        pod: String,
        container: String,
        previous: bool,
    ) -> Result<Resource<LogReader>, then::pod_logs::Error> {
        now::pod_logs::Host::open(self, pod, container, previous)
            .await
            .map_err(Into::into)
    }
}

impl then::pod_logs::HostLog for HostState {
    async fn read(
        &mut self,
        log: Resource<LogReader>,
        max_bytes: u32,
    ) -> Result<Vec<u8>, then::pod_logs::Error> {
        now::pod_logs::HostLog::read(self, log, max_bytes)
            .await
            .map_err(Into::into)
    }

    async fn truncated(&mut self, log: Resource<LogReader>) -> bool {
        now::pod_logs::HostLog::truncated(self, log).await
    }

    async fn drop(&mut self, log: Resource<LogReader>) -> wasmtime::Result<()> {
        now::pod_logs::HostLog::drop(self, log).await
    }
}

impl then::archive::Host for HostState {
    async fn create(
        &mut self,
        key: String,
    ) -> Result<Resource<ObjectWriter>, then::archive::Error> {
        now::archive::Host::create(self, key)
            .await
            .map_err(Into::into)
    }

    async fn put(&mut self, key: String, bytes: Vec<u8>) -> Result<(), then::archive::Error> {
        now::archive::Host::put(self, key, bytes)
            .await
            .map_err(Into::into)
    }
}

impl then::archive::HostWriter for HostState {
    async fn write(
        &mut self,
        writer: Resource<ObjectWriter>,
        bytes: Vec<u8>,
    ) -> Result<(), then::archive::Error> {
        now::archive::HostWriter::write(self, writer, bytes)
            .await
            .map_err(Into::into)
    }

    async fn finish(
        &mut self,
        writer: Resource<ObjectWriter>,
    ) -> Result<u64, then::archive::Error> {
        now::archive::HostWriter::finish(self, writer)
            .await
            .map_err(Into::into)
    }

    async fn drop(&mut self, writer: Resource<ObjectWriter>) -> wasmtime::Result<()> {
        now::archive::HostWriter::drop(self, writer).await
    }
}

/// `From` between two generated enums or variants whose cases have the same names; a case's
/// payload is converted with `Into`.
macro_rules! same_cases {
    ($from:ident => $to:ident: $($case:ident $(($x:ident))?),* $(,)?) => {
        impl From<$from> for $to {
            fn from(value: $from) -> $to {
                match value {
                    $($from::$case $(($x))? => $to::$case $(($x.into()))?,)*
                }
            }
        }
    };
}

use now::archive::Error as ArchiveErrorNow;
use now::pod_logs::Error as LogErrorNow;
use now::sql::{Dialect as DialectNow, Error as SqlErrorNow, Value as ValueNow};
use then::archive::Error as ArchiveErrorThen;
use then::log::Level as LevelThen;
use then::pod_logs::Error as LogErrorThen;
use then::sql::{Dialect as DialectThen, Error as SqlErrorThen, Value as ValueThen};
use then::types::{HandlerError as HandlerErrorThen, Phase as PhaseThen};

same_cases!(LevelThen => Level: Trace, Debug, Info, Warn, Error);
same_cases!(Phase => PhaseThen: Pending, Running, Restarting, Suspended, Succeeded, Failed,
    Terminating, Deleted, Unknown);
same_cases!(HandlerErrorThen => HandlerErrorNow: Retry(m), GiveUp(m));
same_cases!(DialectNow => DialectThen: Mysql, Sqlite);
same_cases!(SqlErrorNow => SqlErrorThen: Denied(m), Unavailable(m), Rejected(m));
same_cases!(ValueThen => ValueNow: Null, Int(v), Float(v), Text(v), Blob(v));
same_cases!(ValueNow => ValueThen: Null, Int(v), Float(v), Text(v), Blob(v));
same_cases!(LogErrorNow => LogErrorThen: Denied(m), NotFound(m), Unavailable(m));
same_cases!(ArchiveErrorNow => ArchiveErrorThen: InvalidKey(m), TooLarge(m), Unavailable(m));

impl From<then::sql::Statement> for now::sql::Statement {
    fn from(s: then::sql::Statement) -> now::sql::Statement {
        now::sql::Statement {
            sql: s.sql,
            params: s.params.into_iter().map(Into::into).collect(),
        }
    }
}

impl From<now::sql::Rows> for then::sql::Rows {
    fn from(r: now::sql::Rows) -> then::sql::Rows {
        then::sql::Rows {
            columns: r.columns,
            rows: r
                .rows
                .into_iter()
                .map(|row| row.into_iter().map(Into::into).collect())
                .collect(),
        }
    }
}

impl From<now::pod_logs::Pod> for then::pod_logs::Pod {
    fn from(p: now::pod_logs::Pod) -> then::pod_logs::Pod {
        then::pod_logs::Pod {
            name: p.name,
            phase: p.phase,
            node: p.node,
            containers: p
                .containers
                .into_iter()
                .map(|c| then::pod_logs::Container {
                    name: c.name,
                    restart_count: c.restart_count,
                    init: c.init,
                })
                .collect(),
        }
    }
}
