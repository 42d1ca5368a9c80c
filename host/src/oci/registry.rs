//! Pulling plugin components from OCI registries, keeping them by content, and pushing them.
//!
//! A component is an OCI artifact: an image manifest whose one layer is the `.wasm`
//! (`application/wasm`, or the older `application/vnd.wasm.content.layer.v1+wasm`) with a small
//! JSON config. The manifest's digest pins it (see `reference.rs`).
//!
//! **Verified, never trusted.** The manifest's bytes must hash to the pinned digest and the
//! layer's bytes to the digest the manifest gives it; neither the registry's `Docker-Content-
//! Digest` header nor the cache is taken on faith. A mismatch refuses the plugin version.
//!
//! **Kept by content.** Pulled manifests and layers are written to the cache folder (under the
//! state folder) named by their digests, and checked again when read, so a restart, or a
//! registry that is down, does not stop a plugin that was pulled once; a damaged cache file is
//! pulled again. What no manifest names any more is removed after each change of the config
//! folder ([`Registries::retain`]), so the folder holds the components in use, not every one
//! ever pulled.

use std::path::{Path, PathBuf};

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::reference::OciRef;

/// The layer media type jobrelay pushes (the CNCF Wasm OCI artifact layout).
pub const WASM_LAYER: &str = "application/wasm";
/// The older Wasm layer media type, still accepted on pull.
pub const WASM_LAYER_V1: &str = "application/vnd.wasm.content.layer.v1+wasm";
/// The config media type jobrelay pushes.
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The largest component pulled: far above any plugin (a Python one is ~20 MB), far below what
/// would hurt the host.
pub const MAX_COMPONENT_BYTES: u64 = 256 << 20;
/// The largest manifest read.
const MAX_MANIFEST_BYTES: usize = 64 << 10;

/// The main file's `oci:` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OciSettings {
    /// Registries (`host:port`) reached over plain HTTP instead of HTTPS: a registry inside the
    /// cluster or on the host, never one across a network you do not control.
    #[serde(default)]
    pub plain_http: Vec<String>,
    /// Credentials by registry (`host[:port]` as written in references); a registry not listed
    /// is used anonymously.
    #[serde(default)]
    pub credentials: std::collections::BTreeMap<String, OciCredential>,
}

/// A user name and password (or token) for one registry; each may be a secret reference
/// (`env:NAME`, `file:/path`), resolved at every pull so a rotated secret is picked up.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OciCredential {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for OciCredential {
    /// Never prints the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OciCredential")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// A registry credential whose secret cannot be resolved: the message names its key.
#[derive(Debug, thiserror::Error)]
#[error("oci.credentials.\"{registry}\".{key}: {why}")]
pub struct CredentialError {
    registry: String,
    key: &'static str,
    why: jobrelay_contract::secret::SecretError,
}

impl OciSettings {
    /// How to authenticate to `registry`; an error names the key whose secret is missing.
    pub fn auth(&self, registry: &str) -> Result<RegistryAuth, CredentialError> {
        let Some(credential) = self.credentials.get(registry) else {
            return Ok(RegistryAuth::Anonymous);
        };
        let resolve = |key: &'static str, value: &str| {
            jobrelay_contract::secret::resolve(value).map_err(|why| CredentialError {
                registry: registry.to_string(),
                key,
                why,
            })
        };
        Ok(RegistryAuth::Basic(
            resolve("username", &credential.username)?,
            resolve("password", &credential.password)?,
        ))
    }
}

/// Why a component could not be had.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FetchError {
    /// The registry could not be reached or answered with an error: may pass, so the load is
    /// tried again with backoff.
    #[error("{reference}: the registry did not give the component: {reason}")]
    Unavailable { reference: String, reason: String },
    /// What the registry gave is not what the reference pins, or not a component: the version
    /// is refused.
    #[error("{reference}: {reason}")]
    Refused { reference: String, reason: String },
}

impl FetchError {
    pub fn is_passing(&self) -> bool {
        matches!(self, FetchError::Unavailable { .. })
    }
}

/// A component as pulled: its bytes and their sha256 (hex).
#[derive(Debug, Clone)]
pub struct Pulled {
    pub bytes: std::sync::Arc<[u8]>,
    pub sha256: String,
}

/// The manifest fields read here.
#[derive(Debug, Deserialize)]
struct Manifest {
    #[serde(default)]
    layers: Vec<Descriptor>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Descriptor {
    #[serde(rename = "mediaType")]
    media_type: String,
    digest: String,
    size: u64,
}

/// Registries as this host reaches them, and the cache of what was pulled.
#[derive(Clone)]
pub struct Registries {
    client: std::sync::Arc<Client>,
    settings: OciSettings,
    cache: PathBuf,
}

impl std::fmt::Debug for Registries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registries")
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}

