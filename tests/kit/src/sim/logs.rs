//! Pod logs: `GET /api/v1/namespaces/{ns}/pods/{name}/log`.
//!
//! A real cluster proxies this to the kubelet; the simulator serves bytes that tests stored with
//! `SimCluster::set_pod_log`. The error cases mirror the apiserver's, since a log archiver must
//! handle them: a missing pod is 404, an ambiguous or unknown container is 400, and so is asking
//! for the previous instance of a container that never restarted. Bytes are served as stored,
//! so logs that are not valid UTF-8 reach the client unchanged.

use bytes::Bytes;
use serde_json::Value;

use super::resources::Gvr;
use super::status::SimError;
use super::store::{LogKey, ObjKey, StoreInner};

/// The query of a log request.
#[derive(Clone, Debug, Default)]
pub(crate) struct LogQuery {
    pub container: Option<String>,
    pub previous: bool,
    pub limit_bytes: Option<usize>,
    pub tail_lines: Option<usize>,
}

/// Container names declared by a pod (regular, init and ephemeral).
fn containers(pod: &Value) -> Vec<String> {
    ["containers", "initContainers", "ephemeralContainers"]
        .iter()
        .filter_map(|field| {
            pod.pointer(&format!("/spec/{field}"))
                .and_then(Value::as_array)
        })
        .flatten()
        .filter_map(|c| c.get("name").and_then(Value::as_str))
        .map(str::to_string)
        .collect()
}

/// Reads a pod log as the apiserver would return it.
pub(crate) fn read(
    store: &StoreInner,
    namespace: &str,
    pod_name: &str,
    query: &LogQuery,
) -> Result<Bytes, SimError> {
    let pod = store
        .objects
        .get(&ObjKey::new(&Gvr::POD, namespace, pod_name))
        .ok_or_else(|| SimError::not_found(&Gvr::POD, pod_name))?;
    let declared = containers(pod);
    let regular: Vec<String> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c.get("name").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();

    let container = match &query.container {
        Some(c) if declared.is_empty() || declared.contains(c) => c.clone(),
        Some(c) => {
            return Err(SimError::bad_request(format!(
                "container {c} is not valid for pod {pod_name}"
            )));
        }
        None if regular.len() == 1 => regular[0].clone(),
        None if regular.len() > 1 => {
            return Err(SimError::bad_request(format!(
                "a container name must be specified for pod {pod_name}, choose one of: [{}]",
                regular.join(" ")
            )));
        }
        None => {
            // No declared containers: fall back to the only container that has logs.
            let mut stored: Vec<&String> = store
                .logs
                .keys()
                .filter(|k| k.namespace == namespace && k.pod == pod_name)
                .map(|k| &k.container)
                .collect();
            stored.sort();
            stored.dedup();
            match stored.as_slice() {
                [only] => (*only).clone(),
                _ => {
                    return Err(SimError::bad_request(format!(
                        "a container name must be specified for pod {pod_name}"
                    )));
                }
            }
        }
    };

    let key = LogKey {
        namespace: namespace.to_string(),
        pod: pod_name.to_string(),
        container: container.clone(),
        previous: query.previous,
    };
    let content = match store.logs.get(&key) {
        Some(bytes) => bytes.clone(),
        None if query.previous => {
            return Err(SimError::bad_request(format!(
                "previous terminated container \"{container}\" in pod \"{pod_name}\" not found"
            )));
        }
        None => Bytes::new(),
    };
    let content = match query.tail_lines {
        Some(n) => tail(&content, n),
        None => content,
    };
    Ok(match query.limit_bytes {
        Some(limit) if limit < content.len() => content.slice(..limit),
        _ => content,
    })
}

/// The last `n` lines of `content` (a final line without newline counts as a line).
fn tail(content: &Bytes, n: usize) -> Bytes {
    if n == 0 {
        return Bytes::new();
    }
    let body = content.strip_suffix(b"\n").unwrap_or(content);
    let mut seen = 0;
    for (i, b) in body.iter().enumerate().rev() {
        if *b == b'\n' {
            seen += 1;
            if seen == n {
                return content.slice(i + 1..);
            }
        }
    }
    content.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_lines() {
        let c = Bytes::from_static(b"a\nb\nc\n");
        assert_eq!(&tail(&c, 1)[..], b"c\n");
        assert_eq!(&tail(&c, 2)[..], b"b\nc\n");
        assert_eq!(&tail(&c, 5)[..], b"a\nb\nc\n");
        assert_eq!(&tail(&c, 0)[..], b"");
        let no_newline = Bytes::from_static(b"a\nb");
        assert_eq!(&tail(&no_newline, 1)[..], b"b");
    }
}
