//! Both resolvers against one table of names, and the walk against the swap race the kernel's resolver is held to
//! in `racklift-bmc-access`'s secrets tests.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::*;

/// A scratch directory with `root/` (the confined directory) and `outside/`; removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let base = std::env::temp_dir().join(format!(
            "racklift-confined-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("root/sub")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        std::fs::write(base.join("root/sub/file"), "inside").unwrap();
        std::fs::write(base.join("outside/file"), "outside").unwrap();
        Scratch(base)
    }

    fn root(&self) -> PathBuf {
        self.0.join("root")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn read(root: &Beneath, name: &str, resolver: Resolver) -> Result<String, &'static str> {
    match root.file_using(Path::new(name), Access::Read, resolver) {
        Ok(file) => {
            let mut text = String::new();
            io::Read::read_to_string(&mut &file, &mut text).map_err(|_| "unreadable")?;
            Ok(text)
        }
        Err(OpenError::Outside) => Err("outside"),
        Err(OpenError::Io(e)) if e.kind() == io::ErrorKind::NotFound => Err("missing"),
        Err(OpenError::Io(_)) => Err("io"),
    }
}

/// What reading a name gives: its text, or why not.
type Expected = Result<&'static str, &'static str>;

#[test]
fn names_resolve_only_beneath_the_directory() {
    let scratch = Scratch::new();
    let root_path = scratch.root();
    std::os::unix::fs::symlink("sub", root_path.join("inner-link")).unwrap();
    std::os::unix::fs::symlink(scratch.0.join("outside"), root_path.join("abs-link")).unwrap();
    std::os::unix::fs::symlink("../outside", root_path.join("up-link")).unwrap();
    let root = Beneath::open(&root_path).unwrap();
    // (name, kernel, walk): the walk refuses every link, the kernel only those that leave.
    let cases: &[(&str, Expected, Expected)] = &[
        ("sub/file", Ok("inside"), Ok("inside")),
        ("./sub/file", Ok("inside"), Ok("inside")),
        ("sub/missing", Err("missing"), Err("missing")),
        ("inner-link/file", Ok("inside"), Err("outside")),
        ("abs-link/file", Err("outside"), Err("outside")),
        ("up-link/file", Err("outside"), Err("outside")),
        ("../outside/file", Err("outside"), Err("outside")),
        ("sub/../../outside/file", Err("outside"), Err("outside")),
        ("/etc/hostname", Err("outside"), Err("outside")),
        ("", Err("outside"), Err("outside")),
    ];
    for (name, kernel, walk) in cases {
        let kernel_got = read(&root, name, Resolver::Kernel);
        assert_eq!(kernel_got.as_deref().map_err(|e| *e), *kernel, "kernel {name}");
        let walk_got = read(&root, name, Resolver::Walk);
        assert_eq!(walk_got.as_deref().map_err(|e| *e), *walk, "walk {name}");
    }
}

#[test]
fn the_walk_never_follows_a_directory_swapped_for_a_link() {
    let scratch = Scratch::new();
    let root = Beneath::open(&scratch.root()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let swapper = {
        let (stop, swaps) = (stop.clone(), swaps.clone());
        let (sub, parked, outside) = (
            scratch.root().join("sub"),
            scratch.0.join("parked"),
            scratch.0.join("outside"),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let swapped = std::fs::rename(&sub, &parked)
                    .and_then(|()| std::os::unix::fs::symlink(&outside, &sub))
                    .and_then(|()| std::fs::remove_file(&sub))
                    .and_then(|()| std::fs::rename(&parked, &sub));
                if swapped.is_err() {
                    return;
                }
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let started = Instant::now();
    let mut reads = 0u64;
    while reads < 20_000 || started.elapsed() < Duration::from_secs(2) {
        for resolver in [Resolver::Walk, Resolver::Kernel] {
            if let Ok(text) = read(&root, "sub/file", resolver) {
                assert_eq!(text, "inside", "{resolver:?} read {reads} left the directory");
            }
        }
        reads += 1;
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    assert!(swaps.load(Ordering::Relaxed) >= 1000, "{swaps:?}");
}

#[test]
fn relative_names_of_absolute_paths_under_the_directory() {
    let scratch = Scratch::new();
    let root = scratch.root();
    let cases: &[(PathBuf, Option<&str>)] = &[
        (PathBuf::from("sub/file"), Some("sub/file")),
        (root.join("sub/file"), Some("sub/file")),
        (scratch.0.join("outside/file"), None),
        (root.clone(), None),
        (PathBuf::new(), None),
    ];
    for (path, want) in cases {
        assert_eq!(
            relative_name(&root, path).as_deref(),
            want.map(Path::new),
            "{path:?}"
        );
    }
}

#[test]
fn a_rewrite_in_place_at_the_same_size_changes_the_stamp() {
    let scratch = Scratch::new();
    let path = scratch.root().join("sub/file");
    let stamp = || FileStamp::of(&std::fs::metadata(&path).unwrap());
    let before = stamp();
    assert_eq!(before, stamp(), "a stamp is stable while nothing changes");
    let (digest, len) = sha256_hex(&File::open(&path).unwrap()).unwrap();
    assert_eq!(len, 6);
    // Wait on the condition, not a fixed time: the change time moves with the write on any clock granularity.
    let deadline = Instant::now() + Duration::from_secs(5);
    while stamp() == before && Instant::now() < deadline {
        std::fs::write(&path, "INSIDE").unwrap();
    }
    assert_ne!(stamp(), before);
    assert_ne!(sha256_hex(&File::open(&path).unwrap()).unwrap().0, digest);
}
