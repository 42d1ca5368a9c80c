//! Job text against Feishu's markup: random hostile text in every field from the cluster never
//! adds a mention, link or format to any text of the card (a property test), and the README's
//! "What Feishu receives from job text" holds as written.

use jobrelay_notify::hostile::{self, FEISHU_LARK_MD, Oracle, PLAIN_TEXT};
use jobrelay_notify::job::{JobEvent, sample};
use jobrelay_notify::markup::feishu_lark_md;
use jobrelay_notify::message::Message;
use jobrelay_notify::{Notifier, fleet, testing};
use proptest::prelude::*;
use serde_json::Value;

use crate::Feishu;

const HOOK: &str = "https://open.feishu.cn/open-apis/bot/v2/hook/tok-123456";
const README: &str = include_str!("../README.md");

/// A signed notifier with a link, so the card has a button and a signature of its own.
fn notifier() -> Notifier<Feishu> {
    testing::notifier::<Feishu>(
        HOOK,
        &[
            ("secret", "demo-secret"),
            ("link.Logs", "https://logs.example/?job={name}"),
        ],
    )
    .expect("valid")
}

/// Where Feishu reads job text in a card, and as what: the fields are `lark_md`, the header
/// and the buttons' labels `plain_text`.
fn oracle(pointer: &str) -> Option<Oracle> {
    if pointer.contains("/fields/") && pointer.ends_with("/text/content") {
        Some(FEISHU_LARK_MD)
    } else if pointer == "/card/header/title/content" || pointer.ends_with("/text/content") {
        Some(PLAIN_TEXT)
    } else {
        None
    }
}

fn check(
    hostile: Result<(String, Value), String>,
    benign: Result<(String, Value), String>,
) -> Result<(), TestCaseError> {
    let (Ok((_, hostile)), Ok((_, benign))) = (hostile, benign) else {
        return Err(TestCaseError::fail(
            "a card within Feishu's 20 KB was refused",
        ));
    };
    prop_assert_ne!(&hostile, &benign, "the job text is in the card");
    hostile::same_markup(&hostile, &benign, oracle).map_err(TestCaseError::fail)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn hostile_job_text_never_marks_up_a_card(
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
fn every_text_of_the_card_is_read_as_what_feishu_makes_of_it() {
    let (_, body) = testing::request(&notifier(), &sample(), 0).expect("a request");
    let card = &body["card"];
    assert_eq!(card["header"]["title"]["tag"], "plain_text");
    assert!(oracle("/card/header/title/content").is_some_and(|o| o.inline.is_empty()));
    assert_eq!(card["elements"][0]["fields"][0]["text"]["tag"], "lark_md");
    assert!(oracle("/card/elements/0/fields/0/text/content").is_some_and(|o| o.entities));
    assert_eq!(
        card["elements"][2]["actions"][0]["text"]["tag"],
        "plain_text"
    );
    assert!(oracle("/card/elements/2/actions/0/text/content").is_some_and(|o| !o.entities));
    assert!(oracle("/card/elements/2/actions/0/url").is_none());
    assert!(oracle("/sign").is_none());
}

/// The README's table of what changes in `lark_md`, as written.
#[test]
fn the_readme_says_what_changes() {
    let rows = hostile::table(README, "job text: lark_md");
    let wrong = hostile::check_table(&rows, feishu_lark_md);
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The README's examples, as the card carries them; and the header as it says.
#[test]
fn the_readme_examples_are_what_feishu_receives() {
    let rows = hostile::table(README, "job text examples: lark_md");
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
        let field = &body["card"]["elements"][1]["fields"][1]["text"]["content"];
        assert_eq!(
            field.as_str(),
            Some(format!("**Message**\n{sent}").as_str()),
            "{message:?}"
        );
    }
    let job = JobEvent {
        name: "**a** <at id=all></at> https://c".into(),
        ..sample()
    };
    let (_, body) = testing::request(&notifier(), &job, 0).expect("a request");
    assert_eq!(
        body["card"]["header"]["title"]["content"],
        "PyTorchJob ml/**a** <at id=all></at> https:/\u{2060}/c: failed"
    );
}
