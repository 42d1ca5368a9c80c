//! Rendezvous (highest-random-weight) hashing: which replica owns which cluster.
//!
//! Every replica computes the same owner from the same member list, with no coordination
//! beyond agreeing on who is alive. When a replica joins, only the clusters it now scores
//! highest on move to it; when one dies, only its clusters move, each to the replica that
//! scored second on it. The weights are SHA-256 based, so they do not depend on the Rust
//! version or the platform.

use sha2::{Digest, Sha256};

/// The weight of `member` for `key`.
fn weight(key: &str, member: &str) -> u64 {
    let mut hash = Sha256::new();
    hash.update(key.as_bytes());
    hash.update([0]);
    hash.update(member.as_bytes());
    let digest = hash.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// The member that owns `key`: the highest weight, ties broken by name. `None` without members.
pub fn owner<'a>(key: &str, members: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    members
        .into_iter()
        .max_by(|a, b| weight(key, a).cmp(&weight(key, b)).then_with(|| a.cmp(b)))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn spread<'a>(keys: &[String], members: &[&'a str]) -> BTreeMap<String, &'a str> {
        keys.iter()
            .map(|k| {
                let owner = owner(k, members.iter().copied()).expect("members");
                (k.clone(), owner)
            })
            .collect()
    }

    #[test]
    fn the_owner_does_not_depend_on_member_order() {
        let keys: Vec<String> = (0..50).map(|i| format!("cluster-{i}")).collect();
        let a = spread(&keys, &["r1", "r2", "r3"]);
        let b = spread(&keys, &["r3", "r1", "r2"]);
        assert_eq!(a, b);
        assert_eq!(owner("x", []), None);
    }

    #[test]
    fn a_leaving_member_moves_only_its_own_keys_and_a_joining_one_takes_only_keys() {
        let keys: Vec<String> = (0..300).map(|i| format!("cluster-{i}")).collect();
        let three = spread(&keys, &["r1", "r2", "r3"]);
        let two = spread(&keys, &["r1", "r2"]);
        for k in &keys {
            if three[k] != "r3" {
                assert_eq!(three[k], two[k], "{k} moved although its owner stayed");
            }
        }
        // And back: r3 joining takes keys only for itself.
        for k in &keys {
            assert!(three[k] == two[k] || three[k] == "r3", "{k}");
        }
        // Roughly even: each of three members gets a fair share of 300 keys.
        for m in ["r1", "r2", "r3"] {
            let n = three.values().filter(|o| **o == m).count();
            assert!((60..=140).contains(&n), "{m} owns {n} of 300");
        }
    }
}
