//! Which addresses a plugin reaches only with `allow_private: true`.
//!
//! An allowed name is only as trustworthy as the DNS answering for it: a name on the list that
//! resolves (or is made to resolve) to `10.0.0.7` or `169.254.169.254` would hand the plugin
//! the cluster's internal network or the cloud's metadata service. So every resolved address
//! is classified, and anything that is not a public unicast address is refused.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why `ip` is not a public unicast address, or `None` if it is one.
pub fn non_public(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(ip) => non_public_v4(ip),
        IpAddr::V6(ip) => non_public_v6(ip),
    }
}

fn non_public_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [first, second, ..] = ip.octets();
    if first == 0 {
        // 0.0.0.0 connects to the local host on Linux; the rest of 0/8 is not routable.
        Some("unspecified (0.0.0.0/8)")
    } else if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_private() {
        Some("private")
    } else if ip.is_link_local() {
        Some("link-local")
    } else if first == 100 && second & 0xc0 == 64 {
        Some("shared address space (100.64.0.0/10)")
    } else if ip.is_multicast() || ip.is_broadcast() {
        Some("not unicast")
    } else {
        None
    }
}

fn non_public_v6(ip: Ipv6Addr) -> Option<&'static str> {
    // IPv4 addresses written as IPv6 reach the IPv4 address: classified as that.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return non_public_v4(v4);
    }
    let segments = ip.segments();
    // NAT64 (64:ff9b::/96): a translating gateway forwards to the embedded IPv4 address.
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let [.., high, low] = segments;
        return non_public_v4(Ipv4Addr::from((u32::from(high) << 16) | u32::from(low)));
    }
    if ip.is_unspecified() {
        Some("unspecified")
    } else if ip.is_loopback() {
        Some("loopback")
    } else if segments[..6] == [0; 6] {
        Some("IPv4-compatible (::/96, deprecated)")
    } else if ip.is_unique_local() {
        Some("private (fc00::/7)")
    } else if ip.is_unicast_link_local() {
        Some("link-local")
    } else if segments[0] & 0xffc0 == 0xfec0 {
        Some("site-local (fec0::/10, deprecated)")
    } else if ip.is_multicast() {
        Some("not unicast")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(text: &str) -> Option<&'static str> {
        non_public(text.parse().expect("test address parses"))
    }

    #[test]
    fn private_ranges_are_refused() {
        for (address, expected) in [
            ("127.0.0.1", "loopback"),
            ("127.255.255.254", "loopback"),
            ("10.0.0.1", "private"),
            ("10.255.255.255", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "link-local"),
            ("100.64.0.1", "shared"),
            ("100.127.255.255", "shared"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("224.0.0.1", "not unicast"),
            ("255.255.255.255", "not unicast"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fc00::1", "private"),
            ("fd12:3456::1", "private"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("fec0::1", "site-local"),
            ("ff02::1", "not unicast"),
            ("::10.0.0.1", "IPv4-compatible"),
        ] {
            match reason(address) {
                Some(why) => assert!(why.contains(expected), "{address}: {why}"),
                None => panic!("{address} passed as public"),
            }
        }
    }

    #[test]
    fn ipv4_mapped_and_nat64_forms_are_classified_as_their_ipv4_address() {
        for (address, expected) in [
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.1.2.3", "private"),
            ("::ffff:172.16.0.1", "private"),
            ("::ffff:192.168.0.1", "private"),
            ("::ffff:169.254.169.254", "link-local"),
            ("::ffff:100.64.0.1", "shared"),
            ("::ffff:0.0.0.0", "unspecified"),
            ("64:ff9b::10.0.0.1", "private"),
            ("64:ff9b::127.0.0.1", "loopback"),
        ] {
            match reason(address) {
                Some(why) => assert!(why.contains(expected), "{address}: {why}"),
                None => panic!("{address} passed as public"),
            }
        }
        assert_eq!(reason("::ffff:8.8.8.8"), None);
        assert_eq!(reason("64:ff9b::8.8.8.8"), None);
    }

    #[test]
    fn public_addresses_pass() {
        for address in [
            "8.8.8.8",
            "1.1.1.1",
            "93.184.216.34",
            "172.15.255.255",
            "172.32.0.1",
            "192.167.1.1",
            "100.63.255.255",
            "100.128.0.1",
            "169.253.1.1",
            "11.0.0.1",
            "2606:4700:4700::1111",
            "2001:4860:4860::8888",
            "fbff::1",
            "fe00::1",
        ] {
            assert_eq!(reason(address), None, "{address}");
        }
    }
}
