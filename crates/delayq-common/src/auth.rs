//! Bearer tokens, checked the same way by every front end (REST, gRPC).
//!
//! Auth is off when no token is configured. Otherwise a request needs a known
//! token, and the admin operations an admin token (accepted everywhere else too).
//!
//! Tokens are compared as SHA-256 digests, in constant time, against every
//! configured token: how long a check takes does not depend on which token
//! matched, how many bytes of one matched, or how long the tokens are.

use sha2::{Digest, Sha256};
use subtle::{Choice, ConstantTimeEq};

/// What a token allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Every operation but the admin ones.
    User,
    /// Every operation.
    Admin,
}

type TokenDigest = [u8; 32];

/// The configured tokens, kept as digests only.
#[derive(Clone, Default)]
pub struct Tokens {
    user: Vec<TokenDigest>,
    admin: Vec<TokenDigest>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Tokens").field("user", &self.user.len()).field("admin", &self.admin.len()).finish()
    }
}

impl Tokens {
    /// Keeps the digests of the user and admin tokens.
    pub fn new(user: &[String], admin: &[String]) -> Tokens {
        Tokens {
            user: user.iter().map(|token| digest(token)).collect(),
            admin: admin.iter().map(|token| digest(token)).collect(),
        }
    }

    /// Returns whether any token is configured, that is whether auth is on.
    pub fn enabled(&self) -> bool {
        !self.user.is_empty() || !self.admin.is_empty()
    }

    /// Returns what `token` allows, or `None` when it is no configured token.
    /// Every configured token is compared, whatever matched before.
    pub fn access(&self, token: &str) -> Option<Access> {
        let given = digest(token);
        let is_admin = matches_any(&self.admin, &given);
        let is_user = matches_any(&self.user, &given);
        if bool::from(is_admin) {
            Some(Access::Admin)
        } else if bool::from(is_user) {
            Some(Access::User)
        } else {
            None
        }
    }
}

/// Returns the token of an `authorization` value `Bearer <token>` (the scheme
/// in any case, spaces around the token ignored).
pub fn bearer_token(value: &[u8]) -> Option<&str> {
    let value = std::str::from_utf8(value).ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn digest(token: &str) -> TokenDigest {
    Sha256::digest(token.as_bytes()).into()
}

/// Compares `given` with every digest, without stopping at a match.
fn matches_any(known: &[TokenDigest], given: &TokenDigest) -> Choice {
    known.iter().fold(Choice::from(0), |found, candidate| found | candidate.ct_eq(given))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> Tokens {
        Tokens::new(&["secret".into(), "other".into()], &["root-secret".into()])
    }

    #[test]
    fn reads_bearer_tokens_only() {
        assert_eq!(bearer_token(b"Bearer abc"), Some("abc"));
        assert_eq!(bearer_token(b"bearer  abc "), Some("abc"));
        assert_eq!(bearer_token(b"Basic abc"), None);
        assert_eq!(bearer_token(b"Bearer "), None);
        assert_eq!(bearer_token(b""), None);
        assert_eq!(bearer_token(b"Bearer \xff"), None);
    }

    #[test]
    fn compares_whole_tokens() {
        let tokens = tokens();
        assert_eq!(tokens.access("secret"), Some(Access::User));
        assert_eq!(tokens.access("other"), Some(Access::User));
        assert_eq!(tokens.access("root-secret"), Some(Access::Admin));
        for wrong in ["secreT", "secret2", "secre", "", "root"] {
            assert_eq!(tokens.access(wrong), None, "{wrong}");
        }
    }

    #[test]
    fn off_without_tokens_and_on_with_admin_tokens_alone() {
        assert!(!Tokens::new(&[], &[]).enabled());
        assert!(Tokens::new(&[], &["root".into()]).enabled());
        assert!(Tokens::new(&["user".into()], &[]).enabled());
    }

    #[test]
    fn debug_shows_no_token() {
        let shown = format!("{:?}", tokens());
        assert!(!shown.contains("secret"), "{shown}");
        assert_eq!(shown, "Tokens { user: 2, admin: 1 }");
    }
}
