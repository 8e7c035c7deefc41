//! racklift.toml as the server commands read it: the built binary with `--config` (or `RACKLIFT_CONFIG`), the file
//! layered under `RACKLIFT_*` variables and flags, and a bad file stopping the start with the key named.

use std::process::Stdio;
use std::time::Duration;

use racklift_testdb::TestDb;
use racklift_tests::racklift_bin;
use tokio::io::{AsyncBufReadExt, BufReader};

fn free_port() -> u16 {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a probe port");
    probe.local_addr().expect("probe address").port()
}

fn write_config(text: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("racklift-{}.toml", uuid::Uuid::new_v4()));
    std::fs::write(&path, text).expect("write the configuration");
    path
}

fn command(args: &[&str], database_url: &str) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(racklift_bin());
    command
        .args(args)
        .env_remove("RACKLIFT_CONFIG")
        .env("DATABASE_URL", database_url)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_takes_its_settings_from_the_file_the_environment_and_its_flags() {
    let db = TestDb::new().await;
    let metrics = free_port();
    let config = write_config(&format!(
        "[worker]\nconcurrency = 7\nbatch = 3\nmetrics_listen = \"127.0.0.1:{metrics}\"\n[queue]\nlease_ttl_ms = 9000\n"
    ));
    let config_arg = config.display().to_string();
    let missing_secrets = std::env::temp_dir().join(format!("racklift-no-secrets-{}", uuid::Uuid::new_v4()));
    let mut worker = command(
        &[
            "--log-format",
            "json",
            "worker",
            "--config",
            &config_arg,
            "--concurrency",
            "13",
        ],
        &db.url,
    )
    // The environment wins over the file, the flag over both.
    .env("RACKLIFT_WORKER__CONCURRENCY", "11")
    // A secrets directory not there yet does not stop the start: it is logged, and file: references wait for it.
    .env("RACKLIFT_PATHS__SECRETS_DIR", &missing_secrets)
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn racklift worker");
    let mut lines = BufReader::new(worker.stderr.take().expect("stderr")).lines();
    let mut warned = false;
    let started = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.expect("read stderr") {
            warned |= line.contains("secrets directory does not exist")
                && line.contains(&missing_secrets.display().to_string());
            if line.contains("worker pool started") {
                return line;
            }
        }
        String::new()
    })
    .await
    .expect("the pool starts within 60 s");
    assert!(
        warned,
        "no warning about the missing secrets directory before: {started}"
    );
    assert!(started.contains("\"concurrency\":13"), "{started}");
    // The metrics address came from the file.
    let body = reqwest::get(format!("http://127.0.0.1:{metrics}/metrics"))
        .await
        .expect("metrics at the file's address")
        .text()
        .await
        .expect("body");
    assert!(body.contains("racklift_"), "{body}");

    // `config show` prints the same layering (without flags: the environment over the file), with the database
    // password redacted.
    let shown = command(
        &["config", "show", "--config", &config_arg],
        "postgres://racklift:s3cret-pw@127.0.0.1:1/racklift",
    )
    .env("RACKLIFT_WORKER__CONCURRENCY", "11")
    .output()
    .await
    .expect("run config show");
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.status.success(),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    assert!(
        text.contains("concurrency = 11") && text.contains("batch = 3"),
        "{text}"
    );
    assert!(text.contains("lease_ttl_ms = 9000"), "{text}");
    assert!(
        !text.contains("s3cret-pw"),
        "the database password is shown: {text}"
    );
    assert!(
        text.contains("racklift:redacted@127.0.0.1:1/racklift (from DATABASE_URL)"),
        "{text}"
    );

    worker.kill().await.expect("stop the worker");
    let _ = std::fs::remove_file(&config);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_file_stops_the_start_naming_the_key_and_its_source() {
    let db = TestDb::new().await;
    let cases = [
        ("[worker]\nconcurency = 7\n", "concurency"),
        ("[queue]\nlease_ttl_ms = \"30s\"\n", "lease_ttl_ms"),
        ("[deploy]\npoll_interval_secs = 0\n", "deploy.poll_interval_secs"),
        (
            "[tls]\nbmc_ca_file = \"/nonexistent/bmc-ca.pem\"\n",
            "/nonexistent/bmc-ca.pem",
        ),
        // No unconfined setting: an empty prefix would let env: references name any variable.
        ("[paths]\nsecret_env_prefix = \"\"\n", "paths.secret_env_prefix"),
        // A secrets directory that exists but is not one (a missing one only warns, below).
        ("[paths]\nsecrets_dir = \"/dev/null\"\n", "/dev/null"),
    ];
    for (text, named) in cases {
        let config = write_config(text);
        for role in ["api", "worker"] {
            let out = tokio::time::timeout(
                Duration::from_secs(60),
                command(&[role], &db.url)
                    .env("RACKLIFT_CONFIG", &config)
                    .env("RACKLIFT_METRICS_LISTEN", "127.0.0.1:0")
                    .env("RACKLIFT_API_LISTEN", "127.0.0.1:0")
                    .output(),
            )
            .await
            .expect("a bad configuration fails at once")
            .expect("run racklift");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "racklift {role} started with {text:?}");
            assert!(
                stderr.contains(named),
                "racklift {role} with {text:?} does not name {named}: {stderr}"
            );
        }
        let _ = std::fs::remove_file(&config);
    }
    // Neither a certificate nor the plain-HTTP opt-in: refused at start, naming the key.
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        command(&["api"], &db.url)
            .env("RACKLIFT_API_LISTEN", "127.0.0.1:0")
            .output(),
    )
    .await
    .expect("refused at once")
    .expect("run racklift");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("api.tls_certificate"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = command(&["api", "--config", "/nonexistent/racklift.toml"], &db.url)
        .output()
        .await
        .expect("run racklift");
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/racklift.toml"));
}
