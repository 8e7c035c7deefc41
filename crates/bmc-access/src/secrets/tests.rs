//! The reference rules, one table each: forms refused before anything is looked up, and what resolving does with
//! every kind of file a secrets directory may hold.

use std::path::{Path, PathBuf};

use super::*;

/// A scratch directory holding a secrets directory and a file outside it; removed when dropped.
struct Scratch {
    base: PathBuf,
}

impl Scratch {
    fn new() -> Scratch {
        let base = std::env::temp_dir().join(format!("racklift-secrets-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(base.join("secrets")).expect("create the secrets directory");
        Scratch { base }
    }

    fn secrets(&self) -> PathBuf {
        self.base.join("secrets")
    }

    fn write(&self, name: &str, contents: &[u8]) {
        let path = self.secrets().join(name);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("create the parent");
        std::fs::write(path, contents).expect("write a secret");
    }

    fn link(&self, name: &str, target: impl AsRef<Path>) {
        std::os::unix::fs::symlink(target, self.secrets().join(name)).expect("create a link");
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("run mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// The variant's name, so tables can say which error they expect.
fn kind(e: &SecretError) -> &'static str {
    match e {
        SecretError::BadForm { .. } => "BadForm",
        SecretError::EnvPrefix { .. } => "EnvPrefix",
        SecretError::EnvNotSet { .. } => "EnvNotSet",
        SecretError::DirUnavailable { .. } => "DirUnavailable",
        SecretError::Outside { .. } => "Outside",
        SecretError::Unreadable { .. } => "Unreadable",
        SecretError::NotRegularFile { .. } => "NotRegularFile",
        SecretError::TooLarge { .. } => "TooLarge",
        SecretError::Deadline { .. } => "Deadline",
        SecretError::Empty { .. } => "Empty",
        SecretError::NotText { .. } => "NotText",
    }
}

fn rules(dir: &Path, prefix: &str) -> Secrets {
    Secrets::new(dir, prefix).expect("a valid prefix")
}

#[test]
fn forms_are_refused_before_anything_is_looked_up() {
    // The directory does not exist: a form refusal must not depend on it.
    let secrets = rules(Path::new("/nonexistent/racklift-secrets"), "RACKLIFT_SECRET_");
    let cases: &[(&str, Result<Reference, &str>)] = &[
        ("file:bmc-password", Ok(Reference::File("bmc-password"))),
        ("file:rack-a/node_1.pw", Ok(Reference::File("rack-a/node_1.pw"))),
        (
            "file:..data/bmc-password",
            Ok(Reference::File("..data/bmc-password")),
        ),
        ("file:.hidden", Ok(Reference::File(".hidden"))),
        (
            "env:RACKLIFT_SECRET_RACK_A",
            Ok(Reference::Env("RACKLIFT_SECRET_RACK_A")),
        ),
        ("file:", Err("BadForm")),
        ("file:/etc/passwd", Err("BadForm")),
        ("file:/proc/self/environ", Err("BadForm")),
        ("file:../x", Err("BadForm")),
        ("file:a/../../x", Err("BadForm")),
        ("file:./x", Err("BadForm")),
        ("file:a//b", Err("BadForm")),
        ("file:a/", Err("BadForm")),
        ("file:a b", Err("BadForm")),
        ("file:a\0b", Err("BadForm")),
        ("file:caf\u{e9}", Err("BadForm")),
        ("file:a\\b", Err("BadForm")),
        ("hunter2", Err("BadForm")),
        ("", Err("BadForm")),
        ("FILE:bmc", Err("BadForm")),
        ("vault:secret/bmc", Err("BadForm")),
        ("env:", Err("BadForm")),
        ("env:1RACKLIFT_SECRET_X", Err("BadForm")),
        ("env:RACKLIFT_SECRET_A-B", Err("BadForm")),
        ("env:RACKLIFT_SECRET_A__B", Err("BadForm")),
        ("env:DATABASE_URL", Err("EnvPrefix")),
        ("env:HOME", Err("EnvPrefix")),
        ("env:RACKLIFT_SECRET_", Err("EnvPrefix")),
        ("env:racklift_secret_x", Err("EnvPrefix")),
    ];
    for (reference, expected) in cases {
        let got = secrets.parse(reference).map_err(|e| kind(&e));
        assert_eq!(&got, expected, "{reference:?}");
    }
    let long = format!("file:{}", "a".repeat(MAX_NAME_BYTES + 1));
    assert_eq!(secrets.parse(&long).map_err(|e| kind(&e)), Err("BadForm"));
}

#[test]
fn a_refusal_never_repeats_the_reference() {
    let secrets = Secrets::default();
    for reference in ["hunter2", "file:/etc/hunter2", "env:HUNTER2"] {
        let err = secrets.parse(reference).expect_err(reference);
        assert!(
            !err.to_string().contains("hunter2") && !err.to_string().contains("HUNTER2"),
            "{err}"
        );
    }
}

#[test]
fn only_usable_prefixes_are_accepted() {
    for (prefix, valid) in [
        ("RACKLIFT_SECRET_", true),
        ("SITE_BMC_", true),
        ("_X", true),
        ("", false),
        ("1X", false),
        ("A-B", false),
        ("A__", false),
        ("A B", false),
    ] {
        assert_eq!(valid_env_prefix(prefix), valid, "{prefix:?}");
        assert_eq!(
            Secrets::new(Path::new("/x"), prefix).is_some(),
            valid,
            "{prefix:?}"
        );
    }
}

#[tokio::test]
async fn files_resolve_only_when_regular_small_and_inside() {
    let scratch = Scratch::new();
    std::fs::write(scratch.base.join("outside"), "other\n").unwrap();
    scratch.write("bmc", b"pw\n");
    scratch.write("crlf", b"pw\r\n\r\n");
    scratch.write("rack-a/node1", b"inner");
    // A Kubernetes Secret volume: the file is a link into a timestamped directory through `..data`.
    scratch.write("..2026_01_01_00_00_00.1/bmc-password", b"mounted\n");
    scratch.link("..data", "..2026_01_01_00_00_00.1");
    scratch.link("bmc-password", "..data/bmc-password");
    scratch.link("link-out", scratch.base.join("outside"));
    scratch.link("link-zero", "/dev/zero");
    scratch.link("link-up", "../outside");
    mkfifo(&scratch.secrets().join("fifo"));
    std::fs::create_dir_all(scratch.secrets().join("a-directory")).unwrap();
    scratch.write("huge", &vec![b'x'; 1024 * 1024]);
    scratch.write("exact", &vec![b'x'; MAX_SECRET_BYTES]);
    scratch.write("over", &vec![b'x'; MAX_SECRET_BYTES + 1]);
    scratch.write("empty", b"");
    scratch.write("newlines", b"\n\r\n");
    scratch.write("binary", &[0xff, 0xfe]);
    let secrets = rules(&scratch.secrets(), "CARGO_PKG_");
    let exact = "x".repeat(MAX_SECRET_BYTES);
    let cases: &[(&str, Result<&str, &str>)] = &[
        ("file:bmc", Ok("pw")),
        ("file:crlf", Ok("pw")),
        ("file:rack-a/node1", Ok("inner")),
        ("file:bmc-password", Ok("mounted")),
        ("file:exact", Ok(&exact)),
        ("file:link-out", Err("Outside")),
        ("file:link-zero", Err("Outside")),
        ("file:link-up", Err("Outside")),
        ("file:fifo", Err("NotRegularFile")),
        ("file:a-directory", Err("NotRegularFile")),
        ("file:huge", Err("TooLarge")),
        ("file:over", Err("TooLarge")),
        ("file:empty", Err("Empty")),
        ("file:newlines", Err("Empty")),
        ("file:binary", Err("NotText")),
        ("file:missing", Err("Unreadable")),
        ("file:rack-a/missing", Err("Unreadable")),
        // Cargo sets the package's name for every test it runs: a variable that exists, under the prefix.
        ("env:CARGO_PKG_NAME", Ok("racklift-bmc-access")),
        ("env:CARGO_PKG_NOT_SET_BY_ANYONE", Err("EnvNotSet")),
        ("env:HOME", Err("EnvPrefix")),
        ("file:/etc/passwd", Err("BadForm")),
    ];
    for (reference, expected) in cases {
        let got = secrets.resolve(reference).await;
        let got = got.as_ref().map(|s| s.expose()).map_err(kind);
        assert_eq!(&got, expected, "{reference}");
    }
}

#[tokio::test]
async fn storing_checks_what_exists_and_accepts_what_is_not_there_yet() {
    let scratch = Scratch::new();
    scratch.write("bmc", b"pw");
    scratch.link("link-out", "/etc/passwd");
    mkfifo(&scratch.secrets().join("fifo"));
    scratch.write("huge", &vec![b'x'; 64 * 1024]);
    let secrets = rules(&scratch.secrets(), DEFAULT_ENV_PREFIX);
    let cases: &[(&str, Result<(), &str>)] = &[
        ("file:bmc", Ok(())),
        ("file:not-yet", Ok(())),
        ("env:RACKLIFT_SECRET_NOT_YET", Ok(())),
        ("file:link-out", Err("Outside")),
        ("file:fifo", Err("NotRegularFile")),
        ("file:huge", Err("TooLarge")),
        ("file:../bmc", Err("BadForm")),
        ("env:PATH", Err("EnvPrefix")),
    ];
    for (reference, expected) in cases {
        let got = secrets.check(reference).await.map_err(|e| kind(&e));
        assert_eq!(&got, expected, "{reference}");
    }
}

#[tokio::test]
async fn a_missing_directory_fails_file_references_naming_it() {
    let scratch = Scratch::new();
    let missing = scratch.base.join("not-created");
    let secrets = rules(&missing, "CARGO_PKG_");
    let err = secrets.resolve("file:bmc").await.expect_err("no directory");
    assert_eq!(kind(&err), "DirUnavailable");
    assert!(err.to_string().contains(&missing.display().to_string()), "{err}");
    // Storing such a reference is fine: the directory may be mounted later.
    secrets
        .check("file:bmc")
        .await
        .expect("stored before the directory exists");
    // Variables do not need it.
    assert!(secrets.resolve("env:CARGO_PKG_NAME").await.is_ok());
    std::fs::create_dir_all(&missing).unwrap();
    std::fs::write(missing.join("bmc"), "late").unwrap();
    let late = secrets.resolve("file:bmc").await.expect("the directory appeared");
    assert_eq!(late.expose(), "late");
}

#[tokio::test]
async fn a_read_that_outlasts_its_deadline_is_abandoned() {
    let (release, wait) = std::sync::mpsc::channel::<()>();
    let (done_tx, done) = std::sync::mpsc::channel::<()>();
    let err = off_runtime("stalled", Duration::from_millis(50), move || {
        // A filesystem that does not answer until the test lets it.
        let _ = wait.recv();
        let _ = done_tx.send(());
        Ok(Vec::<u8>::new())
    })
    .await
    .expect_err("the deadline passes first");
    assert_eq!(kind(&err), "Deadline");
    assert!(err.to_string().contains("file:stalled"), "{err}");
    release.send(()).unwrap();
    done.recv()
        .expect("the abandoned read still finishes on its own thread");
}

#[tokio::test]
async fn a_file_rotated_in_place_is_read_anew() {
    let scratch = Scratch::new();
    scratch.write("bmc", b"first\n");
    let secrets = rules(&scratch.secrets(), DEFAULT_ENV_PREFIX);
    assert_eq!(secrets.resolve("file:bmc").await.unwrap().expose(), "first");
    scratch.write("bmc", b"second\n");
    assert_eq!(secrets.resolve("file:bmc").await.unwrap().expose(), "second");
}

/// A sub-directory of the secrets directory swapped for a link to a directory outside (holding a file of the same
/// name) as fast as a thread can, while the secret is read through `resolve` thousands of times for seconds: no
/// read ever returns the outside file. Checking the name and then opening it would follow the link now and then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_swapped_for_a_link_never_leads_outside() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let scratch = Scratch::new();
    scratch.write("rack/bmc", b"inside\n");
    let outside = scratch.base.join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("bmc"), "outside\n").unwrap();
    let secrets = rules(&scratch.secrets(), DEFAULT_ENV_PREFIX);

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let swapper = {
        let (stop, swaps) = (stop.clone(), swaps.clone());
        let (rack, parked) = (scratch.secrets().join("rack"), scratch.base.join("rack-parked"));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // A step failing (the scratch directory gone after a failed assertion) ends the swapping; the
                // count of swaps says whether it ran.
                let swapped = std::fs::rename(&rack, &parked)
                    .and_then(|()| std::os::unix::fs::symlink(&outside, &rack))
                    .and_then(|()| std::fs::remove_file(&rack))
                    .and_then(|()| std::fs::rename(&parked, &rack));
                if swapped.is_err() {
                    return;
                }
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let started = std::time::Instant::now();
    let (mut reads, mut inside) = (0u64, 0u64);
    while (reads < 5000 || started.elapsed() < Duration::from_secs(3))
        && started.elapsed() < Duration::from_secs(30)
    {
        if let Ok(secret) = secrets.resolve("file:rack/bmc").await {
            assert_eq!(
                secret.expose(),
                "inside",
                "read {reads} returned the file outside the secrets directory"
            );
            inside += 1;
        }
        reads += 1;
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().expect("the swapper ends");
    let swaps = swaps.load(Ordering::Relaxed);
    // The race was run: the directory moved many times, and reads went through between the swaps.
    assert!(
        reads >= 5000 && swaps >= 1000 && inside > 0,
        "reads {reads}, swaps {swaps}, inside {inside}"
    );
}
