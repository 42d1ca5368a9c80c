//! `jobrelay plugin inspect PLUGIN.wasm|oci://REGISTRY/REPO:TAG@sha256:… [--plain-http]`: what
//! a component is before it is deployed — its size, its sha256 and its pin, the plugin world it
//! targets (or why it is not a plugin this host runs), and what it imports and exports. No
//! plugin code runs.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use jobrelay_runtime::{Inspection, Runtime, RuntimeSettings};

use super::push::command_line_settings;
use super::run::compile_cache_dir;
use crate::config::config_schema::ConfigSchema;
use crate::oci::OciRef;
use crate::oci::registry::{Artifact, Registries};

/// Prints the component's description; exit status 1 if it is not a plugin this host runs,
/// whether or not the reader of standard output read it all.
pub async fn command(target: &str, plain_http: bool) -> anyhow::Result<ExitCode> {
    let (wasm, pin): (Arc<[u8]>, String) = if OciRef::is_oci(target) {
        let reference = OciRef::parse(target)?;
        let settings = command_line_settings(&reference.registry, plain_http);
        let cache = tempfile::tempdir().context("cannot create a temporary folder")?;
        let pulled = Registries::new(&settings, cache.path().to_path_buf())
            .fetch(&reference)
            .await?;
        (pulled.bytes, reference.digest())
    } else {
        let bytes = std::fs::read(Path::new(target))
            .with_context(|| format!("cannot read the component {target}"))?;
        let pin = format!("sha256:{}", Artifact::of(&bytes)?.manifest_hex());
        (bytes.into(), pin)
    };
    // The compile cache `plugin run` keeps: inspecting a component is compiling it once.
    let runtime = Runtime::new(RuntimeSettings {
        cache_dir: compile_cache_dir(),
        ..RuntimeSettings::default()
    })?;
    let inspection = runtime
        .inspect(wasm)
        .await
        .with_context(|| format!("{target}: not a component this host can compile"))?;
    let mut text = describe(target, &pin, &inspection);
    if !OciRef::is_oci(target) {
        match ConfigSchema::beside(Path::new(target))? {
            Some(schema) => text.push_str(&format!(
                "config schema: {}\n{}",
                schema.path.display(),
                schema.keys_table()
            )),
            None => text.push_str("config schema: none declared (no .schema.json beside it)\n"),
        }
    }
    // `plugin inspect … | head`: a reader that went away is no error.
    super::print_out(&text)?;
    Ok(crate::cli::passed(inspection.world.is_ok()))
}

/// The description `command` prints, a line per fact.
pub fn describe(target: &str, pin: &str, inspection: &Inspection) -> String {
    let world = match &inspection.world {
        Ok(package) => package.to_string(),
        Err(why) => format!("none this host serves: {why}"),
    };
    format!(
        "component: {target}\nsize: {} bytes ({})\nsha256: {}\npin: {pin} (the OCI \
         artifact's manifest digest; a file's is what `plugin push` of it gives)\nworld: \
         {world}\nexports: {}\nimports:\n{}",
        inspection.bytes,
        if inspection.bytes < 1 << 20 {
            format!("{:.1} KiB", inspection.bytes as f64 / 1024.0)
        } else {
            format!("{:.1} MiB", inspection.bytes as f64 / f64::from(1 << 20))
        },
        inspection.sha256,
        inspection.exports.join(", "),
        inspection
            .imports
            .iter()
            .map(|name| format!("  {name}\n"))
            .collect::<String>()
    )
}
