use super::*;

/// A pod from its `status` as the kubelet writes it.
fn pod(status: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "llama-ft-worker-0", "namespace": "ml"},
        "status": status,
    }))
    .expect("a pod")
}

#[test]
fn an_oom_killed_container_is_the_cause_with_its_exit_code() {
    let p = pod(serde_json::json!({
        "phase": "Failed",
        "containerStatuses": [
            {"name": "sidecar", "image": "s", "imageID": "", "ready": false, "restartCount": 0,
             "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
            {"name": "trainer", "image": "t", "imageID": "", "ready": false, "restartCount": 0,
             "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}},
        ],
    }));
    let cause = failure_cause(&p).expect("a cause");
    assert_eq!(
        (
            cause.container.as_str(),
            cause.reason.as_str(),
            cause.exit_code,
            cause.init
        ),
        ("trainer", "OOMKilled", Some(137), false)
    );
}

#[test]
fn an_image_that_cannot_be_pulled_is_the_cause_while_the_pod_waits() {
    let p = pod(serde_json::json!({
        "phase": "Pending",
        "containerStatuses": [
            {"name": "trainer", "image": "registry.example/llama:9", "imageID": "", "ready": false,
             "restartCount": 0,
             "state": {"waiting": {"reason": "ImagePullBackOff",
                                   "message": "Back-off pulling image \"registry.example/llama:9\""}}},
        ],
    }));
    let cause = failure_cause(&p).expect("a cause");
    assert_eq!(cause.reason, "ImagePullBackOff");
    assert_eq!(cause.exit_code, None);
    assert!(cause.message.expect("its message").contains("llama:9"));
}

#[test]
fn a_crash_loop_keeps_the_last_termination_beside_its_reason() {
    let p = pod(serde_json::json!({
        "phase": "Running",
        "containerStatuses": [
            {"name": "trainer", "image": "t", "imageID": "", "ready": false, "restartCount": 5,
             "state": {"waiting": {"reason": "CrashLoopBackOff"}},
             "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}},
        ],
    }));
    let cause = failure_cause(&p).expect("a cause");
    assert_eq!(
        (
            cause.reason.as_str(),
            cause.exit_code,
            cause.last_reason.as_deref()
        ),
        ("CrashLoopBackOff", Some(137), Some("OOMKilled"))
    );
}

#[test]
fn an_init_container_goes_first_and_the_pods_own_reason_last() {
    let p = pod(serde_json::json!({
        "phase": "Failed",
        "reason": "Evicted",
        "message": "The node was low on resource: memory.",
        "initContainerStatuses": [
            {"name": "fetch-data", "image": "f", "imageID": "", "ready": false, "restartCount": 0,
             "state": {"terminated": {"exitCode": 2, "reason": "Error"}}},
        ],
        "containerStatuses": [
            {"name": "trainer", "image": "t", "imageID": "", "ready": false, "restartCount": 0,
             "state": {"terminated": {"exitCode": 1}}},
        ],
    }));
    let cause = failure_cause(&p).expect("a cause");
    assert_eq!((cause.container.as_str(), cause.init), ("fetch-data", true));
    assert_eq!((cause.reason.as_str(), cause.exit_code), ("Error", Some(2)));

    let evicted = pod(serde_json::json!({
        "phase": "Failed",
        "reason": "Evicted",
        "message": "The node was low on resource: memory.",
    }));
    let cause = failure_cause(&evicted).expect("the pod's own reason");
    assert_eq!(
        (cause.container.as_str(), cause.reason.as_str()),
        ("", "Evicted")
    );
}

#[test]
fn a_healthy_or_starting_pod_has_no_cause() {
    for status in [
        serde_json::json!({"phase": "Running", "containerStatuses": [
            {"name": "t", "image": "t", "imageID": "", "ready": true, "restartCount": 0,
             "state": {"running": {"startedAt": "2026-12-01T10:00:00Z"}}}]}),
        serde_json::json!({"phase": "Pending", "containerStatuses": [
            {"name": "t", "image": "t", "imageID": "", "ready": false, "restartCount": 0,
             "state": {"waiting": {"reason": "ContainerCreating"}}}]}),
        serde_json::json!({"phase": "Succeeded", "containerStatuses": [
            {"name": "t", "image": "t", "imageID": "", "ready": false, "restartCount": 0,
             "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}),
        serde_json::json!({}),
    ] {
        assert_eq!(failure_cause(&pod(status.clone())), None, "{status}");
    }
}
