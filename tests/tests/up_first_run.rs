//! `racklift up` as a newcomer runs it: the built binary started from a checkout inside a directory closed to other
//! users (a clone under `/root`, mode 0700, when the tests run as root), with no `DATABASE_URL`, so it starts its
//! own PostgreSQL. Also `up --demo` on a real terminal (tmux), where the live table must stay free of log lines,
//! and closing that terminal (SIGHUP) must stop the embedded PostgreSQL.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use racklift_tests::{racklift_bin, wait_for};
use tokio::io::{AsyncBufReadExt, BufReader};

/// A checkout inside a directory only its owner may enter, as `~/racklift` under a 0700 home.
struct ClosedCheckout {
    home: PathBuf,
    checkout: PathBuf,
}

impl ClosedCheckout {
    fn new() -> ClosedCheckout {
        use std::os::unix::fs::PermissionsExt;
        let home = std::env::temp_dir().join(format!("racklift-home-{}", uuid::Uuid::new_v4()));
        let checkout = home.join("racklift");
        std::fs::create_dir_all(&checkout).expect("create the checkout");
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).expect("close the home");
        ClosedCheckout { home, checkout }
    }
}

impl Drop for ClosedCheckout {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// The embedded server's directory from `up`'s banner line `racklift is up (database: embedded PostgreSQL in DIR).`
fn embedded_dir(banner: &str) -> Option<PathBuf> {
    let rest = banner.split("(database: embedded PostgreSQL in ").nth(1)?;
    Some(PathBuf::from(rest.split(").").next()?.trim()))
}

/// Whether a PostgreSQL still runs on `dir`: its postmaster.pid exists.
fn postgres_running(dir: &Path) -> bool {
    dir.join("pgdata/postmaster.pid").exists()
}

/// Checks where the database went: relocated out of the closed checkout when running as root, in it otherwise.
fn check_location(dir: &Path, checkout: &Path) {
    if running_as_root() {
        assert!(
            dir.starts_with(racklift_pgembed_base()),
            "as root, the database must move where the postgres user can reach it: {}",
            dir.display()
        );
    } else {
        assert!(dir.starts_with(checkout), "{}", dir.display());
    }
}

fn racklift_pgembed_base() -> &'static str {
    "/var/lib/racklift"
}

/// Removes a relocated database directory this test created (it lives outside the temporary checkout).
fn remove_relocated(dir: &Path) {
    if dir.starts_with(racklift_pgembed_base()) {
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_runs_from_a_checkout_in_a_closed_home_and_stops_its_database_on_sigterm() {
    let checkout = ClosedCheckout::new();
    let mut child = tokio::process::Command::new(racklift_bin())
        .args(["up", "--demo", "--listen", "127.0.0.1:0", "--servers", "2"])
        .current_dir(&checkout.checkout)
        // The newcomer's machine: no database configured, so `up` embeds one.
        .env_remove("DATABASE_URL")
        .env_remove("RACKLIFT_CONFIG")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn racklift up");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut out = Vec::new();
    let finished = tokio::time::timeout(Duration::from_secs(240), async {
        while let Some(line) = lines.next_line().await.expect("read stdout") {
            out.push(line.clone());
            if line.contains("deployments finished") {
                return true;
            }
        }
        false
    })
    .await;
    let text = out.join("\n");
    assert_eq!(
        finished.ok(),
        Some(true),
        "up --demo did not finish its rack:\n{text}"
    );
    let dir = embedded_dir(&text).unwrap_or_else(|| panic!("no embedded database in the banner:\n{text}"));
    check_location(&dir, &checkout.checkout);
    assert!(
        text.contains("2 deployments finished") && text.contains("2 completed"),
        "{text}"
    );
    // Without a terminal the demo prints plain lines, one per state change, never progress-bar redraws.
    assert!(!text.contains('\r') && !text.contains('\u{1b}'), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("sim-0000") && l.contains("Completed")),
        "{text}"
    );

    // The API the banner names answers with the token it printed.
    let api = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("API:"))
        .and_then(|l| l.split_whitespace().next())
        .expect("API line")
        .to_owned();
    let token = text
        .lines()
        .find_map(|l| l.split("RACKLIFT_TOKEN=").nth(1))
        .expect("token line")
        .trim()
        .to_owned();
    // Served over HTTPS with the certificate generated in the data directory, which the banner names.
    assert!(api.starts_with("https://"), "{text}");
    assert!(text.contains("--cacert"), "{text}");
    let ca = std::fs::read(checkout.checkout.join(".racklift/tls/api.crt")).expect("the API's certificate");
    let servers: serde_json::Value = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).expect("PEM"))
        .build()
        .expect("client")
        .get(format!("{api}/servers"))
        .bearer_auth(&token)
        .send()
        .await
        .expect("reach the API")
        .json()
        .await
        .expect("JSON");
    assert_eq!(servers.as_array().map(Vec::len), Some(2), "{servers}");

    // The rack's password and image sit in the data directory's own confined directories (the deployments above
    // read them through the confinement), the secrets one closed to other users.
    {
        use std::os::unix::fs::PermissionsExt;
        let data = checkout.checkout.join(".racklift");
        let secrets = std::fs::metadata(data.join("secrets")).expect("the secrets directory");
        assert_eq!(secrets.permissions().mode() & 0o777, 0o700);
        assert!(data.join("secrets/bmc-password").is_file());
        assert!(data.join("images/incusos-demo.iso").is_file());
    }

    let pid = child.id().expect("running").to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("up exits after SIGTERM")
        .expect("wait");
    assert!(exit.success(), "{exit:?}");
    assert!(
        !postgres_running(&dir),
        "SIGTERM left PostgreSQL running in {}",
        dir.display()
    );
    remove_relocated(&dir);
}

