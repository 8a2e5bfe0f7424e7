//! Tests of layering and validation.

use figment::Jail;

use super::*;

#[test]
fn defaults_are_the_embedded_single_node() {
    // Inside a jail: it serializes with the tests that set variables.
    Jail::expect_with(|_jail| {
        let config = Config::from_figment(Config::figment(None)).expect("defaults are valid");
        assert_eq!(config.server.http_addr, "127.0.0.1:8080");
        assert_eq!(config.server.grpc_addr, "127.0.0.1:9090");
        assert_eq!(config.scheduler.redis_url, None);
        assert_eq!(config.store.database_url, None);
        assert_eq!(config.limits.max_body_bytes, 65_536);
        assert_eq!(config.jobs.max_retries, 10);
        Ok(())
    });
}

#[test]
fn file_overrides_defaults_and_environment_overrides_file() {
    Jail::expect_with(|jail| {
        jail.create_file("delayq.toml", "[server]\nhttp_addr = \"127.0.0.1:7000\"\n[limits]\nmax_body_bytes = 10\n")?;
        jail.set_env("DELAYQ_HTTP_ADDR", "127.0.0.1:0");
        jail.set_env("DELAYQ_REDIS_URL", "redis://127.0.0.1:6379");
        jail.set_env("DELAYQ_JOBS__MAX_RETRIES", "3");
        jail.set_env("DELAYQ_TEST_REDIS_URL", "redis://ignored");
        let config = Config::load(Some(Path::new("delayq.toml"))).expect("valid");
        assert_eq!(config.server.http_addr, "127.0.0.1:0");
        assert_eq!(config.limits.max_body_bytes, 10);
        assert_eq!(config.scheduler.redis_url.as_deref(), Some("redis://127.0.0.1:6379"));
        assert_eq!(config.jobs.max_retries, 3);
        Ok(())
    });
}

#[test]
fn unknown_keys_are_refused_by_name() {
    Jail::expect_with(|jail| {
        jail.create_file("delayq.toml", "[server]\nhttp_adr = \"x\"\n")?;
        let error = Config::load(Some(Path::new("delayq.toml"))).expect_err("unknown key");
        assert!(error.to_string().contains("http_adr"), "{error}");
        Ok(())
    });
}

#[test]
fn a_shard_count_out_of_range_is_refused_by_name() {
    Jail::expect_with(|jail| {
        jail.set_env("DELAYQ_SCHEDULER__REDIS_SHARDS", "0");
        let error = Config::load(None).expect_err("no shards");
        assert!(error.to_string().contains("scheduler.redis_shards"), "{error}");
        jail.set_env("DELAYQ_SCHEDULER__REDIS_SHARDS", "4");
        assert_eq!(Config::load(None).expect("valid").scheduler.redis_shards, Some(4));
        Ok(())
    });
}

#[test]
fn a_horizon_beyond_twenty_hours_is_refused_by_name() {
    Jail::expect_with(|jail| {
        jail.set_env("DELAYQ_SCHEDULER__HORIZON_MS", "72000001");
        let error = Config::load(None).expect_err("too long a horizon");
        assert_eq!(
            error.to_string(),
            "invalid configuration: scheduler.horizon_ms must be 0 (off) or from 1000 to 72000000"
        );
        jail.set_env("DELAYQ_SCHEDULER__HORIZON_MS", "72000000");
        assert_eq!(Config::load(None).expect("valid").scheduler.horizon_ms, 72_000_000);
        Ok(())
    });
}

#[test]
fn groups_in_the_file_are_checked_by_name() {
    Jail::expect_with(|jail| {
        jail.create_file("delayq.toml", "[groups]\n\"order.paid\" = [\"billing\", \"shipping\"]\n")?;
        let config = Config::load(Some(Path::new("delayq.toml"))).expect("valid");
        assert_eq!(config.groups["order.paid"], ["billing", "shipping"]);
        jail.create_file("delayq.toml", "[groups]\norders = [\"bill ing\"]\n")?;
        let error = Config::load(Some(Path::new("delayq.toml"))).expect_err("a bad group name");
        assert_eq!(
            error.to_string(),
            "invalid configuration: groups \"orders\": group may only contain A-Z a-z 0-9 . _ : -"
        );
        Ok(())
    });
}

