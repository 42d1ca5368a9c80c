//! When a kubeconfig's credentials expire.
//!
//! A cluster's access ends when its client certificate passes its notAfter, or when its bearer
//! token passes its `exp`, and the first sign of it would otherwise be a 401 on every stream.
//! This reads those dates from the kubeconfig of the current context's user, so health, status
//! and metrics can show them ahead of time:
//!
//! - `client-certificate-data` (base64 PEM) or the `client-certificate` file: the notAfter of
//!   the first certificate (the client's own; any others are its chain);
//! - `token` or `tokenFile` (`token` wins, as in the client): the `exp` claim when the token is
//!   a JWT that has one. A legacy service-account-token Secret is a JWT without `exp`, and an
//!   opaque token is no JWT at all: neither says when it ends, so neither is reported.
//!
//! The JWT's signature is not checked: only the date it claims is read, to be shown. Neither
//! the token nor the key is kept or logged; errors name the credential and the file, never
//! the content.

use std::path::PathBuf;

use base64::Engine as _;
use kube::config::{AuthInfo, Kubeconfig};
use secrecy::ExposeSecret as _;
use serde::Serialize;

/// A warning is logged when a credential expires within this long (or has expired).
pub const WARN_AHEAD_SECONDS: i64 = 7 * 24 * 3600;

/// Which credential of the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Credential {
    /// The bearer token (`token` or `tokenFile`).
    Token,
    /// The client certificate (`client-certificate-data` or `client-certificate`).
    ClientCertificate,
}

impl Credential {
    /// The name in `/status` and in the metric's `credential` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Credential::Token => "token",
            Credential::ClientCertificate => "client_certificate",
        }
    }
}

impl std::fmt::Display for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// When one credential expires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CredentialExpiry {
    pub credential: Credential,
    /// RFC 3339, UTC, e.g. `2031-05-06T00:00:00Z`.
    pub expires_at: String,
    /// The same instant in seconds since the Unix epoch.
    pub expires_unix: i64,
}

impl CredentialExpiry {
    fn new(credential: Credential, expires_unix: i64) -> CredentialExpiry {
        let expires_at = chrono::DateTime::from_timestamp(expires_unix, 0)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            // Out of chrono's range (hundreds of thousands of years): the number still says it.
            .unwrap_or_else(|| expires_unix.to_string());
        CredentialExpiry {
            credential,
            expires_at,
            expires_unix,
        }
    }

    /// Expired, or expiring within [`WARN_AHEAD_SECONDS`] of `now_unix`.
    pub fn due_soon(&self, now_unix: i64) -> bool {
        self.expires_unix.saturating_sub(now_unix) <= WARN_AHEAD_SECONDS
    }
}

/// Why a credential's expiry could not be read. Never carries the credential itself.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("{credential}: cannot read `{path}`: {source}", path = path.display())]
    ReadFile {
        credential: Credential,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("client-certificate-data is not base64: {0}")]
    Base64(base64::DecodeError),
    #[error("client certificate: no PEM `CERTIFICATE` block")]
    NoCertificate,
    #[error("client certificate: {0}")]
    Certificate(String),
}

/// What was found out about the credentials of a kubeconfig's current user.
#[derive(Debug, Default)]
pub struct Expiries {
    /// One per credential that says when it expires, token first.
    pub found: Vec<CredentialExpiry>,
    /// Credentials that are there but could not be read.
    pub problems: Vec<CredentialError>,
}

/// The expiries of the user of `kubeconfig`'s current context (none when there is no such
/// user, or it authenticates otherwise, e.g. with an exec plugin).
pub fn expiries(kubeconfig: &Kubeconfig) -> Expiries {
    let mut out = Expiries::default();
    let Some(user) = current_user(kubeconfig) else {
        return out;
    };
    match token_expiry(user) {
        Ok(Some(expiry)) => out.found.push(expiry),
        Ok(None) => {}
        Err(e) => out.problems.push(e),
    }
    match certificate_expiry(user) {
        Ok(Some(expiry)) => out.found.push(expiry),
        Ok(None) => {}
        Err(e) => out.problems.push(e),
    }
    out
}

/// The user the current context names.
fn current_user(kubeconfig: &Kubeconfig) -> Option<&AuthInfo> {
    let current = kubeconfig.current_context.as_deref()?;
    let context = kubeconfig.contexts.iter().find(|c| c.name == current)?;
    let user = context.context.as_ref()?.user.as_deref()?;
    kubeconfig
        .auth_infos
        .iter()
        .find(|u| u.name == user)?
        .auth_info
        .as_ref()
}

fn token_expiry(user: &AuthInfo) -> Result<Option<CredentialExpiry>, CredentialError> {
    let exp = if let Some(token) = &user.token {
        jwt_exp(token.expose_secret())
    } else if let Some(path) = &user.token_file {
        let token = std::fs::read_to_string(path).map_err(|source| CredentialError::ReadFile {
            credential: Credential::Token,
            path: path.into(),
            source,
        })?;
        jwt_exp(&token)
    } else {
        None
    };
    Ok(exp.map(|exp| CredentialExpiry::new(Credential::Token, exp)))
}

