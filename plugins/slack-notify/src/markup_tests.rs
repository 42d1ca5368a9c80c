//! Job text against Slack's markup: random hostile text in every field from the cluster never
//! adds a mention, link or format to any text of the body (a property test), and the README's
//! "What Slack receives from job text" holds as written.

use jobrelay_notify::hostile::{self, Oracle, PLAIN_TEXT, SLACK_MRKDWN};
use jobrelay_notify::job::{JobEvent, sample};
use jobrelay_notify::markup::slack_mrkdwn;
use jobrelay_notify::message::Message;
use jobrelay_notify::{Notifier, fleet, testing};
use proptest::prelude::*;
use serde_json::Value;

use crate::Slack;

const HOOK: &str = "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX";
const README: &str = include_str!("../README.md");

/// A notifier that mentions and links, so the body has markup of its own.
fn notifier() -> Notifier<Slack> {
    testing::notifier::<Slack>(
        HOOK,
        &[
            ("mention", "U012AB3CD,all"),
            ("link.Logs", "https://logs.example/?job={name}"),
        ],
    )
    .expect("valid")
}

/// Where Slack reads job text in a body, and as what: the header block and the buttons'
/// labels are `plain_text`; every other text (the notification's `text` included) is mrkdwn.
fn oracle(pointer: &str) -> Option<Oracle> {
    if pointer == "/blocks/0/text/text" || pointer.contains("/elements/") {
        return pointer.ends_with("/text/text").then_some(PLAIN_TEXT);
    }
    (pointer == "/text" || pointer.ends_with("/text/text") || pointer.contains("/fields/"))
        .then_some(SLACK_MRKDWN)
        .filter(|_| pointer.ends_with("/text"))
}

fn check(
    hostile: Result<(String, Value), String>,
    benign: Result<(String, Value), String>,
) -> Result<(), TestCaseError> {
    let (Ok((_, hostile)), Ok((_, benign))) = (hostile, benign) else {
        return Err(TestCaseError::fail(
            "a message within Slack's limits was refused",
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
        let notifier = notifier();
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

#[test]
fn every_text_of_the_body_is_read_as_what_slack_makes_of_it() {
    let (_, body) = testing::request(&notifier(), &sample(), 0).expect("a request");
    assert_eq!(oracle("/text").map(|o| o.entities), Some(true));
    assert_eq!(body["blocks"][0]["text"]["type"], "plain_text");
    assert!(oracle("/blocks/0/text/text").is_some_and(|o| o.inline.is_empty()));
    assert_eq!(body["blocks"][1]["fields"][0]["type"], "mrkdwn");
    assert_eq!(body["blocks"][1]["fields"][0]["verbatim"], true);
    assert!(oracle("/blocks/1/fields/0/text").is_some_and(|o| o.entities));
    assert!(oracle("/blocks/2/text/text").is_some_and(|o| o.entities));
    assert!(oracle("/blocks/1/fields/0/type").is_none());
    assert!(oracle("/blocks/4/elements/0/url").is_none());
}

/// The README's table of what changes in mrkdwn, as written.
#[test]
fn the_readme_says_what_changes() {
    let rows = hostile::table(README, "job text: mrkdwn");
    let wrong = hostile::check_table(&rows, slack_mrkdwn);
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The README's examples, as the section carries them; and the header as it says.
#[test]
fn the_readme_examples_are_what_slack_receives() {
    let rows = hostile::table(README, "job text examples: mrkdwn");
    assert!(rows.len() >= 3, "{rows:?}");
    for row in rows {
        let (Some(message), Some(sent)) = (hostile::code(&row[0]), hostile::code(&row[1])) else {
            panic!("a row that is not two code spans: {row:?}");
        };
        let job = JobEvent {
            message: Some(message.clone()),
            ..sample()
        };
        let (_, body) = testing::request(&notifier(), &job, 0).expect("a request");
        let detail = body["blocks"][2]["text"]["text"].as_str().expect("detail");
        assert!(
            detail.contains(&format!("*Message*: {sent}\n")),
            "{message:?} should be sent as {sent:?}: {detail:?}"
        );
    }
    let job = JobEvent {
        name: "*a* <b> https://c".into(),
        ..sample()
    };
    let (_, body) = testing::request(&notifier(), &job, 0).expect("a request");
    assert_eq!(
        body["blocks"][0]["text"]["text"],
        "PyTorchJob ml/*a* <b> https:/\u{2060}/c: failed"
    );
}
