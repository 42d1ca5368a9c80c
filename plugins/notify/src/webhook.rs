//! Webhook URLs: parsed into the parts `wasi:http` wants, and shown only with the token hidden.
//!
//! A custom bot's URL *is* its credential (anyone holding it can post to the chat), so the
//! parsed form never prints the token. Services put it in one of two places: the last path
//! segment (Feishu `…/hook/<token>`, Slack `…/services/T…/B…/<token>`) or the query (DingTalk
//! `?access_token=<token>`, WeCom `?key=<token>`). A URL with a query is taken to carry its
//! credentials there and shows every query value as `***`; one without shows its last segment
//! so. `Debug` and [`Webhook::redacted`] show only that form, and [`Webhook::scrub`] removes the
//! hidden values and the signing secret from any text (such as an error a host or server
//! produced) before it reaches a log line or a handler error. Parse errors name the problem,
//! never the value.

use std::fmt;

/// Shortest token or secret that is scrubbed from text. Real bot tokens are UUIDs and secrets
/// are 20-odd characters; replacing a two-letter test token everywhere would only garble
/// messages.
const MIN_SCRUBBED_LEN: usize = 8;

/// `http` is accepted for test receivers and proxies inside a trusted network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// A parsed bot URL.
#[derive(Clone, PartialEq, Eq)]
pub struct Webhook {
    pub scheme: Scheme,
    /// `host[:port]` as written.
    pub authority: String,
    /// Starts with `/`; the query is kept, the fragment (never sent over HTTP) dropped.
    pub path_with_query: String,
    /// What must never be shown: the query's values, or else the last path segment.
    hidden: Vec<String>,
    /// The URL with those replaced by `***`.
    shown: String,
}

impl Webhook {
    /// Parses an absolute `http(s)://host[:port]/path[?query]` URL.
    pub fn parse(url: &str) -> Result<Webhook, String> {
        let url = url.trim();
        if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("the URL contains spaces or control characters".to_string());
        }
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| "not an absolute URL (expected https://…)".to_string())?;
        let scheme = if scheme.eq_ignore_ascii_case("https") {
            Scheme::Https
        } else if scheme.eq_ignore_ascii_case("http") {
            Scheme::Http
        } else {
            return Err("the scheme must be http or https".to_string());
        };
        let rest = rest.split_once('#').map_or(rest, |(before, _)| before);
        let split = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path_with_query) = rest.split_at(split);
        if authority.is_empty() {
            return Err("the URL has no host".to_string());
        }
        if authority.contains('@') {
            return Err("credentials in the URL are not supported".to_string());
        }
        if !valid_port(authority) {
            return Err("the URL's port is not a number".to_string());
        }
        let path_with_query = if path_with_query.starts_with('/') {
            path_with_query.to_string()
        } else {
            format!("/{path_with_query}")
        };
        let base = format!("{}://{authority}", scheme.as_str());
        let (hidden, shown) = match path_with_query.split_once('?') {
            Some((path, query)) => {
                let mut hidden = Vec::new();
                let mut shown_query = Vec::new();
                for pair in query.split('&').filter(|p| !p.is_empty()) {
                    let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                    hidden.push(value.to_string());
                    shown_query.push(format!("{name}=***"));
                }
                (hidden, format!("{base}{path}?{}", shown_query.join("&")))
            }
            None => {
                let mut segments = path_with_query.split('/').filter(|s| !s.is_empty()).rev();
                let token = segments.next().unwrap_or_default().to_string();
                let shown = match (segments.next(), token.is_empty()) {
                    (_, true) => format!("{base}/"),
                    (Some(parent), false) => format!("{base}/…/{parent}/***"),
                    (None, false) => format!("{base}/***"),
                };
                (vec![token], shown)
            }
        };
        Ok(Webhook {
            scheme,
            authority: authority.to_string(),
            path_with_query,
            hidden,
            shown,
        })
    }

    /// The whole URL, credentials included: only for the request itself.
    pub fn url(&self) -> String {
        format!(
            "{}://{}{}",
            self.scheme.as_str(),
            self.authority,
            self.path_with_query
        )
    }

    /// The URL with its credentials replaced: safe for logs and error messages.
    pub fn redacted(&self) -> String {
        self.shown.clone()
    }

    /// `text` with this webhook's credentials and `secret` replaced by `***`.
    pub fn scrub(&self, text: &str, secret: Option<&str>) -> String {
        let mut clean = text.to_string();
        let sensitive = self.hidden.iter().map(String::as_str).chain(secret);
        for value in sensitive {
            if value.len() >= MIN_SCRUBBED_LEN {
                clean = clean.replace(value, "***");
            }
        }
        clean
    }
}

