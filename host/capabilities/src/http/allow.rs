//! `grants.http.allow`: the destinations a plugin may reach, as `scheme://host[:port]` patterns.
//!
//! Patterns are parsed once per call's store (they are few and short) into a form that one
//! request checks with a few comparisons: lowercase names, parsed addresses, the default port
//! filled in, a wildcard kept as its `.suffix`. A request's destination ([`Target`]) is the
//! scheme, host and port of its URI and nothing else: paths and queries (where webhook tokens
//! live) never take part in a decision or a log line.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The schemes a plugin may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    /// `http` or `https`, in any case.
    fn parse(text: &str) -> Option<Scheme> {
        if text.eq_ignore_ascii_case("http") {
            Some(Scheme::Http)
        } else if text.eq_ignore_ascii_case("https") {
            Some(Scheme::Https)
        } else {
            None
        }
    }

    /// The port of a URI or pattern that names none.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// The host part of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    /// One DNS name, lowercase.
    Name(String),
    /// `*.example.com`, kept as `.example.com`: a host matches if it ends with it and has at
    /// least one label in front, so the bare suffix does not match.
    Wildcard(String),
    /// An address literal; matches only the same literal in the request, never a name that
    /// resolves to it (names are checked by name, addresses by address).
    Ip(IpAddr),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PortPattern {
    Any,
    Exact(u16),
}

/// One parsed `allow` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    scheme: Scheme,
    host: HostPattern,
    port: PortPattern,
}

/// An `allow` entry that is not a pattern: the entry, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "allow entry `{}`: {why} (expected scheme://host[:port], e.g. \
     `https://api.example.com`, `https://*.example.com` or `http://10.0.0.5:*`)",
    .entry.escape_debug()
)]
pub struct PatternError {
    pub entry: String,
    pub why: &'static str,
}

impl Pattern {
    /// Parses `scheme://host[:port]`. The error names the entry and says what is wrong.
    pub fn parse(entry: &str) -> Result<Pattern, PatternError> {
        parse_pattern(entry).map_err(|why| PatternError {
            entry: entry.to_string(),
            why,
        })
    }

    /// Whether a request to `target` is allowed by this pattern.
    pub fn matches(&self, target: &Target) -> bool {
        if self.scheme != target.scheme {
            return false;
        }
        if let PortPattern::Exact(port) = self.port
            && port != target.port
        {
            return false;
        }
        match (&self.host, &target.host) {
            (HostPattern::Name(name), Host::Name(host)) => name == host,
            (HostPattern::Wildcard(suffix), Host::Name(host)) => {
                host.len() > suffix.len() && host.ends_with(suffix.as_str())
            }
            (HostPattern::Ip(ip), Host::Ip(host)) => ip == host,
            _ => false,
        }
    }
}

/// The canonical form: lowercase, port always written (`*` for any).
impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.scheme.as_str())?;
        match &self.host {
            HostPattern::Name(name) => f.write_str(name)?,
            HostPattern::Wildcard(suffix) => write!(f, "*{suffix}")?,
            HostPattern::Ip(IpAddr::V4(ip)) => write!(f, "{ip}")?,
            HostPattern::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]")?,
        }
        match self.port {
            PortPattern::Any => f.write_str(":*"),
            PortPattern::Exact(port) => write!(f, ":{port}"),
        }
    }
}

fn parse_pattern(entry: &str) -> Result<Pattern, &'static str> {
    let (scheme, rest) = entry.split_once("://").ok_or("no `scheme://`")?;
    let scheme = Scheme::parse(scheme).ok_or("the scheme must be http or https")?;
    if rest.contains(['/', '?', '#']) {
        return Err("a destination has no path, query or fragment");
    }
    if rest.contains('@') {
        return Err("a destination has no user information");
    }
    let (host, port) = if let Some(bracketed) = rest.strip_prefix('[') {
        let (inside, tail) = bracketed.split_once(']').ok_or("`[` without `]`")?;
        let ip = inside
            .parse::<Ipv6Addr>()
            .map_err(|_| "not an IPv6 address between `[` and `]`")?;
        let port = match tail {
            "" => None,
            _ => Some(
                tail.strip_prefix(':')
                    .ok_or("only `:port` may follow `]`")?,
            ),
        };
        (HostPattern::Ip(IpAddr::V6(ip)), port)
    } else {
        let (host, port) = match rest.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (rest, None),
        };
        if port.is_some_and(|port| port.contains(':')) {
            return Err("an IPv6 address must be written in brackets, as in http://[fd00::1]:8080");
        }
        (parse_host(host)?, port)
    };
    let port = match port {
        None => PortPattern::Exact(scheme.default_port()),
        Some("*") => PortPattern::Any,
        Some(digits) => match digits.parse::<u16>() {
            Ok(port) if port > 0 && digits.bytes().all(|b| b.is_ascii_digit()) => {
                PortPattern::Exact(port)
            }
            _ => return Err("the port must be a number from 1 to 65535, or `*`"),
        },
    };
    Ok(Pattern { scheme, host, port })
}

