//! The scenario's REST face: `API.md`'s routes and envelopes.

use super::*;

#[derive(Clone)]
pub(super) struct Rest {
    http: reqwest::Client,
    base_url: String,
    token: String,
}

impl Rest {
    pub(super) fn new(base_url: &str, token: &str) -> Rest {
        Rest { http: reqwest::Client::new(), base_url: base_url.to_owned(), token: token.to_owned() }
    }

    /// Sends a request and returns `data`, or the refusal.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<Value>,
    ) -> Outcome<Value> {
        let mut request = self.http.request(method, format!("{}{path}", self.base_url)).query(query);
        if !self.token.is_empty() {
            request = request.bearer_auth(&self.token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("rest request");
        let status = response.status().as_u16();
        let envelope: Value = response.json().await.expect("a JSON envelope");
        assert_eq!(envelope["success"], status == 200, "envelope agrees with status {status}: {envelope}");
        if status == 200 {
            return Ok(envelope["data"].clone());
        }
        let message = envelope["message"].as_str().expect("message").to_owned();
        let kind = match status {
            400 => Kind::Invalid,
            404 => Kind::NotFound,
            409 if is_wrong_state_message(&message) => Kind::WrongState,
            409 => Kind::Taken,
            401 => Kind::Unauthenticated,
            403 => Kind::Forbidden,
            _ => Kind::Other,
        };
        Err(Failure { kind, message })
    }
}

/// REST folds both conflicts into 409; a wrong state is worded "job {id} is {state}…".
fn is_wrong_state_message(message: &str) -> bool {
    let states = ["delay", "ready", "reserved", "finished", "deleted", "dead", "expired"];
    message.starts_with("job ") && states.iter().any(|state| message.contains(&format!(" is {state}")))
}

fn string(value: &Value) -> String {
    value.as_str().unwrap_or_else(|| panic!("a string: {value}")).to_owned()
}

fn integer(value: &Value) -> i64 {
    value.as_i64().unwrap_or_else(|| panic!("an integer: {value}"))
}

fn optional_string(value: &Value) -> Option<String> {
    value.as_str().map(str::to_owned)
}

fn rest_counts(value: &Value) -> Counts {
    let count = |state: &str| value[state].as_u64().unwrap_or(0);
    Counts {
        delay: count("delay"),
        ready: count("ready"),
        reserved: count("reserved"),
        finished: count("finished"),
        deleted: count("deleted"),
    }
}

/// Reads a job as `GET /jobs/{id}` shows it.
fn rest_details(data: &Value) -> Details {
    let history = data["history"]
        .as_array()
        .expect("history")
        .iter()
        .map(|entry| (string(&entry["state"]), integer(&entry["attempt"]) as u32))
        .collect();
    Details {
        state: string(&data["state"]),
        attempt: integer(&data["attempt"]) as u32,
        run_at: integer(&data["runAt"]),
        result: optional_string(&data["result"]),
        biz_key: optional_string(&data["bizKey"]),
        history,
    }
}

impl Face for Rest {
    fn name(&self) -> &'static str {
        "rest"
    }

    fn with_token(&self, token: &str) -> Rest {
        Rest { token: token.to_owned(), ..self.clone() }
    }

    async fn push(&self, job: &NewJob) -> Outcome<Pushed> {
        let mut fields = Map::new();
        fields.insert("topic".into(), json!(job.topic));
        let optional = [
            ("id", job.id.as_ref().map(|id| json!(id))),
            ("body", job.body.as_ref().map(|body| json!(body))),
            ("delay", job.delay_ms.map(|delay| json!(delay))),
            ("ttr", job.ttr_ms.map(|ttr| json!(ttr))),
            ("priority", job.priority.map(|priority| json!(priority))),
            ("bizKey", job.biz_key.as_ref().map(|key| json!(key))),
        ];
        for (name, value) in optional {
            if let Some(value) = value {
                fields.insert(name.into(), value);
            }
        }
        let data = self.call(reqwest::Method::POST, "/push", &[], Some(Value::Object(fields))).await?;
        Ok(Pushed { id: string(&data["id"]), run_at: integer(&data["runAt"]) })
    }

    async fn pop(&self, topic: &str, count: Option<i64>, timeout_ms: Option<i64>) -> Outcome<Vec<Popped>> {
        let mut query = vec![("topic", topic.to_owned())];
        query.extend(count.map(|count| ("count", count.to_string())));
        query.extend(timeout_ms.map(|timeout| ("timeout", timeout.to_string())));
        let data = self.call(reqwest::Method::GET, "/pop", &query, None).await?;
        let jobs = data.as_array().expect("an array of jobs");
        Ok(jobs
            .iter()
            .map(|job| Popped {
                id: string(&job["id"]),
                body: string(&job["body"]),
                attempt: integer(&job["attempt"]) as u32,
                priority: integer(&job["priority"]) as u32,
                ttr_ms: integer(&job["ttr"]),
                run_at: integer(&job["runAt"]),
                biz_key: optional_string(&job["bizKey"]),
            })
            .collect())
    }

    async fn finish(&self, id: &str, result: Option<&str>) -> Outcome<()> {
        let body = result.map(|result| json!({ "result": result }));
        let data = self.call(reqwest::Method::POST, "/finish", &[("jobId", id.to_owned())], body).await?;
        assert_eq!(data["id"], id);
        Ok(())
    }

    async fn nack(&self, id: &str, delay_ms: Option<i64>) -> Outcome<Nacked> {
        let mut query = vec![("jobId", id.to_owned())];
        query.extend(delay_ms.map(|delay| ("delay", delay.to_string())));
        let data = self.call(reqwest::Method::POST, "/nack", &query, None).await?;
        assert_eq!(data["id"], id);
        Ok(Nacked { run_at: integer(&data["runAt"]), state: string(&data["state"]) })
    }

    async fn touch(&self, id: &str) -> Outcome<()> {
        let data = self.call(reqwest::Method::POST, "/touch", &[("jobId", id.to_owned())], None).await?;
        assert_eq!(data["id"], id);
        Ok(())
    }

    async fn delete(&self, id: &str) -> Outcome<()> {
        let data = self.call(reqwest::Method::GET, "/delete", &[("jobId", id.to_owned())], None).await?;
        assert_eq!(data["id"], id);
        Ok(())
    }

    async fn delete_by_biz_key(&self, topic: &str, biz_key: &str) -> Outcome<()> {
        let query = [("topic", topic.to_owned()), ("bizKey", biz_key.to_owned())];
        self.call(reqwest::Method::POST, "/delete", &query, None).await.map(drop)
    }

    async fn get(&self, id: &str) -> Outcome<Details> {
        let path = format!("/jobs/{id}");
        let data = self.call(reqwest::Method::GET, &path, &[], None).await?;
        Ok(rest_details(&data))
    }

    async fn get_by_biz_key(&self, topic: &str, biz_key: &str) -> Outcome<Details> {
        let query = [("topic", topic.to_owned()), ("bizKey", biz_key.to_owned())];
        let data = self.call(reqwest::Method::GET, "/jobs", &query, None).await?;
        Ok(rest_details(&data))
    }

    async fn restore(&self) -> Outcome<u64> {
        let data = self.call(reqwest::Method::GET, "/reStore", &[("expire", "true".into())], None).await?;
        Ok(data["restored"].as_u64().expect("restored"))
    }

    async fn restore_job(&self, id: &str) -> Outcome<()> {
        let data = self.call(reqwest::Method::GET, "/reStoreJob", &[("jobId", id.to_owned())], None).await?;
        assert_eq!(data["id"], id);
        Ok(())
    }

    async fn counts(&self, topic: &str) -> Outcome<Counts> {
        let data = self.call(reqwest::Method::GET, "/stats", &[], None).await?;
        Ok(rest_counts(&data["topics"][topic]))
    }
}
