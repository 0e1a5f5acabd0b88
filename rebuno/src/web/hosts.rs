//! Which `Host` a server answers: the defence against DNS rebinding that the kernel's server
//! and `receipt ui` share.
//!
//! A page on `http://evil.example` whose name the attacker re-points at `127.0.0.1` reaches a
//! loopback server from the victim's browser as a same-origin request, so the browser lets the
//! page read the answers. Its `Host` header still names `evil.example`: a server that answers only
//! its own names refuses it. [`AllowedHosts::local`] allows the names of the listen address (its
//! IP and port, and `localhost`, `127.0.0.1` and `[::1]` on that port; any IP literal on that
//! port when listening on every interface, since an IP literal is never re-pointed);
//! [`AllowedHosts::with`] adds names an operator lists (`name` on any port or `name:port`; `*`
//! turns the check off). [`AllowedHosts::any`] (the default) answers every `Host`.

use std::net::{IpAddr, SocketAddr};

/// The port a `Host` without one means (plain HTTP).
const DEFAULT_PORT: u16 = 80;

/// One listed name: lowercase, and the port when one was given (any port otherwise).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listed {
    name: String,
    port: Option<u16>,
}

/// The `Host` names a server answers (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedHosts {
    /// The listen address whose local names are answered.
    listen: Option<SocketAddr>,
    /// Names an operator listed.
    listed: Vec<Listed>,
    /// `*` was listed: every `Host` is answered.
    wildcard: bool,
}

/// A `Host` value (or an `Origin`'s authority) split into a lowercase name without brackets or
/// trailing dot, and its port if it has one. `None` when it is not `name[:port]`.
fn split_authority(authority: &str) -> Option<(String, Option<u16>)> {
    let authority = authority.trim();
    if authority.is_empty() || authority.contains(['/', '@', ' ', '?', '#']) {
        return None;
    }
    let (name, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        inside.parse::<std::net::Ipv6Addr>().ok()?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':')?),
        };
        (inside, port)
    } else {
        match authority.rsplit_once(':') {
            Some((name, port)) if !name.contains(':') => (name, Some(port)),
            Some(_) => return None,
            None => (authority, None),
        }
    };
    let port = match port {
        None => None,
        Some(p) => Some(p.parse::<u16>().ok()?),
    };
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if name.is_empty() {
        return None;
    }
    Some((name, port))
}

impl AllowedHosts {
    /// Every `Host` is answered (no check).
    pub fn any() -> Self {
        AllowedHosts::default()
    }

    /// Only the names of `listen` are answered: its IP and port, and `localhost`, `127.0.0.1`
    /// and `[::1]` on its port (any IP literal on its port when it is every interface).
    pub fn local(listen: SocketAddr) -> Self {
        AllowedHosts {
            listen: Some(listen),
            ..AllowedHosts::default()
        }
    }

    /// These hosts, also answering the local names of `listen` (see [`AllowedHosts::local`]).
    pub fn listening_on(mut self, listen: SocketAddr) -> Self {
        self.listen = Some(listen);
        self
    }

    /// These hosts and the names in `entries` (`name` on any port, `name:port`, `[v6]:port`;
    /// `*` answers every `Host`). Blank entries are skipped; anything else that is not a host
    /// is refused, naming it.
    pub fn with<S: AsRef<str>>(mut self, entries: &[S]) -> Result<Self, String> {
        for entry in entries {
            let entry = entry.as_ref().trim();
            if entry.is_empty() {
                continue;
            }
            if entry == "*" {
                self.wildcard = true;
                continue;
            }
            let (name, port) = split_authority(entry).ok_or_else(|| {
                format!("{entry:?} is not a host name, a name:port or * (a comma-separated list)")
            })?;
            self.listed.push(Listed { name, port });
        }
        Ok(self)
    }

    /// A comma-separated list of hosts (a flag's or variable's value), checked as
    /// [`AllowedHosts::with`] checks it.
    pub fn parse_list(raw: &str) -> Result<Vec<String>, String> {
        let entries: Vec<String> = raw.split(',').map(|e| e.trim().to_owned()).collect();
        AllowedHosts::any().with(&entries)?;
        Ok(entries.into_iter().filter(|e| !e.is_empty()).collect())
    }

    /// Whether some `Host` is refused at all.
    pub fn is_restricted(&self) -> bool {
        !self.wildcard && (self.listen.is_some() || !self.listed.is_empty())
    }

    /// Whether `name:port` is one of the local names of the listen address.
    fn is_local(&self, name: &str, port: u16) -> bool {
        let Some(listen) = self.listen else {
            return false;
        };
        if port != listen.port() {
            return false;
        }
        if matches!(name, "localhost" | "127.0.0.1" | "::1") {
            return true;
        }
        match name.parse::<IpAddr>() {
            Ok(ip) => listen.ip().is_unspecified() || ip == listen.ip(),
            Err(_) => false,
        }
    }

    /// Whether `name:port` is listed.
    fn is_listed(&self, name: &str, port: Option<u16>) -> bool {
        self.listed
            .iter()
            .any(|l| l.name == name && (l.port.is_none() || l.port == port))
    }

    /// Whether a request whose `Host` header is `host` is answered.
    pub fn allows(&self, host: &str) -> bool {
        if !self.is_restricted() {
            return true;
        }
        let Some((name, port)) = split_authority(host) else {
            return false;
        };
        self.is_local(&name, port.unwrap_or(DEFAULT_PORT)) || self.is_listed(&name, port)
    }

