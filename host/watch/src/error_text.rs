//! An error in one line of words: what a log, `/status`, a plugin's error value or `check`
//! prints of a failure of the Kubernetes client or anything above it.

/// An error and every source beneath it, joined by `: ` — the one line a log, a plugin's
/// error value or `check` prints. A client's error often says only its kind (kube's
/// `ServiceError: client error (Connect)`) and keeps the cause beneath it (`tcp connect
/// error: Connection refused`), which is what the reader can act on. A source whose text the
/// line already ends with (an error that prints its source itself) is not said twice.
///
/// An API server's answer is said as the answer (`the API server answered 401
/// Unauthorized: Unauthorized`), not as kube's text for it, which appends the whole `Status`
/// in Rust's debug notation — wherever in the chain it is, and in the text of the errors
/// above it that print it.
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut answers = Vec::new();
    let mut next = Some(error);
    let mut first = true;
    while let Some(source) = next {
        if let Some(kube::Error::Api(status)) = source.downcast_ref::<kube::Error>() {
            answers.push((source.to_string(), answer(status)));
            // The `Status` beneath says only what the answer said.
            break;
        }
        if !std::mem::take(&mut first) {
            let said = source.to_string();
            if !text.ends_with(&said) {
                text.push_str(": ");
                text.push_str(&said);
            }
        }
        next = source.source();
    }
    for (kube_text, plain) in answers {
        if text.contains(&kube_text) {
            text = text.replace(&kube_text, &plain);
        } else {
            text.push_str(": ");
            text.push_str(&plain);
        }
    }
    text
}

/// An API server's error answer in words: its code, reason and message.
fn answer(status: &kube::core::Status) -> String {
    let mut text = format!("the API server answered {}", status.code);
    if !status.reason.is_empty() {
        text.push(' ');
        text.push_str(&status.reason);
    }
    if !status.message.is_empty() {
        text.push_str(": ");
        text.push_str(&status.message);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kube's text for an API error ends with the whole `Status` in debug notation; the
    /// chain says the answer instead, here and inside the text of an error above it.
    #[test]
    fn an_api_servers_answer_is_said_without_a_debug_dump() {
        let status = kube::core::Status {
            code: 401,
            reason: "Unauthorized".into(),
            message: "Unauthorized".into(),
            ..kube::core::Status::default()
        };
        let api = kube::Error::Api(Box::new(status));
        assert_eq!(
            chain(&api),
            "the API server answered 401 Unauthorized: Unauthorized"
        );

        #[derive(Debug, thiserror::Error)]
        #[error("failed to perform initial object list: {0}")]
        struct Listing(#[source] kube::Error);
        let listed = Listing(api);
        let text = chain(&listed);
        assert_eq!(
            text,
            "failed to perform initial object list: the API server answered 401 Unauthorized: \
             Unauthorized"
        );
        assert!(!text.contains("Status {"), "{text}");
    }
}
