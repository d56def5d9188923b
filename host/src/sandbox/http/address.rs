//! Where a granted name may lead: the internal address ranges a name never
//! reaches, and what the patterns matching a request open to it (see the
//! module docs of `http`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::grants::AllowedHosts;

/// Where a request goes.
pub(super) struct Target {
    /// `scheme://host:port`, for messages.
    pub(super) origin: String,
    /// The host as resolved and sent as TLS server name: no brackets.
    pub(super) host: String,
    pub(super) https: bool,
    pub(super) port: u16,
}

/// The internal addresses the patterns matching a request open to it.
#[derive(Debug, Default)]
pub(super) struct Reach {
    /// Addresses a matching pattern names literally.
    addresses: Vec<IpAddr>,
    /// Whether a matching pattern is `localhost`.
    loopback: bool,
}

impl Reach {
    /// What the patterns allowing `scheme://host:port` open, or `None` when
    /// none allows it.
    pub(super) fn of(hosts: &AllowedHosts, scheme: &str, host: &str, port: u16) -> Option<Self> {
        let mut reach = None::<Reach>;
        for pattern in hosts.matching(scheme, host, port) {
            let reach = reach.get_or_insert_default();
            reach.addresses.extend(pattern.address());
            reach.loopback |= pattern.is_localhost();
        }
        reach
    }

    fn permits(&self, ip: IpAddr, class: Internal) -> bool {
        self.addresses.contains(&ip) || (self.loopback && class == Internal::Loopback)
    }
}

/// The addresses the request may reach, in order; or, when none is left,
/// the first one refused.
pub(super) fn screen(
    resolved: Vec<SocketAddr>,
    reach: &Reach,
) -> Result<Vec<SocketAddr>, (IpAddr, Internal)> {
    let mut refused = None;
    let allowed: Vec<SocketAddr> = resolved
        .into_iter()
        .filter(|addr| match Internal::of(addr.ip()) {
            None => true,
            Some(class) if reach.permits(addr.ip(), class) => true,
            Some(class) => {
                tracing::debug!(target: "toolhost::http", address = %addr.ip(), %class, "skipped an internal address");
                refused.get_or_insert((addr.ip(), class));
                false
            }
        })
        .collect();
    match refused {
        Some(refused) if allowed.is_empty() => Err(refused),
        _ => Ok(allowed),
    }
}

/// What the model is told when a name leads only to internal addresses.
pub(super) fn internal_refusal(target: &Target, ip: IpAddr, class: Internal) -> String {
    let scheme = if target.https { "https" } else { "http" };
    let literal = match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    };
    let example = format!("\"{scheme}://{literal}:{}\"", target.port);
    let example = if class == Internal::Loopback {
        format!("{example} or \"{scheme}://localhost:{}\"", target.port)
    } else {
        example
    };
    let leads = if target.host.parse::<IpAddr>().ok() == Some(ip) {
        ip.to_string()
    } else {
        format!("{} resolves to {ip}", target.host)
    };
    format!(
        "HTTP request to {} refused: {leads}, a {class} address, which a tool reaches only through an allow_hosts entry naming it, e.g. {example}",
        target.origin
    )
}

/// Addresses that lead into the host or its networks rather than to the
/// public internet: a name never reaches them (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Internal {
    Loopback,
    Private,
    LinkLocal,
    /// 100.64.0.0/10, carrier-grade NAT and some clouds' internal services.
    Shared,
    /// Cloud instance metadata, which serves credentials.
    Metadata,
    Multicast,
    Unspecified,
    Broadcast,
    Documentation,
    Benchmarking,
    /// Reserved, deprecated or tunnel ranges no public server uses.
    Reserved,
}

/// Metadata endpoints inside ranges that are internal anyway; named so the
/// refusal says what they are. AWS, GCP, Azure, OpenStack and others;
/// AWS ECS task metadata; Alibaba Cloud.
const METADATA_V4: [Ipv4Addr; 3] = [
    Ipv4Addr::new(169, 254, 169, 254),
    Ipv4Addr::new(169, 254, 170, 2),
    Ipv4Addr::new(100, 100, 100, 200),
];

/// AWS's IPv6 metadata endpoint, `fd00:ec2::254`.
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);

impl Internal {
    /// The internal range `ip` is in, or `None` for a public address.
    fn of(ip: IpAddr) -> Option<Self> {
        match ip {
            IpAddr::V4(v4) => Self::of_v4(v4),
            IpAddr::V6(v6) => Self::of_v6(v6),
        }
    }

