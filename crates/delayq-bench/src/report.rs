//! Results: nearest-rank percentiles, the per-run metrics, the median (min–max)
//! summary over repeats, the stdout tables and the JSON file.

use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{BenchError, BenchResult};

/// Returns the nearest-rank percentile `v[ceil(p/100 · n) − 1]` of ascending `sorted`.
pub(crate) fn nearest_rank<T: Copy>(sorted: &[T], percent: u32) -> Option<T> {
    debug_assert!(percent <= 100);
    let count = sorted.len();
    let last = count.checked_sub(1)?;
    // Integer arithmetic, so 99 % of 100 values is rank 99 exactly.
    let rank = (percent as usize * count).div_ceil(100);
    sorted.get(rank.saturating_sub(1).min(last)).copied()
}

/// The numbers of one run, in the order they were recorded, and its validity.
#[derive(Clone, Debug, Default)]
pub(crate) struct Metrics {
    entries: Vec<(String, f64)>,
    /// Whether the run met the workload's validity rule.
    pub(crate) valid: bool,
}

impl Metrics {
    /// Records `value` under `name`.
    pub(crate) fn set(&mut self, name: &str, value: f64) {
        debug_assert!(self.get(name).is_none(), "metric {name} recorded twice");
        self.entries.push((name.to_owned(), value));
    }

    /// Records `value` under `name` when there is one.
    pub(crate) fn set_some(&mut self, name: &str, value: Option<f64>) {
        if let Some(value) = value {
            self.set(name, value);
        }
    }

    /// Returns the value recorded under `name`.
    pub(crate) fn get(&self, name: &str) -> Option<f64> {
        self.entries.iter().find(|(entry_name, _)| *entry_name == name).map(|(_, value)| *value)
    }

    /// Records p50, p90, p99, max, min and mean of `values` (sorted here) as `<prefix>_p50` ….
    pub(crate) fn set_distribution(&mut self, prefix: &str, values: &mut [f64]) {
        values.sort_by(f64::total_cmp);
        let mean = (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64);
        self.set_some(&format!("{prefix}_p50"), nearest_rank(values, 50));
        self.set_some(&format!("{prefix}_p90"), nearest_rank(values, 90));
        self.set_some(&format!("{prefix}_p99"), nearest_rank(values, 99));
        self.set_some(&format!("{prefix}_max"), values.last().copied());
        self.set_some(&format!("{prefix}_min"), values.first().copied());
        self.set_some(&format!("{prefix}_mean"), mean);
    }

    fn to_json(&self) -> Map<String, Value> {
        let mut object = Map::new();
        for (name, value) in &self.entries {
            object.insert(name.clone(), number(*value));
        }
        object.insert("valid".to_owned(), Value::Bool(self.valid));
        object
    }
}

/// One repetition of a workload.
#[derive(Clone, Debug)]
pub(crate) struct RepRecord {
    /// 1-based repetition number.
    pub(crate) rep: usize,
    /// The topic the repetition used.
    pub(crate) topic: String,
    /// Its numbers.
    pub(crate) metrics: Metrics,
}

/// The median, min and max of one metric over the repetitions.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Summary {
    name: String,
    spread: Spread,
}

/// The median, min and max of some numbers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Spread {
    /// The median (of an even count, the mean of the middle two).
    pub(crate) median: f64,
    /// The smallest.
    pub(crate) min: f64,
    /// The largest.
    pub(crate) max: f64,
}

impl Spread {
    /// Returns the spread of `values`; `None` when there are none.
    pub(crate) fn of(values: &[f64]) -> Option<Spread> {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let (&min, &max) = (sorted.first()?, sorted.last()?);
        Some(Spread { median: median_of_sorted(&sorted)?, min, max })
    }

    /// Formats it as the tables show it: `median (min-max)`, or one number when all are equal.
    pub(crate) fn display(&self) -> String {
        if self.min == self.max {
            return format_value(self.median);
        }
        format!("{} ({}-{})", format_value(self.median), format_value(self.min), format_value(self.max))
    }

    /// Returns it as a JSON object of `median`, `min` and `max`.
    pub(crate) fn to_json(self) -> Value {
        serde_json::json!({"median": number(self.median), "min": number(self.min), "max": number(self.max)})
    }
}

/// Summarises every metric that all repetitions recorded, in the first one's order.
pub(crate) fn summarize(records: &[RepRecord]) -> Vec<Summary> {
    let Some(first) = records.first() else { return Vec::new() };
    let mut summaries = Vec::new();
    for (name, _) in &first.metrics.entries {
        let values: Vec<f64> = records.iter().filter_map(|record| record.metrics.get(name)).collect();
        if values.len() != records.len() {
            continue;
        }
        let Some(spread) = Spread::of(&values) else { continue };
        summaries.push(Summary { name: name.clone(), spread });
    }
    summaries
}

/// Returns the median of ascending `sorted`; `None` when it is empty.
fn median_of_sorted(sorted: &[f64]) -> Option<f64> {
    let middle = sorted.len() / 2;
    let upper = *sorted.get(middle)?;
    if sorted.len() % 2 == 1 {
        return Some(upper);
    }
    let lower = *sorted.get(middle.checked_sub(1)?)?;
    Some((lower + upper) / 2.0)
}