#[test]
fn the_registry_forgets_consumers_after_a_second_to_a_day() {
    Jail::expect_with(|jail| {
        assert_eq!(Config::load(None).expect("defaults").consumers.forget_after_ms, 60_000);
        jail.set_env("DELAYQ_CONSUMERS__FORGET_AFTER_MS", "999");
        let error = Config::load(None).expect_err("too short");
        assert_eq!(error.to_string(), "invalid configuration: consumers.forget_after_ms must be from 1000 to 86400000");
        jail.set_env("DELAYQ_CONSUMERS__FORGET_AFTER_MS", "5000");
        assert_eq!(Config::load(None).expect("valid").consumers.forget_after(), std::time::Duration::from_secs(5));
        Ok(())
    });
}

#[test]
fn the_console_is_on_and_read_write_by_default_and_set_by_file_or_environment() {
    Jail::expect_with(|jail| {
        let defaults = Config::load(None).expect("defaults").console;
        assert_eq!((defaults.enabled, defaults.read_only), (true, false));
        jail.create_file("console.toml", "[console]\nenabled = false\n")?;
        jail.set_env("DELAYQ_CONSOLE__READ_ONLY", "true");
        let console = Config::load(Some(std::path::Path::new("console.toml"))).expect("valid").console;
        assert_eq!((console.enabled, console.read_only), (false, true));
        jail.set_env("DELAYQ_CONSOLE__READ_ONLY", "maybe");
        assert!(Config::load(None).is_err(), "not a boolean");
        Ok(())
    });
}

#[test]
fn worker_threads_default_to_one_fewer_than_the_cores_and_zero_is_refused() {
    Jail::expect_with(|jail| {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        let config = Config::load(None).expect("defaults are valid");
        assert_eq!(config.server.worker_threads(), cores.saturating_sub(1).max(1));
        jail.set_env("DELAYQ_SERVER__WORKER_THREADS", "0");
        let error = Config::load(None).expect_err("no threads");
        assert!(error.to_string().contains("server.worker_threads"), "{error}");
        jail.set_env("DELAYQ_SERVER__WORKER_THREADS", "3");
        assert_eq!(Config::load(None).expect("valid").server.worker_threads(), 3);
        Ok(())
    });
}

#[test]
fn the_annotated_example_holds_exactly_the_defaults() {
    let example = include_str!("../../../../config/delayq.toml");
    let figment = Figment::from(Serialized::defaults(Config::default())).merge(Toml::string(example));
    let config = Config::from_figment(figment).expect("the example is valid");
    assert_eq!(config, Config::default());
}

#[test]
fn forward_routes_load_from_the_file() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "delayq.toml",
            r#"
[[forward.routes]]
topics = ["order.*", "payment.timeout"]
sink = "rabbitmq"
url = "amqp://guest:guest@127.0.0.1:5672/%2f"
exchange = "delayq"
routing_key = "{subtopic}"

[[forward.routes]]
topics = ["audit.*"]
sink = "kafka"
brokers = "127.0.0.1:9092"
kafka_topic = "{topic}"

[[forward.routes]]
topics = ["hook.*"]
sink = "webhook"
url = "http://127.0.0.1:9000/due"
"#,
        )?;
        let config = Config::load(Some(Path::new("delayq.toml"))).expect("the documented example is valid");
        let sinks: Vec<&str> = config.forward.routes.iter().map(|route| route.sink.as_str()).collect();
        assert_eq!(sinks, ["rabbitmq", "kafka", "webhook"]);
        assert_eq!(config.forward.routes[0].routing_key.as_deref(), Some("{subtopic}"));
        Ok(())
    });
}

