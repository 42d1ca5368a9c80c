//! `jobrelay plugin digest WASM|oci://REGISTRY/REPO:TAG [--plain-http]`: the pin of a
//! component — the digest of its artifact's manifest, what a manifest's `wasm: oci://…@sha256:…`
//! names. Not the `.wasm` file's own sha256, the usual mistake: for a file, both are printed.

use std::path::Path;
use std::process::ExitCode;

use super::push::command_line_settings;
use crate::oci::OciRef;
use crate::oci::registry::{Artifact, resolve_tag};

/// Prints the pin: for a file, the digest `plugin push` of it gives (the artifact is made the
/// same way from the same bytes), then the file's own sha256 for comparison; for a tag, the
/// pinned reference of what the registry serves under it now.
pub async fn command(target: &str, plain_http: bool) -> anyhow::Result<ExitCode> {
    if OciRef::is_oci(target) {
        let (registry, repository, tag) = OciRef::parse_target(target)?;
        let settings = command_line_settings(&registry, plain_http);
        let pinned = resolve_tag(&settings, &registry, &repository, &tag).await?;
        super::print_out(&format!("{pinned}\n"))?;
        return Ok(ExitCode::SUCCESS);
    }
    let path = Path::new(target);
    let bytes = std::fs::read(path)
        .map_err(|e| anyhow::anyhow!("cannot read the component {}: {e}", path.display()))?;
    let artifact = Artifact::of(&bytes)?;
    // The layer is the file itself: its digest is the file's own sha256.
    super::print_out(&format!(
        "sha256:{}\n(the pin of `plugin push {}`; the file's own {} is not a pin)\n",
        artifact.manifest_hex(),
        path.display(),
        artifact.layer_digest
    ))?;
    Ok(ExitCode::SUCCESS)
}
