//! Charts drawn on the server as inline SVG: no script, no library, and
//! readable with scripts off.

use delayq_queue::{ActivityEvent, ActivityReport, DueSoon};
use delayq_store::DueCount;
use maud::{html, Markup};

use super::layout::count;

/// The width of a chart's drawing area, in SVG units.
const WIDTH: u32 = 600;
/// The height of one activity row.
const ROW_HEIGHT: u32 = 36;

/// A count that may be a lower bound, as text ("≥ 50,000" when the read stopped short).
pub(crate) fn due_count(due: DueCount) -> String {
    if due.complete {
        count(due.jobs)
    } else {
        format!("≥ {}", count(due.jobs))
    }
}

/// Pending jobs by when they are due: one bar per range, widths relative to the largest.
pub(crate) fn due_chart(due: &DueSoon) -> Markup {
    let rows = [("next minute", due.minute), ("next hour", due.hour), ("next day", due.day), ("later", due.later)];
    let largest = rows.iter().map(|(_, due)| due.jobs).max().unwrap_or(0).max(1);
    let label_width = 110;
    let bar_room = WIDTH - label_width - 110;
    let height = 28 * rows.len() as u32;
    html! {
        figure.chart.due {
            svg xmlns="http://www.w3.org/2000/svg" viewBox=(format!("0 0 {WIDTH} {height}")) role="img"
                aria-label="pending jobs by due time" {
                @for (index, (label, due)) in rows.iter().enumerate() {
                    @let y = index as u32 * 28;
                    @let width = (u64::from(bar_room) * due.jobs / largest) as u32;
                    text x="0" y=(y + 18) class="label" { (label) }
                    rect x=(label_width) y=(y + 4) width=(width.max(1)) height="18" class=(format!("bar due-{index}")) {}
                    text x=(label_width + width.max(1) + 8) y=(y + 18) class="value" data-due=(label) { (due_count(*due)) }
                }
            }
            figcaption { "Pending jobs by due time (overdue ones count in the next minute)." }
        }
    }
}

/// The last hour, one row of per-minute bars for each kind of event.
pub(crate) fn activity_chart(report: &ActivityReport) -> Markup {
    let label_width = 90;
    let total_width = 80;
    let bars_width = WIDTH - label_width - total_width;
    let slot = bars_width as f64 / report.minutes.len().max(1) as f64;
    let height = ROW_HEIGHT * ActivityEvent::ALL.len() as u32;
    html! {
        figure.chart.activity {
            svg xmlns="http://www.w3.org/2000/svg" viewBox=(format!("0 0 {WIDTH} {height}")) role="img"
                aria-label="jobs per minute over the last hour" {
                @for (row, event) in ActivityEvent::ALL.iter().enumerate() {
                    @let top = row as u32 * ROW_HEIGHT;
                    @let peak = report.minutes.iter().map(|minute| minute.of(*event)).max().unwrap_or(0).max(1);
                    @let total: u64 = report.minutes.iter().map(|minute| minute.of(*event)).sum();
                    text x="0" y=(top + 22) class="label" { (event.as_str()) }
                    line x1=(label_width) x2=(label_width + bars_width) y1=(top + ROW_HEIGHT - 4)
                        y2=(top + ROW_HEIGHT - 4) class="axis" {}
                    @for (index, minute) in report.minutes.iter().enumerate() {
                        @let value = minute.of(*event);
                        @if value > 0 {
                            @let bar = ((ROW_HEIGHT - 8) as f64 * value as f64 / peak as f64).max(1.0);
                            rect x=(format!("{:.1}", label_width as f64 + index as f64 * slot))
                                y=(format!("{:.1}", (top + ROW_HEIGHT - 4) as f64 - bar))
                                width=(format!("{:.1}", (slot - 1.0).max(1.0))) height=(format!("{bar:.1}"))
                                class=(format!("bar event-{}", event.as_str())) {
                                title { (count(value)) " " (event.as_str()) }
                            }
                        }
                    }
                    text x=(WIDTH - 4) y=(top + 22) class="value total" text-anchor="end"
                        data-event=(event.as_str()) { (count(total)) }
                }
            }
            figcaption { "Jobs per minute over the last hour on this node; totals on the right." }
        }
    }
}