impl Registries {
    pub fn new(settings: &OciSettings, cache: PathBuf) -> Registries {
        let protocol = if settings.plain_http.is_empty() {
            ClientProtocol::Https
        } else {
            ClientProtocol::HttpsExcept(settings.plain_http.clone())
        };
        let client = Client::new(ClientConfig {
            protocol,
            ..ClientConfig::default()
        });
        Registries {
            client: std::sync::Arc::new(client),
            settings: settings.clone(),
            cache,
        }
    }

    /// The component `reference` pins: from the cache if it holds it intact, else pulled,
    /// verified and kept.
    pub async fn fetch(&self, reference: &OciRef) -> Result<Pulled, FetchError> {
        let refused = |reason: String| FetchError::Refused {
            reference: reference.to_string(),
            reason,
        };
        let unavailable = |reason: String| FetchError::Unavailable {
            reference: reference.to_string(),
            reason,
        };
        if let Some(pulled) = self.cached(reference) {
            return Ok(pulled);
        }
        let image = reference.by_digest();
        let plain_http = self.settings.plain_http.contains(&reference.registry);
        let why = |e: &OciDistributionError| explain(e, &reference.registry, plain_http);
        let auth = self
            .settings
            .auth(&reference.registry)
            .map_err(|e| refused(e.to_string()))?;
        let (manifest_bytes, _) = self
            .client
            .pull_manifest_raw(&image, &auth, &[OCI_MANIFEST])
            .await
            .map_err(|e| {
                if let OciDistributionError::DigestError(e) = &e {
                    // The client checks the digest too: other bytes than the reference pins.
                    refused(format!(
                        "the registry's manifest is not the pinned one: {e}"
                    ))
                } else if is_unknown(&e) {
                    refused(format!(
                        "the registry has no manifest with the pinned digest ({}){PIN_HINT}",
                        why(&e)
                    ))
                } else if is_server_error(&e) {
                    unavailable(format!("{}{PIN_HINT}", why(&e)))
                } else {
                    unavailable(why(&e))
                }
            })?;
        if manifest_bytes.len() > MAX_MANIFEST_BYTES {
            return Err(refused(format!(
                "the manifest is larger than {MAX_MANIFEST_BYTES} bytes"
            )));
        }
        let actual = hex::encode(Sha256::digest(&manifest_bytes));
        if actual != reference.digest_hex {
            return Err(refused(format!(
                "the registry's manifest has digest sha256:{actual}, not the pinned sha256:{}",
                reference.digest_hex
            )));
        }
        let layer = wasm_layer(&manifest_bytes).map_err(|e| refused(e.to_string()))?;
        let layer_hex = layer_hex(&layer).map_err(|e| refused(e.to_string()))?;
        let mut bytes = Bounded::new(layer.size);
        self.client
            .pull_blob(&image, layer.digest.as_str(), &mut bytes)
            .await
            .map_err(|e| match e {
                // The client checks the digest as it reads: other bytes than the manifest pins.
                OciDistributionError::DigestError(e) => refused(format!(
                    "the layer's bytes do not have the manifest's digest {}: {e}",
                    layer.digest
                )),
                e if bytes.overflowed => refused(format!(
                    "the registry sent more than the {} bytes the manifest gives the layer: {e}",
                    layer.size
                )),
                e => unavailable(format!("the layer {}: {}", layer.digest, why(&e))),
            })?;
        let bytes = bytes.bytes;
        let actual = hex::encode(Sha256::digest(&bytes));
        if actual != layer_hex {
            return Err(refused(format!(
                "the layer's bytes do not have the manifest's digest {}: sha256:{actual}",
                layer.digest
            )));
        }
        self.keep(&reference.digest_hex, &manifest_bytes, &layer_hex, &bytes);
        Ok(Pulled {
            bytes: bytes.into(),
            sha256: layer_hex,
        })
    }

    /// The cached component, if its manifest and layer are there and intact.
    fn cached(&self, reference: &OciRef) -> Option<Pulled> {
        let manifest = std::fs::read(self.manifest_path(&reference.digest_hex)).ok()?;
        if hex::encode(Sha256::digest(&manifest)) != reference.digest_hex {
            return None;
        }
        let layer = wasm_layer(&manifest).ok()?;
        let layer_hex = layer_hex(&layer).ok()?;
        let bytes = std::fs::read(self.layer_path(&layer_hex)).ok()?;
        if hex::encode(Sha256::digest(&bytes)) != layer_hex {
            tracing::warn!(digest = %layer.digest, "a cached component is damaged; pulling it again");
            return None;
        }
        Some(Pulled {
            bytes: bytes.into(),
            sha256: layer_hex,
        })
    }