#[test]
fn bad_routes_are_refused_by_name() {
    Jail::expect_with(|jail| {
        jail.create_file("unknown-type.toml", "[[forward.routes]]\ntopics = [\"a\"]\nsink = \"kafak\"\n")?;
        let error = Config::load(Some(Path::new("unknown-type.toml"))).expect_err("unknown sink");
        assert!(error.to_string().contains("forward.routes[0].sink"), "{error}");
        assert!(error.to_string().contains("kafak"), "{error}");
        jail.create_file("unknown-key.toml", "[[forward.routes]]\ntopics = [\"a\"]\nsink = \"log\"\nqueue = \"q\"\n")?;
        let error = Config::load(Some(Path::new("unknown-key.toml"))).expect_err("unknown key");
        assert!(error.to_string().contains("queue"), "{error}");
        Ok(())
    });
}

/// Asserts that loading fails, naming `key` and quoting none of `secrets`.
fn refused_without_secrets(error: ConfigError, key: &str, secrets: &[&str]) {
    let message = error.to_string();
    assert!(message.contains(key), "{key} not named in: {message}");
    for secret in secrets {
        assert!(!message.contains(secret), "{secret} quoted in: {message}");
    }
    let debug = format!("{error:?}");
    for secret in secrets {
        assert!(!debug.contains(secret), "{secret} in the Debug output: {debug}");
    }
}

#[test]
fn text_of_digits_alone_stays_text() {
    Jail::expect_with(|jail| {
        jail.set_env("DELAYQ_NODE_ID", "007");
        jail.set_env("DELAYQ_SCHEDULER__REDIS_PREFIX", "42");
        jail.set_env("DELAYQ_DATA_DIR", "2026");
        let config = Config::load(None).expect("digits are a valid node id, prefix and directory");
        assert_eq!(config.server.node_id.as_deref(), Some("007"));
        assert_eq!(config.scheduler.redis_prefix, "42");
        assert_eq!(config.server.data_dir, PathBuf::from("2026"));
        jail.set_env("DELAYQ_NODE_ID", "\"7\"");
        assert_eq!(Config::load(None).expect("quoted").server.node_id.as_deref(), Some("7"));
        // Keys that are not text are still parsed.
        jail.set_env("DELAYQ_LIMITS__MAX_BODY_BYTES", "1024");
        assert_eq!(Config::load(None).expect("a number").limits.max_body_bytes, 1024);
        Ok(())
    });
}

#[test]
fn malformed_tokens_are_named_without_their_value() {
    Jail::expect_with(|jail| {
        for malformed in ["s3cret-token", "{s3cret-token=1}", "[[s3cret-token]]", "1234567890"] {
            jail.set_env("DELAYQ_AUTH__TOKENS", malformed);
            match Config::load(None) {
                Err(error) => refused_without_secrets(error, "auth.tokens", &["s3cret-token", "1234567890"]),
                Ok(config) => panic!("{malformed:?} loaded as {:?}", config.auth.tokens),
            }
        }
        jail.set_env("DELAYQ_AUTH__TOKENS", "[\"t1\", \"t2\"]");
        jail.set_env("DELAYQ_AUTH__ADMIN_TOKENS", "{adm1n-s3cret=1}");
        let error = Config::load(None).expect_err("malformed admin tokens");
        refused_without_secrets(error, "auth.admin_tokens", &["adm1n-s3cret"]);
        jail.set_env("DELAYQ_AUTH__ADMIN_TOKENS", "[\"a1\"]");
        let config = Config::load(None).expect("well-formed tokens");
        assert_eq!(config.auth.tokens, ["t1", "t2"]);
        assert_eq!(config.auth.admin_tokens, ["a1"]);
        Ok(())
    });
}