    /// Whether `authority` (an `Origin`'s host and port) is one of these hosts' own names:
    /// listed or local, never by the wildcard.
    pub fn names_origin(&self, authority: &str, default_port: u16) -> bool {
        let Some((name, port)) = split_authority(authority) else {
            return false;
        };
        self.is_local(&name, port.unwrap_or(default_port)) || self.is_listed(&name, port)
    }

    /// The answered names, for an error message.
    pub fn describe(&self) -> String {
        if !self.is_restricted() {
            return "any host".to_owned();
        }
        let mut names = Vec::new();
        if let Some(listen) = self.listen {
            let port = listen.port();
            if listen.ip().is_unspecified() {
                names.push(format!("any IP address:{port}"));
            } else if !listen.ip().is_loopback() {
                names.push(listen.to_string());
            }
            names.extend([
                format!("localhost:{port}"),
                format!("127.0.0.1:{port}"),
                format!("[::1]:{port}"),
            ]);
        }
        for l in &self.listed {
            names.push(match l.port {
                Some(p) if l.name.contains(':') => format!("[{}]:{p}", l.name),
                Some(p) => format!("{}:{p}", l.name),
                None => l.name.clone(),
            });
        }
        names.join(", ")
    }
}

/// The scheme's default port and the authority of an `Origin` value (`scheme://host[:port]`);
/// `None` for `null` or anything else.
pub fn origin_authority(origin: &str) -> Option<(&str, u16)> {
    let (scheme, authority) = origin.split_once("://")?;
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    split_authority(authority)?;
    Some((authority, default_port))
}

/// Whether two authorities (`Host` values, or an `Origin`'s host and a `Host`) name the same
/// host and port, `default_port` standing for a missing one.
pub fn same_authority(a: &str, b: &str, default_port: u16) -> bool {
    match (split_authority(a), split_authority(b)) {
        (Some((na, pa)), Some((nb, pb))) => {
            na == nb && pa.unwrap_or(default_port) == pb.unwrap_or(default_port)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(addr: &str) -> AllowedHosts {
        AllowedHosts::local(addr.parse().unwrap())
    }

    #[test]
    fn a_loopback_listener_answers_its_local_names_on_its_port_only() {
        let hosts = local("127.0.0.1:8080");
        for ok in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LOCALHOST:8080",
            "localhost.:8080",
            "[::1]:8080",
        ] {
            assert!(hosts.allows(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8080",
            "localhost:8081",
            "localhost",
            "127.0.0.2:8080",
            "localhost.evil.example:8080",
            "",
            "127.0.0.1:8080/x",
            "user@127.0.0.1:8080",
            "[::1",
            "[::1]x",
            "127.0.0.1:99999",
        ] {
            assert!(!hosts.allows(bad), "{bad}");
        }
        assert!(local("127.0.0.1:80").allows("localhost"));
    }

    #[test]
    fn every_interface_answers_ip_literals_but_no_foreign_name() {
        let hosts = local("0.0.0.0:8080");
        assert!(hosts.allows("192.168.1.5:8080"));
        assert!(hosts.allows("[fe80::1]:8080"));
        assert!(hosts.allows("localhost:8080"));
        assert!(!hosts.allows("192.168.1.5:9090"));
        assert!(!hosts.allows("evil.example:8080"));
    }

    #[test]
    fn listed_names_are_answered_and_the_wildcard_turns_the_check_off() {
        let hosts = local("127.0.0.1:8080")
            .with(&["rebuno.example.com", " dev.local:9000 ", ""])
            .unwrap();
        assert!(hosts.allows("rebuno.example.com"));
        assert!(hosts.allows("Rebuno.Example.Com:443"));
        assert!(hosts.allows("dev.local:9000"));
        assert!(!hosts.allows("dev.local:9001"));
        assert!(!hosts.allows("evil.example"));
        let open = local("127.0.0.1:8080").with(&["*"]).unwrap();
        assert!(!open.is_restricted() && open.allows("evil.example"));
        assert!(!AllowedHosts::any().is_restricted());
        assert!(AllowedHosts::any().allows("anything"));
        let only = AllowedHosts::any().with(&["a.example"]).unwrap();
        assert!(only.allows("a.example:1") && !only.allows("localhost:8080"));
        assert!(AllowedHosts::any().with(&["a b"]).is_err());
        assert!(AllowedHosts::parse_list("a.example,,b.example:1").is_ok());
        let err = AllowedHosts::parse_list("a.example, http://b").unwrap_err();
        assert!(err.contains("\"http://b\""), "{err}");
    }

    #[test]
    fn origins_and_authorities() {
        assert_eq!(
            origin_authority("http://127.0.0.1:8080"),
            Some(("127.0.0.1:8080", 80))
        );
        assert_eq!(
            origin_authority("https://a.example"),
            Some(("a.example", 443))
        );
        assert_eq!(origin_authority("null"), None);
        assert_eq!(origin_authority("file://"), None);
        assert!(same_authority("a.example", "A.example:80", 80));
        assert!(!same_authority("a.example", "a.example:8080", 80));
        let hosts = local("127.0.0.1:8080").with(&["app.example"]).unwrap();
        assert!(hosts.names_origin("localhost:8080", 80));
        assert!(hosts.names_origin("app.example", 443));
        assert!(!hosts.names_origin("evil.example", 80));
        assert!(hosts.describe().contains("localhost:8080"));
    }
}
