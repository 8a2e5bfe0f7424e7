//! The replies, byte for byte as beanstalkd sends them.

pub(crate) const NOT_FOUND: &[u8] = b"NOT_FOUND\r\n";
pub(crate) const DEADLINE_SOON: &[u8] = b"DEADLINE_SOON\r\n";
pub(crate) const TIMED_OUT: &[u8] = b"TIMED_OUT\r\n";
pub(crate) const DELETED: &[u8] = b"DELETED\r\n";
pub(crate) const RELEASED: &[u8] = b"RELEASED\r\n";
pub(crate) const BURIED: &[u8] = b"BURIED\r\n";
pub(crate) const KICKED: &[u8] = b"KICKED\r\n";
pub(crate) const TOUCHED: &[u8] = b"TOUCHED\r\n";
pub(crate) const NOT_IGNORED: &[u8] = b"NOT_IGNORED\r\n";
pub(crate) const PAUSED: &[u8] = b"PAUSED\r\n";
pub(crate) const INTERNAL_ERROR: &[u8] = b"INTERNAL_ERROR\r\n";
pub(crate) const OUT_OF_MEMORY: &[u8] = b"OUT_OF_MEMORY\r\n";
pub(crate) const BAD_FORMAT: &[u8] = b"BAD_FORMAT\r\n";
pub(crate) const UNKNOWN_COMMAND: &[u8] = b"UNKNOWN_COMMAND\r\n";
pub(crate) const EXPECTED_CRLF: &[u8] = b"EXPECTED_CRLF\r\n";
pub(crate) const JOB_TOO_BIG: &[u8] = b"JOB_TOO_BIG\r\n";
pub(crate) const DRAINING: &[u8] = b"DRAINING\r\n";

/// A line such as `INSERTED 7`, with its `\r\n`.
pub(crate) fn line(text: &str) -> Vec<u8> {
    format!("{text}\r\n").into_bytes()
}

/// `<word> <id> <bytes>\r\n<body>\r\n`: a job handed out or peeked.
pub(crate) fn job(word: &str, id: u64, body: &[u8]) -> Vec<u8> {
    let mut reply = format!("{word} {id} {}\r\n", body.len()).into_bytes();
    reply.extend_from_slice(body);
    reply.extend_from_slice(b"\r\n");
    reply
}

/// `OK <bytes>\r\n<data>\r\n`: a YAML document.
pub(crate) fn data(yaml: &str) -> Vec<u8> {
    let mut reply = format!("OK {}\r\n", yaml.len()).into_bytes();
    reply.extend_from_slice(yaml.as_bytes());
    reply.extend_from_slice(b"\r\n");
    reply
}

/// A YAML list of names, as `list-tubes` answers.
pub(crate) fn name_list<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<u8> {
    let mut yaml = String::from("---\n");
    for name in names {
        yaml.push_str("- ");
        yaml.push_str(name);
        yaml.push('\n');
    }
    data(&yaml)
}

/// A YAML dictionary of `key: value` lines, as the stats commands answer.
pub(crate) fn dictionary(entries: &[(&str, String)]) -> Vec<u8> {
    let mut yaml = String::from("---\n");
    for (key, value) in entries {
        yaml.push_str(key);
        yaml.push_str(": ");
        yaml.push_str(value);
        yaml.push('\n');
    }
    data(&yaml)
}

/// A YAML string value in double quotes, as beanstalkd writes its version.
pub(crate) fn quoted(value: &str) -> String {
    format!("\"{value}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_frame_their_data() {
        assert_eq!(job("RESERVED", 5, b"hi"), b"RESERVED 5 2\r\nhi\r\n");
        assert_eq!(name_list(["default", "a"]), b"OK 18\r\n---\n- default\n- a\n\r\n");
        assert_eq!(dictionary(&[("id", "3".to_owned())]), b"OK 10\r\n---\nid: 3\n\r\n");
    }
}
