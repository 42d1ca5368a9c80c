//! The lifecycle steps: what each phase writes for each flavour (see the table in the
//! `lifecycle` module docs).

use anyhow::bail;
use serde_json::{Value, json};

use super::driver::{first_task, non_empty, rv_of};
use super::kubeflow::{created_condition, kubeflow_condition, replica_counts};
use super::play::Step;
use super::pods;
use super::volcano::Counts;
use super::{Flavor, JobDriver, batch, kubeflow, volcano};

impl JobDriver {
    // ----- steps ---------------------------------------------------------------------------------

    /// Scheduled, not started. See the module table.
    pub fn pending(&mut self) -> anyhow::Result<String> {
        let now = self.tick();
        self.write_pods(|_, p| Some(pods::pending_status(p, &now)))?;
        match self.flavor {
            Flavor::Batch => self.write_status(&now, batch::pending),
            Flavor::Volcano => {
                let counts = Counts {
                    pending: self.total,
                    ..Counts::default()
                };
                self.write_status(&now, |s, c| {
                    volcano::transition(s, c, "Pending", "", "", counts)
                })
            }
            Flavor::PyTorch | Flavor::Mpi => self.write_status(&now, |s, c| {
                created_condition(s, c);
                replica_counts(s, c, (0, 0, 0), (0, 0, 0));
            }),
            Flavor::TrainJob | Flavor::JobSet | Flavor::RayJob => self.play(Step::Pending, now),
        }
    }

    /// All pods running. See the module table.
    pub fn running(&mut self) -> anyhow::Result<String> {
        let now = self.tick();
        let started = self.pods_started.get_or_insert_with(|| now.clone()).clone();
        let restarts = self.restarts;
        self.write_pods(|i, p| {
            let r = if i == 0 { restarts } else { 0 };
            Some(pods::running_status(p, i as u32, &started, &now, r, true))
        })?;
        self.append_logs(|p| Some(format!("{} | epoch 1/3 loss=0.912\n", p.name)));
        match self.flavor {
            Flavor::Batch => self.write_status(&now, batch::running),
            Flavor::Volcano => {
                let counts = Counts {
                    running: self.total,
                    ..Counts::default()
                };
                self.write_status(&now, |s, c| {
                    volcano::transition(s, c, "Running", "", "", counts)
                })
            }
            Flavor::PyTorch | Flavor::Mpi => self.write_status(&now, |s, c| {
                created_condition(s, c);
                kubeflow::set_condition(
                    s,
                    c,
                    kubeflow_condition(c, "Running", true, "is running."),
                );
                if s.get("startTime").is_none_or(Value::is_null) {
                    s["startTime"] = json!(c.now);
                }
                replica_counts(s, c, (1, 0, 0), (c.workers, 0, 0));
            }),
            Flavor::TrainJob | Flavor::JobSet | Flavor::RayJob => self.play(Step::Running, now),
        }
    }

    /// The first pod's container failed and restarted. See the module table.
    pub fn restarting(&mut self) -> anyhow::Result<String> {
        let now = self.tick();
        self.restarts += 1;
        let started = self.pods_started.get_or_insert_with(|| now.clone()).clone();
        let restarts = self.restarts;
        self.write_pods(|i, p| {
            (i == 0).then(|| pods::running_status(p, 0, &started, &now, restarts, false))
        })?;
        if let Some(first) = self.pods.first().cloned() {
            let old = self
                .sim
                .pod_log(&self.namespace, &first.name, &first.container, false);
            let mut previous = old.map(|b| b.to_vec()).unwrap_or_default();
            previous.extend_from_slice(
                format!(
                    "{} | RuntimeError: NCCL communicator was aborted\n",
                    first.name
                )
                .as_bytes(),
            );
            self.sim.set_pod_log(
                &self.namespace,
                &first.name,
                &first.container,
                true,
                previous,
            );
            let fresh = format!(
                "{} | restarted (restart {restarts}), resuming from checkpoint\n",
                first.name
            );
            self.sim
                .set_pod_log(&self.namespace, &first.name, &first.container, false, fresh);
        }
        match self.flavor {
            Flavor::Batch => self.write_status(&now, batch::restarting),
            Flavor::Volcano => {
                let counts = Counts {
                    running: self.total - 1,
                    failed: 1,
                    ..Counts::default()
                };
                self.write_status(&now, |s, c| {
                    volcano::bump_retry(s);
                    let message = format!("Task {} failed, restarting the job", first_task(c));
                    volcano::transition(s, c, "Restarting", "PodFailed", &message, counts);
                })
            }
            Flavor::PyTorch | Flavor::Mpi => {
                let (leader, worker) = self.flavor.roles();
                let failed_role = if self.pods.len() > 1 { leader } else { worker };
                self.write_status(&now, |s, c| {
                    let what = format!("is restarting because 1 {failed_role} replica(s) failed.");
                    kubeflow::set_condition(s, c, kubeflow_condition(c, "Restarting", true, &what));
                    replica_counts(s, c, (0, 0, 1), (c.workers, 0, 0));
                })
            }
            Flavor::TrainJob | Flavor::JobSet | Flavor::RayJob => self.play(Step::Restarting, now),
        }
    }

