//! The client subcommands' answers as tables for people. Every field is read
//! leniently: a field the server did not send shows as `-`, so an older or newer
//! server still prints.

use std::time::{Duration, UNIX_EPOCH};

use comfy_table::{presets, Table};
use delayq_common::{Group, Topic};
use serde_json::Value;

/// Which answer is shown.
#[derive(Clone, Debug)]
pub(crate) enum Shown {
    Pushed,
    Popped,
    Finished,
    Stats,
    Paused,
    Group { topic: Topic, group: Group, dropped: bool },
}

/// The job states, in the order `/stats` columns show them.
const STATES: [&str; 7] = ["delay", "ready", "reserved", "finished", "deleted", "dead", "expired"];

impl Shown {
    /// Renders the `data` of a successful answer.
    pub(crate) fn render(&self, data: &Value) -> String {
        match self {
            Shown::Pushed => pushed(data),
            Shown::Popped => popped(data),
            Shown::Finished => format!("finished {}\n", text(&data["id"])),
            Shown::Stats => stats(data),
            Shown::Paused => {
                let state = if data["paused"] == Value::Bool(true) { "paused" } else { "running" };
                format!("{} {state}\n", text(&data["topic"]))
            }
            Shown::Group { topic, group, dropped: false } => format!("group {group} of {topic} declared\n"),
            Shown::Group { topic, group, dropped: true } => format!("group {group} of {topic} dropped\n"),
        }
    }
}

fn pushed(data: &Value) -> String {
    let mut table = table(&["ID", "DUE"]);
    table.add_row(vec![text(&data["id"]), instant(&data["runAt"])]);
    format!("{table}\n")
}

fn popped(data: &Value) -> String {
    let jobs = data.as_array().map(Vec::as_slice).unwrap_or_default();
    if jobs.is_empty() {
        return "no job is ready\n".to_owned();
    }
    let mut table = table(&["ID", "TOPIC", "GROUP", "ATTEMPT", "DUE", "BODY"]);
    for job in jobs {
        table.add_row(vec![
            text(&job["id"]),
            text(&job["topic"]),
            text(&job["group"]),
            text(&job["attempt"]),
            instant(&job["runAt"]),
            shortened(&text(&job["body"]), 40),
        ]);
    }
    format!("{table}\n")
}

fn stats(data: &Value) -> String {
    let mut header = vec!["TOPIC"];
    let upper: Vec<String> = STATES.iter().map(|state| state.to_uppercase()).collect();
    header.extend(upper.iter().map(String::as_str));
    let mut counts = table(&header);
    if let Some(topics) = data["topics"].as_object() {
        for (topic, topic_counts) in topics {
            counts.add_row(counts_row(topic, topic_counts));
        }
    }
    counts.add_row(counts_row("(all)", &data["totals"]));
    let backends = &data["backends"];
    let mut shown = format!(
        "{counts}\nrole {}, leader {}, scheduler {}, store {}\n",
        text(&data["role"]),
        text(&data["leader"]),
        text(&backends["scheduler"]),
        text(&backends["store"]),
    );
    if let Some(consumers) = data["consumers"].as_array().filter(|consumers| !consumers.is_empty()) {
        let mut listed = table(&["CONSUMER", "TOPIC", "GROUP", "NODE", "IN FLIGHT", "LAST SEEN"]);
        for consumer in consumers {
            listed.add_row(
                ["consumer", "topic", "group", "node", "inFlight", "lastSeen"].map(|field| text(&consumer[field])),
            );
        }
        shown.push_str(&format!("\n{listed}\n"));
    }
    shown
}

fn counts_row(name: &str, counts: &Value) -> Vec<String> {
    let mut row = vec![name.to_owned()];
    row.extend(STATES.iter().map(|state| text(&counts[*state])));
    row
}

/// A borderless table with `header`, columns aligned as a terminal shows them.
fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table.load_preset(presets::NOTHING).set_header(header.to_vec());
    table
}

/// A field as text: strings without quotes, `-` when missing or null.
fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// An epoch-millisecond instant as RFC 3339 UTC, or the raw field when it is not one.
fn instant(value: &Value) -> String {
    match value.as_u64() {
        Some(millis) => humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(millis)).to_string(),
        None => text(value),
    }
}

/// `text` cut to `limit` characters, marked with `…` when cut; newlines shown as spaces.
fn shortened(text: &str, limit: usize) -> String {
    let flat: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if flat.chars().count() <= limit {
        return flat;
    }
    let mut cut: String = flat.chars().take(limit.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_pop_shows_one_row_per_job_with_its_due_time() {
        let data = json!([{"id": "order-1", "topic": "orders", "attempt": 2, "runAt": 1_795_278_000_000_u64,
            "body": "{\"orderId\":123}"}]);
        let shown = Shown::Popped.render(&data);
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(lines.len(), 2, "{shown}");
        assert!(lines[0].contains("ID") && lines[0].contains("BODY"), "{shown}");
        assert!(lines[1].contains("order-1") && lines[1].contains("2026-11-21T16:20:00.000Z"), "{shown}");
        assert!(lines[1].contains("{\"orderId\":123}"), "{shown}");
        assert_eq!(Shown::Popped.render(&json!([])), "no job is ready\n");
    }

    #[test]
    fn stats_show_a_row_per_topic_and_the_totals() {
        let data = json!({"topics": {"orders": {"delay": 3, "ready": 1, "reserved": 0, "finished": 7,
            "deleted": 0, "dead": 0, "expired": 0}}, "totals": {"delay": 3, "ready": 1, "reserved": 0,
            "finished": 7, "deleted": 0, "dead": 0, "expired": 0}, "role": "standalone", "leader": null,
            "backends": {"scheduler": "memory", "store": "sqlite"}});
        let shown = Shown::Stats.render(&data);
        let orders = shown.lines().find(|line| line.contains("orders")).unwrap_or_default();
        let numbers: Vec<&str> = orders.split_whitespace().skip(1).collect();
        assert_eq!(numbers, ["3", "1", "0", "7", "0", "0", "0"], "{shown}");
        assert!(shown.contains("(all)"), "{shown}");
        assert!(shown.contains("role standalone, leader -, scheduler memory, store sqlite"), "{shown}");
        assert!(!shown.contains("CONSUMER"), "no consumers, no table: {shown}");

        let mut data = data;
        data["consumers"] = json!([{"consumer": "worker-1", "topic": "orders", "node": "node-1",
            "lastSeen": 1_795_000_000_000_u64, "inFlight": 2}]);
        let shown = Shown::Stats.render(&data);
        let row = shown.lines().find(|line| line.contains("worker-1")).unwrap_or_default();
        let fields: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(fields, ["worker-1", "orders", "-", "node-1", "2", "1795000000000"], "{shown}");
    }

    #[test]
    fn long_bodies_are_cut_and_missing_fields_show_a_dash() {
        assert_eq!(shortened("abcdef", 4), "abc…");
        assert_eq!(shortened("a\nb", 10), "a b");
        assert_eq!(text(&Value::Null), "-");
        assert_eq!(instant(&json!("soon")), "soon");
        assert_eq!(Shown::Finished.render(&json!({"id": "x"})), "finished x\n");
    }
}