/// The `exp` claim of a JWT, in Unix seconds; `None` for a token that is not a JWT (three
/// base64url parts, a JSON header and payload) or has no numeric `exp`.
pub fn jwt_exp(token: &str) -> Option<i64> {
    let mut parts = token.trim().split('.');
    let (Some(header), Some(payload), Some(_signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let decode = |part: &str| -> Option<serde_json::Map<String, serde_json::Value>> {
        // Unpadded by the JWS spec; some encoders pad anyway.
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(part.trim_end_matches('='))
            .ok()?;
        match serde_json::from_slice(&bytes).ok()? {
            serde_json::Value::Object(map) => Some(map),
            _ => None,
        }
    };
    decode(header)?;
    let exp = decode(payload)?.get("exp")?.as_f64()?;
    // A NumericDate may have a fraction; an absurd one is no date.
    (exp.is_finite() && exp.abs() < 1e15).then(|| exp.floor() as i64)
}

fn certificate_expiry(user: &AuthInfo) -> Result<Option<CredentialExpiry>, CredentialError> {
    // As the client loads it: the data wins over the file.
    let pem = if let Some(data) = &user.client_certificate_data {
        base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(CredentialError::Base64)?
    } else if let Some(path) = &user.client_certificate {
        std::fs::read(path).map_err(|source| CredentialError::ReadFile {
            credential: Credential::ClientCertificate,
            path: path.into(),
            source,
        })?
    } else {
        return Ok(None);
    };
    let not_after = certificate_not_after(&pem)?;
    Ok(Some(CredentialExpiry::new(
        Credential::ClientCertificate,
        not_after,
    )))
}

/// The notAfter (Unix seconds) of the first certificate in a PEM bundle.
pub fn certificate_not_after(pem: &[u8]) -> Result<i64, CredentialError> {
    for block in x509_parser::pem::Pem::iter_from_buffer(pem) {
        let block = block.map_err(|e| CredentialError::Certificate(e.to_string()))?;
        if block.label != "CERTIFICATE" {
            continue;
        }
        let cert = block
            .parse_x509()
            .map_err(|e| CredentialError::Certificate(e.to_string()))?;
        return Ok(cert.validity().not_after.timestamp());
    }
    Err(CredentialError::NoCertificate)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64url(json: &str) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    fn jwt(payload: &str) -> String {
        format!(
            "{}.{}.c2lnbmF0dXJl",
            b64url(r#"{"alg":"RS256","kid":"k1"}"#),
            b64url(payload)
        )
    }

    /// A self-signed certificate valid until midnight UTC of the given day, and its key.
    fn certificate(year: i32, month: u8, day: u8) -> (String, String) {
        let mut params =
            rcgen::CertificateParams::new(vec!["jobrelay-test".to_string()]).expect("params");
        params.not_after = rcgen::date_time_ymd(year, month, day);
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("certificate");
        (cert.pem(), key.serialize_pem())
    }

    fn unix(rfc3339: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(rfc3339)
            .expect("a date")
            .timestamp()
    }

    /// A kubeconfig whose current user is `user`; another context's user has a token that
    /// expires in 2027, which must never be reported.
    fn kubeconfig(user: &str) -> Kubeconfig {
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: \
             https://127.0.0.1:6443\ncontexts:\n- name: other\n  context:\n    cluster: c\n    \
             user: nobody\n- name: ctx\n  context:\n    cluster: c\n    user: u\n\
             current-context: ctx\nusers:\n- name: nobody\n  user:\n    token: {}\n\
             - name: u\n  user:\n{user}",
            jwt(r#"{"exp":1800000000}"#)
        );
        Kubeconfig::from_yaml(&yaml).expect("kubeconfig")
    }

    #[test]
    fn a_jwt_says_when_it_expires() {
        assert_eq!(
            jwt_exp(&jwt(r#"{"sub":"a","exp":1900000000}"#)),
            Some(1900000000)
        );
        // Expired is still a date.
        assert_eq!(jwt_exp(&jwt(r#"{"exp":1000000000}"#)), Some(1000000000));
        // A fractional NumericDate, padding and surrounding whitespace.
        let padded = format!(
            "{}=.{}==.sig\n",
            b64url(r#"{"alg":"none"}"#),
            b64url(r#"{"exp":1900000000.75}"#)
        );
        assert_eq!(jwt_exp(&padded), Some(1900000000));
    }

    #[test]
    fn tokens_that_say_no_date_give_none() {
        // A legacy service-account-token Secret: a JWT without `exp`.
        assert_eq!(
            jwt_exp(&jwt(
                r#"{"iss":"kubernetes/serviceaccount","sub":"system:serviceaccount:ml:relay"}"#
            )),
            None
        );
        assert_eq!(jwt_exp(&jwt(r#"{"exp":"tomorrow"}"#)), None);
        assert_eq!(jwt_exp(&jwt(r#"{"exp":1e300}"#)), None);
        // Opaque tokens and near misses.
        for token in [
            "abcdef0123456789",
            "a.b",
            "a.b.c",
            "a.b.c.d",
            &format!("{}.{}.s", b64url("[1]"), b64url(r#"{"exp":1}"#)),
            &format!("{}.{}.s", b64url(r#"{"alg":"none"}"#), b64url("17")),
            "",
        ] {
            assert_eq!(jwt_exp(token), None, "{token}");
        }
    }

    #[test]
    fn a_certificate_says_its_not_after() {
        let (cert, key) = certificate(2031, 5, 6);
        assert_eq!(
            certificate_not_after(cert.as_bytes()).expect("parses"),
            unix("2031-05-06T00:00:00Z")
        );
        // A bundle with the key first and a second certificate: the first certificate counts.
        let (other, _) = certificate(2040, 1, 1);
        let bundle = format!("{key}{cert}{other}");
        assert_eq!(
            certificate_not_after(bundle.as_bytes()).expect("parses"),
            unix("2031-05-06T00:00:00Z")
        );
        assert!(matches!(
            certificate_not_after(key.as_bytes()),
            Err(CredentialError::NoCertificate)
        ));
        let broken = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(matches!(
            certificate_not_after(broken.as_bytes()),
            Err(CredentialError::Certificate(_))
        ));
    }

    #[test]
    fn the_current_users_token_and_certificate_are_read() {
        let (cert, key) = certificate(2031, 5, 6);
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let token = jwt(r#"{"exp":1900000000}"#);
        let found = expiries(&kubeconfig(&format!(
            "    token: {token}\n    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(&cert),
            b64(&key)
        )));
        assert!(found.problems.is_empty(), "{:?}", found.problems);
        assert_eq!(
            found.found,
            vec![
                CredentialExpiry {
                    credential: Credential::Token,
                    expires_at: "2030-03-17T17:46:40Z".into(),
                    expires_unix: 1900000000,
                },
                CredentialExpiry {
                    credential: Credential::ClientCertificate,
                    expires_at: "2031-05-06T00:00:00Z".into(),
                    expires_unix: unix("2031-05-06T00:00:00Z"),
                },
            ]
        );
        let json = serde_json::to_value(&found.found[1]).expect("serializes");
        assert_eq!(json["credential"], "client_certificate");
        assert_eq!(json["expires_at"], "2031-05-06T00:00:00Z");
    }

    #[test]
    fn files_are_read_and_their_absence_is_a_problem() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, _) = certificate(2029, 2, 3);
        let cert_path = dir.path().join("client.crt");
        std::fs::write(&cert_path, &cert).expect("write");
        let token_path = dir.path().join("token");
        std::fs::write(&token_path, format!("{}\n", jwt(r#"{"exp":1700000000}"#))).expect("w");
        let found = expiries(&kubeconfig(&format!(
            "    tokenFile: {}\n    client-certificate: {}\n",
            token_path.display(),
            cert_path.display()
        )));
        assert!(found.problems.is_empty(), "{:?}", found.problems);
        let unix_of: Vec<(Credential, i64)> = found
            .found
            .iter()
            .map(|e| (e.credential, e.expires_unix))
            .collect();
        assert_eq!(
            unix_of,
            [
                (Credential::Token, 1700000000),
                (Credential::ClientCertificate, unix("2029-02-03T00:00:00Z"))
            ]
        );

        let missing = dir.path().join("gone.crt");
        let found = expiries(&kubeconfig(&format!(
            "    token: opaque-secret-value\n    client-certificate: {}\n",
            missing.display()
        )));
        assert!(found.found.is_empty());
        let [problem] = found.problems.as_slice() else {
            panic!("one problem: {:?}", found.problems);
        };
        let said = problem.to_string();
        assert!(
            said.contains("client_certificate") && said.contains("gone.crt"),
            "{said}"
        );
        assert!(!said.contains("opaque-secret-value"));
    }

    #[test]
    fn other_users_and_exec_users_report_nothing() {
        let mut config = kubeconfig(
            "    exec:\n      command: gke-gcloud-auth-plugin\n      \
             apiVersion: client.authentication.k8s.io/v1beta1\n",
        );
        let found = expiries(&config);
        assert!(found.found.is_empty() && found.problems.is_empty());
        config.current_context = None;
        assert!(expiries(&config).found.is_empty());
        // The other context's user does have a date: switching to it shows it.
        config.current_context = Some("other".into());
        assert_eq!(expiries(&config).found.len(), 1);
    }

    #[test]
    fn due_soon_means_within_seven_days_or_past() {
        let now = 1_800_000_000;
        let at = |unix| CredentialExpiry::new(Credential::Token, unix);
        assert!(at(now - 1).due_soon(now));
        assert!(at(now + 6 * 86400).due_soon(now));
        assert!(at(now + 7 * 86400).due_soon(now));
        assert!(!at(now + 7 * 86400 + 1).due_soon(now));
        assert!(!at(i64::MAX).due_soon(now));
    }
}