    /// Writes the pulled manifest and layer to the cache; a failure only costs a later pull.
    fn keep(&self, manifest_hex: &str, manifest: &[u8], layer_hex: &str, layer: &[u8]) {
        let written = std::fs::create_dir_all(&self.cache)
            .and_then(|()| write_atomic(&self.layer_path(layer_hex), layer))
            .and_then(|()| write_atomic(&self.manifest_path(manifest_hex), manifest));
        if let Err(e) = written {
            tracing::warn!(cache = %self.cache.display(), error = %e,
                "cannot keep a pulled component; it will be pulled again at the next load");
        }
    }

    /// Removes every cached file but those of `keep` (the references the manifests name now):
    /// their manifest and the layer it gives. Failures are logged; they only leave files.
    pub fn retain<'a>(&self, keep: impl IntoIterator<Item = &'a OciRef>) {
        let mut kept = std::collections::HashSet::new();
        for reference in keep {
            let manifest = self.manifest_path(&reference.digest_hex);
            if let Some(layer) = std::fs::read(&manifest)
                .ok()
                .and_then(|bytes| wasm_layer(&bytes).ok())
                .and_then(|layer| layer_hex(&layer).ok())
            {
                kept.insert(self.layer_path(&layer));
            }
            kept.insert(manifest);
        }
        let Ok(entries) = std::fs::read_dir(&self.cache) else {
            return; // nothing pulled yet
        };
        for path in entries.flatten().map(|entry| entry.path()) {
            let ours = path
                .file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("sha256-"));
            if ours
                && !kept.contains(&path)
                && let Err(e) = std::fs::remove_file(&path)
            {
                tracing::warn!(file = %path.display(), error = %e, "cannot remove an unused component");
            }
        }
    }

    fn manifest_path(&self, hex: &str) -> PathBuf {
        self.cache.join(format!("sha256-{hex}.manifest.json"))
    }

    fn layer_path(&self, hex: &str) -> PathBuf {
        self.cache.join(format!("sha256-{hex}.wasm"))
    }
}

/// Said when a registry has no manifest with the pinned digest, or fails to answer for it:
/// the usual mistake is pinning the `.wasm` file's own sha256 (a blob of the artifact, which
/// a registry may even fail on when asked for it as a manifest).
const PIN_HINT: &str = " (hint: the pin is the digest of the artifact's manifest, which \
    `jobrelay plugin push` prints and `jobrelay plugin digest` computes — not the sha256 of \
    the .wasm file)";

/// Whether the registry failed on the request (a 5xx answer).
fn is_server_error(error: &OciDistributionError) -> bool {
    matches!(error, OciDistributionError::ServerError { code, .. } if *code >= 500)
}

/// Whether the registry answered that what was asked for does not exist: a definite answer
/// for a digest, which no retry changes (unlike a registry that is down or refuses access).
fn is_unknown(error: &OciDistributionError) -> bool {
    match error {
        OciDistributionError::ServerError { code, .. } => *code == 404,
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().any(|e| {
            matches!(
                e.code,
                OciErrorCode::ManifestUnknown | OciErrorCode::NotFound | OciErrorCode::NameUnknown
            )
        }),
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        _ => false,
    }
}

/// Why a manifest does not give one Wasm layer this host pulls.
#[derive(Debug, thiserror::Error)]
enum LayerError {
    #[error("the manifest is not an OCI image manifest: {0}")]
    NotManifest(serde_json::Error),
    #[error("the artifact must have exactly one layer of type {WASM_LAYER}, it has {count}")]
    NotOneLayer { count: usize },
    #[error("the component is {size} bytes, over the {MAX_COMPONENT_BYTES} this host pulls")]
    TooLarge { size: u64 },
    #[error("the layer's digest `{digest}` is not a sha256")]
    NotSha256 { digest: String },
}

/// The one Wasm layer of a manifest, within the size bound.
fn wasm_layer(manifest: &[u8]) -> Result<Descriptor, LayerError> {
    let manifest: Manifest = serde_json::from_slice(manifest).map_err(LayerError::NotManifest)?;
    let layers: Vec<&Descriptor> = manifest
        .layers
        .iter()
        .filter(|l| l.media_type == WASM_LAYER || l.media_type == WASM_LAYER_V1)
        .collect();
    let [layer] = layers[..] else {
        return Err(LayerError::NotOneLayer {
            count: layers.len(),
        });
    };
    if layer.size > MAX_COMPONENT_BYTES {
        return Err(LayerError::TooLarge { size: layer.size });
    }
    Ok(layer.clone())
}

