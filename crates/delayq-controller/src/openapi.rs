//! The OpenAPI 3.1 document of the REST API, served at `GET /openapi.json`.
//!
//! The router is built from the annotated handlers (`utoipa_axum::routes!`),
//! so every route it serves is in the document with the methods it answers.
//! This module adds what a handler cannot say of itself: which routes the
//! token guard covers, the statuses the layers around every route answer,
//! and operation ids that stay unique when one handler serves two methods.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use axum::body::Bytes;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use delayq_common::auth::Access;
use tracing::error;
use utoipa::openapi::path::Operation;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{Content, OpenApi, Ref, RefOr};
use utoipa::{OpenApi as _, PartialSchema, ToSchema};

use crate::error::ApiError;
use crate::schemas::Refusal;

/// The name of the bearer-token scheme in the document.
const BEARER: &str = "bearer";

/// What every route may answer besides its own statuses: a panic, caught
/// by the router's outermost layers ...
const INTERNAL_ERROR: &str = "a bug inside delayq; the detail is logged, never returned (`internal error`)";
/// ... and the request timeout, a route layer around every route.
const TIMED_OUT: &str = "the request did not complete within `server.request_timeout_ms` \
    (`request did not complete within <n> ms`)";

#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "delayq",
        description = "The REST API of delayq, a delay-queue server. Every answer but `/metrics` and \
            `/openapi.json` is the envelope `{success, message, data}`. With auth on (any token configured), \
            the operations that list the `bearer` scheme need `Authorization: Bearer <token>`; the others are \
            open. docs/api.md describes each route in full.",
        license(name = "Apache-2.0")
    ),
    tags(
        (name = "jobs", description = "push, pop, acknowledge and look up jobs"),
        (name = "youzan", description = "the routes of the Youzan design: durations in seconds, the topic in the path"),
        (name = "groups", description = "consumer groups: each due job of a topic with groups is delivered to \
            every group"),
        (name = "consumers", description = "the registry of consumers: heartbeats; `/stats` lists them"),
        (name = "admin", description = "rebuild the scheduler from the store, clear everything: an admin token"),
        (name = "ops", description = "liveness, readiness, counts, metrics and this document"),
    )
)]
struct ApiDoc;

/// Returns the document's frame: info, tags and the bearer scheme; the
/// routes add the paths.
pub(crate) fn frame() -> OpenApi {
    let mut api = ApiDoc::openapi();
    let components = api.components.get_or_insert_with(Default::default);
    let scheme = HttpBuilder::new()
        .scheme(HttpAuthScheme::Bearer)
        .description(Some("any configured token, user or admin; the admin routes need an admin token"))
        .build();
    components.add_security_scheme(BEARER, SecurityScheme::Http(scheme));
    components.schemas.insert(Refusal::name().into_owned(), Refusal::schema());
    api
}

/// Marks every operation of `api` as behind the token guard for `access`,
/// with the refusals the guard answers.
pub(crate) fn mark_guarded(api: &mut OpenApi, access: Access) {
    for (_, operation) in operations_mut(api) {
        operation.security = Some(vec![SecurityRequirement::new(BEARER, Vec::<String>::new())]);
        add_refusal(
            operation,
            "401",
            "no valid token: `authorization is required: Bearer <token>`, `token is not valid`",
        );
        if access == Access::Admin {
            add_refusal(operation, "403", "a user token on an admin route: `admin token is required`");
        }
    }
}

/// Completes the document once every route is in: the statuses of the
/// layers around every route, and unique operation ids.
pub(crate) fn complete(mut api: OpenApi) -> OpenApi {
    for (_, operation) in operations_mut(&mut api) {
        add_refusal(operation, "500", INTERNAL_ERROR);
        match operation.responses.responses.get_mut("503") {
            Some(RefOr::T(unavailable)) => {
                unavailable.description = format!("{}; or {TIMED_OUT}", unavailable.description);
            }
            _ => add_refusal(operation, "503", TIMED_OUT),
        }
    }
    suffix_shared_operation_ids(&mut api);
    api
}

/// Adds a refusal with `status`, unless the operation lists that status already.
fn add_refusal(operation: &mut Operation, status: &str, description: &str) {
    let refusal = ResponseBuilder::new()
        .description(description)
        .content("application/json", Content::new(Some(Ref::from_schema_name(Refusal::name()))))
        .build();
    operation.responses.responses.entry(status.to_owned()).or_insert(RefOr::T(refusal));
}

/// A handler that serves two methods gives both operations its name; each
/// then gets its method as a suffix (`pop_get`, `pop_post`).
fn suffix_shared_operation_ids(api: &mut OpenApi) {
    let mut uses: BTreeMap<String, usize> = BTreeMap::new();
    for (_, operation) in operations_mut(api) {
        if let Some(id) = &operation.operation_id {
            *uses.entry(id.clone()).or_default() += 1;
        }
    }
    for (method, operation) in operations_mut(api) {
        if let Some(id) = operation.operation_id.as_mut() {
            if uses.get(id.as_str()).is_some_and(|count| *count > 1) {
                id.push('_');
                id.push_str(method);
            }
        }
    }
}

/// Every operation of the document, with its method in lower case.
fn operations_mut(api: &mut OpenApi) -> impl Iterator<Item = (&'static str, &mut Operation)> {
    api.paths.paths.values_mut().flat_map(|item| {
        [
            ("get", &mut item.get),
            ("put", &mut item.put),
            ("post", &mut item.post),
            ("delete", &mut item.delete),
            ("options", &mut item.options),
            ("head", &mut item.head),
            ("patch", &mut item.patch),
            ("trace", &mut item.trace),
        ]
        .into_iter()
        .filter_map(|(method, operation)| operation.as_mut().map(|operation| (method, operation)))
    })
}

/// The document as served, written once the router is built.
#[derive(Clone, Default)]
pub(crate) struct Document(Arc<OnceLock<Bytes>>);

impl Document {
    /// Serializes `api` for `/openapi.json`.
    pub(crate) fn publish(&self, api: &OpenApi) {
        match api.to_json() {
            // `router` makes one cell per router and publishes into it once.
            Ok(json) => {
                let _first = self.0.set(Bytes::from(json));
            }
            Err(cause) => error!(error = %cause, "the openapi document could not be serialized"),
        }
    }
}

/// `GET /openapi.json`: this document.
///
/// Open like `/health`: it says what docs/api.md says, and nothing of the node's jobs.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "ops",
    operation_id = "openapi",
    responses((status = 200, description = "the OpenAPI 3.1 document of this API",
        body = inline(serde_json::Value), content_type = "application/json"))
)]
pub(crate) async fn serve_document(Extension(document): Extension<Document>) -> Response {
    match document.0.get() {
        Some(json) => {
            ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], json.clone()).into_response()
        }
        None => ApiError::internal().into_response(),
    }
}
