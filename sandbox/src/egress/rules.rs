//! Where a proxied command may connect: the pure decision of the egress proxy.
//!
//! Guarantees: a destination is allowed when it is granted by name (`host:port` exactly as
//! the config writes it, the host compared without case), or when its port is allowed and
//! *every* address its name resolves to is a public unicast address — never loopback,
//! private (RFC 1918, unique-local), shared (CGNAT), link-local (the cloud metadata endpoint
//! `169.254.169.254` among them), multicast, broadcast, unspecified or reserved, also when
//! written as an IPv4-mapped or NAT64 IPv6 address. The proxy then connects to exactly the
//! address decided here, so a name that resolves differently a moment later (DNS
//! rebinding) changes nothing. A refusal says what was refused, why, and the setting that
//! would allow it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// What a proxied command may reach besides public addresses on its ports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    /// Ports public destinations may be reached on; `None`: any.
    pub ports: Option<Vec<u16>>,
    /// `host:port` destinations allowed whatever their addresses (a test database, a
    /// service on the private network).
    pub granted: Vec<String>,
}

/// Why a destination is refused, in words for the command (and the model reading its output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

impl Rules {
    /// Whether `host:port` is granted by name.
    fn grants(&self, host: &str, port: u16) -> bool {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        self.granted.iter().any(|g| match split_host_port(g) {
            Some((h, p)) => p == port && h.eq_ignore_ascii_case(host),
            None => false,
        })
    }