fn layer_hex(layer: &Descriptor) -> Result<String, LayerError> {
    layer
        .digest
        .strip_prefix("sha256:")
        .filter(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::to_ascii_lowercase)
        .ok_or_else(|| LayerError::NotSha256 {
            digest: layer.digest.clone(),
        })
}

/// A buffer that takes at most the size the manifest declares, so a registry cannot make the
/// host hold more than it agreed to (the declared size itself is bounded by
/// [`MAX_COMPONENT_BYTES`]).
struct Bounded {
    bytes: Vec<u8>,
    max: usize,
    overflowed: bool,
}

impl Bounded {
    fn new(size: u64) -> Bounded {
        let max = usize::try_from(size).unwrap_or(usize::MAX);
        Bounded {
            bytes: Vec::with_capacity(max),
            max,
            overflowed: false,
        }
    }
}

impl tokio::io::AsyncWrite for Bounded {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if self.bytes.len() + buf.len() > self.max {
            self.overflowed = true;
            return std::task::Poll::Ready(Err(std::io::Error::other(
                "more bytes than the manifest declares",
            )));
        }
        self.bytes.extend_from_slice(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// Why a push failed: the step that failed, and the registry's or the client's answer with
/// its cause and, where one is known, what to do ([`explain`]). No message shows a
/// credential's secret.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// The registry's credential cannot be resolved.
    #[error(transparent)]
    Credential(#[from] CredentialError),
    /// The registry refused the sign-in, or could not be reached.
    #[error("signing in to {registry}: {why}")]
    SignIn { registry: String, why: String },
    /// The config or the manifest could not be encoded.
    #[error("{0}")]
    Encode(serde_json::Error),
    #[error("pushing the component: {0}")]
    Component(String),
    #[error("pushing the config: {0}")]
    Config(String),
    #[error("pushing the manifest: {0}")]
    Manifest(String),
}

/// The client's error with every cause beneath it (the client's own message drops them: a
/// refused connection shows only as "error sending request"), and a hint where the cause
/// says what to do: a TLS handshake with a registry that speaks plain HTTP, or a refused
/// connection.
pub fn explain(error: &OciDistributionError, registry: &str, plain_http: bool) -> String {
    let mut text = error.to_string();
    let mut next = std::error::Error::source(error);
    while let Some(source) = next {
        let said = source.to_string();
        // Clients often repeat their source in their own message.
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        next = source.source();
    }
    let lower = text.to_ascii_lowercase();
    let handshake = [
        "tls",
        "ssl",
        "certificate",
        "corrupt message",
        "wrong version number",
    ]
    .iter()
    .any(|word| lower.contains(word));
    if !plain_http && handshake {
        text.push_str(&format!(
            " (hint: if {registry} speaks plain HTTP, not HTTPS, give the command \
             `--plain-http`, or list it under `oci.plain_http` in jobrelay.yaml)"
        ));
    } else if lower.contains("connection refused") {
        text.push_str(&format!(
            " (hint: nothing listens at {registry}: is the registry running, and is the \
             port right?)"
        ));
    }
    text
}

/// Why a tag could not be resolved to its pin.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(transparent)]
    Credential(#[from] CredentialError),
    #[error("reading the manifest of {reference}: {why}")]
    Manifest { reference: String, why: String },
}

/// The pinned reference of what `registry/repository:tag` names now: the digest of the
/// manifest's bytes as the registry serves them.
pub async fn resolve_tag(
    settings: &OciSettings,
    registry: &str,
    repository: &str,
    tag: &str,
) -> Result<OciRef, ResolveError> {
    let client = Registries::new(settings, PathBuf::new()).client;
    let plain_http = settings.plain_http.iter().any(|r| r == registry);
    let image = Reference::with_tag(
        registry.to_string(),
        repository.to_string(),
        tag.to_string(),
    );
    let auth = settings.auth(registry)?;
    let (manifest, _) = client
        .pull_manifest_raw(&image, &auth, &[OCI_MANIFEST])
        .await
        .map_err(|e| ResolveError::Manifest {
            reference: format!("oci://{registry}/{repository}:{tag}"),
            why: explain(&e, registry, plain_http),
        })?;
    Ok(OciRef {
        registry: registry.to_string(),
        repository: repository.to_string(),
        tag: Some(tag.to_string()),
        digest_hex: hex::encode(Sha256::digest(&manifest)),
    })
}

/// The OCI artifact of a component as `push` writes it: the same bytes give the same
/// manifest, so its digest — the pin — is known before (or without) a push.
pub struct Artifact {
    pub layer_digest: String,
    pub config: Vec<u8>,
    pub config_digest: String,
    pub manifest: Vec<u8>,
}

impl Artifact {
    pub fn of(wasm: &[u8]) -> Result<Artifact, serde_json::Error> {
        let layer_digest = format!("sha256:{}", hex::encode(Sha256::digest(wasm)));
        let config = serde_json::to_vec(&serde_json::json!({
            "architecture": "wasm",
            "os": "wasip2",
            "layerDigests": [layer_digest],
        }))?;
        let config_digest = format!("sha256:{}", hex::encode(Sha256::digest(&config)));
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": WASM_CONFIG,
            "config": {"mediaType": WASM_CONFIG, "digest": config_digest, "size": config.len()},
            "layers": [{"mediaType": WASM_LAYER, "digest": layer_digest, "size": wasm.len()}],
        }))?;
        Ok(Artifact {
            layer_digest,
            config,
            config_digest,
            manifest,
        })
    }

    /// The manifest's sha256 (hex): what a reference pins.
    pub fn manifest_hex(&self) -> String {
        hex::encode(Sha256::digest(&self.manifest))
    }
}