    /// Success criteria met, pods finishing (batch, Volcano). See the module table.
    pub fn completing(&mut self) -> anyhow::Result<String> {
        if !matches!(self.flavor, Flavor::Batch | Flavor::Volcano) {
            bail!("{} has no completing phase", self.flavor.kind());
        }
        let now = self.tick();
        self.finish_pods(&now, false)?;
        match self.flavor {
            Flavor::Batch => self.write_status(&now, batch::completing),
            _ => {
                let counts = Counts {
                    succeeded: self.total,
                    ..Counts::default()
                };
                self.write_status(&now, |s, c| {
                    volcano::transition(s, c, "Completing", "", "", counts)
                })
            }
        }
    }

    /// Finished successfully. See the module table.
    pub fn succeeded(&mut self) -> anyhow::Result<String> {
        let status = self.current_status()?;
        match self.flavor {
            Flavor::Batch => {
                if !batch::has_condition(&status, "SuccessCriteriaMet") {
                    self.completing()?;
                }
                let now = self.tick();
                self.write_status(&now, batch::complete)
            }
            Flavor::Volcano => {
                if volcano::phase(&status) != "Completing" {
                    self.completing()?;
                }
                let now = self.tick();
                let counts = Counts {
                    succeeded: self.total,
                    ..Counts::default()
                };
                self.write_status(&now, |s, c| {
                    volcano::transition(s, c, "Completed", "", "", counts)
                })
            }
            Flavor::PyTorch | Flavor::Mpi => {
                let now = self.tick();
                self.finish_pods(&now, false)?;
                self.write_status(&now, |s, c| {
                    kubeflow::set_condition(
                        s,
                        c,
                        kubeflow_condition(c, "Succeeded", true, "successfully completed."),
                    );
                    s["completionTime"] = json!(c.now);
                    replica_counts(s, c, (0, 1, 0), (0, c.workers, 0));
                })
            }
            Flavor::TrainJob | Flavor::JobSet | Flavor::RayJob => {
                let now = self.tick();
                self.play(Step::Succeeded, now)
            }
        }
    }

    /// The job will fail (batch only: `FailureTarget`). Empty `reason` means
    /// `BackoffLimitExceeded`.
    pub fn failing(&mut self, reason: &str) -> anyhow::Result<String> {
        if self.flavor != Flavor::Batch {
            bail!("only batch/v1 Jobs have a failing phase");
        }
        let reason = non_empty(reason, batch::DEFAULT_FAILURE);
        let now = self.tick();
        self.finish_pods(&now, true)?;
        self.write_status(&now, |s, c| batch::failure_target(s, c, &reason))
    }

    /// Failed. Empty `reason` means the flavour's usual one. See the module table.
    pub fn failed(&mut self, reason: &str) -> anyhow::Result<String> {
        match self.flavor {
            Flavor::Batch => {
                let reason = non_empty(reason, batch::DEFAULT_FAILURE);
                if !batch::has_condition(&self.current_status()?, "FailureTarget") {
                    self.failing(&reason)?;
                }
                let now = self.tick();
                self.write_status(&now, |s, c| batch::failed(s, c, &reason))
            }
            Flavor::Volcano => {
                let reason = non_empty(reason, "PodFailed");
                let now = self.tick();
                self.finish_pods(&now, true)?;
                let counts = Counts {
                    failed: self.total,
                    ..Counts::default()
                };
                self.write_status(&now, |s, c| {
                    let message = format!("Task {} failed with exit code 1", first_task(c));
                    volcano::transition(s, c, "Failed", &reason, &message, counts);
                })
            }
            Flavor::PyTorch | Flavor::Mpi => {
                let (leader, _) = self.flavor.roles();
                let default_reason = format!("{}Failed", self.flavor.kind());
                let reason = non_empty(reason, &default_reason);
                let now = self.tick();
                self.finish_pods(&now, true)?;
                self.write_status(&now, |s, c| {
                    let mut cond = kubeflow_condition(
                        c,
                        "Failed",
                        true,
                        &format!("has failed because 1 {leader} replica(s) failed."),
                    );
                    cond.reason = reason.clone();
                    kubeflow::set_condition(s, c, cond);
                    s["completionTime"] = json!(c.now);
                    replica_counts(s, c, (0, 0, 1), (0, 0, c.workers));
                })
            }
            Flavor::TrainJob | Flavor::JobSet | Flavor::RayJob => {
                let now = self.tick();
                self.play(Step::Failed(reason), now)
            }
        }
    }