#[test]
fn malformed_urls_are_named_without_their_value() {
    Jail::expect_with(|jail| {
        jail.set_env("DELAYQ_DATABASE_URL", "{mysql=\"root:hunter2@db\"}");
        refused_without_secrets(Config::load(None).expect_err("a map"), "store.database_url", &["hunter2"]);
        jail.set_env("DELAYQ_DATABASE_URL", "sqlite://./data/delayq.db");
        jail.set_env("DELAYQ_REDIS_URL", "987654321");
        refused_without_secrets(Config::load(None).expect_err("a number"), "scheduler.redis_url", &["987654321"]);
        jail.set_env("DELAYQ_REDIS_URL", "rediss://:hunter2@redis:6380");
        let error = Config::load(None).expect_err("no TLS");
        assert!(error.to_string().contains("rediss://, Redis over TLS, is not supported"), "{error}");
        refused_without_secrets(error, "scheduler.redis_url", &["hunter2"]);
        // Out of range, but the message does not quote the URL either.
        jail.set_env("DELAYQ_REDIS_URL", "http://:hunter2@redis");
        refused_without_secrets(Config::load(None).expect_err("not redis"), "scheduler.redis_url", &["hunter2"]);
        Ok(())
    });
}

#[test]
fn malformed_route_secrets_are_named_without_their_value() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "secret-type.toml",
            "[[forward.routes]]\ntopics = [\"a\"]\nsink = \"webhook\"\nurl = \"http://h/\"\nsecret = 987654321\n",
        )?;
        let error = Config::load(Some(Path::new("secret-type.toml"))).expect_err("a number");
        refused_without_secrets(error, "secret", &["987654321"]);
        jail.create_file(
            "property-type.toml",
            "[[forward.routes]]\ntopics = [\"a\"]\nsink = \"kafka\"\nbrokers = \"k:9092\"\n\
             kafka_properties = { \"sasl.password\" = 987654321 }\n",
        )?;
        let error = Config::load(Some(Path::new("property-type.toml"))).expect_err("a number");
        refused_without_secrets(error, "kafka_properties", &["987654321"]);
        jail.create_file(
            "url-type.toml",
            "[[forward.routes]]\ntopics = [\"a\"]\nsink = \"rabbitmq\"\nurl = 987654321\n",
        )?;
        let error = Config::load(Some(Path::new("url-type.toml"))).expect_err("a number");
        refused_without_secrets(error, "url", &["987654321"]);
        Ok(())
    });
}

#[test]
fn a_syntax_error_gives_its_place_without_quoting_the_line() {
    Jail::expect_with(|jail| {
        jail.create_file("unquoted.toml", "[auth]\ntokens = [s3cret-token]\n")?;
        let error = Config::load(Some(Path::new("unquoted.toml"))).expect_err("not TOML");
        refused_without_secrets(error, "line 2", &["s3cret-token"]);
        Ok(())
    });
}

#[test]
fn values_that_are_not_secrets_are_still_quoted() {
    Jail::expect_with(|jail| {
        jail.set_env("DELAYQ_STORE__SQLITE_SYNCHRONOUS", "fast");
        let error = Config::load(None).expect_err("unknown mode").to_string();
        assert!(error.contains("store.sqlite_synchronous") && error.contains("fast"), "{error}");
        jail.set_env("DELAYQ_STORE__SQLITE_SYNCHRONOUS", "normal");
        assert_eq!(Config::load(None).expect("valid").store.sqlite_synchronous, crate::SqliteSynchronous::Normal);
        jail.set_env("DELAYQ_LIMITS__MAX_BODY_BYTES", "lots");
        let error = Config::load(None).expect_err("not a number").to_string();
        assert!(error.contains("limits.max_body_bytes") && error.contains("lots"), "{error}");
        Ok(())
    });
}

