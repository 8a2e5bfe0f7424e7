//! Hiding secrets in what is printed: the password of a URL, the values of
//! secret-looking query parameters and properties.
//!
//! Used by the `Debug` output of configuration and by error messages that
//! would otherwise quote a URL.

/// What a hidden value is shown as.
pub const REDACTED: &str = "***";

/// Parts of a key name that mark its value as a secret (`sasl.password`,
/// `ssl.key.pem`, `access_token`, `sasl.oauthbearer.config`, ...).
const SENSITIVE_KEY_PARTS: [&str; 10] =
    ["pass", "pwd", "secret", "token", "key", "pem", "jaas", "credential", "oauthbearer", "sig"];

/// Returns whether a property or query-parameter name looks like it holds a
/// secret; errs on the side of hiding.
pub fn is_sensitive_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SENSITIVE_KEY_PARTS.iter().any(|part| key.contains(part))
}

/// Returns `text` with the secrets of each URL in it hidden: the password of
/// the user info (`mysql://root:***@db/delayq`; user info without a password
/// is hidden whole, as it may be a token), and the values of query
/// parameters whose name looks secret (`?access_token=***`).
///
/// `text` may be one URL or several separated by commas (Redis Cluster
/// seeds); text that is not a URL is returned as it is.
pub fn url(text: &str) -> String {
    // A comma inside a password does not start a new URL: only a piece with a
    // scheme does.
    let mut urls: Vec<String> = Vec::new();
    for piece in text.split(',') {
        match urls.last_mut() {
            Some(current) if !piece.contains("://") => {
                current.push(',');
                current.push_str(piece);
            }
            _ => urls.push(piece.to_owned()),
        }
    }
    urls.iter().map(|url| one_url(url)).collect::<Vec<_>>().join(",")
}

fn one_url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(at) => url.split_at(at + 3),
        None => ("", url),
    };
    let mut out = String::with_capacity(url.len());
    out.push_str(scheme);
    let rest = if scheme.is_empty() {
        rest
    } else {
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, after) = rest.split_at(authority_end);
        match authority.rfind('@') {
            Some(at) => {
                let (userinfo, host) = authority.split_at(at);
                match userinfo.split_once(':') {
                    Some((user, _password)) => {
                        out.push_str(user);
                        out.push(':');
                        out.push_str(REDACTED);
                    }
                    None => out.push_str(REDACTED),
                }
                out.push_str(host);
            }
            None => out.push_str(authority),
        }
        after
    };
    let Some(query_start) = rest.find('?') else {
        out.push_str(rest);
        return out;
    };
    let (path, query_and_fragment) = rest.split_at(query_start + 1);
    out.push_str(path);
    let (query, fragment) = match query_and_fragment.find('#') {
        Some(at) => query_and_fragment.split_at(at),
        None => (query_and_fragment, ""),
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _value)) if is_sensitive_key(key) => format!("{key}={REDACTED}"),
            _ => pair.to_owned(),
        })
        .collect();
    out.push_str(&pairs.join("&"));
    out.push_str(fragment);
    out
}

/// Returns `text` with every occurrence of `secret` replaced by its redacted
/// form: for error messages of libraries that quote the value they refused.
pub fn scrub(text: &str, secret: &str, shown_as: &str) -> String {
    if secret.is_empty() {
        return text.to_owned();
    }
    text.replace(secret, shown_as)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hides_the_password_of_a_url() {
        assert_eq!(url("mysql://root:delayq@mariadb:3306/delayq"), "mysql://root:***@mariadb:3306/delayq");
        assert_eq!(url("redis://:hunter2@127.0.0.1:6379/0"), "redis://:***@127.0.0.1:6379/0");
        assert_eq!(url("amqp://guest:gu@st@rabbit:5672/%2f"), "amqp://guest:***@rabbit:5672/%2f");
        assert_eq!(url("https://tok3n@hooks.example/due"), "https://***@hooks.example/due");
    }

    #[test]
    fn leaves_urls_without_secrets_alone() {
        for plain in [
            "redis://127.0.0.1:6379",
            "sqlite://./data/delayq.db?mode=rwc",
            "http://127.0.0.1:9000/due?user=a@b",
            "not a url",
            "",
        ] {
            assert_eq!(url(plain), plain);
        }
    }

    #[test]
    fn hides_secret_query_parameters() {
        assert_eq!(
            url("https://hooks.example/due?access_token=abc&x=1#top"),
            "https://hooks.example/due?access_token=***&x=1#top"
        );
        assert_eq!(
            url("mysql://db/delayq?password=p&ssl-mode=REQUIRED"),
            "mysql://db/delayq?password=***&ssl-mode=REQUIRED"
        );
    }

    #[test]
    fn hides_each_url_of_a_list() {
        assert_eq!(url("redis://:a,b@n1:7000,redis://:c@n2:7000"), "redis://:***@n1:7000,redis://:***@n2:7000");
        assert_eq!(url("redis://n1:7000,redis://n2:7000"), "redis://n1:7000,redis://n2:7000");
    }

    #[test]
    fn sensitive_keys() {
        for key in ["sasl.password", "ssl.key.password", "sasl.oauthbearer.config", "SECRET", "ssl.key.pem"] {
            assert!(is_sensitive_key(key), "{key}");
        }
        for key in ["linger.ms", "compression.type", "client.id", "sasl.mechanism"] {
            assert!(!is_sensitive_key(key), "{key}");
        }
    }

    #[test]
    fn scrubs_a_quoted_value() {
        assert_eq!(scrub("bad value \"s3cret\" for x", "s3cret", REDACTED), "bad value \"***\" for x");
        assert_eq!(scrub("nothing", "", REDACTED), "nothing");
    }
}
