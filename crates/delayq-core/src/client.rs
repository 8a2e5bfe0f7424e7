//! The client subcommands: thin HTTP calls that print the server's answer.

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::cli::{ClientCommand, ServerArg};

pub(crate) async fn run(command: ClientCommand) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let answer = match command {
        ClientCommand::Push { server, topic, body, delay, id } => {
            let job = match id {
                Some(id) => json!({"topic": topic, "body": body, "delay": delay, "id": id}),
                None => json!({"topic": topic, "body": body, "delay": delay}),
            };
            send(authorized(http.post(url(&server, "/push")), &server).json(&job)).await?
        }
        ClientCommand::Pop { server, topic, count, timeout } => {
            let request = http.get(url(&server, "/pop")).query(&[
                ("topic", topic),
                ("count", count.to_string()),
                ("timeout", timeout.to_string()),
            ]);
            send(authorized(request, &server)).await?
        }
        ClientCommand::Finish { server, id, attempt } => {
            let mut query = vec![("jobId", id)];
            if let Some(attempt) = attempt {
                query.push(("attempt", attempt.to_string()));
            }
            send(authorized(http.post(url(&server, "/finish")).query(&query), &server)).await?
        }
        ClientCommand::Stats { server } => send(authorized(http.get(url(&server, "/stats")), &server)).await?,
    };
    println!("{}", serde_json::to_string_pretty(&answer)?);
    if answer.get("success") != Some(&Value::Bool(true)) {
        bail!("the server refused: {}", answer.get("message").unwrap_or(&Value::Null));
    }
    Ok(())
}

fn url(server: &ServerArg, path: &str) -> String {
    format!("{}{path}", server.server.trim_end_matches('/'))
}

fn authorized(request: reqwest::RequestBuilder, server: &ServerArg) -> reqwest::RequestBuilder {
    match &server.token {
        Some(token) => request.bearer_auth(token),
        None => request,
    }
}

async fn send(request: reqwest::RequestBuilder) -> anyhow::Result<Value> {
    let response = request.send().await.context("cannot reach the server")?;
    response.json().await.context("the server's answer is not JSON")
}