#[test]
fn the_debug_output_holds_no_secret() {
    let mut config = Config::default();
    config.auth.tokens = vec!["user-s3cret".to_owned()];
    config.auth.admin_tokens = vec!["admin-s3cret".to_owned()];
    config.store.database_url = Some("mysql://root:db-s3cret@mariadb:3306/delayq".to_owned());
    config.scheduler.redis_url = Some("redis://:redis-s3cret@n1:7000,redis://:redis-s3cret@n2:7000".to_owned());
    let webhook = crate::RouteConfig {
        topics: vec!["hook.*".to_owned()],
        sink: "webhook".to_owned(),
        url: Some("https://hook-us3r:hook-s3cret@hooks.example/due?access_token=query-s3cret".to_owned()),
        secret: Some("hmac-s3cret".to_owned()),
        ..crate::RouteConfig::default()
    };
    let rabbit = crate::RouteConfig {
        topics: vec!["order.*".to_owned()],
        sink: "rabbitmq".to_owned(),
        url: Some("amqp://guest:amqp-s3cret@rabbit:5672/%2f".to_owned()),
        ..crate::RouteConfig::default()
    };
    let kafka = crate::RouteConfig {
        topics: vec!["audit.*".to_owned()],
        sink: "kafka".to_owned(),
        brokers: Some("kafka:9092".to_owned()),
        kafka_properties: [("sasl.password", "sasl-s3cret"), ("ssl.key.password", "key-s3cret"), ("linger.ms", "5")]
            .into_iter()
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .collect(),
        ..crate::RouteConfig::default()
    };
    config.forward.routes = vec![webhook, rabbit, kafka];
    for printed in [format!("{config:?}"), format!("{config:#?}")] {
        assert!(!printed.contains("s3cret"), "a secret is printed: {printed}");
        // What is not secret is still there to debug with.
        for visible in ["mariadb:3306", "n2:7000", "hooks.example", "rabbit:5672", "linger.ms", "sasl.password"] {
            assert!(printed.contains(visible), "{visible} missing: {printed}");
        }
    }
}

#[test]
fn missing_explicit_file_is_an_error() {
    let error = Config::load(Some(Path::new("/nonexistent/delayq.toml"))).expect_err("missing");
    assert!(matches!(error, ConfigError::MissingFile(_)));
}

#[test]
fn invalid_values_name_their_key() {
    Jail::expect_with(|jail| {
        jail.set_env("DELAYQ_HTTP_ADDR", "nonsense");
        let error = Config::load(None).expect_err("bad address");
        assert!(error.to_string().contains("server.http_addr"), "{error}");
        jail.set_env("DELAYQ_HTTP_ADDR", "127.0.0.1:0");
        jail.set_env("DELAYQ_DATABASE_URL", "postgres://x");
        let error = Config::load(None).expect_err("bad url");
        assert!(error.to_string().contains("store.database_url"), "{error}");
        Ok(())
    });
}

#[test]
fn the_beanstalk_listener_is_off_unless_an_address_is_given() {
    Jail::expect_with(|jail| {
        assert!(!Config::load(None).expect("defaults").beanstalk.enabled());
        jail.set_env("DELAYQ_BEANSTALK_ADDR", "127.0.0.1:11300");
        jail.set_env("DELAYQ_BEANSTALK__IDLE_TIMEOUT_MS", "5000");
        let config = Config::load(None).expect("valid");
        assert_eq!(config.beanstalk.addr, "127.0.0.1:11300");
        assert_eq!(config.beanstalk.idle_timeout_ms, 5_000);
        jail.set_env("DELAYQ_BEANSTALK_ADDR", "localhost");
        let error = Config::load(None).expect_err("no port");
        assert!(error.to_string().contains("beanstalk.addr"), "{error}");
        jail.set_env("DELAYQ_BEANSTALK_ADDR", "off");
        jail.set_env("DELAYQ_BEANSTALK__MAX_CONNECTIONS", "0");
        let error = Config::load(None).expect_err("no connections");
        assert!(error.to_string().contains("beanstalk.max_connections"), "{error}");
        Ok(())
    });
}
