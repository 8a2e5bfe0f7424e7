//! The admin endpoints: rebuild the scheduler from the store, and clear everything.

use axum::extract::State;
use serde::Serialize;

use crate::app::AppState;
use crate::error::{ok, ApiResult};
use crate::extract::Params;
use crate::views::IdView;

/// `{"restored": n}`.
#[derive(Serialize)]
struct Restored {
    restored: u64,
}

/// `{"cleared": n}`.
#[derive(Serialize)]
struct Cleared {
    cleared: u64,
}

/// `GET|POST /reStore?expire=true|false`: schedules every live job of the store again.
///
/// `expire=true` (the default) includes jobs already overdue, which fall due at
/// once; `expire=false` leaves them out.
pub(crate) async fn restore(State(state): State<AppState>, params: Params) -> ApiResult {
    let include_overdue = params.flag("expire", true)?;
    let restored = state.queue.restore(!include_overdue).await?;
    ok(Restored { restored })
}

/// `GET|POST /reStoreJob?jobId=`: schedules one live job of the store again.
pub(crate) async fn restore_job(State(state): State<AppState>, params: Params) -> ApiResult {
    let id = params.job_id()?;
    let job = state.queue.restore_job(&id).await?;
    ok(IdView::of(&job.id))
}

/// `GET|POST /clearAll`: deletes every live job.
pub(crate) async fn clear_all(State(state): State<AppState>) -> ApiResult {
    let cleared = state.queue.clear_all().await?;
    ok(Cleared { cleared })
}
