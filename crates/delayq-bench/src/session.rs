//! `delayq-bench summarize DIR`: the numbers of a benchmark session directory
//! (`scripts/session.sh` writes one JSON file per run) as docs/benchmarks.md's tables
//! give them: each series as median (min-max) over its repetitions, and each
//! push series divided, repetition by repetition, by the baseline measured in
//! the same repetition (the ceiling at pipeline 1 for single pushes, at 64 for
//! batches; the peer's rate when a peer ran), then the median of those ratios.
//! The HTTP floor (refused pushes) is divided by the ceiling at pipeline 1, and
//! single pushes by the floor as well: how much of the ceiling the transport
//! alone leaves, and how much of that a push keeps.
//!
//! The runs made once that a peer also ran (`peer-once.txt`) are divided by the
//! peer's figure: W3's bytes per pending job and W4's drain time.
//!
//! Files: `<series>-<rep>.json` for the repeated series, `<run>.json` for the
//! runs made once, `peer-<rep>.txt` with lines `<peer> single: jobs_per_s=N`
//! and `<peer> batch: jobs_per_s=N` (the `PEER_CMD` contract of `session.sh`),
//! and `peer-once.txt` with `<peer> memory: bytes_per_job=N` and
//! `<peer> burst: drain_ms=N` (its `PEER_ONCE_CMD`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::{Map, Value};

use crate::error::{BenchError, BenchResult};
use crate::report::{self, Spread};