/// Pushes `wasm` to `registry/repository:tag` as a Wasm OCI artifact; returns the pinned
/// reference to put in a manifest.
pub async fn push(
    settings: &OciSettings,
    registry: &str,
    repository: &str,
    tag: &str,
    wasm: &[u8],
) -> Result<OciRef, PushError> {
    let client = Registries::new(settings, PathBuf::new()).client;
    let plain_http = settings.plain_http.iter().any(|r| r == registry);
    let why = |e: OciDistributionError| explain(&e, registry, plain_http);
    let image = Reference::with_tag(
        registry.to_string(),
        repository.to_string(),
        tag.to_string(),
    );
    let auth = settings.auth(registry)?;
    // Signs in (answering the registry's challenge) before the uploads, which do not.
    client
        .auth(&image, &auth, oci_client::RegistryOperation::Push)
        .await
        .map_err(|e| PushError::SignIn {
            registry: registry.to_string(),
            why: why(e),
        })?;
    let artifact = Artifact::of(wasm).map_err(PushError::Encode)?;
    client
        .push_blob(&image, wasm, &artifact.layer_digest)
        .await
        .map_err(|e| PushError::Component(why(e)))?;
    client
        .push_blob(&image, &artifact.config, &artifact.config_digest)
        .await
        .map_err(|e| PushError::Config(why(e)))?;
    let manifest_hex = artifact.manifest_hex();
    let manifest = artifact.manifest;
    let content_type = http::HeaderValue::from_static(OCI_MANIFEST);
    client
        .push_manifest_raw(&image, manifest, content_type)
        .await
        .map_err(|e| PushError::Manifest(why(e)))?;
    Ok(OciRef {
        registry: registry.to_string(),
        repository: repository.to_string(),
        tag: Some(tag.to_string()),
        digest_hex: manifest_hex,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(bytes: &[u8]) -> String {
        hex::encode(Sha256::digest(bytes))
    }

    /// Two components pulled; the manifests now name one: the other's manifest and layer go,
    /// the named one's stay and still read back, and files not of the cache are left alone.
    #[test]
    fn retain_keeps_what_is_named_and_removes_the_rest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let registries = Registries::new(&OciSettings::default(), dir.path().to_path_buf());
        let mut references = Vec::new();
        for wasm in [&b"first component"[..], &b"second component"[..]] {
            let layer = digest(wasm);
            let manifest = serde_json::to_vec(&serde_json::json!({
                "layers": [{"mediaType": WASM_LAYER, "digest": format!("sha256:{layer}"), "size": wasm.len()}],
            }))
            .expect("json");
            let manifest_hex = digest(&manifest);
            registries.keep(&manifest_hex, &manifest, &layer, wasm);
            references.push(OciRef {
                registry: "r.io".into(),
                repository: "p".into(),
                tag: None,
                digest_hex: manifest_hex,
            });
        }
        std::fs::write(dir.path().join("notes.txt"), "not ours").expect("write");
        registries.retain([&references[1]]);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .expect("list")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left.len(), 3, "{left:?}");
        assert!(left.contains(&"notes.txt".to_string()));
        assert!(registries.cached(&references[0]).is_none());
        let kept = registries.cached(&references[1]).expect("still cached");
        assert_eq!(&*kept.bytes, b"second component");
    }
}
