//! Job text against WeCom's markup, in both layouts: random hostile text in every field from
//! the cluster never adds a mention, link or format to the content (a property test), and the
//! README's "What WeCom receives from job text" holds as written.

use jobrelay_notify::hostile::{self, CHINESE_MARKDOWN, Oracle, WECOM_TEXT};
use jobrelay_notify::job::{JobEvent, sample};
use jobrelay_notify::markup::{wecom_markdown, wecom_text};
use jobrelay_notify::{Notifier, fleet, testing};
use proptest::prelude::*;
use serde_json::Value;

use crate::WeCom;

const HOOK: &str = "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=693a91f6-7xxx";
const README: &str = include_str!("../README.md");

/// A notifier in `msgtype` that mentions and links, so the content has markup of its own.
fn notifier(msgtype: &str) -> Notifier<WeCom> {
    let mention = if msgtype == "text" { "all" } else { "zhangsan" };
    testing::notifier::<WeCom>(
        HOOK,
        &[
            ("msgtype", msgtype),
            ("mention", mention),
            ("link.Logs", "https://logs.example/?job={name}"),
        ],
    )
    .expect("valid")
}

/// Where WeCom reads job text in a body, and as what.
fn oracle(pointer: &str) -> Option<Oracle> {
    match pointer {
        "/markdown/content" => Some(CHINESE_MARKDOWN),
        "/text/content" => Some(WECOM_TEXT),
        _ => None,
    }
}

/// A body, or `None` when WeCom's size limit refuses the message (nothing is sent then).
fn body(result: Result<(String, Value), String>) -> Option<Value> {
    match result {
        Ok((_, body)) => Some(body),
        Err(e) if e.contains("shorten `title`") => None,
        Err(e) => panic!("{e}"),
    }
}

fn check(hostile: Option<Value>, benign: Option<Value>) -> Result<(), TestCaseError> {
    let (Some(hostile), Some(benign)) = (hostile, benign) else {
        return Ok(());
    };
    prop_assert_ne!(&hostile, &benign, "the job text is in the body");
    hostile::same_markup(&hostile, &benign, oracle).map_err(TestCaseError::fail)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn hostile_job_text_never_marks_up_a_message(
        job in hostile::job(),
        other in hostile::job(),
        summary in hostile::fleet(),
    ) {
        for msgtype in ["markdown", "text"] {
            let notifier = notifier(msgtype);
            let request = |job: &JobEvent| body(testing::request(&notifier, job, 0));
            check(request(&job), request(&hostile::benign(&job)))?;

            let lines = |a: &JobEvent, b: &JobEvent| {
                vec![jobrelay_notify::message::Message::line(a), jobrelay_notify::message::Message::line(b)]
            };
            let digest = |a: &JobEvent, b: &JobEvent| {
                body(testing::digest_request(&notifier, a, &lines(a, b), 0))
            };
            let (harmless, harmless_other) = (hostile::benign(&job), hostile::benign(&other));
            check(digest(&job, &other), digest(&harmless, &harmless_other))?;

            let fleet = |event: &fleet::FleetEvent| body(testing::fleet_request(&notifier, event, 0));
            check(fleet(&summary), fleet(&hostile::benign_fleet(&summary)))?;
        }
    }
}

/// The README's tables of what changes, as written.
#[test]
fn the_readme_says_what_changes() {
    for (marker, neutralise) in [
        ("job text: markdown", wecom_markdown as fn(&str) -> String),
        ("job text: text", wecom_text),
    ] {
        let rows = hostile::table(README, marker);
        let wrong = hostile::check_table(&rows, neutralise);
        assert!(wrong.is_empty(), "{marker}: {wrong:#?}");
    }
}

/// The README's examples, as the content carries them.
#[test]
fn the_readme_examples_are_what_wecom_receives() {
    for (msgtype, marker, line) in [
        ("markdown", "job text examples: markdown", "**Message**: "),
        ("text", "job text examples: text", "Message: "),
    ] {
        let rows = hostile::table(README, marker);
        assert!(rows.len() >= 3, "{marker}: {rows:?}");
        let notifier = notifier(msgtype);
        for row in rows {
            let (Some(message), Some(sent)) = (hostile::code(&row[0]), hostile::code(&row[1]))
            else {
                panic!("{marker}: a row that is not two code spans: {row:?}");
            };
            let job = JobEvent {
                message: Some(message.clone()),
                ..sample()
            };
            let (_, body) = testing::request(&notifier, &job, 0).expect("a request");
            let content = body[msgtype]["content"].as_str().expect("content");
            assert!(
                content.contains(&format!("{line}{sent}\n")),
                "{msgtype}: {message:?} should be sent as {sent:?}: {content:?}"
            );
        }
    }
}
