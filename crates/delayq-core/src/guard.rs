//! The start-up guard: a node that listens beyond loopback without auth
//! refuses to start, unless `auth.allow_unauthenticated` says otherwise.
//!
//! Without tokens every route is open, `/clearAll` included: anyone who can
//! reach the port could read, delete or clear the queue. On loopback only
//! local processes can; on `0.0.0.0`, `::`, a LAN address or a host name, the
//! network can. Like Redis's protected mode, the node then stops at start
//! rather than run open by accident.

use std::net::{IpAddr, SocketAddr};

use delayq_config::{AuthConfig, ServerConfig};

/// The `server.grpc_addr` value that turns the gRPC listener off.
const GRPC_OFF: &str = "off";

/// Whether the node may start, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Exposure {
    /// Every listener is on loopback: only local processes can connect.
    LoopbackOnly,
    /// A listener is reachable beyond loopback and auth is on.
    Authenticated,
    /// A listener is reachable beyond loopback without auth, and
    /// `auth.allow_unauthenticated` accepts that.
    OpenByChoice {
        /// The listeners beyond loopback: (key, address).
        exposed: Vec<(&'static str, String)>,
    },
    /// A listener is reachable beyond loopback without auth: refused.
    Refused {
        /// The listeners beyond loopback: (key, address).
        exposed: Vec<(&'static str, String)>,
    },
}

/// Decides whether a node with these listeners and this auth may start.
pub(crate) fn exposure(server: &ServerConfig, auth: &AuthConfig) -> Exposure {
    let mut listeners = vec![("server.http_addr", server.http_addr.as_str())];
    if server.grpc_addr != GRPC_OFF {
        listeners.push(("server.grpc_addr", server.grpc_addr.as_str()));
    }
    let exposed: Vec<(&'static str, String)> = listeners
        .into_iter()
        .filter(|(_, addr)| !is_loopback(addr))
        .map(|(key, addr)| (key, addr.to_owned()))
        .collect();
    // Admin tokens alone turn auth on too: every route then needs a token.
    let auth_on = !auth.tokens.is_empty() || !auth.admin_tokens.is_empty();
    if exposed.is_empty() {
        Exposure::LoopbackOnly
    } else if auth_on {
        Exposure::Authenticated
    } else if auth.allow_unauthenticated {
        Exposure::OpenByChoice { exposed }
    } else {
        Exposure::Refused { exposed }
    }
}

/// Returns an error naming the settings that let the node start, when it may not.
///
/// # Errors
/// The node listens beyond loopback without auth and without the opt-out.
pub(crate) fn check(server: &ServerConfig, auth: &AuthConfig) -> anyhow::Result<()> {
    match exposure(server, auth) {
        Exposure::LoopbackOnly | Exposure::Authenticated => Ok(()),
        Exposure::OpenByChoice { exposed } => {
            tracing::warn!(
                listeners = %describe(&exposed),
                "listening beyond loopback WITHOUT authentication (auth.allow_unauthenticated = true): \
                 anyone who can reach these ports can read, delete and clear every job"
            );
            Ok(())
        }
        Exposure::Refused { exposed } => Err(anyhow::anyhow!(
            "refusing to start: {} beyond loopback and auth.tokens is empty, so anyone who can reach it could \
             read, delete and clear every job. Set auth.tokens (DELAYQ_AUTH__TOKENS='[\"<token>\"]'), listen on \
             127.0.0.1 or ::1 only, or set auth.allow_unauthenticated = true \
             (DELAYQ_AUTH__ALLOW_UNAUTHENTICATED=true) to run without auth anyway",
            describe_listening(&exposed)
        )),
    }
}

fn describe(exposed: &[(&'static str, String)]) -> String {
    exposed.iter().map(|(key, addr)| format!("{key} = {addr}")).collect::<Vec<_>>().join(", ")
}

fn describe_listening(exposed: &[(&'static str, String)]) -> String {
    let verb = if exposed.len() == 1 { "listens" } else { "listen" };
    format!("{} {verb}", describe(exposed))
}

/// Returns whether `addr` (`host:port`) only accepts connections from this
/// machine: a loopback address (`127.0.0.0/8`, `::1`, `::ffff:127.x.y.z`) or
/// the name `localhost`. Anything else (`0.0.0.0`, `::`, a LAN address, any
/// other host name, an address that does not parse) counts as exposed.
pub(crate) fn is_loopback(addr: &str) -> bool {
    if let Ok(socket) = addr.parse::<SocketAddr>() {
        return socket.ip().to_canonical().is_loopback();
    }
    let host = match addr.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => addr,
    };
    let host = host.strip_prefix('[').and_then(|host| host.strip_suffix(']')).unwrap_or(host);
    if let Ok(ip) = host.parse::<IpAddr>() {
        return ip.to_canonical().is_loopback();
    }
    let host = host.strip_suffix('.').unwrap_or(host);
    host.eq_ignore_ascii_case("localhost")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(http: &str, grpc: &str) -> ServerConfig {
        ServerConfig { http_addr: http.to_owned(), grpc_addr: grpc.to_owned(), ..ServerConfig::default() }
    }

    fn auth(tokens: &[&str], admin_tokens: &[&str], allow_unauthenticated: bool) -> AuthConfig {
        AuthConfig {
            tokens: tokens.iter().map(|token| (*token).to_owned()).collect(),
            admin_tokens: admin_tokens.iter().map(|token| (*token).to_owned()).collect(),
            allow_unauthenticated,
        }
    }

    #[test]
    fn loopback_addresses() {
        for addr in [
            "127.0.0.1:8080",
            "127.0.0.1:0",
            "127.1.2.3:8080",
            "[::1]:8080",
            "[::ffff:127.0.0.1]:8080",
            "localhost:8080",
            "LOCALHOST:8080",
            "localhost.:8080",
            "localhost",
        ] {
            assert!(is_loopback(addr), "{addr}");
        }
    }

    #[test]
    fn addresses_beyond_loopback() {
        for addr in [
            "0.0.0.0:8080",
            "[::]:8080",
            "192.168.1.10:8080",
            "10.0.0.5:0",
            "[fe80::1]:8080",
            "[::ffff:10.0.0.1]:8080",
            "delayq.example.com:8080",
            "localhost.example.com:8080",
            "mylocalhost:8080",
            "",
            "nonsense",
        ] {
            assert!(!is_loopback(addr), "{addr}");
        }
    }

    #[test]
    fn the_defaults_start() {
        assert_eq!(exposure(&ServerConfig::default(), &AuthConfig::default()), Exposure::LoopbackOnly);
    }

    #[test]
    fn loopback_without_tokens_starts() {
        let none = auth(&[], &[], false);
        assert_eq!(exposure(&server("127.0.0.1:8080", "[::1]:9090"), &none), Exposure::LoopbackOnly);
        assert_eq!(exposure(&server("localhost:8080", "off"), &none), Exposure::LoopbackOnly);
    }

    #[test]
    fn beyond_loopback_without_tokens_is_refused() {
        let none = auth(&[], &[], false);
        for (http, grpc, exposed) in [
            ("0.0.0.0:8080", "127.0.0.1:9090", vec![("server.http_addr", "0.0.0.0:8080")]),
            ("[::]:8080", "off", vec![("server.http_addr", "[::]:8080")]),
            ("127.0.0.1:8080", "0.0.0.0:9090", vec![("server.grpc_addr", "0.0.0.0:9090")]),
            (
                "192.168.1.10:8080",
                "[::]:9090",
                vec![("server.http_addr", "192.168.1.10:8080"), ("server.grpc_addr", "[::]:9090")],
            ),
            ("delayq.example.com:8080", "off", vec![("server.http_addr", "delayq.example.com:8080")]),
        ] {
            let exposed = exposed.into_iter().map(|(key, addr)| (key, addr.to_owned())).collect();
            assert_eq!(exposure(&server(http, grpc), &none), Exposure::Refused { exposed }, "{http} {grpc}");
        }
    }

    #[test]
    fn a_disabled_grpc_listener_is_not_checked() {
        let none = auth(&[], &[], false);
        assert_eq!(exposure(&server("127.0.0.1:8080", "off"), &none), Exposure::LoopbackOnly);
    }

    #[test]
    fn beyond_loopback_with_tokens_starts() {
        let exposed = server("0.0.0.0:8080", "[::]:9090");
        assert_eq!(exposure(&exposed, &auth(&["t"], &[], false)), Exposure::Authenticated);
        // Admin tokens alone also turn auth on.
        assert_eq!(exposure(&exposed, &auth(&[], &["a"], false)), Exposure::Authenticated);
        assert_eq!(exposure(&exposed, &auth(&["t"], &[], true)), Exposure::Authenticated);
    }

    #[test]
    fn the_opt_out_lets_an_open_node_start() {
        let open = exposure(&server("0.0.0.0:8080", "127.0.0.1:9090"), &auth(&[], &[], true));
        assert_eq!(open, Exposure::OpenByChoice { exposed: vec![("server.http_addr", "0.0.0.0:8080".to_owned())] });
        assert!(check(&server("0.0.0.0:8080", "off"), &auth(&[], &[], true)).is_ok());
    }

    #[test]
    fn the_refusal_names_the_settings_that_fix_it() {
        let error = check(&server("0.0.0.0:8080", "127.0.0.1:9090"), &AuthConfig::default()).expect_err("refused");
        let message = error.to_string();
        for needle in [
            "server.http_addr = 0.0.0.0:8080",
            "auth.tokens",
            "DELAYQ_AUTH__TOKENS",
            "auth.allow_unauthenticated",
            "DELAYQ_AUTH__ALLOW_UNAUTHENTICATED",
        ] {
            assert!(message.contains(needle), "{needle} missing from: {message}");
        }
        assert!(!message.contains("server.grpc_addr"), "{message}");
    }
}
