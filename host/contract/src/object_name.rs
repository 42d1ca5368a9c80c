//! What Kubernetes accepts as most objects' names, and as a label key's prefix: a DNS
//! subdomain (RFC 1123) — dot-separated labels of lowercase letters, digits and `-`, each 1–63
//! characters, starting and ending alphanumeric, 253 characters in all.
//!
//! Checked wherever a name from a cluster's objects or a plugin goes into a request path or a
//! key: a name is text anyone who can create an object writes, and kube puts it into the URL
//! as it is.

/// Whether `text` is a DNS subdomain as Kubernetes checks it.
pub fn is_dns_subdomain(text: &str) -> bool {
    text.len() <= 253
        && text.split('.').all(|part| {
            !part.is_empty()
                && part.len() <= 63
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_kubernetes_takes_and_paths_it_does_not() {
        for good in ["llama-ft", "a.b-c.d0", "x", &"a".repeat(63)] {
            assert!(is_dns_subdomain(good), "{good}");
        }
        let long = format!(
            "{}.{}.{}.{}",
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(63)
        );
        for bad in [
            "",
            "Llama",
            "-a",
            "a-",
            "a..b",
            "../../api/v1/secrets",
            "a/b",
            "a?watch=1",
            "a b",
            &"a".repeat(64),
            &long,
        ] {
            assert!(!is_dns_subdomain(bad), "{bad}");
        }
    }
}