/// Flags of `summarize`.
#[derive(Args, Debug)]
pub(crate) struct SummarizeArgs {
    /// The session directory (`session.sh`'s OUT_DIR).
    dir: PathBuf,
    /// Also write the summary to this JSON file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// What a repeated series is divided by, repetition by repetition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Baseline {
    /// Another series of the session (a ceiling).
    Series(&'static str),
    /// The peer's rate in this mode (`single` or `batch`).
    Peer(&'static str),
}

/// A series run once per repetition, and what its jobs/s are divided by.
struct Repeated {
    name: &'static str,
    baselines: &'static [Baseline],
}

const REPEATED: &[Repeated] = &[
    Repeated { name: "ceiling1", baselines: &[] },
    Repeated { name: "ceiling64", baselines: &[] },
    Repeated { name: "floor", baselines: &[Baseline::Series("ceiling1")] },
    Repeated {
        name: "push-single",
        baselines: &[Baseline::Series("ceiling1"), Baseline::Peer("single"), Baseline::Series("floor")],
    },
    Repeated { name: "push-batch", baselines: &[Baseline::Series("ceiling64"), Baseline::Peer("batch")] },
    Repeated { name: "lateness", baselines: &[] },
    Repeated { name: "push-single-mariadb", baselines: &[Baseline::Series("ceiling1"), Baseline::Peer("single")] },
    Repeated { name: "push-batch-mariadb", baselines: &[Baseline::Series("ceiling64"), Baseline::Peer("batch")] },
    Repeated { name: "lateness-mariadb", baselines: &[] },
];

/// The runs made once.
const ONCE: &[&str] = &[
    "embedded-push-single",
    "embedded-push-batch",
    "embedded-lateness",
    "grpc-push-single",
    "grpc-push-batch",
    "grpc-lateness",
    "memory",
    "memory-1m",
    "burst",
    "memory-mariadb",
    "burst-mariadb",
    "flow-mariadb",
];

/// A run made once, divided by the peer's run of the same workload in `peer-once.txt`.
struct AgainstPeer {
    run: &'static str,
    metric: &'static str,
    peer_mode: &'static str,
    peer_metric: &'static str,
}

const ONCE_AGAINST_PEER: &[AgainstPeer] = &[
    AgainstPeer {
        run: "memory",
        metric: "redis_used_memory_bytes_per_job",
        peer_mode: "memory",
        peer_metric: "bytes_per_job",
    },
    AgainstPeer {
        run: "memory-mariadb",
        metric: "redis_used_memory_bytes_per_job",
        peer_mode: "memory",
        peer_metric: "bytes_per_job",
    },
    AgainstPeer { run: "burst", metric: "drain_ms", peer_mode: "burst", peer_metric: "drain_ms" },
    AgainstPeer { run: "burst-mariadb", metric: "drain_ms", peer_mode: "burst", peer_metric: "drain_ms" },
];

/// The metrics shown, in this order, where a run has them.
const SHOWN: &[&str] = &[
    "jobs_per_s",
    "push_latency_ms_p99",
    "lateness_ms_p50",
    "lateness_ms_p90",
    "lateness_ms_p99",
    "lateness_ms_max",
    "early",
    "missing",
    "duplicates",
    "redis_used_memory_bytes_per_job",
    "first_pop_ms",
    "drain_ms",
    "push_jobs_per_s",
    "finish_jobs_per_s",
    "unfinished_at_push_end",
    "unreceived_at_push_end",
    "in_hand_at_push_end",
    "finish_after_push_ms",
    "server_cpu_us_per_job",
    "redis_cpu_us_per_job",
    "client_cpu_us_per_job",
    "p50_ms",
    "p99_ms",
    "max_ms",
    "bytes_per_job",
];

/// One run's numbers by metric name.
type Numbers = BTreeMap<String, f64>;

/// A repeated series: each repetition's numbers by repetition number.
type Reps = BTreeMap<usize, Numbers>;

/// Prints the session's summary and writes its JSON when asked.
///
/// # Errors
/// When the directory cannot be read, a file is not a run's JSON, or it holds no run at all.
pub(crate) fn run(args: &SummarizeArgs) -> BenchResult<()> {
    let summary = summarize(&args.dir)?;
    print!("{}", summary.text);
    if let Some(path) = &args.json {
        report::write_json(path, &summary.json)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// A session's summary, as text and as JSON.
struct SessionSummary {
    text: String,
    json: Value,
}

fn summarize(dir: &Path) -> BenchResult<SessionSummary> {
    let names = file_names(dir)?;
    let peers = read_peers(dir, &names)?;
    let mut series: BTreeMap<&str, Reps> = BTreeMap::new();
    for repeated in REPEATED {
        let reps = read_repeated(dir, &names, repeated.name)?;
        if !reps.is_empty() {
            series.insert(repeated.name, reps);
        }
    }
    let mut text = String::new();
    let mut json = Map::new();
    let rep_count = series.values().map(BTreeMap::len).max().unwrap_or(0);
    text.push_str(&format!("session {} ({rep_count} repetitions): median (min-max)\n", dir.display()));
    for repeated in REPEATED {
        let Some(reps) = series.get(repeated.name) else { continue };
        let mut entry = shown_spreads(reps.values(), &mut text, repeated.name);
        let mut ratios = Map::new();
        for &baseline in repeated.baselines {
            let (key, base) = match baseline {
                Baseline::Series(other) => (other.to_owned(), series.get(other)),
                Baseline::Peer(mode) => (format!("peer {mode}"), peers.get(mode)),
            };
            let Some(spread) = base.and_then(|base| Spread::of(&ratios_to(reps, base))) else { continue };
            text.push_str(&format!("  {:<34} {}\n", format!("jobs_per_s / {key}, per rep"), spread.display()));
            ratios.insert(key, spread.to_json());
        }
        if !ratios.is_empty() {
            entry.insert("ratios".to_owned(), Value::Object(ratios));
        }
        json.insert(repeated.name.to_owned(), Value::Object(entry));
    }
    for (mode, reps) in &peers {
        let name = format!("peer-{mode}");
        json.insert(name.clone(), Value::Object(shown_spreads(reps.values(), &mut text, &name)));
    }
    let peer_once = read_peer_once(dir, &names)?;
    for (mode, numbers) in &peer_once {
        let name = format!("peer-once-{mode}");
        json.insert(name.clone(), Value::Object(shown_spreads([numbers].into_iter(), &mut text, &name)));
    }
    for &name in ONCE {
        if let Some(numbers) = read_run(dir, &names, name)? {
            let mut entry = shown_spreads([&numbers].into_iter(), &mut text, name);
            let mut ratios = Map::new();
            for against in ONCE_AGAINST_PEER.iter().filter(|against| against.run == name) {
                let ours = numbers.get(against.metric);
                let theirs = peer_once.get(against.peer_mode).and_then(|peer| peer.get(against.peer_metric));
                let (Some(ours), Some(theirs)) = (ours, theirs) else { continue };
                if *theirs <= 0.0 {
                    continue;
                }
                let ratio = ours / theirs;
                let key = format!("peer {}", against.peer_mode);
                text.push_str(&format!("  {:<34} {ratio:.2}\n", format!("{} / {key}", against.metric)));
                ratios.insert(key, Value::from((ratio * 100.0).round() / 100.0));
            }
            if !ratios.is_empty() {
                entry.insert("ratios".to_owned(), Value::Object(ratios));
            }
            json.insert(name.to_owned(), Value::Object(entry));
        }
    }
    if json.is_empty() {
        return Err(BenchError::Invalid(format!("{} holds no benchmark session's files", dir.display())));
    }
    Ok(SessionSummary { text, json: Value::Object(json) })
}

/// Adds a line per shown metric of `runs` to `text`; returns their spreads as JSON.
fn shown_spreads<'a>(
    runs: impl Iterator<Item = &'a Numbers> + Clone,
    text: &mut String,
    name: &str,
) -> Map<String, Value> {
    text.push_str(&format!("{name}\n"));
    let mut entry = Map::new();
    // A run that broke its workload's validity rule (a job lost, say) is shown, and flagged.
    let invalid = runs.clone().filter(|numbers| numbers.get("valid") == Some(&0.0)).count();
    if invalid > 0 {
        text.push_str(&format!("  INVALID runs: {invalid} of {}\n", runs.clone().count()));
        entry.insert("invalid_runs".to_owned(), Value::from(invalid));
    }
    for &metric in SHOWN {
        let values: Vec<f64> = runs.clone().filter_map(|numbers| numbers.get(metric).copied()).collect();
        if let Some(spread) = Spread::of(&values) {
            text.push_str(&format!("  {metric:<34} {}\n", spread.display()));
            entry.insert(metric.to_owned(), spread.to_json());
        }
    }
    entry
}

/// Divides each repetition's jobs/s by the baseline's in the same repetition.
fn ratios_to(reps: &Reps, baseline: &Reps) -> Vec<f64> {
    reps.iter()
        .filter_map(|(rep, numbers)| {
            let rate = numbers.get("jobs_per_s")?;
            let base = baseline.get(rep)?.get("jobs_per_s")?;
            (*base > 0.0).then(|| rate / base)
        })
        .collect()
}

fn file_names(dir: &Path) -> BenchResult<Vec<String>> {
    let entries = std::fs::read_dir(dir).map_err(|error| BenchError::io(format!("read {}", dir.display()), error))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|error| BenchError::io(format!("read {}", dir.display()), error))?;
        if let Some(name) = entry.file_name().to_str() {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}

/// The repetitions of `series`: files `<series>-<rep>.json`.
fn read_repeated(dir: &Path, names: &[String], series: &str) -> BenchResult<Reps> {
    let mut reps = Reps::new();
    for name in names {
        let Some(rep) = rep_number(name, series, ".json") else { continue };
        if let Some(numbers) = read_run(dir, names, &format!("{series}-{rep}"))? {
            reps.insert(rep, numbers);
        }
    }
    Ok(reps)
}

/// The repetition number of `file` when it is `<series>-<rep><extension>`.
fn rep_number(file: &str, series: &str, extension: &str) -> Option<usize> {
    file.strip_prefix(series)?.strip_prefix('-')?.strip_suffix(extension)?.parse().ok()
}

/// The numbers of the run in `<name>.json`, when the file is there.
fn read_run(dir: &Path, names: &[String], name: &str) -> BenchResult<Option<Numbers>> {
    let file = format!("{name}.json");
    if !names.contains(&file) {
        return Ok(None);
    }
    let path = dir.join(&file);
    let text = read_text(&path)?;
    let not_a_run = |detail: &str| BenchError::Invalid(format!("{}: {detail}", path.display()));
    let value: Value = serde_json::from_str(&text).map_err(|error| not_a_run(&format!("not JSON: {error}")))?;
    let reps = value.get("reps").and_then(Value::as_array).ok_or_else(|| not_a_run("no reps array"))?;
    let [rep] = reps.as_slice() else {
        return Err(not_a_run(&format!("has {} repetitions; a session runs each once", reps.len())));
    };
    let fields = rep.as_object().ok_or_else(|| not_a_run("a repetition is not an object"))?;
    let number = |value: &Value| value.as_f64().or_else(|| value.as_bool().map(|valid| f64::from(u8::from(valid))));
    Ok(Some(fields.iter().filter_map(|(metric, value)| Some((metric.clone(), number(value)?))).collect()))
}

fn read_text(path: &Path) -> BenchResult<String> {
    std::fs::read_to_string(path).map_err(|error| BenchError::io(format!("read {}", path.display()), error))
}

/// The peer's numbers per mode and repetition, from `peer-<rep>.txt`.
fn read_peers(dir: &Path, names: &[String]) -> BenchResult<BTreeMap<String, Reps>> {
    let mut peers: BTreeMap<String, Reps> = BTreeMap::new();
    for name in names {
        let Some(rep) = rep_number(name, "peer", ".txt") else { continue };
        let text = read_text(&dir.join(name))?;
        for (mode, numbers) in peer_lines(&text) {
            peers.entry(mode).or_default().insert(rep, numbers);
        }
    }
    Ok(peers)
}

/// The peer's numbers per mode from `peer-once.txt`, when it is there.
fn read_peer_once(dir: &Path, names: &[String]) -> BenchResult<BTreeMap<String, Numbers>> {
    let file = "peer-once.txt";
    if !names.iter().any(|name| name == file) {
        return Ok(BTreeMap::new());
    }
    Ok(peer_lines(&read_text(&dir.join(file))?).into_iter().collect())
}

/// The mode and numeric fields of each line `<peer> <mode>: key=N key=N …`; other lines
/// and fields that are not numbers are passed over.
fn peer_lines(text: &str) -> Vec<(String, Numbers)> {
    text.lines()
        .filter_map(|line| {
            let (head, fields) = line.split_once(": ")?;
            let (_, mode) = head.trim().split_once(' ')?;
            let numbers: Numbers = fields
                .split_whitespace()
                .filter_map(|field| {
                    let (key, value) = field.split_once('=')?;
                    Some((key.to_owned(), value.parse().ok()?))
                })
                .collect();
            (!numbers.is_empty()).then(|| (mode.to_owned(), numbers))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_run(dir: &Path, name: &str, metrics: &[(&str, f64)]) {
        let rep: Map<String, Value> =
            metrics.iter().map(|(metric, value)| ((*metric).to_owned(), Value::from(*value))).collect();
        let run = serde_json::json!({"workload": "push", "reps": [rep]});
        std::fs::write(dir.join(format!("{name}.json")), run.to_string()).expect("write a run");
    }

    #[test]
    fn ratios_are_taken_per_repetition_then_their_median() {
        let dir = tempfile::tempdir().expect("temp dir");
        // Rep 2's ceiling is twice rep 1's: the ratio of each rep uses its own.
        for (rep, ceiling, single, peer) in [(1, 100.0, 40.0, 50.0), (2, 200.0, 60.0, 40.0), (3, 100.0, 30.0, 60.0)] {
            write_run(dir.path(), &format!("ceiling1-{rep}"), &[("jobs_per_s", ceiling)]);
            write_run(dir.path(), &format!("floor-{rep}"), &[("jobs_per_s", ceiling / 2.0)]);
            write_run(
                dir.path(),
                &format!("push-single-{rep}"),
                &[("jobs_per_s", single), ("server_cpu_us_per_job", 30.0)],
            );
            std::fs::write(
                dir.path().join(format!("peer-{rep}.txt")),
                format!("bullmq single: jobs_per_s={peer} valid=true\nbullmq batch: jobs_per_s=1 valid=true\n"),
            )
            .expect("write the peer");
        }
        write_run(dir.path(), "burst", &[("drain_ms", 3408.0)]);
        write_run(dir.path(), "memory-mariadb", &[("redis_used_memory_bytes_per_job", 300.0)]);
        std::fs::write(
            dir.path().join("peer-once.txt"),
            "bullmq memory: bytes_per_job=800\nbullmq burst: drain_ms=6816\n",
        )
        .expect("write the peer's runs made once");
        let summary = summarize(dir.path()).expect("summary");
        assert_eq!(summary.json["burst"]["ratios"]["peer burst"], 0.5);
        assert_eq!(summary.json["memory-mariadb"]["ratios"]["peer memory"], 0.38);
        assert_eq!(summary.json["peer-once-memory"]["bytes_per_job"]["median"], 800);
        let single = &summary.json["push-single"];
        assert_eq!(single["jobs_per_s"], serde_json::json!({"median": 40, "min": 30, "max": 60}));
        // 40/100, 60/200, 30/100: median 0.3, not 40/100 (the medians' ratio).
        assert_eq!(single["ratios"]["ceiling1"], serde_json::json!({"median": 0.3, "min": 0.3, "max": 0.4}));
        // 40/50, 60/40, 30/60.
        assert_eq!(single["ratios"]["peer single"], serde_json::json!({"median": 0.8, "min": 0.5, "max": 1.5}));
        assert_eq!(summary.json["floor"]["ratios"]["ceiling1"]["median"], 0.5);
        // 40/50, 60/100, 30/50.
        assert_eq!(single["ratios"]["floor"], serde_json::json!({"median": 0.6, "min": 0.6, "max": 0.8}));
        assert_eq!(summary.json["peer-single"]["jobs_per_s"]["median"], 50);
        assert_eq!(summary.json["burst"]["drain_ms"]["median"], 3408);
        assert!(summary.text.contains("jobs_per_s / ceiling1, per rep"), "{}", summary.text);
        assert!(summary.json.get("push-batch").is_none(), "a series without files is left out");
    }

    #[test]
    fn a_repetition_without_its_baseline_gets_no_ratio_and_invalid_runs_are_flagged() {
        let dir = tempfile::tempdir().expect("temp dir");
        write_run(dir.path(), "ceiling64-1", &[("jobs_per_s", 100.0)]);
        write_run(dir.path(), "push-batch-1", &[("jobs_per_s", 80.0)]);
        write_run(dir.path(), "push-batch-2", &[("jobs_per_s", 90.0)]);
        write_run(dir.path(), "push-batch-mariadb-1", &[("jobs_per_s", 50.0)]);
        let invalid = serde_json::json!({"reps": [{"jobs_per_s": 70.0, "valid": false}]});
        std::fs::write(dir.path().join("push-batch-mariadb-2.json"), invalid.to_string()).expect("write a run");
        let summary = summarize(dir.path()).expect("summary");
        assert_eq!(summary.json["push-batch-mariadb"]["invalid_runs"], 1);
        assert!(summary.text.contains("INVALID runs: 1 of 2"), "{}", summary.text);
        assert!(summary.json["push-batch"].get("invalid_runs").is_none());
        assert_eq!(summary.json["push-batch"]["ratios"]["ceiling64"]["median"], 0.8);
        assert_eq!(summary.json["push-batch"]["jobs_per_s"]["median"], 85, "both reps count for the rate");
        assert_eq!(summary.json["push-batch-mariadb"]["jobs_per_s"]["max"], 70, "not mixed with push-batch");
    }

    #[test]
    fn unusable_inputs_are_named() {
        let empty = tempfile::tempdir().expect("temp dir");
        let error = summarize(empty.path()).err().map(|error| error.to_string()).unwrap_or_default();
        assert!(error.contains("holds no benchmark session"), "{error}");
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("ceiling1-1.json"), "{\"reps\": []}").expect("write");
        let error = summarize(dir.path()).err().map(|error| error.to_string()).unwrap_or_default();
        assert!(error.contains("ceiling1-1.json: has 0 repetitions"), "{error}");
        assert!(summarize(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn peer_lines_give_numbers_per_mode() {
        let lines = peer_lines("bullmq single: jobs_per_s=45508 valid=true\nnoise\nbullmq batch: jobs_per_s=32898.5\n");
        let rate = |mode: &str| lines.iter().find(|(m, _)| m == mode).and_then(|(_, n)| n.get("jobs_per_s").copied());
        assert_eq!(lines.len(), 2);
        assert_eq!((rate("single"), rate("batch")), (Some(45508.0), Some(32898.5)));
        let memory = peer_lines("bullmq memory: bytes_per_job=805.5");
        assert_eq!(memory, vec![("memory".to_owned(), Numbers::from([("bytes_per_job".to_owned(), 805.5)]))]);
        assert_eq!(rep_number("push-batch-mariadb-2.json", "push-batch", ".json"), None);
        assert_eq!(rep_number("push-batch-12.json", "push-batch", ".json"), Some(12));
    }
}