    fn of_v4(ip: Ipv4Addr) -> Option<Self> {
        let [a, b, c, _] = ip.octets();
        let class = match (a, b, c) {
            _ if METADATA_V4.contains(&ip) => Self::Metadata,
            _ if ip.is_broadcast() => Self::Broadcast,
            (0, _, _) => Self::Unspecified, // "this network": 0.0.0.0 is this host
            (10, _, _) | (172, 16..=31, _) | (192, 168, _) => Self::Private,
            (100, 64..=127, _) => Self::Shared,
            (127, _, _) => Self::Loopback,
            (169, 254, _) => Self::LinkLocal,
            (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => Self::Documentation,
            (198, 18..=19, _) => Self::Benchmarking,
            (192, 0, 0) => Self::Reserved, // IETF protocol assignments
            (224..=239, _, _) => Self::Multicast,
            (240..=255, _, _) => Self::Reserved,
            _ => return None,
        };
        Some(class)
    }

    fn of_v6(ip: Ipv6Addr) -> Option<Self> {
        let s = ip.segments();
        if ip == METADATA_V6 {
            return Some(Self::Metadata);
        }
        if ip.is_unspecified() {
            return Some(Self::Unspecified);
        }
        if ip.is_loopback() {
            return Some(Self::Loopback);
        }
        let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
        // IPv6 forms that carry an IPv4 address are what they carry.
        // IPv4-mapped (::ffff:a.b.c.d), NAT64 (64:ff9b::a.b.c.d) and 6to4
        // (2002:aabb:ccdd::) reach public IPv4 hosts too.
        if (s[..5] == [0; 5] && s[5] == 0xffff) || (s[..2] == [0x64, 0xff9b] && s[2..6] == [0; 4]) {
            return Self::of_v4(v4(s[6], s[7]));
        }
        if s[0] == 0x2002 {
            return Self::of_v4(v4(s[1], s[2]));
        }
        // IPv4-compatible (::a.b.c.d) and -translated (::ffff:0:a.b.c.d)
        // are deprecated or internal to translators: never public.
        if s[..6] == [0; 6] || (s[..4] == [0; 4] && s[4] == 0xffff && s[5] == 0) {
            return Some(Self::of_v4(v4(s[6], s[7])).unwrap_or(Self::Reserved));
        }
        let class = match s {
            [0xfc00..=0xfdff, ..] | [0xfec0..=0xfeff, ..] => Self::Private, // unique local; site-local
            [0xfe80..=0xfebf, ..] => Self::LinkLocal,
            [0xff00..=0xffff, ..] => Self::Multicast,
            [0x2001, 0x0db8, ..] | [0x3fff, 0x0000..=0x0fff, ..] => Self::Documentation,
            [0x2001, 0x0002, 0, ..] => Self::Benchmarking,
            [0x64, 0xff9b, 1, ..] => Self::Private, // local-use NAT64
            [0x2001, 0, ..] => Self::Reserved,      // Teredo
            [0x100, 0, 0, 0, ..] => Self::Reserved, // discard-only
            [0..=0xff, ..] => Self::Reserved,       // ::/8, unassigned
            _ => return None,
        };
        Some(class)
    }
}

impl std::fmt::Display for Internal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Loopback => "loopback",
            Self::Private => "private-network",
            Self::LinkLocal => "link-local",
            Self::Shared => "shared (CGNAT)",
            Self::Metadata => "cloud metadata",
            Self::Multicast => "multicast",
            Self::Unspecified => "unspecified",
            Self::Broadcast => "broadcast",
            Self::Documentation => "documentation-only",
            Self::Benchmarking => "benchmarking-only",
            Self::Reserved => "reserved",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grants::Grants;

    fn class(ip: &str) -> Option<Internal> {
        Internal::of(ip.parse().unwrap())
    }

    #[test]
    fn internal_ipv4_ranges_are_classified() {
        use Internal::*;
        for (ip, expected) in [
            ("127.0.0.1", Loopback),
            ("127.255.255.254", Loopback),
            ("10.0.0.1", Private),
            ("172.16.0.1", Private),
            ("172.31.255.255", Private),
            ("192.168.1.1", Private),
            ("169.254.0.1", LinkLocal),
            ("169.254.169.254", Metadata),
            ("169.254.170.2", Metadata),
            ("100.100.100.200", Metadata),
            ("100.64.0.1", Shared),
            ("100.127.255.255", Shared),
            ("224.0.0.1", Multicast),
            ("239.255.255.250", Multicast),
            ("0.0.0.0", Unspecified),
            ("0.1.2.3", Unspecified),
            ("255.255.255.255", Broadcast),
            ("240.0.0.1", Reserved),
            ("192.0.0.8", Reserved),
            ("192.0.2.1", Documentation),
            ("198.51.100.1", Documentation),
            ("203.0.113.1", Documentation),
            ("198.18.0.1", Benchmarking),
            ("198.19.255.255", Benchmarking),
        ] {
            assert_eq!(class(ip), Some(expected), "{ip}");
        }
    }

    #[test]
    fn internal_ipv6_ranges_are_classified() {
        use Internal::*;
        for (ip, expected) in [
            ("::1", Loopback),
            ("::", Unspecified),
            ("fc00::1", Private),
            ("fd12:3456::1", Private),
            ("fec0::1", Private),
            ("fe80::1", LinkLocal),
            ("febf::1", LinkLocal),
            ("fd00:ec2::254", Metadata),
            ("ff02::1", Multicast),
            ("2001:db8::1", Documentation),
            ("3fff::1", Documentation),
            ("2001:2::1", Benchmarking),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", Reserved),
            ("100::1", Reserved),
            ("64:ff9b:1::a00:1", Private),
        ] {
            assert_eq!(class(ip), Some(expected), "{ip}");
        }
    }

