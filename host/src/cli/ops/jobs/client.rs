//! The daemon's job view API as the command line reaches it: the server's URL, the request
//! URLs built from it, and one GET with a deadline.
//!
//! Every request is bounded by [`TIMEOUT`]: the API answers from memory, so a daemon that
//! takes longer is stuck or not there, and an operator's shell must not hang on it.

use std::net::IpAddr;
use std::time::Duration;

use reqwest::Url;

use super::ListArgs;
use super::error::JobsError;

/// The longest one request (connecting, the answer and its body) may take.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Where `--server` points when not given: the telemetry address the docs and the example
/// config use (`telemetry.listen: 0.0.0.0:9464` or `127.0.0.1:9464`; the main file has no
/// default, the endpoint is off unless set), reached on this machine — the usual way is a
/// `kubectl port-forward svc/jobrelay-metrics 9464` or a shell beside the daemon.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:9464";

/// One daemon's API.
#[derive(Debug, Clone)]
pub struct Server {
    /// The URL given, without query or fragment; its path (if any) prefixes the API's.
    base: Url,
    http: reqwest::Client,
}

/// What the daemon answered to one request.
#[derive(Debug)]
pub struct Answer {
    /// The URL asked, for messages.
    pub url: String,
    pub status: u16,
    pub body: String,
}

impl Server {
    /// The daemon at `text`: `http://HOST:PORT` (a path prefix is kept, for a daemon behind a
    /// proxy), or `HOST:PORT` alone, meaning `http://`.
    pub fn new(text: &str) -> Result<Server, JobsError> {
        let bad = |why: &str| JobsError::BadServer {
            server: text.to_string(),
            why: why.to_string(),
        };
        let with_scheme = if text.contains("://") {
            text.to_string()
        } else {
            format!("http://{text}")
        };
        let mut base = Url::parse(&with_scheme).map_err(|e| bad(&e.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(bad("only http:// (or https://) URLs are served"));
        }
        if base.host_str().is_none_or(str::is_empty) {
            return Err(bad("no host"));
        }
        base.set_query(None);
        base.set_fragment(None);
        let mut builder = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .connect_timeout(TIMEOUT)
            .user_agent(concat!("jobrelay/", env!("CARGO_PKG_VERSION")));
        // A proxy from HTTP_PROXY would be asked for this machine's own port (a port-forward,
        // a daemon beside the shell) and fail; Go's clients, kubectl included, never proxy
        // loopback either.
        if is_loopback(&base) {
            builder = builder.no_proxy();
        }
        let http = builder.build().map_err(|e| bad(&reason(&e)))?;
        Ok(Server { base, http })
    }

    /// `GET /api/v1/jobs?QUERY`.
    pub fn jobs_url(&self, query: &str) -> Result<Url, JobsError> {
        let mut url = self.at(&["api", "v1", "jobs"])?;
        if !query.is_empty() {
            url.set_query(Some(query));
        }
        Ok(url)
    }

    /// `GET /api/v1/jobs/{cluster}/{namespace}/{name}`, each part percent-encoded.
    pub fn job_url(&self, cluster: &str, namespace: &str, name: &str) -> Result<Url, JobsError> {
        self.at(&["api", "v1", "jobs", cluster, namespace, name])
    }

    fn at(&self, segments: &[&str]) -> Result<Url, JobsError> {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|()| JobsError::BadServer {
                server: self.base.to_string(),
                why: "it cannot take a path".to_string(),
            })?
            .pop_if_empty()
            .extend(segments);
        Ok(url)
    }

    /// One GET, its status and body; any status is an answer (the caller reads the API's
    /// `{"error": …}`), only no answer within [`TIMEOUT`] is an error.
    pub async fn get(&self, url: Url) -> Result<Answer, JobsError> {
        let shown = url.to_string();
        let failed = |e: reqwest::Error| {
            if e.is_timeout() {
                JobsError::TimedOut { url: shown.clone() }
            } else {
                JobsError::Unreachable {
                    url: shown.clone(),
                    reason: reason(&e),
                }
            }
        };
        let response = self
            .http
            .get(url.clone())
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(failed)?;
        let status = response.status().as_u16();
        let body = response.text().await.map_err(failed)?;
        Ok(Answer {
            url: shown,
            status,
            body,
        })
    }
}

