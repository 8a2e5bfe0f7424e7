//! The router, `/openapi.json` and docs/api.md name the same routes: every
//! (method, path) the router serves is in the document, with the token guard
//! where the router has it, and has its section in docs/api.md and its row
//! in the table of routes there; and nothing else is in either.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use axum::http::{Method, StatusCode};
use axum::Router;
use common::TestApp;
use delayq_controller::{serve, HttpLimits};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// A method in upper case and a path as the router writes it (`/jobs/{id}`).
type Route = (String, String);

/// The methods a route may serve. HEAD is left out: axum answers it wherever
/// GET is served, and the document lists GET.
const METHODS: [&str; 7] = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"];

/// Fetches `/openapi.json` without a token from the app served on a socket.
async fn fetch_document(app: &TestApp) -> Value {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(serve(listener, app.router.clone(), HttpLimits::new(5_000, 8), shutdown.clone()));
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(b"GET /openapi.json HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n").await.unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut reply)).await.unwrap().unwrap();
    shutdown.cancel();
    server.await.unwrap();
    let reply = String::from_utf8(reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: application/json"), "{head}");
    serde_json::from_str(body).unwrap()
}

/// The operations of the document, each with whether it lists a security requirement.
fn documented_routes(document: &Value) -> BTreeMap<Route, bool> {
    let mut routes = BTreeMap::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            if !METHODS.contains(&method.to_ascii_uppercase().as_str()) && method != "head" {
                continue;
            }
            let guarded = operation["security"].as_array().is_some_and(|requirements| !requirements.is_empty());
            routes.insert((method.to_ascii_uppercase(), path.clone()), guarded);
        }
    }
    routes
}

/// The paths the router matches, read from its `Debug` form: axum has no
/// public list of routes, but its path router prints the paths it holds.
fn router_paths(router: &Router) -> BTreeSet<String> {
    let debug = format!("{router:?}");
    let (_, routes) = debug.split_once("path_router:").unwrap();
    let (routes, _) = routes.split_once("fallback_router:").unwrap();
    let paths: BTreeSet<String> = routes
        .split("RouteId(")
        .filter_map(|tail| tail.split_once("): \""))
        .filter(|(id, _)| id.bytes().all(|byte| byte.is_ascii_digit()))
        .filter_map(|(_, rest)| rest.split_once('"'))
        .map(|(path, _)| path.to_owned())
        // The console is pages, not API: docs/console.md describes it.
        .filter(|path| path != "/console" && !path.starts_with("/console/"))
        .collect();
    assert!(paths.contains("/health") && paths.contains("/push"), "paths not found in {debug}");
    paths
}

/// Every (method, path) the router serves, found by calling each path with
/// each method and no token: `405` means not served, `401` served behind
/// the token guard, anything else served open.
async fn served_routes(app: &TestApp) -> BTreeMap<Route, bool> {
    let mut routes = BTreeMap::new();
    for path in router_paths(&app.router) {
        let uri: Vec<&str> =
            path.split('/').map(|segment| if segment.starts_with('{') { "probe" } else { segment }).collect();
        for method in METHODS {
            let method_name = Method::from_bytes(method.as_bytes()).unwrap();
            let (status, _) = app.exchange(method_name, &uri.join("/"), None, None).await;
            if status != StatusCode::METHOD_NOT_ALLOWED {
                routes.insert((method.to_owned(), path.clone()), status == StatusCode::UNAUTHORIZED);
            }
        }
    }
    routes
}

fn api_md() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/api.md")).unwrap()
}

/// Splits `GET|POST /pop` or `GET, POST /pop` into its routes.
fn routes_of(methods_and_path: &str) -> Vec<Route> {
    let Some((methods, path)) = methods_and_path.split_once(" /") else {
        return Vec::new();
    };
    methods.split(['|', ',']).map(|method| (method.trim().to_owned(), format!("/{path}"))).collect()
}

/// The routes docs/api.md gives a section: headings such as "### `GET|POST /pop`".
fn section_routes(markdown: &str) -> BTreeSet<Route> {
    markdown
        .lines()
        .filter_map(|line| line.strip_prefix("##"))
        .filter_map(|heading| heading.trim_start_matches('#').trim().strip_prefix('`'))
        .filter_map(|heading| heading.split_once('`'))
        .flat_map(|(code, _)| routes_of(code))
        .collect()
}

