//! Plugin components in OCI registries: `wasm: oci://REGISTRY/REPO:TAG@sha256:…` in a
//! manifest, and `jobrelay plugin push`.

pub mod reference;
pub mod registry;

pub use self::reference::{OciRef, OciRefError};
pub use self::registry::{CredentialError, FetchError, OciSettings, PushError, Registries};

/// The folder of pulled components, inside the state's local folder.
pub const OCI_CACHE_DIR: &str = "oci";
