//! Query and path parameters of the OpenAPI document. The handlers read them
//! through `Params` and `ApiPath`, which word every refusal themselves, so
//! these types are never built: each only names a route's parameters.

use utoipa::IntoParams;

use crate::schemas::JobStateSchema;

/// The job a call names in its query string.
#[derive(IntoParams)]
#[into_params(parameter_in = Query, rename_all = "camelCase")]
#[allow(dead_code, reason = "never built: `Params::job_id` reads it")]
pub(crate) struct JobIdQuery {
    /// The job's id; also accepted as `JobId` or `id`, in that order of preference.
    #[param(min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9._:-]+$")]
    job_id: String,
}

/// The consumer group whose delivery a call acts on.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code, reason = "never built: `consumers::group_of` reads it")]
pub(crate) struct GroupQuery {
    /// A consumer group of the job's topic: the call acts on that group's delivery of
    /// the job; without it, on the job itself.
    #[param(min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9._:-]+$")]
    group: Option<String>,
}

/// The delivery a consumer holds.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code, reason = "never built: `Params::optional_attempt` reads it")]
pub(crate) struct AttemptQuery {
    /// The delivery as its pop returned it; the call then acts only on that delivery.
    #[param(minimum = 1)]
    attempt: Option<u32>,
}

/// What `/pop` reserves.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code, reason = "never built: `jobs::pop` reads it through `Params`")]
pub(crate) struct PopQuery {
    /// The topic.
    #[param(min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9._:-]+$")]
    topic: String,
    /// The consumer group whose deliveries to reserve; required on a topic with groups
    /// (a dropped group's deliveries still live are popped with it too).
    #[param(min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9._:-]+$")]
    group: Option<String>,
    /// How many jobs to reserve at most.
    #[param(minimum = 1, maximum = 100, default = 1)]
    count: Option<u32>,
    /// How long to wait for the first job, in ms.
    #[param(minimum = 0, maximum = 30_000, default = 0)]
    timeout: Option<u64>,
    /// The consumer's name, for the registry of consumers (or the `delayq-consumer` header).
    #[param(min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9._:-]+$")]
    consumer: Option<String>,
}

/// When a nacked job falls due again.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code, reason = "never built: `jobs::nack` reads it through `Params`")]
pub(crate) struct NackQuery {
    /// Milliseconds until the redelivery, at most `limits.max_delay_ms`; the job's
    /// `retryBackoff`, else the server's exponential backoff, when absent.
    #[param(minimum = 0)]
    delay: Option<u64>,
}

/// The job to delete: by id, or by topic and business key (an id wins).
#[derive(IntoParams)]
#[into_params(parameter_in = Query, rename_all = "camelCase")]
#[allow(dead_code, reason = "never built: `jobs::delete` reads it through `Params`")]
pub(crate) struct DeleteQuery {
    /// The job's id; also accepted as `JobId` or `id`.
    #[param(pattern = "^[A-Za-z0-9._:-]+$")]
    job_id: Option<String>,
    /// The topic of the job named by `bizKey`.
    topic: Option<String>,
    /// The business key of a live job of `topic`.
    biz_key: Option<String>,
    /// A consumer group: cancel that group's delivery of the job alone; without it, the
    /// job and every group's delivery of it.
    #[param(min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9._:-]+$")]
    group: Option<String>,
}

/// A job named in the path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code, reason = "never built: `ApiPath` reads it")]
pub(crate) struct JobPath {
    /// The job's id.
    #[param(pattern = "^[A-Za-z0-9._:-]+$")]
    id: String,
}

/// How much history a lookup shows.
#[derive(IntoParams)]
#[into_params(parameter_in = Query, rename_all = "camelCase")]
#[allow(dead_code, reason = "never built: `jobs::get_job` reads it through `Params`")]
pub(crate) struct HistoryQuery {
    /// How many of the newest history lines to return.
    #[param(minimum = 0, maximum = 1000, default = 100)]
    history_limit: Option<u32>,
}

/// A lookup by business key, or a page of a topic's jobs in one state.
#[derive(IntoParams)]
#[into_params(parameter_in = Query, rename_all = "camelCase")]
#[allow(dead_code, reason = "never built: `jobs::find` reads it through `Params`")]
pub(crate) struct FindQuery {
    /// The topic.
    topic: String,
    /// A business key: answers the live job that holds it.
    biz_key: Option<String>,
    /// The state to list (required unless `bizKey`).
    #[param(inline)]
    state: Option<JobStateSchema>,
    /// Jobs per page.
    #[param(minimum = 1, maximum = 1000, default = 100)]
    limit: Option<u32>,
    /// The `cursor` of the previous page, as it was returned.
    cursor: Option<String>,
    /// A consumer group of the topic: its delivery of the job (by `bizKey`), or a page
    /// of its deliveries.
    #[param(min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9._:-]+$")]
    group: Option<String>,
}

/// The topic a route names in its path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code, reason = "never built: `ApiPath` reads it")]
pub(crate) struct TopicPath {
    /// The topic.
    #[param(pattern = "^[A-Za-z0-9._:-]+$")]
    topic: String,
}

/// A consumer group of a topic, named in the path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code, reason = "never built: `ApiPath` reads it")]
pub(crate) struct TopicGroupPath {
    /// The topic.
    #[param(pattern = "^[A-Za-z0-9._:-]+$")]
    topic: String,
    /// The group.
    #[param(pattern = "^[A-Za-z0-9._:-]+$")]
    group: String,
}

/// The topic and job of a Youzan route; the job must belong to the topic.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code, reason = "never built: `ApiPath` reads it")]
pub(crate) struct TopicJobPath {
    /// The topic.
    #[param(pattern = "^[A-Za-z0-9._:-]+$")]
    topic: String,
    /// The job's id.
    #[param(pattern = "^[A-Za-z0-9._:-]+$")]
    id: String,
}

/// How long a Youzan pop waits.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code, reason = "never built: `youzan::pop` reads it through `Params`")]
pub(crate) struct YouzanPopQuery {
    /// Seconds to wait for a job.
    #[param(minimum = 0, maximum = 30, default = 0)]
    timeout: Option<u64>,
}

/// Which jobs `/reStore` covers.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code, reason = "never built: `admin::restore` reads it through `Params`")]
pub(crate) struct RestoreQuery {
    /// `false` (or `0`) leaves out jobs whose due time has passed; `true` (or `1`) includes them.
    #[param(default = true)]
    expire: Option<bool>,
}
