//! Bearer tokens in the `authorization` header, checked as every front end
//! checks them ([`delayq_common::auth`]); this maps the outcome to a status.
//! Messages are those of REST.

use delayq_common::auth::bearer_token;
pub(crate) use delayq_common::auth::{Access, Tokens};
use delayq_common::ErrorKind;
use tonic::Status;

use crate::status::of_kind;

/// Lets a call through when auth is off, or its `authorization` value carries
/// a token that grants `need`.
pub(crate) fn check(tokens: &Tokens, authorization: Option<&[u8]>, need: Access) -> Result<(), Status> {
    if !tokens.enabled() {
        return Ok(());
    }
    let Some(token) = authorization.and_then(bearer_token) else {
        return Err(of_kind(ErrorKind::Unauthenticated, "authorization is required: Bearer <token>"));
    };
    match (tokens.access(token), need) {
        (Some(Access::Admin), _) | (Some(Access::User), Access::User) => Ok(()),
        (Some(Access::User), Access::Admin) => Err(of_kind(ErrorKind::Forbidden, "admin token is required")),
        (None, _) => Err(of_kind(ErrorKind::Unauthenticated, "token is not valid")),
    }
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
        super::check(tokens, value, need).map_err(|status| (status.code(), status.message().to_owned()))
    }

    #[test]
    fn off_without_tokens() {
        assert!(super::check(&Tokens::default(), None, Access::Admin).is_ok());
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
        let not_utf8 = super::check(&tokens, Some(b"Bearer \xff"), Access::User).map_err(|status| status.code());
        assert_eq!(not_utf8, Err(Code::Unauthenticated));
    }
}
