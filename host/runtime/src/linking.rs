//! The one place that knows every capability and the whole store: links each capability's
//! interfaces into the engine-wide linker, with a getter from [`HostState`] to the part of it
//! that capability works on. A capability's own file never names `HostState`.

use wasmtime::component::{HasSelf, Linker};

use super::HostState;
use jobrelay_bindings as bindings;
use jobrelay_capabilities::{
    archive, deferral, http, job, kv, lifecycle, log, pod_logs, sql, story, wasi,
};

/// Links the plugin worlds' imports: the type-only interfaces, then every capability.
///
/// Everything is defined under the current package version (0.2.2) and, where 0.1.0 differs,
/// under 0.1.0 too. A 0.2.0 plugin's imports (`jobrelay:plugin/log@0.2.0`, ...) need no
/// definitions of their own: the linker resolves an import to a definition of a
/// semver-compatible version, and 0.2.0, 0.2.1 and 0.2.2 are one `0.2` track.
pub fn link(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    bindings::jobrelay::plugin::types::add_to_linker::<_, HasSelf<_>>(linker, |s| s)?;
    bindings::jobrelay::plugin::fleet::add_to_linker::<_, HasSelf<_>>(linker, |s| s)?;
    bindings::v0_1::jobrelay::plugin::types::add_to_linker::<_, HasSelf<_>>(linker, |s| s)?;
    wasi::add_to_linker(linker)?;
    http::add_to_linker(linker)?;
    log::add_to_linker(linker, HostState::log)?;
    lifecycle::add_to_linker(linker, |s| &mut s.caps.lifecycle)?;
    deferral::add_to_linker(linker, |s| &mut s.caps.deferral)?;
    job::add_to_linker(linker, |s| &mut s.caps.job)?;
    sql::add_to_linker(linker, |s| &mut s.caps.sql)?;
    kv::add_to_linker(linker, |s| &mut s.caps.kv)?;
    pod_logs::add_to_linker(linker, |s| &mut s.caps.pod_logs)?;
    archive::add_to_linker(linker, |s| &mut s.caps.archive)?;
    story::add_to_linker(linker, |s| &mut s.caps.story)?;
    Ok(())
}
