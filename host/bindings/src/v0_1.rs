//! The `plugin` world of `jobrelay:plugin@0.1.0` (`wit/0.1.0/plugin.wit`), still served so
//! plugins built before 0.2.0 keep running.
//!
//! 0.2.0 only added `job-event.transition-key`; every import is the same interface under
//! another version, and a component links against the version it was built for (versions 0.1
//! and 0.2 are not interchangeable in the linker). So each 0.1.0 type except `job-event`
//! converts to and from the current bindings' type (here), and each capability implements its
//! 0.1.0 interface by forwarding to its current one (in its own file): the capabilities exist
//! once, with their grants and limits, whichever world a plugin targets.
#![allow(unused_variables)]

use super::jobrelay::plugin as now;
use super::{HandlerError as HandlerErrorNow, Level, Phase};

wasmtime::component::bindgen!({
    world: "plugin",
    path: "../../wit/0.1.0/plugin.wit",
    imports: { default: async },
    exports: { default: async },
    ownership: Borrowing { duplicate_if_necessary: true },
});

use self::jobrelay::plugin as then;

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
