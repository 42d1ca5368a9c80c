//! `jobrelay plugin push WASM oci://REGISTRY/REPO:TAG [--plain-http]`: a component published to
//! an OCI registry as a Wasm artifact (see [`crate::oci::registry::push`]).

use std::path::Path;
use std::process::ExitCode;

use crate::oci::registry::{OciCredential, push};
use crate::oci::{OciRef, OciSettings};

/// Pushes the component and prints the pinned reference to put in a manifest's `wasm:`.
/// Credentials come from JOBRELAY_OCI_USERNAME and JOBRELAY_OCI_PASSWORD.
pub async fn command(wasm: &Path, target: &str, plain_http: bool) -> anyhow::Result<ExitCode> {
    let (registry, repository, tag) = OciRef::parse_target(target)?;
    let bytes = std::fs::read(wasm)
        .map_err(|e| anyhow::anyhow!("cannot read the component {}: {e}", wasm.display()))?;
    let settings = command_line_settings(&registry, plain_http);
    let pinned = push(&settings, &registry, &repository, &tag, &bytes)
        .await
        .map_err(|e| anyhow::anyhow!("{target}: {e}"))?;
    println!("{pinned}");
    Ok(ExitCode::SUCCESS)
}

/// The registry settings of a command: plain HTTP if asked, and credentials from the
/// environment, never the command line (it shows in `ps`).
pub(super) fn command_line_settings(registry: &str, plain_http: bool) -> OciSettings {
    let mut settings = OciSettings {
        plain_http: if plain_http {
            vec![registry.to_string()]
        } else {
            Vec::new()
        },
        ..Default::default()
    };
    if let (Ok(username), Ok(password)) = (
        std::env::var("JOBRELAY_OCI_USERNAME"),
        std::env::var("JOBRELAY_OCI_PASSWORD"),
    ) {
        settings
            .credentials
            .insert(registry.to_string(), OciCredential { username, password });
    }
    settings
}
