//! Bearer tokens in the `authorization` metadata: off when no token is
//! configured; otherwise every call needs a known token, and the admin calls
//! (Restore, RestoreJob, ClearAll) an admin token. Messages are those of REST.

use delayq_common::ErrorKind;
use tonic::metadata::MetadataMap;
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

/// The configured tokens.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tokens {
    user: Vec<String>,
    admin: Vec<String>,
}

impl Tokens {
    pub(crate) fn new(user: Vec<String>, admin: Vec<String>) -> Tokens {
        Tokens { user, admin }
    }

    fn enabled(&self) -> bool {
        !self.user.is_empty() || !self.admin.is_empty()
    }

    /// Lets a call through when its metadata carries a token that grants `need`.
    pub(crate) fn check(&self, metadata: &MetadataMap, need: Access) -> Result<(), Status> {
        if !self.enabled() {
            return Ok(());
        }
        let Some(token) = bearer_token(metadata) else {
            return Err(of_kind(ErrorKind::Unauthenticated, "authorization is required: Bearer <token>"));
        };
        if self.admin.iter().any(|known| same_token(known, token)) {
            return Ok(());
        }
        if self.user.iter().any(|known| same_token(known, token)) {
            return match need {
                Access::User => Ok(()),
                Access::Admin => Err(of_kind(ErrorKind::Forbidden, "admin token is required")),
            };
        }
        Err(of_kind(ErrorKind::Unauthenticated, "token is not valid"))
    }
}

/// Returns the token of `authorization: Bearer <token>`.
fn bearer_token(metadata: &MetadataMap) -> Option<&str> {
    let value = metadata.get("authorization")?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Compares tokens in time independent of where they differ.
fn same_token(known: &str, given: &str) -> bool {
    if known.len() != given.len() {
        return false;
    }
    known.bytes().zip(given.bytes()).fold(0u8, |difference, (a, b)| difference | (a ^ b)) == 0
}

#[cfg(test)]
mod tests {
    use tonic::Code;

    use super::*;

    fn metadata(value: &str) -> MetadataMap {
        let mut metadata = MetadataMap::new();
        if let Ok(value) = value.parse() {
            metadata.insert("authorization", value);
        }
        metadata
    }

    fn tokens() -> Tokens {
        Tokens::new(vec!["user".into()], vec!["root".into()])
    }

    #[test]
    fn off_without_tokens() {
        assert!(Tokens::default().check(&MetadataMap::new(), Access::Admin).is_ok());
    }

    #[test]
    fn users_and_admins() {
        let tokens = tokens();
        assert!(tokens.check(&metadata("Bearer user"), Access::User).is_ok());
        assert!(tokens.check(&metadata("bearer  root "), Access::Admin).is_ok());
        assert!(tokens.check(&metadata("Bearer root"), Access::User).is_ok());
        let forbidden = tokens.check(&metadata("Bearer user"), Access::Admin).err();
        assert_eq!(forbidden.map(|status| status.code()), Some(Code::PermissionDenied));
    }

    #[test]
    fn missing_or_unknown_tokens() {
        let tokens = tokens();
        for (value, message) in [
            ("", "authorization is required: Bearer <token>"),
            ("Basic user", "authorization is required: Bearer <token>"),
            ("Bearer nope", "token is not valid"),
        ] {
            let refused = tokens.check(&metadata(value), Access::User).err();
            let refused = refused.map(|status| (status.code(), status.message().to_owned()));
            assert_eq!(refused, Some((Code::Unauthenticated, message.to_owned())), "{value:?}");
        }
    }
}