fn parse_host(host: &str) -> Result<HostPattern, &'static str> {
    let host = host.to_ascii_lowercase();
    let wildcard_suffix = host.strip_prefix("*.");
    if wildcard_suffix.unwrap_or(&host).contains('*') {
        return Err("`*` may only stand for the leading labels, as in *.example.com");
    }
    if let Some(suffix) = wildcard_suffix {
        check_name(suffix)?;
        return Ok(HostPattern::Wildcard(format!(".{suffix}")));
    }
    if let Ok(ip) = host.parse::<Ipv4Addr>() {
        return Ok(HostPattern::Ip(IpAddr::V4(ip)));
    }
    check_name(&host)?;
    Ok(HostPattern::Name(host))
}

/// A DNS name as resolvers take it: dot-separated labels of letters, digits, `-` and `_`.
fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("the host is empty");
    }
    if name.len() > 253 {
        return Err("the host name is longer than 253 characters");
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(
                "every label of a host name has 1 to 63 characters (no empty label, no trailing dot)",
            );
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err("a host name has only letters, digits, `-`, `_` and dots");
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err("a label of a host name does not start or end with `-`");
        }
    }
    // `10.0.0.256` or `1.2.3` would otherwise pass as a name: resolvers read such text as an
    // address in legacy notations, and an operator meant an address anyway.
    if name
        .rsplit('.')
        .next()
        .is_some_and(|last| last.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err("not a valid IPv4 address, and a host name does not end with a number");
    }
    Ok(())
}

/// The parsed `allow` list.
#[derive(Debug, Clone, Default)]
pub struct AllowList {
    patterns: Vec<Pattern>,
}

impl AllowList {
    /// Parses every entry; fails on the first bad one, naming it.
    pub fn parse(entries: &[String]) -> Result<AllowList, PatternError> {
        let patterns = entries
            .iter()
            .map(|entry| Pattern::parse(entry))
            .collect::<Result<_, _>>()?;
        Ok(AllowList { patterns })
    }

    /// Whether any pattern allows `target`.
    pub fn allows(&self, target: &Target) -> bool {
        self.patterns.iter().any(|pattern| pattern.matches(target))
    }

    /// The entries in canonical form, to store back into the grant.
    pub fn canonical(&self) -> Vec<String> {
        self.patterns.iter().map(ToString::to_string).collect()
    }
}

/// The host of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// A name, lowercase.
    Name(String),
    Ip(IpAddr),
}

/// Where a request goes: scheme, host and port of its URI. What is checked, and all that is
/// logged about a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub scheme: Scheme,
    pub host: Host,
    pub port: u16,
}

impl Target {
    /// The destination of a request URI, or why it has none a plugin may use.
    pub fn from_uri(uri: &http::Uri) -> Result<Target, &'static str> {
        let scheme = uri
            .scheme_str()
            .and_then(Scheme::parse)
            .ok_or("the scheme is not http or https")?;
        let authority = uri.authority().ok_or("the URI has no host")?;
        // Credentials in the authority would travel in the Host header; refused rather than
        // stripped, and never logged.
        if authority.as_str().contains('@') {
            return Err("the authority carries user information");
        }
        let host = authority.host();
        let host = if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            let ip = inner
                .parse::<Ipv6Addr>()
                .map_err(|_| "the host is not a valid IPv6 address")?;
            Host::Ip(IpAddr::V6(ip))
        } else if let Ok(ip) = host.parse::<Ipv4Addr>() {
            Host::Ip(IpAddr::V4(ip))
        } else if host.is_empty() {
            return Err("the URI has no host");
        } else {
            Host::Name(host.to_ascii_lowercase())
        };
        let port = authority.port_u16().unwrap_or(scheme.default_port());
        Ok(Target { scheme, host, port })
    }
}

