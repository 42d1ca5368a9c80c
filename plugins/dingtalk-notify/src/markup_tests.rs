//! Job text against DingTalk's markup, in both styles: random hostile text in every field from
//! the cluster never adds a mention, link or format to the text or the title (a property
//! test), and the README's "What DingTalk receives from job text" holds as written.

use jobrelay_notify::hostile::{self, CHINESE_MARKDOWN, Oracle};
use jobrelay_notify::job::{JobEvent, sample};
use jobrelay_notify::markup::dingtalk_markdown;
use jobrelay_notify::message::Message;
use jobrelay_notify::{Notifier, fleet, testing};
use proptest::prelude::*;
use serde_json::Value;

use crate::DingTalk;

const HOOK: &str = "https://oapi.dingtalk.com/robot/send?access_token=0123456789abcdef";
const README: &str = include_str!("../README.md");

/// A notifier of `style` with a link, mentioning (markdown only: cards cannot), so the text has
/// markup of its own.
fn notifier(style: &str) -> Notifier<DingTalk> {
    let mut config = vec![
        ("style", style),
        ("link.Logs", "https://logs.example/?job={name}"),
    ];
    if style == "markdown" {
        config.extend([("mention", "manager01"), ("mention_mobiles", "13800000000")]);
    }
    testing::notifier::<DingTalk>(HOOK, &config).expect("valid")
}

/// Where DingTalk reads job text in a body: the markdown, and the titles notifications show.
fn oracle(pointer: &str) -> Option<Oracle> {
    match pointer {
        "/markdown/text" | "/markdown/title" | "/actionCard/text" | "/actionCard/title" => {
            Some(CHINESE_MARKDOWN)
        }
        _ => None,
    }
}

fn check(
    hostile: Result<(String, Value), String>,
    benign: Result<(String, Value), String>,
) -> Result<(), TestCaseError> {
    let (Ok((_, hostile)), Ok((_, benign))) = (hostile, benign) else {
        return Err(TestCaseError::fail(
            "a message within DingTalk's 20,000 bytes was refused",
        ));
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
        event in hostile::fleet(),
    ) {
        for style in ["markdown", "action_card"] {
            let notifier = notifier(style);
            let request = |job: &JobEvent| testing::request(&notifier, job, 0);
            check(request(&job), request(&hostile::benign(&job)))?;

            let digest = |a: &JobEvent, b: &JobEvent| {
                testing::digest_request(&notifier, a, &[Message::line(a), Message::line(b)], 0)
            };
            let (harmless, harmless_other) = (hostile::benign(&job), hostile::benign(&other));
            check(digest(&job, &other), digest(&harmless, &harmless_other))?;

            let fleet = |event: &fleet::FleetEvent| testing::fleet_request(&notifier, event, 0);
            check(fleet(&event), fleet(&hostile::benign_fleet(&event)))?;
        }
    }
}

/// The README's table of what changes, as written.
#[test]
fn the_readme_says_what_changes() {
    let rows = hostile::table(README, "job text: markdown");
    let wrong = hostile::check_table(&rows, dingtalk_markdown);
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The README's examples, as the text carries them.
#[test]
fn the_readme_examples_are_what_dingtalk_receives() {
    let rows = hostile::table(README, "job text examples: markdown");
    assert!(rows.len() >= 3, "{rows:?}");
    let notifier = notifier("markdown");
    for row in rows {
        let (Some(message), Some(sent)) = (hostile::code(&row[0]), hostile::code(&row[1])) else {
            panic!("a row that is not two code spans: {row:?}");
        };
        let job = JobEvent {
            message: Some(message.clone()),
            ..sample()
        };
        let (_, body) = testing::request(&notifier, &job, 0).expect("a request");
        let text = body["markdown"]["text"].as_str().expect("text");
        assert!(
            text.contains(&format!("**Message**: {sent}\n")),
            "{message:?} should be sent as {sent:?}: {text:?}"
        );
    }
}
