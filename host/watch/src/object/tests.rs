use proptest::prelude::*;
use serde_json::json;

use super::*;

/// An object's text with its members in the given order: compact, or spaced and broken over
/// lines as a pretty printer would.
fn written(members: &[(&str, String)], pretty: bool) -> String {
    let (sep, colon) = if pretty {
        (",\n    ", ": ")
    } else {
        (",", ":")
    };
    let body: Vec<String> = members
        .iter()
        .map(|(k, v)| format!("\"{k}\"{colon}{v}"))
        .collect();
    if pretty {
        format!("{{\n    {}\n}}", body.join(sep))
    } else {
        format!("{{{}}}", body.join(sep))
    }
}

/// The tree of a text that must be JSON.
fn tree(text: &str) -> Value {
    serde_json::from_str(text).expect("valid JSON")
}

/// Where the value of member `m` lies in `object`, found as the quick reading finds it.
fn value_of_m(object: &str) -> Range<usize> {
    #[derive(Deserialize)]
    struct M<'a> {
        #[serde(borrow)]
        m: &'a RawValue,
    }
    let m: M<'_> = serde_json::from_str(object).expect("an object with m");
    within(object, m.m.get()).expect("inside")
}

#[test]
fn a_member_is_cut_with_one_comma_wherever_it_stands() {
    let cases = [
        (r#"{"a":1,"m":[2],"b":3}"#, r#"{"a":1,"b":3}"#),
        (r#"{"m":[2],"b":3}"#, r#"{"b":3}"#),
        (r#"{"a":1,"m":[2]}"#, r#"{"a":1}"#),
        (r#"{"m":[2]}"#, r#"{}"#),
        ("{ \"m\" :\n [2] ,\n \"b\": 3 }", "{ \n \"b\": 3 }"),
        ("{ \"a\": 1 ,\t\"m\" : {\"x\":[2]}\r\n}", "{ \"a\": 1 \r\n}"),
    ];
    for (object, expected) in cases {
        let cut = member_range(object, "m", value_of_m(object)).expect("cut");
        assert_eq!(without(object, cut), expected, "{object}");
    }
}

#[test]
fn a_key_written_with_escapes_is_not_cut_by_position() {
    // `"x\"m"` ends in `"m"` but is another key; `\u006d` is an `m` written with an escape.
    let object = r#"{"x\"m":[2]}"#;
    let start = object.find('[').expect("a value");
    assert_eq!(member_range(object, "m", start..start + 3), None);
    let object = r#"{"\u006d":[2]}"#;
    assert_eq!(member_range(object, "m", value_of_m(object)), None);
}

#[test]
fn managed_fields_are_cut_from_the_text_and_the_rest_is_kept_as_sent() {
    let text = r#"{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"a","namespace":"ml","uid":"u","resourceVersion":"3","managedFields":[{"manager":"m","fieldsV1":{"f:spec":{}}}],"labels":{"x":"y"},"extra":{"kept":true}},"spec":{"b":[1,2.5,"é"],"a":null},"status":{"active":1}}"#;
    let object = JobObject::from_json(text).expect("reads");
    assert_eq!(
        object.text(),
        r#"{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"a","namespace":"ml","uid":"u","resourceVersion":"3","labels":{"x":"y"},"extra":{"kept":true}},"spec":{"b":[1,2.5,"é"],"a":null},"status":{"active":1}}"#,
        "the text as sent, member order and unknown metadata included, without managedFields"
    );
    assert!(object.typed());
    assert_eq!(object.metadata.name.as_deref(), Some("a"));
    assert_eq!(object.metadata.managed_fields, None);
    assert_eq!(object.view(), &json!({"status": {"active": 1}}));
}

#[test]
fn objects_the_quick_reading_leaves_are_read_whole() {
    let cases = [
        // A member written twice: the last one counts, as in any JSON tree.
        r#"{"apiVersion":"v1","kind":"Job","metadata":{"name":"a"},"status":{"x":1},"status":{"x":2}}"#,
        // managedFields under a key written with an escape.
        r#"{"apiVersion":"v1","kind":"Job","metadata":{"name":"a","\u006danagedFields":[{"manager":"m"}]}}"#,
        // No apiVersion, or not as text.
        r#"{"kind":"Job","metadata":{"name":"a"}}"#,
        r#"{"apiVersion":7,"kind":"Job","metadata":{"name":"a"}}"#,
        // No metadata.
        r#"{"apiVersion":"v1","kind":"Job","status":null}"#,
    ];
    for text in cases {
        assert!(quick(text).is_none(), "{text}");
        let object = JobObject::from_json(text).expect("reads whole");
        let read = tree(object.text());
        assert!(read.pointer("/metadata/managedFields").is_none(), "{text}");
        assert_eq!(object.metadata, whole(text).expect("whole").metadata);
    }
    let twice = JobObject::from_json(cases[0]).expect("reads");
    assert_eq!(twice.view(), &json!({"status": {"x": 2}}));
    let untyped = JobObject::from_json(cases[2]).expect("reads");
    assert!(!untyped.typed());
    assert!(
        tree(untyped.text()).get("kind").is_none(),
        "neither is kept"
    );
    let null_status = JobObject::from_json(cases[4]).expect("reads");
    assert_eq!(null_status.view(), &json!({"status": null}));
}

/// managedFields is left out unread, so a malformed one does not make the object unreadable
/// (the whole-tree reading, which decodes it, refuses it).
#[test]
fn a_malformed_managed_fields_is_left_out_unread() {
    let text = r#"{"apiVersion":"v1","kind":"Job","metadata":{"name":"a","managedFields":7}}"#;
    assert!(whole(text).is_err());
    let object = JobObject::from_json(text).expect("reads");
    assert_eq!(
        object.text(),
        r#"{"apiVersion":"v1","kind":"Job","metadata":{"name":"a"}}"#
    );
}

#[test]
fn a_null_status_is_kept_by_the_quick_reading_too() {
    let text = r#"{"apiVersion":"v1","kind":"Job","metadata":{"name":"a"},"status":null}"#;
    let object = quick(text).expect("quick");
    assert_eq!(object.view(), &json!({"status": null}));
    assert_eq!(object, whole(text).expect("whole"));
}

#[test]
fn what_is_not_a_job_object_is_refused() {
    for text in [
        "",
        "1",
        "[]",
        "{",
        r#"{"metadata":7}"#,
        r#"{"metadata":{"name":[]}}"#,
        r#"{"apiVersion":"v1","kind":"Job","metadata":{"name":[]}}"#,
        r#"{"apiVersion":"v1","kind":"Job","metadata":{"name":"a"},"status":{"#,
    ] {
        assert!(JobObject::from_json(text).is_err(), "{text}");
    }
}

#[test]
fn an_object_known_by_its_metadata_alone() {
    let metadata: ObjectMeta =
        serde_json::from_value(json!({"name": "a", "uid": "u", "managedFields": [{}]}))
            .expect("metadata");
    let object = JobObject::from_metadata(metadata);
    assert_eq!(
        tree(object.text()),
        json!({"metadata": {"name": "a", "uid": "u"}})
    );
    assert!(!object.typed());
    assert_eq!(object.view(), &json!({}));
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(|n| json!(n)),
        "[a-zA-Z0-9 _\"\\\\é\n-]{0,12}".prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

prop_compose! {
    /// A job object as an API server writes one: metadata in any order, with or without
    /// managedFields (anywhere in it) and a deletion timestamp, any spec and status, compact or
    /// pretty.
    fn job_object()(
        labels in prop::collection::btree_map("[a-z]{1,5}", "[a-z0-9]{0,5}", 0..4),
        annotations in prop::collection::btree_map("[a-z./]{1,8}", "[ -~]{0,12}", 0..3),
        managed in prop::option::of(json_value()),
        deleting in any::<bool>(),
        spec in json_value(),
        status in prop::option::of(json_value()),
        order in Just(()).prop_perturb(|_, mut rng| rng.random::<u64>()),
        pretty in any::<bool>(),
    ) -> String {
        let mut meta: Vec<(&str, String)> = vec![
            ("name", json!("job-a").to_string()),
            ("namespace", json!("ml").to_string()),
            ("uid", json!("5f0c7a9e-3b1d-4c2a-9e8f-1a2b3c4d5e6f").to_string()),
            ("resourceVersion", json!("48213").to_string()),
            ("generation", json!(3).to_string()),
            ("labels", json!(labels).to_string()),
            ("annotations", json!(annotations).to_string()),
        ];
        if let Some(managed) = managed {
            meta.push(("managedFields", json!([{"manager": "m", "fieldsV1": managed}]).to_string()));
        }
        if deleting {
            meta.push(("deletionTimestamp", json!("2026-05-01T00:00:00Z").to_string()));
        }
        shuffle(&mut meta, order);
        let mut top: Vec<(&str, String)> = vec![
            ("apiVersion", json!("batch.volcano.sh/v1alpha1").to_string()),
            ("kind", json!("Job").to_string()),
            ("metadata", written(&meta, pretty)),
            ("spec", spec.to_string()),
        ];
        if let Some(status) = status {
            top.push(("status", status.to_string()));
        }
        shuffle(&mut top, order >> 32);
        written(&top, pretty)
    }
}

/// A deterministic reordering by `seed`.
fn shuffle<T>(items: &mut [T], mut seed: u64) {
    for i in (1..items.len()).rev() {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        items.swap(i, (seed >> 33) as usize % (i + 1));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The quick reading takes every object an API server writes, and reads it as the whole
    /// tree does: the same metadata, the same status view, and a text that is the object as
    /// sent without managedFields.
    #[test]
    fn the_quick_reading_agrees_with_the_whole_tree(text in job_object()) {
        let quick = quick(&text).expect("the quick reading takes it");
        let whole = whole(&text).expect("the whole tree takes it");
        prop_assert_eq!(&quick.metadata, &whole.metadata);
        prop_assert_eq!(quick.view(), whole.view());
        prop_assert_eq!(quick.typed(), whole.typed());
        let mut sent = tree(&text);
        if let Some(meta) = sent.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
        prop_assert_eq!(tree(quick.text()), sent.clone());
        prop_assert_eq!(tree(whole.text()), sent);
    }
}

/// A job object with one random edit: a span cut out, or one of JSON's structural characters
/// put in.
fn edited_object() -> impl Strategy<Value = String> {
    (job_object(), any::<u16>(), any::<u16>(), 0usize..12).prop_map(|(text, at, len, what)| {
        let bytes = text.as_bytes();
        let at = usize::from(at) % bytes.len();
        let mut out = bytes[..at].to_vec();
        match b"{}[]\",:\\ 0n"[..].get(what) {
            Some(&c) => {
                out.push(c);
                out.extend_from_slice(&bytes[at..]);
            }
            None => out.extend_from_slice(&bytes[(at + usize::from(len) % 16).min(bytes.len())..]),
        }
        String::from_utf8_lossy(&out).into_owned()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Whatever the text, reading it never panics, and what is read is an object whose text is
    /// JSON without managedFields and agrees with the whole tree.
    #[test]
    fn a_damaged_object_is_refused_or_read_whole(text in edited_object()) {
        if let Ok(object) = JobObject::from_json(&text) {
            let read = tree(object.text());
            prop_assert!(read.is_object());
            prop_assert!(read.pointer("/metadata/managedFields").is_none());
            if let Ok(whole) = whole(&text) {
                prop_assert_eq!(&object.metadata, &whole.metadata);
                prop_assert_eq!(object.view(), whole.view());
            }
        }
    }
}

/// A deletion time written without seconds, which the metadata type still takes: both
/// readings show it the same way in the view, as the type writes it back.
#[test]
fn a_deletion_time_without_seconds_reads_the_same_both_ways() {
    let text = r#"{"apiVersion":"batch.volcano.sh/v1alpha1","kind":"Job","metadata":{"name":"job-a","namespace":"ml","uid":"5f0c7a9e-3b1d-4c2a-9e8f-1a2b3c4d5e6f","resourceVersion":"1","deletionTimestamp":"2026-05-01T00:00Z"}}"#;
    let quick = quick(text).expect("the quick reading takes it");
    let whole = whole(text).expect("the whole tree takes it");
    assert_eq!(quick.view(), whole.view());
    assert_eq!(
        quick.view().pointer("/metadata/deletionTimestamp"),
        Some(&Value::String("2026-05-01T00:00:00Z".into()))
    );
}