/// The routes of the table under "## Routes": rows such as "| `GET`, `POST /pop` | …".
fn table_routes(markdown: &str) -> BTreeSet<Route> {
    let (_, section) = markdown.split_once("\n## Routes\n").unwrap();
    section
        .lines()
        .take_while(|line| !line.starts_with('#'))
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|row| row.split_once(" |"))
        .flat_map(|(cell, _)| routes_of(&cell.replace('`', "")))
        .collect()
}

#[tokio::test]
async fn the_router_serves_exactly_the_documented_routes_with_the_documented_guard() {
    let app = TestApp::with_auth().await;
    let documented = documented_routes(&fetch_document(&app).await);
    let served = served_routes(&app).await;
    assert_eq!(served, documented, "(method, path) → behind the token guard: router, then /openapi.json");
    assert!(!served[&("GET".to_owned(), "/openapi.json".to_owned())], "the document is open");
    assert!(served[&("GET".to_owned(), "/clearAll".to_owned())]);
}

#[tokio::test]
async fn docs_api_md_has_a_section_and_a_table_row_for_exactly_the_documented_routes() {
    let app = TestApp::new().await;
    let documented: BTreeSet<Route> = documented_routes(&fetch_document(&app).await).into_keys().collect();
    let markdown = api_md();
    assert_eq!(section_routes(&markdown), documented, "sections of docs/api.md, then /openapi.json");
    assert_eq!(table_routes(&markdown), documented, "rows of the table of routes in docs/api.md, then /openapi.json");
}

#[test]
fn a_route_missing_from_api_md_is_noticed() {
    let markdown = api_md();
    let without_touch = markdown.replace("### `POST /touch`\n", "");
    let touch = ("POST".to_owned(), "/touch".to_owned());
    assert!(section_routes(&markdown).contains(&touch));
    assert!(!section_routes(&without_touch).contains(&touch));
    let without_row = markdown.replace("| `GET /jobs/{id}` |", "| one job |");
    assert!(!table_routes(&without_row).contains(&("GET".to_owned(), "/jobs/{id}".to_owned())));
}

/// Every `$ref` in `value`.
fn references(value: &Value, found: &mut BTreeSet<String>) {
    match value {
        Value::Object(object) => {
            if let Some(Value::String(reference)) = object.get("$ref") {
                found.insert(reference.clone());
            }
            object.values().for_each(|child| references(child, found));
        }
        Value::Array(items) => items.iter().for_each(|child| references(child, found)),
        _ => {}
    }
}

#[tokio::test]
async fn the_document_is_openapi_3_1_with_unique_operations_and_resolvable_references() {
    let app = TestApp::new().await;
    let document = fetch_document(&app).await;
    assert_eq!(document["openapi"], "3.1.0");
    let mut operation_ids = BTreeSet::new();
    for ((method, path), guarded) in documented_routes(&document) {
        let operation = &document["paths"][&path][method.to_ascii_lowercase()];
        let id = operation["operationId"].as_str().unwrap().to_owned();
        assert!(operation_ids.insert(id.clone()), "operationId {id} is used twice");
        let responses = operation["responses"].as_object().unwrap();
        for status in ["200", "500", "503"] {
            assert!(responses.contains_key(status), "{method} {path} lists no {status}");
        }
        assert_eq!(responses.contains_key("401"), guarded, "{method} {path}: 401 where the guard is");
        for parameter in path.split('/').filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}')) {
            let declared = operation["parameters"].as_array().into_iter().flatten();
            let mut in_path = declared.filter(|declared| declared["in"] == "path");
            assert!(in_path.any(|declared| declared["name"] == parameter), "{method} {path}: {parameter}");
        }
    }
    let mut found = BTreeSet::new();
    references(&document, &mut found);
    for reference in found {
        let name = reference.strip_prefix("#/components/schemas/").unwrap();
        assert!(document["components"]["schemas"].get(name).is_some(), "{reference} does not resolve");
    }
}
