//! Fuzz targets of the install media server's HTTP Range handling ([`racklift_api::plan_ranges`]): bounded runs
//! under the normal test run, the harness and how to run them longer in `crates/fuzz`.
//!
//! - `media_range_header`: any header bytes (the corpus holds what BMCs send: iDRAC, iLO, XCC and Supermicro
//!   reading 4 KiB to 1 MiB blocks, multipart and suffix ranges, and garbage) against files of several lengths.
//! - `media_range_model`: generated `bytes=a-b`, `bytes=a-` and `bytes=-n` against an independent model.

use std::ops::RangeInclusive;

use bolero::generator::TypeGenerator;
use racklift_api::{MAX_RANGES, RangePlan, plan_ranges};
use racklift_fuzz::fuzz_target;

/// File lengths every header is checked against: empty, tiny, around a BMC block, an ISO, and the largest.
const SIZES: [u64; 9] = [0, 1, 2, 4095, 4096, 1 << 20, 734_003_200, u64::MAX - 1, u64::MAX];

/// What every plan must satisfy, whatever the input.
fn check_contract(value: &[u8], size: u64, plan: &RangePlan) {
    let RangePlan::Parts(ranges) = plan else {
        return;
    };
    assert!(!ranges.is_empty(), "{value:?} / {size}: an empty 206");
    assert!(
        ranges.len() <= MAX_RANGES,
        "{value:?} / {size}: {} ranges",
        ranges.len()
    );
    for r in ranges {
        assert!(
            r.start() <= r.end() && *r.end() < size,
            "{value:?} / {size}: {r:?} is not inside the file"
        );
    }
    // At most one range starts inside the ones before it (sorted by start): more is a 416, since overlapping
    // ranges only make a response larger than the file.
    let mut sorted: Vec<&RangeInclusive<u64>> = ranges.iter().collect();
    sorted.sort_by_key(|r| *r.start());
    let mut overlaps = 0;
    let mut max_end = *sorted[0].end();
    for r in &sorted[1..] {
        overlaps += usize::from(r.start() <= &max_end);
        max_end = max_end.max(*r.end());
    }
    assert!(overlaps <= 1, "{value:?} / {size}: {overlaps} overlaps");
    if !value.get(..6).is_some_and(|p| p.eq_ignore_ascii_case(b"bytes=")) {
        panic!("{value:?} / {size}: ranges from a header that does not start with bytes=");
    }
}

/// One range-spec of the simple forms, as the model sees it.
#[derive(Clone, Copy, Debug)]
enum Spec {
    Closed(u64, u64),
    From(u64),
    Suffix(u64),
}

/// RFC 9110 §14.1.2 for one simple range-spec, written from the RFC rather than from the library.
fn model(spec: Spec, size: u64) -> RangePlan {
    let part = |s: u64, e: u64| RangePlan::Parts(vec![s..=e]);
    match spec {
        // A last-pos before the first-pos is invalid: the header is ignored.
        Spec::Closed(a, b) if a > b => RangePlan::Whole,
        Spec::Closed(a, _) | Spec::From(a) if a >= size => RangePlan::Unsatisfiable,
        Spec::Closed(a, b) => part(a, b.min(size - 1)),
        Spec::From(a) => part(a, size - 1),
        Spec::Suffix(0) => RangePlan::Unsatisfiable,
        // An empty file has nothing to select; the whole (empty) file is the answer.
        Spec::Suffix(_) if size == 0 => RangePlan::Whole,
        Spec::Suffix(n) => part(size - n.min(size), size - 1),
    }
}