    #[test]
    fn ipv6_forms_carrying_an_internal_ipv4_address_are_internal() {
        use Internal::*;
        for (ip, expected) in [
            ("::ffff:127.0.0.1", Loopback),
            ("::ffff:7f00:1", Loopback),
            ("::ffff:169.254.169.254", Metadata),
            ("::ffff:10.1.2.3", Private),
            ("::127.0.0.1", Loopback),
            ("::10.0.0.1", Private),
            ("::ffff:0:127.0.0.1", Loopback),
            ("64:ff9b::127.0.0.1", Loopback),
            ("64:ff9b::a9fe:a9fe", Metadata),
            ("64:ff9b::192.168.0.1", Private),
            ("2002:7f00:1::", Loopback),
            ("2002:a9fe:a9fe::1", Metadata),
            ("2002:c0a8:101::", Private),
            // Deprecated forms stay internal even around a public address.
            ("::8.8.8.8", Reserved),
            ("::ffff:0:8.8.8.8", Reserved),
        ] {
            assert_eq!(class(ip), Some(expected), "{ip}");
        }
    }

    #[test]
    fn public_addresses_are_not_internal() {
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "93.184.215.14",
            "172.15.255.255",
            "172.32.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "169.253.255.255",
            "192.0.3.1",
            "198.17.255.255",
            "223.255.255.255",
            "2606:4700:4700::1111",
            "2a00:1450:4001:80b::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::8.8.8.8",
            "2002:808:808::1",
        ] {
            assert_eq!(class(ip), None, "{ip}");
        }
    }

    fn reach(patterns: &[&str], host: &str, port: u16) -> Option<Reach> {
        let mut grants = Grants::none();
        for pattern in patterns {
            grants = grants.allow_host(pattern).unwrap();
        }
        Reach::of(grants.hosts(), "http", host, port)
    }

    fn socket(ip: &str) -> SocketAddr {
        SocketAddr::new(ip.parse().unwrap(), 80)
    }

    #[test]
    fn a_name_never_reaches_an_internal_address_through_a_wildcard() {
        let reach = reach(&["http://*:*"], "localhost", 80).unwrap();
        let refused = screen(vec![socket("127.0.0.1"), socket("::1")], &reach).unwrap_err();
        assert_eq!(refused, ("127.0.0.1".parse().unwrap(), Internal::Loopback));
        let refused = screen(vec![socket("::ffff:169.254.169.254")], &reach).unwrap_err();
        assert_eq!(refused.1, Internal::Metadata);
    }

    #[test]
    fn internal_addresses_are_skipped_when_a_public_one_is_left() {
        let reach = reach(&["http://*.example.org"], "a.example.org", 80).unwrap();
        let resolved = vec![socket("10.0.0.1"), socket("93.184.215.14"), socket("::1")];
        assert_eq!(screen(resolved, &reach), Ok(vec![socket("93.184.215.14")]));
    }

    #[test]
    fn localhost_reaches_loopback_only() {
        let reach = reach(&["http://localhost"], "localhost", 80).unwrap();
        let resolved = vec![socket("::1"), socket("127.0.0.1")];
        assert_eq!(screen(resolved.clone(), &reach), Ok(resolved));
        assert!(screen(vec![socket("10.0.0.1")], &reach).is_err());
        assert!(screen(vec![socket("169.254.169.254")], &reach).is_err());
    }

    #[test]
    fn an_address_named_literally_is_reached_and_no_other() {
        let named = reach(&["http://127.0.0.1:8081", "http://*:*"], "127.0.0.1", 8081).unwrap();
        assert!(screen(vec![socket("127.0.0.1")], &named).is_ok());
        assert!(screen(vec![socket("127.0.0.2")], &named).is_err());
        let named = reach(&["http://[::1]:8080"], "[::1]", 8080).unwrap();
        assert!(screen(vec![socket("::1")], &named).is_ok());
        assert!(screen(vec![socket("::ffff:127.0.0.1")], &named).is_err());
    }

    #[test]
    fn ungranted_origins_have_no_reach() {
        assert!(reach(&["http://example.org"], "localhost", 80).is_none());
        assert!(reach(&["http://*:*"], "127.1", 80).is_none());
        assert!(reach(&["http://*.1:*"], "127.1", 80).is_none());
    }

    #[test]
    fn refusals_name_the_host_the_address_and_the_fix() {
        let target = Target {
            origin: "http://localhost:8080".into(),
            host: "localhost".into(),
            https: false,
            port: 8080,
        };
        let message = internal_refusal(&target, "::1".parse().unwrap(), Internal::Loopback);
        assert_eq!(
            message,
            "HTTP request to http://localhost:8080 refused: localhost resolves to ::1, a loopback address, \
             which a tool reaches only through an allow_hosts entry naming it, \
             e.g. \"http://[::1]:8080\" or \"http://localhost:8080\""
        );
    }
}
