//! Bearer tokens in the `authorization` header: off when no token is
//! configured; otherwise every call needs a known token, and the admin calls
//! (Restore, RestoreJob, ClearAll) an admin token. Messages are those of REST.
//!
//! Tokens are compared as SHA-256 digests, in constant time, against every
//! configured token: how long a check takes does not depend on which token
//! matched, how many bytes of one matched, or how long the configured tokens are.

use delayq_common::ErrorKind;
use sha2::{Digest, Sha256};
use subtle::{Choice, ConstantTimeEq};
use tonic::Status;

use crate::status::of_kind;

/// What a call needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// Any configured token.
    User,
    /// An admin token.
    Admin,
}

type TokenDigest = [u8; 32];

/// The configured tokens, kept as digests.
#[derive(Clone, Default)]
pub(crate) struct Tokens {
    user: Vec<TokenDigest>,
    admin: Vec<TokenDigest>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Tokens").field("user", &self.user.len()).field("admin", &self.admin.len()).finish()
    }
}

impl Tokens {
    pub(crate) fn new(user: &[String], admin: &[String]) -> Tokens {
        Tokens {
            user: user.iter().map(|token| digest(token)).collect(),
            admin: admin.iter().map(|token| digest(token)).collect(),
        }
    }

    /// Returns whether any token is configured.
    pub(crate) fn enabled(&self) -> bool {
        !self.user.is_empty() || !self.admin.is_empty()
    }

    /// Lets a call through when its `authorization` value carries a token that grants `need`.
    pub(crate) fn check(&self, authorization: Option<&[u8]>, need: Access) -> Result<(), Status> {
        if !self.enabled() {
            return Ok(());
        }
        let Some(token) = authorization.and_then(bearer_token) else {
            return Err(of_kind(ErrorKind::Unauthenticated, "authorization is required: Bearer <token>"));
        };
        let given = digest(token);
        let is_admin = matches_any(&self.admin, &given);
        let is_user = matches_any(&self.user, &given);
        if bool::from(is_admin) {
            return Ok(());
        }
        if bool::from(is_user) {
            return match need {
                Access::User => Ok(()),
                Access::Admin => Err(of_kind(ErrorKind::Forbidden, "admin token is required")),
            };
        }
        Err(of_kind(ErrorKind::Unauthenticated, "token is not valid"))
    }
}

fn digest(token: &str) -> TokenDigest {
    Sha256::digest(token.as_bytes()).into()
}

/// Compares `given` with every digest, without stopping at a match.
fn matches_any(known: &[TokenDigest], given: &TokenDigest) -> Choice {
    known.iter().fold(Choice::from(0), |found, candidate| found | candidate.ct_eq(given))
}

/// Returns the token of `Bearer <token>`.
fn bearer_token(value: &[u8]) -> Option<&str> {
    let value = std::str::from_utf8(value).ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use tonic::Code;

    use super::*;

    fn tokens() -> Tokens {
        Tokens::new(&["user".into(), "user-2".into()], &["root".into()])
    }

    fn check(tokens: &Tokens, value: &str, need: Access) -> Result<(), (Code, String)> {
        let value = (!value.is_empty()).then_some(value.as_bytes());
        tokens.check(value, need).map_err(|status| (status.code(), status.message().to_owned()))
    }

    #[test]
    fn off_without_tokens() {
        assert!(Tokens::default().check(None, Access::Admin).is_ok());
    }

    #[test]
    fn users_and_admins() {
        let tokens = tokens();
        assert!(check(&tokens, "Bearer user", Access::User).is_ok());
        assert!(check(&tokens, "Bearer user-2", Access::User).is_ok());
        assert!(check(&tokens, "bearer  root ", Access::Admin).is_ok());
        assert!(check(&tokens, "Bearer root", Access::User).is_ok());
        let forbidden = check(&tokens, "Bearer user", Access::Admin);
        assert_eq!(forbidden, Err((Code::PermissionDenied, "admin token is required".to_owned())));
    }

    #[test]
    fn missing_or_unknown_tokens() {
        let tokens = tokens();
        for (value, message) in [
            ("", "authorization is required: Bearer <token>"),
            ("Basic user", "authorization is required: Bearer <token>"),
            ("Bearer", "authorization is required: Bearer <token>"),
            ("Bearer nope", "token is not valid"),
            ("Bearer use", "token is not valid"),
            ("Bearer user-22", "token is not valid"),
        ] {
            let refused = check(&tokens, value, Access::User);
            assert_eq!(refused, Err((Code::Unauthenticated, message.to_owned())), "{value:?}");
        }
        let not_utf8 = tokens.check(Some(b"Bearer \xff"), Access::User).map_err(|status| status.code());
        assert_eq!(not_utf8, Err(Code::Unauthenticated));
    }

    #[test]
    fn debug_output_has_no_tokens() {
        let printed = format!("{:?}", tokens());
        assert!(!printed.contains("user") || printed.contains("user: 2"), "{printed}");
        assert!(!printed.contains("root"), "{printed}");
    }
}
