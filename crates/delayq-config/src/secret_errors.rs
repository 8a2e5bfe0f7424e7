//! Configuration errors that never quote a secret: a parse error of a key
//! that holds one (tokens, URLs with a password, a webhook secret, Kafka
//! properties) names the key and the expected type, not the value.

use crate::load::FLAT_VARIABLES;

/// The keys whose values are secrets, as figment paths (list indexes left
/// out): their parse errors never quote the value.
const SECRET_KEYS: [&[&str]; 7] = [
    &["auth", "tokens"],
    &["auth", "admin_tokens"],
    &["store", "database_url"],
    &["scheduler", "redis_url"],
    &["forward", "routes", "url"],
    &["forward", "routes", "secret"],
    &["forward", "routes", "kafka_properties"],
];

/// Returns `error` with no secret value in it.
///
/// figment quotes the value it refused (`found string "s3cret", expected a
/// sequence`), and a TOML syntax error quotes the line. For a key that holds
/// a secret, or a section or list that contains one, the value is replaced
/// by its type; the lines quoted from a file are dropped from every message
/// (their line and column stay).
pub(crate) fn without_secrets(error: figment::Error) -> figment::Error {
    let mut errors: Vec<figment::Error> = error
        .into_iter()
        .map(|mut error| {
            let secret = holds_secret(&error.path);
            error.kind = kind_without_secrets(error.kind, secret, error.path.is_empty());
            error
        })
        .collect();
    // Rebuild the chain in its order: the first error stays first.
    let Some(mut chained) = errors.pop() else { return figment::Error::from("invalid configuration") };
    while let Some(error) = errors.pop() {
        chained = chained.chain(error);
    }
    chained
}

/// Describes each error of the chain with its dotted key (`store.sqlite_synchronous`),
/// the variable that sets it when it came from the environment, and its source.
pub(crate) fn describe_parse_error(error: &figment::Error) -> String {
    let describe = |error: figment::Error| {
        let mut line = error.kind.to_string();
        let from_environment = error.metadata.as_ref().is_some_and(|md| md.name.contains("environment variable"));
        if !error.path.is_empty() {
            let key = error.path.join(".");
            line.push_str(&format!(" for key {key}"));
            if from_environment {
                let nested = format!("DELAYQ_{}", error.path.join("__").to_ascii_uppercase());
                match FLAT_VARIABLES.iter().find(|(_, dotted)| *dotted == key) {
                    Some((flat, _)) => line.push_str(&format!(" (DELAYQ_{} or {nested})", flat.to_ascii_uppercase())),
                    None => line.push_str(&format!(" ({nested})")),
                }
            }
        }
        if let Some(metadata) = &error.metadata {
            match &metadata.source {
                Some(source) => line.push_str(&format!(" in {source} {}", metadata.name)),
                None => line.push_str(&format!(" in {}", metadata.name)),
            }
        }
        line
    };
    error.clone().into_iter().map(describe).collect::<Vec<_>>().join("\n")
}

/// Returns whether the value at `path` is, or contains, a secret.
fn holds_secret(path: &[String]) -> bool {
    let keys: Vec<&str> =
        path.iter().map(String::as_str).filter(|segment| !segment.chars().all(|c| c.is_ascii_digit())).collect();
    // One is a prefix of the other: the secret itself, a part of it, or a section holding it.
    SECRET_KEYS.iter().any(|secret| keys.iter().zip(secret.iter()).all(|(key, secret)| key == secret))
}

fn kind_without_secrets(kind: figment::error::Kind, secret: bool, at_root: bool) -> figment::error::Kind {
    use figment::error::Kind;
    match kind {
        // A message at the root is a parse error of a whole source: its line
        // and column are kept, the quoted line is not.
        Kind::Message(message) if at_root || !secret => Kind::Message(without_quoted_lines(&message)),
        _ if !secret => kind,
        Kind::Message(_) => Kind::Message("is malformed (value withheld: the key holds a secret)".to_owned()),
        Kind::InvalidType(actual, expected) => Kind::InvalidType(withheld(&actual), expected),
        Kind::InvalidValue(actual, expected) => Kind::InvalidValue(withheld(&actual), expected),
        Kind::UnknownVariant(_, expected) => Kind::UnknownVariant(WITHHELD.to_owned(), expected),
        Kind::Unsupported(actual) => Kind::Unsupported(withheld(&actual)),
        Kind::UnsupportedKey(actual, expected) => Kind::UnsupportedKey(withheld(&actual), expected),
        Kind::ISizeOutOfRange(_) | Kind::USizeOutOfRange(_) => {
            Kind::Message(format!("integer is out of range ({WITHHELD})"))
        }
        // Lengths and field names, never values.
        other
        @ (Kind::InvalidLength(..) | Kind::UnknownField(..) | Kind::MissingField(_) | Kind::DuplicateField(_)) => other,
    }
}

/// What a withheld value is shown as.
const WITHHELD: &str = "value withheld";

/// Describes a value by its type alone: `string (value withheld)`.
fn withheld(actual: &figment::error::Actual) -> figment::error::Actual {
    use figment::error::Actual;
    let type_name = match actual {
        Actual::Bool(_) => "bool".to_owned(),
        Actual::Unsigned(_) => "unsigned int".to_owned(),
        Actual::Signed(_) => "signed int".to_owned(),
        Actual::Float(_) => "float".to_owned(),
        Actual::Char(_) => "char".to_owned(),
        Actual::Str(_) => "string".to_owned(),
        Actual::Bytes(_) => "bytes".to_owned(),
        Actual::Other(_) => "value".to_owned(),
        // The others name a shape, not a value.
        shape => shape.to_string(),
    };
    Actual::Other(format!("{type_name} ({WITHHELD})"))
}

/// Drops the source lines a parser quotes under its message (`3 | secret = …`
/// and the caret line below it), and puts the rest on one line.
fn without_quoted_lines(message: &str) -> String {
    let quoted = |line: &str| {
        let rest = line.trim_start().trim_start_matches(|c: char| c.is_ascii_digit()).trim_start();
        rest.starts_with('|')
    };
    message.lines().filter(|line| !quoted(line) && !line.trim().is_empty()).collect::<Vec<_>>().join(": ")
}