    /// Suspended by the user. See the module table.
    pub fn suspended(&mut self) -> anyhow::Result<String> {
        match self.flavor {
            Flavor::Batch => {
                self.patch_spec(json!({ "spec": { "suspend": true } }))?;
                let now = self.tick();
                self.write_status(&now, batch::suspended)
            }
            Flavor::Volcano => {
                self.volcano_two_step("Aborting", "Aborted", "AbortJob", "job aborted by user")
            }
            Flavor::PyTorch | Flavor::Mpi => {
                self.patch_spec(json!({ "spec": { "runPolicy": { "suspend": true } } }))?;
                let now = self.tick();
                self.write_status(&now, |s, c| {
                    kubeflow::set_condition(
                        s,
                        c,
                        kubeflow_condition(c, "Suspended", true, "is suspended."),
                    );
                    let mut running = kubeflow_condition(c, "Running", false, "is suspended.");
                    running.reason = kubeflow::reason(c, "Suspended");
                    kubeflow::set_condition(s, c, running);
                    if let Some(map) = s.as_object_mut() {
                        map.remove("startTime");
                    }
                    replica_counts(s, c, (0, 0, 0), (0, 0, 0));
                })
            }
            Flavor::TrainJob | Flavor::JobSet | Flavor::RayJob => {
                let now = self.tick();
                self.play(Step::Suspended, now)
            }
        }
    }

    /// Resumed after [`JobDriver::suspended`]. See the module table.
    pub fn resumed(&mut self) -> anyhow::Result<String> {
        match self.flavor {
            Flavor::Batch => {
                self.patch_spec(json!({ "spec": { "suspend": false } }))?;
                let now = self.tick();
                self.write_status(&now, batch::resumed)
            }
            Flavor::Volcano => {
                let now = self.tick();
                let counts = Counts {
                    pending: self.total,
                    ..Counts::default()
                };
                self.write_status(&now, |s, c| {
                    volcano::bump_retry(s);
                    volcano::transition(
                        s,
                        c,
                        "Restarting",
                        "ResumeJob",
                        "job resumed by user",
                        counts,
                    );
                })
            }
            Flavor::PyTorch | Flavor::Mpi => {
                self.patch_spec(json!({ "spec": { "runPolicy": { "suspend": false } } }))?;
                let now = self.tick();
                self.write_status(&now, |s, c| {
                    let mut cond = kubeflow_condition(c, "Suspended", false, "is resumed.");
                    cond.reason = kubeflow::reason(c, "Resumed");
                    kubeflow::set_condition(s, c, cond);
                    s["startTime"] = json!(c.now);
                })
            }
            Flavor::TrainJob | Flavor::JobSet | Flavor::RayJob => {
                let now = self.tick();
                self.play(Step::Resumed, now)
            }
        }
    }

    /// Volcano only: `Aborting`, then `Aborted`.
    pub fn aborted(&mut self) -> anyhow::Result<String> {
        if self.flavor != Flavor::Volcano {
            bail!("only Volcano jobs can be aborted");
        }
        self.volcano_two_step("Aborting", "Aborted", "AbortJob", "job aborted by user")
    }

    /// Volcano only: `Terminating`, then `Terminated`. Empty `reason` means `PodFailed`.
    pub fn terminated(&mut self, reason: &str) -> anyhow::Result<String> {
        if self.flavor != Flavor::Volcano {
            bail!("only Volcano jobs can be terminated");
        }
        let reason = non_empty(reason, "PodFailed");
        self.volcano_two_step(
            "Terminating",
            "Terminated",
            &reason,
            "job terminated by policy",
        )
    }

    /// Deletes the job (DELETE semantics: marked when it has finalizers, else removed, and its
    /// pods garbage-collected once it is gone). Returns the RV of the delete.
    pub fn delete(&mut self) -> anyhow::Result<String> {
        let object = self.sim.delete(&self.gvr(), &self.namespace, &self.name)?;
        self.last_rv = rv_of(&object);
        Ok(self.last_rv.clone())
    }
}
