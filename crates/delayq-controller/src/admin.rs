//! The admin endpoints: rebuild the scheduler from the store, and clear everything.

use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use crate::app::AppState;
use crate::error::{ok, ApiResult, Envelope};
use crate::extract::Params;
use crate::params::{JobIdQuery, RestoreQuery};
use crate::schemas::Refusal;
use crate::views::IdView;

/// `{"restored": n}`.
#[derive(Serialize, ToSchema)]
struct Restored {
    /// The number of live jobs covered, not only those that were missing.
    restored: u64,
}

/// `{"cleared": n}`.
#[derive(Serialize, ToSchema)]
struct Cleared {
    /// The number of jobs deleted.
    cleared: u64,
}

/// `GET|POST /reStore?expire=true|false`: schedules every live job of the store again.
///
/// `expire=true` (the default) includes jobs already overdue, which fall due at
/// once; `expire=false` leaves them out.
///
/// A job the scheduler holds is left alone, so the call is idempotent.
#[utoipa::path(
    method(get, post),
    path = "/reStore",
    tag = "admin",
    params(RestoreQuery),
    responses(
        (status = 200, description = "done", body = Envelope<'static, Restored>),
        (status = 400, description = "`expire` is not true or false", body = Refusal),
        (status = 503, description = "the store or the scheduler is unavailable", body = Refusal),
    )
)]
pub(crate) async fn restore(State(state): State<AppState>, params: Params) -> ApiResult {
    let include_overdue = params.flag("expire", true)?;
    let restored = state.queue.restore(!include_overdue).await?;
    ok(Restored { restored })
}

/// `GET|POST /reStoreJob?jobId=`: schedules one live job of the store again.
#[utoipa::path(
    method(get, post),
    path = "/reStoreJob",
    tag = "admin",
    params(JobIdQuery),
    responses(
        (status = 200, description = "the job is live and scheduled", body = Envelope<'static, IdView>),
        (status = 400, description = "`jobId` missing or invalid", body = Refusal),
        (status = 404, description = "no job has this id", body = Refusal),
        (status = 409, description = "the job has ended (or ended while it was being restored)", body = Refusal),
        (status = 503, description = "the store or the scheduler is unavailable", body = Refusal),
    )
)]
pub(crate) async fn restore_job(State(state): State<AppState>, params: Params) -> ApiResult {
    let id = params.job_id()?;
    let job = state.queue.restore_job(&id).await?;
    ok(IdView::of(&job.id))
}

/// `GET|POST /clearAll`: deletes every live job.
///
/// Each becomes `deleted` in the store, then leaves the scheduler.
#[utoipa::path(
    method(get, post),
    path = "/clearAll",
    tag = "admin",
    responses(
        (status = 200, description = "done", body = Envelope<'static, Cleared>),
        (status = 503, description = "the store or the scheduler is unavailable", body = Refusal),
    )
)]
pub(crate) async fn clear_all(State(state): State<AppState>) -> ApiResult {
    let cleared = state.queue.clear_all().await?;
    ok(Cleared { cleared })
}