/// The query string `jobs list` sends for `args`: each filter value as given (the API splits
/// commas itself), the page size and the token of the page to continue after.
pub fn query_string(args: &ListArgs, limit: Option<u64>, token: Option<&str>) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (param, values) in [
        ("cluster", &args.cluster),
        ("namespace", &args.namespace),
        ("kind", &args.kind),
        ("phase", &args.phase),
        ("timer", &args.timer),
    ] {
        for value in values {
            query.append_pair(param, value);
        }
    }
    if let Some(selector) = &args.selector {
        query.append_pair("labelSelector", selector);
    }
    if let Some(prefix) = &args.name {
        query.append_pair("name", prefix);
    }
    if let Some(sort) = &args.sort {
        query.append_pair("sort", sort);
    }
    if let Some(limit) = limit {
        query.append_pair("limit", &limit.to_string());
    }
    if let Some(token) = token {
        query.append_pair("continue", token);
    }
    query.finish()
}

fn is_loopback(url: &Url) -> bool {
    let host = url.host_str().unwrap_or_default();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The innermost cause of a request's failure (`Connection refused (os error 111)`): the
/// outer ones only repeat the URL and say "error sending request".
fn reason(e: &reqwest::Error) -> String {
    let mut innermost: &dyn std::error::Error = e;
    while let Some(source) = innermost.source() {
        innermost = source;
    }
    innermost.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_encoded_as_the_api_reads_them() {
        let args = ListArgs {
            cluster: vec!["east,west".into()],
            phase: vec!["failed".into(), "running".into()],
            selector: Some("team=nlp,gpu in (a100,h100),!spot".into()),
            name: Some("train a&b".into()),
            sort: Some("-created".into()),
            ..ListArgs::default()
        };
        let query = query_string(&args, Some(5), Some("tok+en/="));
        assert_eq!(
            query,
            "cluster=east%2Cwest&phase=failed&phase=running\
             &labelSelector=team%3Dnlp%2Cgpu+in+%28a100%2Ch100%29%2C%21spot\
             &name=train+a%26b&sort=-created&limit=5&continue=tok%2Ben%2F%3D"
        );
        let read: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect();
        assert!(read.contains(&(
            "labelSelector".into(),
            "team=nlp,gpu in (a100,h100),!spot".into()
        )));
        assert!(read.contains(&("continue".into(), "tok+en/=".into())));
        assert_eq!(query_string(&ListArgs::default(), None, None), "");
    }

    #[test]
    fn server_urls_take_a_host_and_port_or_a_url_with_a_prefix() -> Result<(), JobsError> {
        let server = Server::new("127.0.0.1:9464")?;
        assert_eq!(
            server.jobs_url("phase=failed")?.as_str(),
            "http://127.0.0.1:9464/api/v1/jobs?phase=failed"
        );
        let server = Server::new("http://relay.example:8080/jobrelay/")?;
        assert_eq!(
            server.job_url("east", "ml", "a b/c")?.as_str(),
            "http://relay.example:8080/jobrelay/api/v1/jobs/east/ml/a%20b%2Fc"
        );
        assert_eq!(
            Server::new(DEFAULT_SERVER)?.jobs_url("")?.as_str(),
            "http://127.0.0.1:9464/api/v1/jobs"
        );
        for bad in ["ftp://x", "http://", "http://a b:1"] {
            assert!(
                matches!(Server::new(bad), Err(JobsError::BadServer { .. })),
                "{bad}"
            );
        }
        Ok(())
    }

    /// Something that takes the connection and never answers: an error after [`TIMEOUT`]
    /// naming the URL, not a shell that hangs (the clock is paused and jumps ahead).
    #[tokio::test(start_paused = true)]
    async fn a_server_that_does_not_answer_times_out() -> Result<(), Box<dyn std::error::Error>> {
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let server = Server::new(&silent.local_addr()?.to_string())?;
        let url = server.jobs_url("")?;
        match server.get(url.clone()).await {
            Err(e @ JobsError::TimedOut { .. }) => assert_eq!(
                e.to_string(),
                format!("the jobrelay daemon at {url} did not answer within 10 s")
            ),
            other => panic!("not a timeout: {other:?}"),
        }
        Ok(())
    }

    #[test]
    fn loopback_hosts_are_recognised() {
        for (url, want) in [
            ("http://127.0.0.1:1", true),
            ("http://localhost:1", true),
            ("http://[::1]:1", true),
            ("http://10.0.0.1:1", false),
            ("http://relay.example", false),
        ] {
            let parsed = Url::parse(url).expect("a URL");
            assert_eq!(is_loopback(&parsed), want, "{url}");
        }
    }
}