/// `racklift up ARGS` in a tmux session of its own (its own socket, so the test neither sees nor disturbs anyone's
/// sessions), run from a checkout in a closed home with no database configured and logs at info.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(checkout: &ClosedCheckout, up_args: &str, (width, height): (u16, u16)) -> Tmux {
        let tmux = Tmux {
            socket: format!("racklift-test-{}", uuid::Uuid::new_v4()),
        };
        let command = format!(
            "cd {} && exec env -u DATABASE_URL -u RACKLIFT_CONFIG RUST_LOG=info {} up {up_args}",
            checkout.checkout.display(),
            racklift_bin().display()
        );
        let (width, height) = (width.to_string(), height.to_string());
        let started = tmux.run(&[
            "new-session",
            "-d",
            "-s",
            "up",
            "-x",
            &width,
            "-y",
            &height,
            &command,
        ]);
        assert!(
            started.status.success(),
            "{}",
            String::from_utf8_lossy(&started.stderr)
        );
        tmux
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux is installed (.ci/run installs it)")
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "up"]).stdout).into_owned()
    }

    /// The screen once `done` holds for it, checking every screen on the way with `each`; one every 200 ms is
    /// enough to catch a log line, which would stay until scrolled away.
    async fn screen_when(&self, what: &str, done: impl Fn(&str) -> bool, each: impl Fn(&str)) -> String {
        let mut last = String::new();
        wait_for(Duration::from_secs(240), what, || {
            last = self.screen();
            each(&last);
            let finished = done(&last);
            async move {
                if !finished {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                finished
            }
        })
        .await;
        last
    }

    /// The embedded database's directory from the banner, whose line the terminal may have wrapped.
    fn database_dir(screen: &str) -> PathBuf {
        let joined: String = screen.lines().map(str::trim_end).collect::<Vec<_>>().join("");
        embedded_dir(&joined).unwrap_or_else(|| panic!("no embedded database in the banner:\n{screen}"))
    }

    /// Closes the terminal, which sends SIGHUP to the process in it, and waits for PostgreSQL in `dir` to stop.
    async fn hang_up(&self, dir: &Path) {
        self.run(&["kill-session", "-t", "up"]);
        wait_for(
            Duration::from_secs(60),
            "SIGHUP to stop the embedded PostgreSQL",
            || {
                let running = postgres_running(dir);
                async move { !running }
            },
        )
        .await;
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// Marks of a log line (tracing's text format): a level, or a module path.
fn log_lines(screen: &str) -> Vec<&str> {
    screen
        .lines()
        .filter(|l| {
            [" INFO ", " WARN ", " ERROR ", " DEBUG ", "racklift_"]
                .iter()
                .any(|m| l.contains(m))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_table_stays_clean_on_a_terminal_and_a_hangup_stops_postgres() {
    let checkout = ClosedCheckout::new();
    let tmux = Tmux::start(&checkout, "--demo --listen 127.0.0.1:0 --servers 4", (160, 45));
    // Every screen while the rack deploys: logs (at info, so there are many) must never land on it.
    let last = tmux
        .screen_when(
            "the demo to finish its rack",
            |screen| screen.contains("deployments finished"),
            |screen| {
                let logs = log_lines(screen);
                assert!(
                    logs.is_empty(),
                    "log lines inside the demo's screen: {logs:?}\n{screen}"
                );
            },
        )
        .await;
    assert!(
        last.contains("SERVER") && last.contains("STATE"),
        "no table header:\n{last}"
    );
    for i in 0..4 {
        let name = format!("sim-{i:04}");
        assert!(
            last.lines().any(|l| l.contains(&name) && l.contains("Completed")),
            "{name} is not shown completed:\n{last}"
        );
    }
    // The logs went to the file the banner names.
    let log = last
        .lines()
        .find_map(|l| l.trim().strip_prefix("logs:"))
        .map(|p| PathBuf::from(p.trim()))
        .unwrap_or_else(|| panic!("no log file named:\n{last}"));
    let logged = std::fs::read_to_string(&log).expect("read the log file");
    assert!(logged.contains("INFO"), "{}", log.display());

    let dir = Tmux::database_dir(&last);
    check_location(&dir, &checkout.checkout);
    assert!(postgres_running(&dir));
    tmux.hang_up(&dir).await;
    remove_relocated(&dir);
}

/// Without `--demo` the logs go to the terminal itself; closing it must still stop PostgreSQL, though every log line
/// written after the hangup fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hangup_stops_postgres_when_the_logs_go_to_the_closed_terminal() {
    let checkout = ClosedCheckout::new();
    let tmux = Tmux::start(&checkout, "--listen 127.0.0.1:0 --servers 1", (200, 50));
    let screen = tmux
        .screen_when(
            "racklift up to start",
            |screen| screen.contains("Press Ctrl-C to stop"),
            |_| {},
        )
        .await;
    let dir = Tmux::database_dir(&screen);
    assert!(postgres_running(&dir));
    tmux.hang_up(&dir).await;
    remove_relocated(&dir);
}