/// Formats a number the way the tables show it: integers plainly, others with 3 decimals.
fn format_value(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.0}")
    } else {
        format!("{value:.3}")
    }
}

/// Prints the table of one repetition.
pub(crate) fn print_rep(workload: &str, repeats: usize, record: &RepRecord) {
    println!("== {workload} rep {}/{repeats} topic={} valid={}", record.rep, record.topic, record.metrics.valid);
    for (name, value) in &record.metrics.entries {
        println!("  {name:<28} {:>16}", format_value(*value));
    }
}

/// Prints the median (min–max) table over all repetitions.
pub(crate) fn print_summary(workload: &str, records: &[RepRecord], summaries: &[Summary]) {
    let valid_count = records.iter().filter(|record| record.metrics.valid).count();
    println!("== {workload} summary over {} rep(s), {valid_count} valid: median (min-max)", records.len());
    for summary in summaries {
        println!(
            "  {:<28} {:>16} ({} - {})",
            summary.name,
            format_value(summary.spread.median),
            format_value(summary.spread.min),
            format_value(summary.spread.max)
        );
    }
}

/// Returns the whole result as JSON: parameters, every repetition and the summary.
pub(crate) fn to_json(workload: &str, params: Value, records: &[RepRecord], summaries: &[Summary]) -> Value {
    let reps: Vec<Value> = records
        .iter()
        .map(|record| {
            let mut object = record.metrics.to_json();
            object.insert("rep".to_owned(), Value::from(record.rep));
            object.insert("topic".to_owned(), Value::from(record.topic.clone()));
            Value::Object(object)
        })
        .collect();
    let mut summary = Map::new();
    for entry in summaries {
        summary.insert(entry.name.clone(), entry.spread.to_json());
    }
    serde_json::json!({
        "workload": workload,
        "params": params,
        "all_valid": records.iter().all(|record| record.metrics.valid),
        "reps": reps,
        "summary": summary,
    })
}

/// Writes `result` to `path`, pretty-printed.
///
/// # Errors
/// Returns [`BenchError::Io`] when the file cannot be written.
pub(crate) fn write_json(path: &Path, result: &Value) -> BenchResult<()> {
    let text = serde_json::to_string_pretty(result)
        .map_err(|error| BenchError::Invalid(format!("cannot serialize the results: {error}")))?;
    std::fs::write(path, text + "\n").map_err(|error| BenchError::io(format!("write {}", path.display()), error))
}

/// Returns `value` as a JSON number, an integer when it is one.
fn number(value: f64) -> Value {
    if value.fract() == 0.0 && value.abs() < 9e15 {
        Value::from(value as i64)
    } else {
        Value::from(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_follows_the_definition() {
        let values: Vec<u32> = (1..=100).collect();
        assert_eq!(nearest_rank(&values, 50), Some(50));
        assert_eq!(nearest_rank(&values, 99), Some(99));
        assert_eq!(nearest_rank(&values, 100), Some(100));
        assert_eq!(nearest_rank(&values, 0), Some(1));
        let few = [10, 20, 30];
        assert_eq!(nearest_rank(&few, 50), Some(20));
        assert_eq!(nearest_rank(&few, 90), Some(30));
        assert_eq!(nearest_rank(&few, 1), Some(10));
        assert_eq!(nearest_rank::<u32>(&[], 50), None);
    }

    #[test]
    fn distributions_record_six_numbers() {
        let mut metrics = Metrics::default();
        let mut values = vec![5.0, -1.0, 3.0, 1.0];
        metrics.set_distribution("lateness_ms", &mut values);
        assert_eq!(metrics.get("lateness_ms_p50"), Some(1.0));
        assert_eq!(metrics.get("lateness_ms_p99"), Some(5.0));
        assert_eq!(metrics.get("lateness_ms_min"), Some(-1.0));
        assert_eq!(metrics.get("lateness_ms_mean"), Some(2.0));
    }

    #[test]
    fn summaries_are_median_min_max() {
        let record = |rep: usize, value: f64| {
            let mut metrics = Metrics::default();
            metrics.set("jobs_per_s", value);
            RepRecord { rep, topic: format!("t{rep}"), metrics }
        };
        let records = [record(1, 30.0), record(2, 10.0), record(3, 20.0)];
        let summaries = summarize(&records);
        assert_eq!(
            summaries,
            vec![Summary { name: "jobs_per_s".to_owned(), spread: Spread { median: 20.0, min: 10.0, max: 30.0 } }]
        );
        assert_eq!(median_of_sorted(&[1.0, 2.0]), Some(1.5));
        assert_eq!(Spread::of(&[4.0, 1.0]), Some(Spread { median: 2.5, min: 1.0, max: 4.0 }));
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(Spread::of(&[0.5, 2.0, 1.0]).map(|spread| spread.display()), Some("1 (0.500-2)".to_owned()));
        assert_eq!(Spread::of(&[7.0]).map(|spread| spread.display()), Some("7".to_owned()));
    }

    #[test]
    fn values_format_as_integers_when_whole() {
        assert_eq!(format_value(12.0), "12");
        assert_eq!(format_value(0.25), "0.250");
        assert_eq!(number(3.0), Value::from(3));
    }
}
