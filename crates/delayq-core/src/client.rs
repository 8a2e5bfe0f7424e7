//! The client subcommands: thin HTTP calls that print the server's answer, as a
//! table for people or, with `--json`, as the server sent it.

use anyhow::{bail, Context};
use delayq_common::{Group, JobId, Topic};
use serde_json::{json, Value};

use crate::cli::{ClientCommand, ServerArg};
use crate::render::Shown;

pub(crate) async fn run(command: ClientCommand) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let (answer, json_output, shown) = match command {
        ClientCommand::Push { server, topic, body, delay, id } => {
            let job = match id {
                Some(id) => json!({"topic": topic, "body": body, "delay": delay, "id": id}),
                None => json!({"topic": topic, "body": body, "delay": delay}),
            };
            let answer = send(authorized(http.post(url(&server, "/push")), &server).json(&job)).await?;
            (answer, server.json, Shown::Pushed)
        }
        ClientCommand::Pop { server, topic, count, timeout, consumer, group } => {
            let mut query = vec![("topic", topic), ("count", count.to_string()), ("timeout", timeout.to_string())];
            if let Some(consumer) = consumer {
                query.push(("consumer", consumer));
            }
            if let Some(group) = group {
                query.push(("group", group));
            }
            let request = http.get(url(&server, "/pop")).query(&query);
            (send(authorized(request, &server)).await?, server.json, Shown::Popped)
        }
        ClientCommand::Finish { server, id, attempt, group } => {
            let mut query = vec![("jobId", id)];
            if let Some(attempt) = attempt {
                query.push(("attempt", attempt.to_string()));
            }
            if let Some(group) = group {
                query.push(("group", group));
            }
            let answer = send(authorized(http.post(url(&server, "/finish")).query(&query), &server)).await?;
            (answer, server.json, Shown::Finished)
        }
        ClientCommand::Stats { server } => {
            let answer = send(authorized(http.get(url(&server, "/stats")), &server)).await?;
            (answer, server.json, Shown::Stats)
        }
        // The names go into the path: checked first, so none can change the URL.
        ClientCommand::Run { server, id } => {
            let id = JobId::parse(id)?;
            let answer = send(authorized(http.post(url(&server, &format!("/jobs/{id}/run"))), &server)).await?;
            (answer, server.json, Shown::Pushed)
        }
        ClientCommand::Retry { server, id } => {
            let id = JobId::parse(id)?;
            let answer = send(authorized(http.post(url(&server, &format!("/jobs/{id}/retry"))), &server)).await?;
            (answer, server.json, Shown::Pushed)
        }
        ClientCommand::Pause { server, topic } => {
            let topic = Topic::parse(topic)?;
            let answer = send(authorized(http.post(url(&server, &format!("/topics/{topic}/pause"))), &server)).await?;
            (answer, server.json, Shown::Paused)
        }
        ClientCommand::Resume { server, topic } => {
            let topic = Topic::parse(topic)?;
            let answer = send(authorized(http.post(url(&server, &format!("/topics/{topic}/resume"))), &server)).await?;
            (answer, server.json, Shown::Paused)
        }
        ClientCommand::Group { server, topic, group, drop } => {
            let (topic, group) = (Topic::parse(topic)?, Group::parse(group)?);
            let path = url(&server, &format!("/topics/{topic}/groups/{group}"));
            let request = if drop { http.delete(path) } else { http.put(path) };
            let answer = send(authorized(request, &server)).await?;
            (answer, server.json, Shown::Group { topic, group, dropped: drop })
        }
    };
    let succeeded = answer.get("success") == Some(&Value::Bool(true));
    if json_output {
        println!("{}", serde_json::to_string_pretty(&answer)?);
    } else if succeeded {
        print!("{}", shown.render(answer.get("data").unwrap_or(&Value::Null)));
    }
    if !succeeded {
        bail!("the server refused: {}", answer.get("message").and_then(Value::as_str).unwrap_or("no reason given"));
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
