//! Where a job falls in a list's order. A page is the first `limit` jobs after the continue
//! token's position, so every job scanned is compared with that position and with the worst
//! job kept so far: the key is borrowed from the record while its cluster is read, and a name
//! or uid is copied only for a job the page keeps (its [`Position`]).
//!
//! The uid breaks a tie of names (a deleted job and a new one of the same name), so the order
//! is total and a page goes on exactly after the last job of the one before.

use std::cmp::Ordering;

use super::query::{Position, SortField};
use super::record::JobRecord;
use jobrelay_contract::uid::Uid;

/// A job's place in an order, borrowed from its record while the cluster is read.
pub(crate) struct KeyRef<'a> {
    missing: bool,
    time: u32,
    a: &'a str,
    b: &'a str,
    c: &'a str,
    uid: UidRef<'a>,
}

enum UidRef<'a> {
    Text(&'a str),
    Uid(&'a Uid),
}

impl UidRef<'_> {
    fn text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            UidRef::Text(t) => std::borrow::Cow::Borrowed(t),
            UidRef::Uid(u) => std::borrow::Cow::Owned(u.to_string()),
        }
    }
}

impl<'a> KeyRef<'a> {
    pub(crate) fn of(
        field: SortField,
        cluster: &'a str,
        namespace: &'a str,
        rec: &'a JobRecord,
        uid: &'a Uid,
    ) -> KeyRef<'a> {
        let (missing, time) = match field {
            SortField::Cluster | SortField::Name => (false, 0),
            SortField::Created => (rec.created == 0, rec.created),
            SortField::Finished => (rec.finished == 0, rec.finished),
        };
        let (a, c) = match field {
            SortField::Name => (rec.name.as_str(), cluster),
            _ => (cluster, rec.name.as_str()),
        };
        KeyRef {
            missing,
            time,
            a,
            b: namespace,
            c,
            uid: UidRef::Uid(uid),
        }
    }

    pub(crate) fn owned(&self) -> Position {
        Position {
            missing: self.missing,
            time: self.time,
            a: self.a.to_string(),
            b: self.b.to_string(),
            c: self.c.to_string(),
            uid: self.uid.text().into_owned(),
        }
    }
}

impl Position {
    pub(crate) fn key(&self) -> KeyRef<'_> {
        KeyRef {
            missing: self.missing,
            time: self.time,
            a: &self.a,
            b: &self.b,
            c: &self.c,
            uid: UidRef::Text(&self.uid),
        }
    }
}

/// The order of two keys: jobs without the time last whatever the direction; the rest by
/// time and names, reversed when descending. The uid is made text only on a tie of names.
pub(crate) fn compare(descending: bool, x: &KeyRef<'_>, y: &KeyRef<'_>) -> Ordering {
    x.missing.cmp(&y.missing).then_with(|| {
        let order = (x.time, x.a, x.b, x.c)
            .cmp(&(y.time, y.a, y.b, y.c))
            .then_with(|| x.uid.text().cmp(&y.uid.text()));
        if descending { order.reverse() } else { order }
    })
}
