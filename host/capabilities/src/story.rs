//! The `jobrelay:plugin/story` interface: what the objects around the job being handled said
//! of it when its version was seen (its Kueue Workload, its pods), read from the event itself.
//!
//! Why an interface and not fields of `job-event`: a record that grows is a new world version
//! every plugin would be rebuilt against, and a story lowered into every call would cost every
//! plugin what only a few read. An import a world only gains keeps the version (see the WIT's
//! opening), and a plugin that never calls `get` pays one pointer copy per call. Always
//! granted: it hands a plugin only its own event's data.

use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker};

use super::{CallScope, Capability, GrantProblem, StoreSetup};
use jobrelay_bindings::jobrelay::plugin::story as wit;
use jobrelay_contract::story::{FailureCause, QueueState, Story, WorkloadFacts};

/// The story capability.
pub struct StoryCapability;

impl Capability for StoryCapability {
    fn name(&self) -> &'static str {
        "story"
    }

    fn configure(&self, call: &CallScope<'_>, setup: &mut StoreSetup) -> Result<(), GrantProblem> {
        setup.state.story = EventStory(call.event.and_then(|e| e.story.clone()));
        Ok(())
    }
}

/// The story of the call's event, shared with the event.
#[derive(Debug, Default)]
pub struct EventStory(Option<Arc<Story>>);

/// Links the interface into a linker whose store data gives the call's [`EventStory`]
/// through `get`.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut EventStory,
) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, HasSelf<EventStory>>(linker, get)
}

impl wit::Host for EventStory {
    async fn get(&mut self) -> Option<wit::JobStory> {
        let story = self.0.as_deref()?;
        Some(wit::JobStory {
            workload: story.workload.as_ref().map(workload),
            failure: story.failure.as_ref().map(failure),
        })
    }
}

fn workload(facts: &WorkloadFacts) -> wit::Workload {
    let none = || (String::new(), String::new());
    let (state, (reason, message), preempted) = match &facts.state {
        QueueState::Queued { reason, message } => (
            wit::QueueState::Queued,
            (reason.clone(), message.clone()),
            None,
        ),
        QueueState::Reserved => (wit::QueueState::Reserved, none(), None),
        QueueState::Admitted => (wit::QueueState::Admitted, none(), None),
        QueueState::Evicted {
            reason,
            message,
            preempted,
        } => (
            wit::QueueState::Evicted,
            (reason.clone(), message.clone()),
            preempted.as_ref().map(|p| wit::Preemption {
                reason: p.reason.clone(),
                message: p.message.clone(),
            }),
        ),
        QueueState::Finished { reason, message } => (
            wit::QueueState::Finished,
            (reason.clone(), message.clone()),
            None,
        ),
    };
    wit::Workload {
        state,
        reason,
        message,
        preempted,
        cluster_queue: facts.cluster_queue.clone(),
        local_queue: facts.local_queue.clone(),
        waiting_since: facts.waiting_since.map(|t| t.to_rfc3339()),
        admitted_at: facts.admitted_at.map(|t| t.to_rfc3339()),
        past_execution_seconds: facts.past_execution_seconds,
        evictions: facts
            .evictions
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
        requeues: facts.requeues,
        accelerators: facts
            .accelerators
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
    }
}

fn failure(cause: &FailureCause) -> wit::FailureCause {
    wit::FailureCause {
        container: cause.container.clone(),
        init: cause.init,
        reason: cause.reason.clone(),
        exit_code: cause.exit_code,
        last_reason: cause.last_reason.clone(),
        message: cause.message.clone(),
    }
}