/// Hidden token even under `{:?}`, so a stray debug print cannot leak it.
impl fmt::Debug for Webhook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Webhook({})", self.redacted())
    }
}

/// Whether the port after the host, if any, is a number. IPv6 literals are bracketed, so only
/// a colon after the closing bracket (or in a name) introduces a port.
fn valid_port(authority: &str) -> bool {
    let after_host = match authority.rfind(']') {
        Some(end) => &authority[end + 1..],
        None => authority,
    };
    match after_host.rsplit_once(':') {
        Some((_, port)) => !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "2f6a1c0e-8d4b-4e57-9a3d-5b7c0f1e2d3c";

    fn feishu_url() -> String {
        format!("https://open.feishu.cn/open-apis/bot/v2/hook/{TOKEN}")
    }

    #[test]
    fn parses_a_feishu_url() {
        let hook = Webhook::parse(&feishu_url()).expect("valid");
        assert_eq!(hook.scheme, Scheme::Https);
        assert_eq!(hook.authority, "open.feishu.cn");
        assert_eq!(
            hook.path_with_query,
            format!("/open-apis/bot/v2/hook/{TOKEN}")
        );
        assert_eq!(hook.redacted(), "https://open.feishu.cn/…/hook/***");
        assert!(!format!("{hook:?}").contains(TOKEN));
    }

    #[test]
    fn parses_ports_queries_and_plain_http() {
        let hook = Webhook::parse("http://127.0.0.1:8080/open-apis/bot/v2/hook/abc?x=1#frag")
            .expect("valid");
        assert_eq!(hook.scheme, Scheme::Http);
        assert_eq!(hook.authority, "127.0.0.1:8080");
        assert_eq!(hook.path_with_query, "/open-apis/bot/v2/hook/abc?x=1");
        assert_eq!(
            hook.redacted(),
            "http://127.0.0.1:8080/open-apis/bot/v2/hook/abc?x=***"
        );

        let bare = Webhook::parse("HTTPS://[::1]:9443").expect("valid");
        assert_eq!(bare.authority, "[::1]:9443");
        assert_eq!(bare.path_with_query, "/");
        assert_eq!(bare.redacted(), "https://[::1]:9443/");

        let query_only = Webhook::parse("https://example.com?t=1").expect("valid");
        assert_eq!(query_only.path_with_query, "/?t=1");
    }

    #[test]
    fn credentials_in_the_query_are_hidden() {
        let token = "a7c3e9f1b2d4a6c8e0f2a4c6e8b0d2f4";
        let ding = Webhook::parse(&format!(
            "https://oapi.dingtalk.com/robot/send?access_token={token}"
        ))
        .expect("valid");
        assert_eq!(
            ding.redacted(),
            "https://oapi.dingtalk.com/robot/send?access_token=***"
        );
        assert!(!format!("{ding:?}").contains(token));
        assert_eq!(ding.scrub(&format!("refused {token}"), None), "refused ***");
        assert!(ding.url().ends_with(token));

        let wecom = Webhook::parse(&format!(
            "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key={token}&debug=1"
        ))
        .expect("valid");
        assert_eq!(
            wecom.redacted(),
            "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=***&debug=***"
        );
    }

    #[test]
    fn refuses_bad_urls_without_echoing_them() {
        for bad in [
            "open.feishu.cn/open-apis/bot/v2/hook/secret-token",
            "ftp://open.feishu.cn/secret-token",
            "https:///secret-token",
            "https://user:pw@open.feishu.cn/secret-token",
            "https://open.feishu.cn:x/secret-token",
            "https://open.feishu.cn/secret token",
        ] {
            let error = Webhook::parse(bad).expect_err(bad);
            assert!(!error.contains("secret"), "{error}");
        }
    }

    #[test]
    fn scrubs_token_and_secret() {
        let hook = Webhook::parse(&feishu_url()).expect("valid");
        let text = format!("failed for {} with key s3cr3t-signing-key", feishu_url());
        let clean = hook.scrub(&text, Some("s3cr3t-signing-key"));
        assert!(!clean.contains(TOKEN), "{clean}");
        assert!(!clean.contains("s3cr3t"), "{clean}");
        // Too short to be a real credential: left alone rather than garbling the text.
        assert_eq!(hook.scrub("ok", Some("ok")), "ok");
    }
}