    /// The address to connect to for `host:port`, given what `host` resolved to.
    pub fn decide(
        &self,
        host: &str,
        port: u16,
        resolved: &[SocketAddr],
    ) -> Result<SocketAddr, Refused> {
        let first = resolved
            .first()
            .copied()
            .ok_or_else(|| Refused(format!("{host} does not resolve to any address")))?;
        if self.grants(host, port) {
            return Ok(first);
        }
        if let Some(bad) = resolved.iter().find_map(|a| not_public(a.ip())) {
            return Err(Refused(format!(
                "{host} is {bad}, which commands may not reach; grant {host}:{port} in \
                 [sandbox] connect if this command needs it"
            )));
        }
        if let Some(ports) = &self.ports
            && !ports.contains(&port)
        {
            return Err(Refused(format!(
                "port {port} is not one commands may connect to (allowed: {}); add it to \
                 [sandbox] ports, or grant {host}:{port} in [sandbox] connect",
                ports
                    .iter()
                    .map(u16::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        Ok(first)
    }
}

/// `host:port` (`[::1]:443` for IPv6) split; `None` without a valid port.
pub fn split_host_port(text: &str) -> Option<(&str, u16)> {
    let (host, port) = text.rsplit_once(':')?;
    let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (!host.is_empty()).then_some((host, port))
}

/// What kind of non-public address `ip` is, or `None` for a public unicast one.
pub fn not_public(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => not_public_v4(v4),
        IpAddr::V6(v6) => not_public_v6(v6),
    }
}

fn not_public_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match () {
        () if ip.is_loopback() => "a loopback address",
        () if ip.is_private() => "a private address",
        () if ip.is_link_local() => "a link-local address (the cloud metadata endpoint among them)",
        () if a == 100 && (64..128).contains(&b) => "a shared (carrier-grade NAT) address",
        () if ip.is_unspecified() || a == 0 => "an unspecified address",
        () if ip.is_broadcast() => "the broadcast address",
        () if ip.is_multicast() => "a multicast address",
        () if a >= 240 => "a reserved address",
        () if a == 192 && b == 0 && c == 0 => "an IETF protocol address",
        () if ip.is_documentation() => "a documentation address",
        () if a == 198 && (b == 18 || b == 19) => "a benchmarking address",
        () => return None,
    })
}

fn not_public_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return not_public_v4(v4);
    }
    let segments = ip.segments();
    // NAT64 (64:ff9b::/96) carries an IPv4 address in its last 32 bits.
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let [.., hi, lo] = segments;
        let v4 = Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
        return not_public_v4(v4);
    }
    Some(match segments[0] {
        _ if ip.is_loopback() => "a loopback address",
        _ if ip.is_unspecified() => "an unspecified address",
        s if s & 0xfe00 == 0xfc00 => "a private (unique-local) address",
        s if s & 0xffc0 == 0xfe80 => "a link-local address",
        s if s & 0xffc0 == 0xfec0 => "a site-local address",
        s if s & 0xff00 == 0xff00 => "a multicast address",
        // ::/96 (IPv4-compatible) and the rest of ::/8 are reserved.
        s if s & 0xff00 == 0 => "a reserved address",
        0x2001 if segments[1] == 0x0db8 => "a documentation address",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn only_public_unicast_addresses_are_public() {
        for public in [
            "93.184.216.34",
            "140.82.112.3",
            "1.1.1.1",
            "2606:4700::1111",
        ] {
            assert_eq!(not_public(public.parse().unwrap()), None, "{public}");
        }
        for (ip, kind) in [
            ("127.0.0.1", "loopback"),
            ("127.8.9.1", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "link-local"),
            ("100.64.0.1", "carrier-grade"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("255.255.255.255", "broadcast"),
            ("224.0.0.1", "multicast"),
            ("240.0.0.1", "reserved"),
            ("198.18.0.1", "benchmarking"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fd00::1", "unique-local"),
            ("fe80::1", "link-local"),
            ("ff02::1", "multicast"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "link-local"),
            ("64:ff9b::a00:1", "private"),
            ("::127.0.0.1", "reserved"),
        ] {
            let said = not_public(ip.parse().unwrap());
            assert!(said.is_some_and(|s| s.contains(kind)), "{ip}: {said:?}");
        }
        assert_eq!(not_public("172.32.0.1".parse().unwrap()), None);
        assert_eq!(not_public("100.128.0.1".parse().unwrap()), None);
    }

    #[test]
    fn a_destination_is_public_on_an_allowed_port_or_granted_by_name() {
        let rules = Rules {
            ports: Some(vec![80, 443]),
            granted: vec![
                "db.internal:5432".into(),
                "127.0.0.1:8080".into(),
                "[::1]:9".into(),
            ],
        };
        let public = [addr("140.82.112.3:443")];
        assert_eq!(rules.decide("github.com", 443, &public), Ok(public[0]));
        let err = rules
            .decide("github.com", 22, &[addr("140.82.112.3:22")])
            .unwrap_err();
        assert!(
            err.0.contains("port 22") && err.0.contains("[sandbox] ports"),
            "{}",
            err.0
        );
        // Every address must be public: one private address among them refuses the name.
        let mixed = [addr("140.82.112.3:443"), addr("10.0.0.5:443")];
        let err = rules.decide("split.example", 443, &mixed).unwrap_err();
        assert!(err.0.contains("a private address") && err.0.contains("[sandbox] connect"));
        let err = rules
            .decide("localhost", 443, &[addr("127.0.0.1:443")])
            .unwrap_err();
        assert!(err.0.contains("loopback"), "{}", err.0);
        let err = rules
            .decide("169.254.169.254", 80, &[addr("169.254.169.254:80")])
            .unwrap_err();
        assert!(err.0.contains("metadata"), "{}", err.0);
        // Granted by name: whatever the address class and port list.
        let db = [addr("10.0.0.7:5432")];
        assert_eq!(rules.decide("DB.internal", 5432, &db), Ok(db[0]));
        let local = [addr("127.0.0.1:8080")];
        assert_eq!(rules.decide("127.0.0.1", 8080, &local), Ok(local[0]));
        assert_eq!(
            rules.decide("[::1]", 9, &[addr("[::1]:9")]),
            Ok(addr("[::1]:9"))
        );
        assert!(
            rules
                .decide("127.0.0.1", 8081, &[addr("127.0.0.1:8081")])
                .is_err()
        );
        assert!(rules.decide("nowhere", 443, &[]).is_err());
        let any = Rules {
            ports: None,
            granted: vec![],
        };
        assert!(
            any.decide("github.com", 22, &[addr("140.82.112.3:22")])
                .is_ok()
        );
        assert!(any.decide("x", 22, &[addr("127.0.0.1:22")]).is_err());
    }

    #[test]
    fn host_and_port_are_split_with_ipv6_brackets() {
        assert_eq!(split_host_port("db:5432"), Some(("db", 5432)));
        assert_eq!(split_host_port("[::1]:443"), Some(("::1", 443)));
        assert_eq!(split_host_port("db"), None);
        assert_eq!(split_host_port("db:0"), None);
        assert_eq!(split_host_port(":80"), None);
        assert_eq!(split_host_port("db:http"), None);
    }
}
