//! Job arrays: the `--array` syntax, the index set, labels and job references.

use super::*;
use crate::core::array::{
    parse_job_ref, pending_label, task_label, Range, MAX_ARRAY_INDEX, MAX_RANGES,
};
use proptest::prelude::*;
use std::collections::BTreeSet;

fn spec(s: &str) -> ArraySpec {
    ArraySpec::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn set(s: &str) -> Indices {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn members(i: &Indices) -> Vec<u32> {
    i.iter().collect()
}

/// The canonical layout worked out index by index, the definition the
/// range-by-range [`Indices::ranges`] must agree with.
fn reference_layout(m: &[u32]) -> Vec<Range> {
    let run_start = |j: usize| j + 1 < m.len() && m[j + 1] == m[j] + 1;
    let mut out = Vec::new();
    let mut i = 0;
    while i < m.len() {
        if run_start(i) {
            let mut j = i + 1;
            while run_start(j) {
                j += 1;
            }
            out.push(Range::new(m[i], m[j], 1).unwrap());
            i = j + 1;
            continue;
        }
        if i + 1 < m.len() {
            let s = m[i + 1] - m[i];
            let mut j = i;
            while j + 1 < m.len() && m[j + 1] - m[j] == s && !run_start(j + 1) {
                j += 1;
            }
            if j - i + 1 >= 3 {
                out.push(Range::new(m[i], m[j], s).unwrap());
                i = j + 1;
                continue;
            }
        }
        out.push(Range::single(m[i]));
        i += 1;
    }
    out
}

#[test]
fn sbatch_array_syntax() {
    let cases: [(&str, &str, u64); 9] = [
        ("0-99", "0-99", 100),
        ("0-99:2", "0-98:2", 50),
        ("1,3,5-7", "1,3,5-7", 5),
        ("0-15:4", "0-12:4", 4),
        ("7", "7", 1),
        ("0-99%8", "0-99%8", 100),
        ("1-7:2%1", "1-7:2%1", 4),
        ("007,010", "7,10", 2),
        ("0-1000000", "0-1000000", 1_000_001),
    ];
    for (input, shown, count) in cases {
        let a = spec(input);
        assert_eq!(a.to_string(), shown, "{input}");
        assert_eq!(a.task_count(), count, "{input}");
        assert_eq!(spec(shown), a, "{input} round trip");
    }
    assert_eq!(spec("0-99%8").max_running, Some(8));
    assert_eq!(spec("0-99").max_running, None);
}

#[test]
fn ranges_are_normalised() {
    assert_eq!(Range::new(1, 8, 2), Range::new(1, 7, 2));
    assert_eq!(Range::new(1, 8, 2).unwrap().last, 7);
    assert_eq!(Range::new(4, 5, 9), Some(Range::single(4)));
    assert_eq!(Range::new(1, 0, 1), None);
    assert_eq!(Range::new(1, 5, 0), None);
    assert_eq!(Range::new(1, 7, 2).unwrap().len(), 4);
    assert_eq!(Range::new(1, 7, 2).unwrap().to_string(), "1-7:2");
    assert_eq!(Range::single(3).to_string(), "3");
    for (input, shown) in [
        ("1-8:2", "1-7:2"),
        ("5-6", "5-6"),
        ("5-5", "5"),
        ("0-2:2", "0,2"),
    ] {
        assert_eq!(set(input).to_string(), shown, "{input}");
    }
    assert_eq!(
        Indices::from_range(Range {
            first: 3,
            last: 9,
            step: 0
        })
        .to_string(),
        "3-9"
    );
}

#[test]
fn overlapping_and_unordered_parts_are_merged() {
    let cases = [
        ("0-50,40-99", "0-99"),
        ("0-49,50-99", "0-99"),
        ("0-99,10-20:2,30-40:3", "0-99"),
        ("0-10:2,1-11:2", "0-11"),
        ("1-7:2,2-8:2", "1-8"),
        ("5,5,5", "5"),
        ("7,1-3", "1-3,7"),
        ("0-10:5,3", "0,3,5,10"),
        ("0-20:2,10-30:2", "0-30:2"),
        ("9,8,7,6", "6-9"),
    ];
    for (input, shown) in cases {
        assert_eq!(set(input).to_string(), shown, "{input}");
    }
    let model: BTreeSet<u32> = (0..=99)
        .step_by(3)
        .chain((1..=99).step_by(2))
        .chain(50..=60)
        .collect();
    let merged = set("0-99:3,1-99:2,50-60");
    assert_eq!(members(&merged), model.into_iter().collect::<Vec<_>>());
}

#[test]
fn display_prefers_runs_then_progressions() {
    let cases: [(&[u32], &str); 7] = [
        (&[1, 3, 5, 7], "1-7:2"),
        (&[1, 2, 4, 6, 8], "1-2,4-8:2"),
        (&[4, 5, 7, 9, 11], "4-5,7-11:2"),
        (&[1, 3], "1,3"),
        (&[1, 3, 6, 9, 12], "1,3-12:3"),
        (&[1, 3, 5, 6, 7], "1,3,5-7"),
        (&[], ""),
    ];
    for (m, shown) in cases {
        let i: Indices = m.iter().copied().collect();
        assert_eq!(i.to_string(), shown, "{m:?}");
        assert_eq!(i.ranges(), reference_layout(m), "{m:?}");
    }
}

#[test]
fn each_bad_spec_has_its_own_error() {
    use ArrayError as E;
    let cases: Vec<Case<'_, E>> = vec![
        ("", |e| *e == E::Empty, "empty"),
        ("%4", |e| *e == E::Empty, "empty"),
        ("1,,3", |e| matches!(e, E::EmptyPart { .. }), "\"1,,3\""),
        ("1,", |e| matches!(e, E::EmptyPart { .. }), "empty part"),
        (",1", |e| matches!(e, E::EmptyPart { .. }), "empty part"),
        ("a", |e| matches!(e, E::NotANumber { .. }), "\"a\""),
        (
            "1-b",
            |e| matches!(e, E::NotANumber { .. }),
            "\"b\" in array part \"1-b\"",
        ),
        ("-1", |e| matches!(e, E::NotANumber { .. }), "\"-1\""),
        ("+5", |e| matches!(e, E::NotANumber { .. }), "\"+5\""),
        ("1-5-7", |e| matches!(e, E::NotANumber { .. }), "\"5-7\""),
        ("[1-3]", |e| matches!(e, E::NotANumber { .. }), "\"[1\""),
        ("0-9:x", |e| matches!(e, E::NotANumber { .. }), "\"x\""),
        (
            "9-3",
            |e| {
                matches!(
                    e,
                    E::Reversed {
                        first: 9,
                        last: 3,
                        ..
                    }
                )
            },
            "3-9",
        ),
        ("0-9:0", |e| matches!(e, E::ZeroStep { .. }), "\"0-9:0\""),
        (
            "5:2",
            |e| matches!(e, E::StepWithoutRange { .. }),
            "\"5:2\"",
        ),
        (
            "1000001",
            |e| {
                matches!(
                    e,
                    E::TooHigh {
                        index: 1_000_001,
                        ..
                    }
                )
            },
            "1000000",
        ),
        (
            "0-1000001",
            |e| matches!(e, E::TooHigh { .. }),
            "\"0-1000001\"",
        ),
        (
            "99999999999999999999999",
            |e| matches!(e, E::TooHigh { .. }),
            "above",
        ),
        ("1-5%0", |e| matches!(e, E::ZeroLimit { .. }), "%0"),
        ("1-5%", |e| matches!(e, E::BadLimit { .. }), "'%'"),
        ("1-5%x", |e| matches!(e, E::BadLimit { .. }), "\"x\""),
        ("1-5%2%3", |e| matches!(e, E::BadLimit { .. }), "\"2%3\""),
        ("1-5%-1", |e| matches!(e, E::BadLimit { .. }), "\"-1\""),
        ("1, 3", |e| matches!(e, E::Whitespace { .. }), "white space"),
        (" 1", |e| matches!(e, E::Whitespace { .. }), "white space"),
        (
            "1-5\n",
            |e| matches!(e, E::Whitespace { .. }),
            "white space",
        ),
    ];
    for (input, is, words) in cases {
        let e = ArraySpec::parse(input).expect_err(input);
        assert!(is(&e), "{input}: {e:?}");
        assert!(e.to_string().contains(words), "{input}: {e}");
    }
}

#[test]
fn overlaps_too_costly_to_merge_are_refused() {
    let parts: Vec<String> = [2u32, 3, 5, 7, 11]
        .iter()
        .flat_map(|&s| (0..s).map(move |r| format!("{r}-{MAX_ARRAY_INDEX}:{s}")))
        .collect();
    let e = ArraySpec::parse(&parts.join(",")).unwrap_err();
    assert!(matches!(e, ArrayError::TooComplex { .. }), "{e:?}");
    // Two interleaved halves are within the budget and merge to one run.
    assert_eq!(spec("0-1000000:2,1-999999:2").to_string(), "0-1000000");
}

/// H1 of the second security review: 21 bytes that merge into 333,334
/// ranges (4 MB in memory, in every record and every listing line) are
/// refused, naming the bound; the most ranges allowed still parse, and
/// are small.
#[test]
fn an_array_of_too_many_separate_ranges_is_refused() {
    let e = ArraySpec::parse("0-999999:3,1-999999:3").unwrap_err();
    assert!(
        matches!(
            e,
            ArrayError::TooManyRanges {
                ranges: 333_334,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("more than the 1024"), "{e}");
    // Interleaved steps of 3 make one range `3i-3i+1` per i.
    let pairs = |n: usize| format!("0-{e}:3,1-{e}:3", e = 3 * n - 1);
    let a = spec(&pairs(MAX_RANGES));
    assert_eq!(a.indices.range_count(), MAX_RANGES);
    assert!(
        a.indices.memory_bytes() < 16 << 10,
        "{}",
        a.indices.memory_bytes()
    );
    assert!(matches!(
        ArraySpec::parse(&pairs(MAX_RANGES + 1)),
        Err(ArrayError::TooManyRanges { ranges, .. }) if ranges == MAX_RANGES + 1
    ));
    // A stepped range is one range however many indices it holds.
    assert_eq!(spec("0-999999:3").indices.range_count(), 1);
}

#[test]
fn a_huge_pending_array_is_one_small_range() {
    let mut a = spec("0-99999");
    assert_eq!(a.indices.range_count(), 1);
    assert!(
        a.indices.memory_bytes() < 1024,
        "{}",
        a.indices.memory_bytes()
    );
    for expected in 0..50_000 {
        assert_eq!(a.indices.pop_first(), Some(expected));
    }
    assert_eq!(a.indices.range_count(), 1);
    assert_eq!(a.indices.to_string(), "50000-99999");
    let b = spec("0-999999:2,1-999999:2%4");
    assert_eq!(b.indices.range_count(), 1);
}

#[test]
fn pop_first_takes_indices_in_order() {
    let mut a = set("1,3,5-7");
    let popped: Vec<u32> = std::iter::from_fn(|| a.pop_first()).collect();
    assert_eq!(popped, [1, 3, 5, 6, 7]);
    assert!(a.is_empty() && a.first().is_none() && a.last().is_none());
    let mut b = set("0-6:3");
    assert_eq!((b.pop_first(), b.to_string()), (Some(0), "3,6".into()));
    assert_eq!(b.len(), 2);
}

#[test]
fn remove_and_insert_split_and_join_ranges() {
    let mut a = set("0-9");
    assert!(a.remove(5));
    assert!(!a.remove(5));
    assert!(!a.remove(50));
    assert_eq!(a.to_string(), "0-4,6-9");
    assert!(!a.contains(5) && a.contains(4) && a.contains(6));
    assert!(a.remove(0) && a.remove(9));
    assert_eq!(a.to_string(), "1-4,6-8");
    assert!(a.insert(5));
    assert!(!a.insert(5));
    assert_eq!((a.to_string(), a.range_count()), ("1-8".into(), 1));
    let mut b = set("0-20:2");
    assert!(!b.remove(11));
    assert!(b.remove(10));
    assert_eq!(b.to_string(), "0-8:2,12-20:2");
    assert!(b.insert(11));
    assert_eq!(b.to_string(), "0-8:2,11-12,14-20:2");
    let mut c = Indices::new();
    for i in 0..1000 {
        assert!(c.insert(i));
    }
    assert_eq!((c.range_count(), c.len()), (1, 1000));
    let mut d = Indices::new();
    for i in (0..1000).rev().step_by(2) {
        d.insert(i);
    }
    assert_eq!((d.range_count(), d.to_string()), (1, "1-999:2".into()));
}

#[test]
fn equal_sets_are_equal_however_built() {
    let a: Indices = [1, 3, 4].into_iter().collect();
    let b = set("1,3-4");
    assert_eq!(a, b);
    use std::hash::{BuildHasher, RandomState};
    let r = RandomState::new();
    assert_eq!(r.hash_one(&a), r.hash_one(&b));
    assert_ne!(a, set("1,3"));
    assert_eq!(format!("{a:?}"), "Indices[1,3-4]");
}

#[test]
fn environment_values() {
    // (spec, SLURM_ARRAY_TASK_COUNT, _MIN, _MAX, _STEP)
    let cases = [
        ("0-15:4", 4, 0, 12, 4),
        ("1,3,5-7", 5, 1, 7, 1),
        ("0-99", 100, 0, 99, 1),
        ("0-2:2", 2, 0, 2, 2),
        ("7", 1, 7, 7, 1),
        ("1-2,10-30:10%2", 5, 1, 30, 10),
    ];
    for (input, count, min, max, step) in cases {
        let a = spec(input);
        assert_eq!(
            (a.task_count(), a.min(), a.max(), a.step()),
            (count, min, max, step),
            "{input}"
        );
    }
    let empty = ArraySpec {
        indices: Indices::new(),
        max_running: None,
    };
    assert_eq!(
        (empty.task_count(), empty.min(), empty.max(), empty.step()),
        (0, 0, 0, 1)
    );
}

#[test]
fn labels_as_slurm_shows_them() {
    assert_eq!(pending_label(123, &set("5-99"), Some(8)), "123_[5-99%8]");
    assert_eq!(pending_label(123, &set("5-99"), None), "123_[5-99]");
    assert_eq!(pending_label(123, &set("1-7:2"), None), "123_[1-7:2]");
    assert_eq!(pending_label(123, &set("7"), Some(8)), "123_7");
    assert_eq!(pending_label(123, &Indices::new(), None), "123");
    assert_eq!(task_label(123, 4), "123_4");
}

#[test]
fn job_references() {
    assert_eq!(parse_job_ref("123"), Ok(JobRef::Job(123)));
    assert_eq!(parse_job_ref("123_4"), Ok(JobRef::Task(123, 4)));
    assert_eq!(
        parse_job_ref("123_[1-3,7]"),
        Ok(JobRef::Tasks(123, set("1-3,7")))
    );
    assert_eq!(parse_job_ref("123_[7]"), Ok(JobRef::Tasks(123, set("7"))));
    for s in ["123", "123_4", "123_[1-3,7]", "5_[0-8:2]"] {
        let r: JobRef = s.parse().unwrap();
        assert_eq!(r.to_string(), s);
        assert_eq!(
            r.job(),
            s.split('_').next().unwrap().parse::<u64>().unwrap()
        );
    }
    use JobRefError as E;
    let cases: Vec<(&str, Is<E>)> = vec![
        ("", |e| *e == E::Empty),
        ("abc", |e| matches!(e, E::NotAJobId { .. })),
        (" 123", |e| matches!(e, E::NotAJobId { .. })),
        ("12a", |e| matches!(e, E::NotAJobId { .. })),
        ("_4", |e| matches!(e, E::NotAJobId { .. })),
        ("0", |e| matches!(e, E::ZeroJobId { .. })),
        ("0_1", |e| matches!(e, E::ZeroJobId { .. })),
        ("123_1-3", |e| matches!(e, E::NeedBrackets { .. })),
        ("123_1,2", |e| matches!(e, E::NeedBrackets { .. })),
        ("123_[1-3", |e| matches!(e, E::Unclosed { .. })),
        ("123_", |e| {
            matches!(
                e,
                E::BadTasks {
                    cause: ArrayError::Empty,
                    ..
                }
            )
        }),
        ("123_[]", |e| {
            matches!(
                e,
                E::BadTasks {
                    cause: ArrayError::Empty,
                    ..
                }
            )
        }),
        ("123_x", |e| {
            matches!(
                e,
                E::BadTasks {
                    cause: ArrayError::NotANumber { .. },
                    ..
                }
            )
        }),
        ("123_1000001", |e| {
            matches!(
                e,
                E::BadTasks {
                    cause: ArrayError::TooHigh { .. },
                    ..
                }
            )
        }),
        ("123_[1-3%2]", |e| matches!(e, E::BadTasks { .. })),
        ("123_[9-3]", |e| {
            matches!(
                e,
                E::BadTasks {
                    cause: ArrayError::Reversed { .. },
                    ..
                }
            )
        }),
    ];
    for (input, is) in cases {
        let e = parse_job_ref(input).expect_err(input);
        assert!(is(&e), "{input}: {e:?}");
        assert!(
            e.to_string().contains(&format!("{input:?}")) || input.is_empty(),
            "{input}: {e}"
        );
    }
}

#[test]
fn stored_as_strings() {
    let a = spec("1,3,5-7%2");
    let json = serde_json::to_string(&a).unwrap();
    assert_eq!(json, r#""1,3,5-7%2""#);
    assert_eq!(serde_json::from_str::<ArraySpec>(&json).unwrap(), a);
    let i = set("0-99999");
    assert_eq!(serde_json::to_string(&i).unwrap(), r#""0-99999""#);
    assert_eq!(
        serde_json::from_str::<Indices>(r#""""#).unwrap(),
        Indices::new()
    );
    assert_eq!(
        serde_json::from_str::<JobRef>(r#""5_[1-2]""#).unwrap(),
        JobRef::Tasks(5, set("1-2"))
    );
    let e = serde_json::from_str::<ArraySpec>(r#""9-3""#).unwrap_err();
    assert!(e.to_string().contains("runs backwards"), "{e}");
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u32),
    Remove(u32),
    Pop,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u32..120).prop_map(Op::Insert),
        2 => (0u32..120).prop_map(Op::Remove),
        1 => Just(Op::Pop),
    ]
}

fn piece() -> impl Strategy<Value = String> {
    (0u32..150, 0u32..40, 1u32..9, 0u32..3).prop_map(|(first, width, step, shape)| match shape {
        0 => first.to_string(),
        1 => format!("{first}-{}", first + width),
        _ => format!("{first}-{}:{step}", first + width),
    })
}

proptest! {
    /// Whatever is inserted, removed and popped, the set agrees with a
    /// BTreeSet, keeps its canonical layout and reads back from its text.
    #[test]
    fn indices_agree_with_a_btreeset(start in proptest::collection::vec(piece(), 0..4),
                                     ops in proptest::collection::vec(op(), 0..80)) {
        let mut s: Indices = start.join(",").parse().unwrap();
        let mut model: BTreeSet<u32> = s.iter().collect();
        for op in ops {
            match op {
                Op::Insert(i) => prop_assert_eq!(s.insert(i), model.insert(i)),
                Op::Remove(i) => prop_assert_eq!(s.remove(i), model.remove(&i)),
                Op::Pop => prop_assert_eq!(s.pop_first(), model.pop_first()),
            }
            let m: Vec<u32> = model.iter().copied().collect();
            prop_assert_eq!(members(&s), m.clone());
            prop_assert_eq!(s.len(), m.len() as u64);
            prop_assert_eq!((s.first(), s.last()), (m.first().copied(), m.last().copied()));
            for probe in 0..125 {
                prop_assert_eq!(s.contains(probe), model.contains(&probe));
            }
            prop_assert_eq!(s.ranges(), reference_layout(&m));
            let text = s.to_string();
            let back: Indices = text.parse().unwrap();
            prop_assert_eq!(&back, &s);
            prop_assert_eq!(back.to_string(), text);
        }
    }

    /// Any list of parts parses to the union of its parts, and the spec
    /// reads back from its text.
    #[test]
    fn specs_parse_to_the_union_of_their_parts(parts in proptest::collection::vec(piece(), 1..6),
                                               limit in proptest::option::of(1u32..20)) {
        let mut text = parts.join(",");
        if let Some(n) = limit {
            text.push_str(&format!("%{n}"));
        }
        let a = ArraySpec::parse(&text).unwrap();
        let mut model = BTreeSet::new();
        for p in &parts {
            model.extend(set(p).iter());
        }
        prop_assert_eq!(members(&a.indices), model.iter().copied().collect::<Vec<_>>());
        prop_assert_eq!(a.max_running, limit);
        prop_assert_eq!(ArraySpec::parse(&a.to_string()).unwrap(), a.clone());
        prop_assert_eq!(a.indices.ranges().len(), a.indices.range_count());
    }

    /// Arbitrary text never panics the parsers, and what they accept reads
    /// back the same.
    #[test]
    fn parsers_take_any_text(s in "[0-9,:%_\\[\\]x -]{0,16}") {
        if let Ok(a) = ArraySpec::parse(&s) {
            prop_assert_eq!(ArraySpec::parse(&a.to_string()).unwrap(), a);
        }
        if let Ok(r) = parse_job_ref(&s) {
            prop_assert_eq!(parse_job_ref(&r.to_string()).unwrap(), r);
        }
    }
}
