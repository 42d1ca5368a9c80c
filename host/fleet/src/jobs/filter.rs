//! A list's filters, resolved against one cluster's interned values once per part of its
//! scan, then judged on each job.

use super::ClusterJobs;
use crate::interner::Sym;
use crate::query::JobQuery;
use crate::record::JobRecord;
use jobrelay_contract::event::Phase;
use jobrelay_contract::uid::Uid;

/// A query's filters, resolved against one cluster's interned values.
pub(super) struct Filter<'q> {
    namespaces: Option<Vec<Sym>>,
    kinds: Option<Vec<Sym>>,
    /// Bit `i` set: phase `Phase::ALL[i]` is taken; all set without a phase filter.
    phases: u16,
    query: &'q JobQuery,
}

impl<'q> Filter<'q> {
    /// `None`: nothing on this cluster can match (a namespace or kind asked for is not here).
    pub(super) fn of(query: &'q JobQuery, jobs: &ClusterJobs) -> Option<Filter<'q>> {
        let resolve = |values: &[String]| -> Option<Option<Vec<Sym>>> {
            if values.is_empty() {
                return Some(None);
            }
            let syms: Vec<Sym> = values.iter().filter_map(|v| jobs.strings.find(v)).collect();
            if syms.is_empty() {
                None
            } else {
                Some(Some(syms))
            }
        };
        let phases = if query.phases.is_empty() {
            u16::MAX
        } else {
            query.phases.iter().fold(0, |mask, p| mask | phase_bit(*p))
        };
        Some(Filter {
            namespaces: resolve(&query.namespaces)?,
            kinds: resolve(&query.kinds)?,
            phases,
            query,
        })
    }

    pub(super) fn takes(
        &self,
        uid: &Uid,
        rec: &JobRecord,
        jobs: &ClusterJobs,
        verdicts: &mut [u8],
    ) -> bool {
        if self.phases & phase_bit(rec.phase) == 0 {
            return false;
        }
        if !self.query.timers.is_empty() {
            let firing = jobs.firing.get(uid).map_or(&[][..], Vec::as_slice);
            let any = self.query.timers.iter().any(|t| t == "*");
            if !(if any {
                !firing.is_empty()
            } else {
                firing.iter().any(|t| self.query.timers.contains(t))
            }) {
                return false;
            }
        }
        if let Some(ns) = &self.namespaces
            && !ns.contains(&rec.namespace)
        {
            return false;
        }
        if let Some(kinds) = &self.kinds
            && !kinds.contains(&rec.kind)
        {
            return false;
        }
        if let Some(prefix) = &self.query.name_prefix
            && !rec.name.starts_with(prefix.as_str())
        {
            return false;
        }
        if let Some(selector) = &self.query.selector {
            // Each label set is judged once per request, however many jobs share it.
            let slot = rec.labels.index();
            if verdicts.get(slot) == Some(&0) {
                let labels = jobs.labels.get(rec.labels);
                let yes = labels.is_some_and(|l| selector.matches_with(|key| l.get(key)));
                verdicts[slot] = if yes { 1 } else { 2 };
            }
            return verdicts.get(slot) == Some(&1);
        }
        true
    }
}

fn phase_bit(phase: Phase) -> u16 {
    let index = Phase::ALL.iter().position(|p| *p == phase).unwrap_or(0);
    1 << index
}