/// Reads `bytes=a-b`, `bytes=a-` or `bytes=-n` (canonical digits only), to compare corpus inputs with the model.
fn simple_form(value: &[u8]) -> Option<Spec> {
    let rest = std::str::from_utf8(value).ok()?.strip_prefix("bytes=")?;
    let number = |s: &str| {
        (!s.is_empty() && s.len() <= 19 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let (a, b) = rest.split_once('-')?;
    match (a.is_empty(), b.is_empty()) {
        (true, false) => Some(Spec::Suffix(number(b)?)),
        (false, true) => Some(Spec::From(number(a)?)),
        (false, false) => Some(Spec::Closed(number(a)?, number(b)?)),
        (true, true) => None,
    }
}

/// Every header, against every length, never panics and keeps the contract; simple forms match the model.
#[test]
fn media_range_header() {
    fuzz_target!("media_range_header", |input: &[u8]| {
        // Random bytes seldom start with `bytes=`, let alone continue with digits: each input is also tried
        // behind the unit, and spelled in the alphabet of range-sets, so random runs reach past the prefix.
        let mut prefixed = b"bytes=".to_vec();
        prefixed.extend_from_slice(input);
        let mut spelled = b"bytes=".to_vec();
        spelled.extend(input.iter().map(|b| b"0123456789-,- \t9"[usize::from(*b) % 16]));
        // A length drawn from the input itself, beside the fixed ones, so lengths near the numbers in it occur.
        let drawn = input.iter().fold(0u64, |h, b| h.rotate_left(5) ^ u64::from(*b));
        for value in [input, &prefixed, &spelled] {
            for size in SIZES.into_iter().chain([drawn, drawn % 65_536]) {
                let plan = plan_ranges(Some(value), size, MAX_RANGES);
                check_contract(value, size, &plan);
                if let Some(spec) = simple_form(value) {
                    assert_eq!(plan, model(spec, size), "{spec:?} / {size}");
                }
            }
        }
    });
}

/// A number of a range-spec, mostly near the file's edges, where off-by-one mistakes live.
#[derive(Clone, Copy, Debug, TypeGenerator)]
enum Num {
    Zero,
    One,
    BeforeEnd,
    End,
    PastEnd,
    Small(u16),
    Any(u64),
}

impl Num {
    fn resolve(self, size: u64) -> u64 {
        match self {
            Num::Zero => 0,
            Num::One => 1,
            Num::BeforeEnd => size.saturating_sub(1),
            Num::End => size,
            Num::PastEnd => size.saturating_add(1),
            Num::Small(n) => u64::from(n),
            Num::Any(n) => n,
        }
    }
}

#[derive(Clone, Copy, Debug, TypeGenerator)]
enum Form {
    Closed(Num, Num),
    From(Num),
    Suffix(Num),
}

/// A file length: the edges, a BMC block, an ISO, or anything.
#[derive(Clone, Copy, Debug, TypeGenerator)]
enum Size {
    Empty,
    One,
    Block,
    Iso,
    Small(u16),
    Any(u64),
}

/// A generated simple Range request: the spec, how `bytes=` is spelled, and the file's length.
#[derive(Clone, Copy, Debug, TypeGenerator)]
struct Request {
    form: Form,
    /// `bytes=` as `bytes=`, `Bytes=` or `BYTES=` (the unit is case-insensitive).
    unit: u8,
    /// Leading zeros on the numbers (allowed: digits are digits).
    zeros: u8,
    size: Size,
}

impl Request {
    fn size(&self) -> u64 {
        match self.size {
            Size::Empty => 0,
            Size::One => 1,
            Size::Block => 4096,
            Size::Iso => 734_003_200,
            Size::Small(n) => u64::from(n),
            Size::Any(n) => n,
        }
    }
}

#[test]
fn media_range_model() {
    fuzz_target!(
        "media_range_model",
        bolero::generator::produce::<Request>(),
        |input: &Request| {
            let size = input.size();
            let zeros = "0".repeat(usize::from(input.zeros % 3));
            let unit = ["bytes=", "Bytes=", "BYTES="][usize::from(input.unit % 3)];
            let (spec, text) = match input.form {
                Form::Closed(a, b) => {
                    let (a, b) = (a.resolve(size), b.resolve(size));
                    (Spec::Closed(a, b), format!("{unit}{zeros}{a}-{zeros}{b}"))
                }
                Form::From(a) => {
                    let a = a.resolve(size);
                    (Spec::From(a), format!("{unit}{zeros}{a}-"))
                }
                Form::Suffix(n) => {
                    let n = n.resolve(size);
                    (Spec::Suffix(n), format!("{unit}-{zeros}{n}"))
                }
            };
            let plan = plan_ranges(Some(text.as_bytes()), size, MAX_RANGES);
            check_contract(text.as_bytes(), size, &plan);
            assert_eq!(plan, model(spec, size), "{text} / {size}");
        }
    );
}

/// The model and the simple-form reader agree with a few hand-checked cases, so a broken model cannot make the
/// targets above pass vacuously.
#[test]
fn the_model_matches_hand_checked_answers() {
    let parts = |s, e| RangePlan::Parts(vec![s..=e]);
    assert_eq!(model(Spec::Closed(0, 4095), 1 << 20), parts(0, 4095));
    assert_eq!(model(Spec::Closed(100, 1 << 30), 1000), parts(100, 999));
    assert_eq!(model(Spec::Closed(1000, 1000), 1000), RangePlan::Unsatisfiable);
    assert_eq!(model(Spec::Closed(5, 4), 1000), RangePlan::Whole);
    assert_eq!(model(Spec::From(999), 1000), parts(999, 999));
    assert_eq!(model(Spec::Suffix(4096), 1000), parts(0, 999));
    assert_eq!(model(Spec::Suffix(0), 1000), RangePlan::Unsatisfiable);
    assert_eq!(model(Spec::Suffix(1), 0), RangePlan::Whole);
    assert!(matches!(simple_form(b"bytes=0-511"), Some(Spec::Closed(0, 511))));
    assert!(simple_form(b"bytes=0-1,5-6").is_none() && simple_form(b"bytes=+1-2").is_none());
    let plan = plan_ranges(Some(b"bytes=0-0,2-2,4-4"), 10, MAX_RANGES);
    assert_eq!(plan, RangePlan::Parts(vec![0..=0, 2..=2, 4..=4]));
    assert_eq!(
        plan_ranges(Some(b"bytes=\xff0-1"), 10, MAX_RANGES),
        RangePlan::Whole
    );
    assert_eq!(plan_ranges(None, 10, MAX_RANGES), RangePlan::Whole);
}

/// Any bytes as the body of every operation: decoding and the checks after it never panic, and every refusal is
/// a 4xx naming the field to blame (the error contract clients rely on).
#[test]
fn api_bodies() {
    fuzz_target!("api_bodies", |input: &[u8]| {
        for (body, verdict) in racklift_api::fuzzing::request_bodies(input) {
            if let Err(e) = verdict {
                assert!(
                    e.status.is_client_error(),
                    "{body}: {} for {:?}",
                    e.status,
                    String::from_utf8_lossy(input)
                );
                assert!(
                    e.field.as_deref().is_some_and(|f| !f.is_empty()),
                    "{body}: {e} names no field, for {:?}",
                    String::from_utf8_lossy(input)
                );
            }
        }
    });
}