/// `scheme://host:port`, the form refusals are logged with.
impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = self.scheme.as_str();
        let port = self.port;
        match &self.host {
            Host::Name(name) => write!(f, "{scheme}://{name}:{port}"),
            Host::Ip(IpAddr::V4(ip)) => write!(f, "{scheme}://{ip}:{port}"),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "{scheme}://[{ip}]:{port}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(entry: &str) -> String {
        match Pattern::parse(entry) {
            Ok(pattern) => pattern.to_string(),
            Err(e) => panic!("{entry} should parse: {e}"),
        }
    }

    fn target(url: &str) -> Target {
        let uri: http::Uri = url.parse().expect("test URI parses");
        Target::from_uri(&uri).expect("test URI has a destination")
    }

    fn allows(entries: &[&str], url: &str) -> bool {
        let entries: Vec<String> = entries.iter().map(|e| e.to_string()).collect();
        AllowList::parse(&entries)
            .expect("test patterns parse")
            .allows(&target(url))
    }

    #[test]
    fn good_patterns_parse_into_canonical_form() {
        for (entry, expected) in [
            ("https://open.feishu.cn", "https://open.feishu.cn:443"),
            ("http://example.com", "http://example.com:80"),
            (
                "HTTPS://API.Example.COM:8443",
                "https://api.example.com:8443",
            ),
            ("https://*.example.com", "https://*.example.com:443"),
            ("http://*.Example.com:*", "http://*.example.com:*"),
            ("http://10.0.0.5:8080", "http://10.0.0.5:8080"),
            ("http://127.0.0.1:*", "http://127.0.0.1:*"),
            ("http://[::1]", "http://[::1]:80"),
            ("https://[FD00::1]:9443", "https://[fd00::1]:9443"),
            ("http://[::ffff:10.0.0.1]:*", "http://[::ffff:10.0.0.1]:*"),
            (
                "http://svc_name.ns-1.svc:65535",
                "http://svc_name.ns-1.svc:65535",
            ),
            ("http://localhost", "http://localhost:80"),
        ] {
            assert_eq!(canonical(entry), expected, "{entry}");
            // The canonical form parses to the same pattern.
            assert_eq!(canonical(expected), expected);
        }
    }

    #[test]
    fn bad_patterns_are_refused_naming_the_entry() {
        for (entry, why) in [
            ("open.feishu.cn", "no `scheme://`"),
            ("ftp://example.com", "http or https"),
            ("ws://example.com", "http or https"),
            ("https://example.com/", "no path"),
            ("https://example.com/hook/abc", "no path"),
            ("https://example.com?x=1", "no path, query"),
            ("https://example.com#f", "fragment"),
            ("https://user:pw@example.com", "user information"),
            ("https://", "empty"),
            ("https://:443", "empty"),
            ("https://example.com:", "port"),
            ("https://example.com:0", "port"),
            ("https://example.com:65536", "port"),
            ("https://example.com:+80", "port"),
            ("https://example.com:8x", "port"),
            ("https://*", "`*`"),
            ("https://*.", "empty"),
            ("https://*.*.example.com", "`*`"),
            ("https://api.*.example.com", "`*`"),
            ("https://*example.com", "`*`"),
            ("https://example.com.", "trailing dot"),
            ("https://exa mple.com", "letters"),
            ("https://-example.com", "`-`"),
            ("http://10.0.0.256", "IPv4"),
            ("http://1.2.3", "IPv4"),
            ("http://::1", "brackets"),
            ("http://fd00::1:80", "brackets"),
            ("http://[::1", "without `]`"),
            ("http://[10.0.0.1]", "IPv6"),
            ("http://[::1]x", "`:port`"),
        ] {
            match Pattern::parse(entry) {
                Ok(pattern) => panic!("{entry} parsed as {pattern}"),
                Err(message) => {
                    let message = message.to_string();
                    assert!(message.contains(why), "{entry}: {message}");
                    assert!(
                        message.contains(&format!("`{}`", entry.escape_debug())),
                        "names the entry: {message}"
                    );
                }
            }
        }
    }

    #[test]
    fn exact_names_match_scheme_host_and_default_port() {
        let allow = ["https://open.feishu.cn"];
        assert!(allows(
            &allow,
            "https://open.feishu.cn/open-apis/bot/v2/hook/x"
        ));
        assert!(allows(&allow, "https://open.feishu.cn:443/"));
        assert!(allows(&allow, "https://OPEN.Feishu.CN/"));
        assert!(allows(&allow, "HTTPS://open.feishu.cn/"));
        assert!(!allows(&allow, "http://open.feishu.cn/"), "other scheme");
        assert!(
            !allows(&allow, "https://open.feishu.cn:8443/"),
            "other port"
        );
        assert!(!allows(&allow, "https://x.open.feishu.cn/"), "subdomain");
        assert!(
            !allows(&allow, "https://open.feishu.cn.evil.com/"),
            "suffix trick"
        );
        assert!(!allows(&allow, "https://feishu.cn/"), "parent");
        assert!(!allows(&allow, "https://open.feishu.cn./"), "trailing dot");
        assert!(allows(&["http://example.com"], "http://example.com:80/"));
        assert!(!allows(&["http://example.com"], "http://example.com:443/"));
    }

    #[test]
    fn wildcards_match_one_or_more_labels_but_not_the_bare_suffix() {
        let allow = ["https://*.example.com"];
        assert!(allows(&allow, "https://api.example.com/"));
        assert!(allows(&allow, "https://a.b.example.com/"));
        assert!(allows(&allow, "https://API.Example.com/"));
        assert!(!allows(&allow, "https://example.com/"));
        assert!(!allows(&allow, "https://notexample.com/"));
        assert!(!allows(&allow, "https://api.example.com.evil.org/"));
        assert!(!allows(&allow, "https://api.example.com:8443/"));
        assert!(!allows(&allow, "http://api.example.com/"));
    }

    #[test]
    fn port_star_matches_every_port() {
        let allow = ["http://127.0.0.1:*"];
        assert!(allows(&allow, "http://127.0.0.1/"));
        assert!(allows(&allow, "http://127.0.0.1:8080/x"));
        assert!(allows(&allow, "http://127.0.0.1:1/"));
        assert!(!allows(&allow, "https://127.0.0.1:8080/"));
        assert!(!allows(&allow, "http://127.0.0.2:8080/"));
        // Names are checked by name, even those that resolve to an allowed address.
        assert!(!allows(&allow, "http://localhost:8080/"));
        assert!(!allows(&allow, "http://[::ffff:127.0.0.1]:8080/"));
        assert!(allows(&["http://*.svc:*"], "http://api.ns.svc:9000/"));
    }

    #[test]
    fn ip_literals_match_by_address() {
        assert!(allows(&["http://[::1]:8080"], "http://[::1]:8080/"));
        assert!(allows(&["http://[::1]:8080"], "http://[0:0::1]:8080/"));
        assert!(!allows(&["http://[::1]:8080"], "http://[::2]:8080/"));
        assert!(allows(&["https://10.0.0.5"], "https://10.0.0.5/"));
        // A wildcard never covers an address: a numeric suffix is refused outright.
        assert!(Pattern::parse("http://*.0.1:*").is_err());
    }

    #[test]
    fn an_empty_list_allows_nothing() {
        assert!(!allows(&[], "https://example.com/"));
    }

    #[test]
    fn targets_are_logged_without_path_query_or_credentials() {
        assert_eq!(
            target("https://Open.Feishu.cn/open-apis/bot/v2/hook/SECRET?sig=1").to_string(),
            "https://open.feishu.cn:443"
        );
        assert_eq!(target("http://[::1]:9/x").to_string(), "http://[::1]:9");
        let uri: http::Uri = "http://user:pw@example.com/".parse().expect("parses");
        assert!(Target::from_uri(&uri).is_err());
        let uri: http::Uri = "/relative".parse().expect("parses");
        assert!(Target::from_uri(&uri).is_err());
    }
}
