//! The harness of racklift's fuzz targets: each target is a bolero test that runs under `cargo test` and
//! `cargo nextest` on stable, bounded in time, over its committed seed corpus and then random inputs, and prints
//! how many inputs it executed; under `cargo bolero test` the same target runs on a fuzzing engine.
//!
//! A target is one [`fuzz_target!`] call in a `tests/*.rs` file of the crate that owns the code. Its corpus is
//! `tests/__fuzz__/<name>/corpus/`, one raw input per file (bolero's layout, so an engine run adds to it).
//!
//! Run longer with bolero's variables, for example `BOLERO_RANDOM_TEST_TIME_MS=600000` (ten minutes per
//! target); `BOLERO_RANDOM_SEED=N` replays the seed a failure printed.

pub mod json;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[doc(hidden)]
pub use bolero;

/// How long a target runs under a normal test run unless `BOLERO_RANDOM_TEST_TIME_MS` says otherwise: the five
/// targets of the workspace then stay well under a minute of a 2-core machine.
pub const DEFAULT_TEST_TIME: Duration = Duration::from_secs(8);

/// Declares a fuzz target inside a `#[test]` function: `fuzz_target!("name", |input: &[u8]| ...)` for raw
/// bytes (the corpus files are fed as they are), or `fuzz_target!("name", generator, |input: &T| ...)` for
/// structured values from a bolero generator. The body panics to report a failure.
#[macro_export]
macro_rules! fuzz_target {
    ($name:literal, |$input:ident: &[u8]| $body:expr) => {{
        let run = $crate::Run::start($name, $crate::corpus_dir!($name));
        $crate::bolero::check!(name = $name)
            .with_test_time($crate::DEFAULT_TEST_TIME)
            .for_each(|$input: &[u8]| {
                run.executed();
                $body
            });
        run.finish();
    }};
    ($name:literal, $generator:expr, |$input:ident: &$ty:ty| $body:expr) => {{
        let run = $crate::Run::start($name, $crate::corpus_dir!($name));
        $crate::bolero::check!(name = $name)
            .with_test_time($crate::DEFAULT_TEST_TIME)
            .with_generator($generator)
            .for_each(|$input: &$ty| {
                run.executed();
                $body
            });
        run.finish();
    }};
}

/// The corpus directory of the target `name` of the calling crate: `tests/__fuzz__/<name>/corpus`.
#[macro_export]
macro_rules! corpus_dir {
    ($name:expr) => {
        ::std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/__fuzz__")
            .join($name)
            .join("corpus")
    };
}

/// One target's run: counts the inputs its body executed and reports them when the target ends.
#[derive(Debug)]
pub struct Run {
    name: &'static str,
    corpus: PathBuf,
    started: Instant,
    executions: AtomicU64,
}

impl Run {
    #[doc(hidden)]
    pub fn start(name: &'static str, corpus: PathBuf) -> Self {
        Run {
            name,
            corpus,
            started: Instant::now(),
            executions: AtomicU64::new(0),
        }
    }

    #[doc(hidden)]
    pub fn executed(&self) {
        self.executions.fetch_add(1, Ordering::Relaxed);
    }

    /// Prints the line a reader of the test output quotes, and fails a target that ran nothing, or less than its
    /// own corpus: a harness that silently stopped feeding inputs would otherwise pass.
    #[doc(hidden)]
    pub fn finish(&self) {
        let executions = self.executions.load(Ordering::Relaxed);
        let corpus = corpus_files(&self.corpus).len() as u64;
        let elapsed = self.started.elapsed();
        println!(
            "fuzz target {}: {executions} executions ({corpus} corpus inputs) in {:.1} s",
            self.name,
            elapsed.as_secs_f64()
        );
        assert!(
            executions > corpus,
            "fuzz target {} executed {executions} inputs, its corpus alone has {corpus}",
            self.name
        );
    }
}

/// The files of a corpus directory, sorted by name (dot files are skipped, as bolero does).
pub fn corpus_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .filter(|p| {
            !p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('.'))
        })
        .collect();
    files.sort();
    files
}

/// Every input of a corpus directory, with its file name.
pub fn corpus(dir: &Path) -> Vec<(String, Vec<u8>)> {
    corpus_files(dir)
        .into_iter()
        .map(|path| {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            (name, bytes)
        })
        .collect()
}
