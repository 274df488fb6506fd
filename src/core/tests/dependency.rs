//! Job dependencies: the `--dependency` syntax and when a dependency holds.

use super::*;
use crate::core::dependency::{parse, Cond, Kind, Target, MAX_DEPENDENCY_TARGETS};
use proptest::prelude::*;
use std::collections::BTreeMap;

fn dep(s: &str) -> Dependency {
    parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn on(kind: Kind, target: Target) -> Cond {
    Cond::On { kind, target }
}

fn ok(id: JobId) -> Cond {
    on(Kind::AfterOk, Target::Job(id))
}

/// A `look` over a table of dependees; those not in it are purged.
fn table(rows: &[(Target, Progress)]) -> impl FnMut(&Target) -> Option<Progress> + '_ {
    move |t| rows.iter().find(|(r, _)| r == t).map(|(_, p)| *p)
}

#[test]
fn slurm_dependency_syntax() {
    let d = dep("afterok:12:13,afterany:14");
    assert!(!d.any);
    assert_eq!(
        d.conds,
        [ok(12), ok(13), on(Kind::AfterAny, Target::Job(14))]
    );
    let d = dep("afterok:12?afternotok:13");
    assert!(d.any);
    assert_eq!(d.conds, [ok(12), on(Kind::AfterNotOk, Target::Job(13))]);
    assert_eq!(dep("singleton").conds, [Cond::Singleton]);
    assert_eq!(
        dep("afterok:12_4").conds,
        [on(Kind::AfterOk, Target::Task(12, 4))]
    );
    assert_eq!(
        dep("after:5,singleton").conds,
        [on(Kind::After, Target::Job(5)), Cond::Singleton]
    );
    assert_eq!(dep("afterok:12:12").conds, [ok(12), ok(12)]);
    // (input, canonical text)
    let cases = [
        ("afterok:12:13,afterany:14", "afterok:12:13,afterany:14"),
        ("afterok:12?afternotok:13", "afterok:12?afternotok:13"),
        (
            "afterok:12:13?afterany:14",
            "afterok:12?afterok:13?afterany:14",
        ),
        ("12:13", "afterany:12:13"),
        ("12,13_2", "afterany:12:13_2"),
        ("12?13", "afterany:12?afterany:13"),
        ("AfterOK:12,SINGLETON", "afterok:12,singleton"),
        (
            "afterok:12,afterany:13,afterok:14",
            "afterok:12,afterany:13,afterok:14",
        ),
        ("afterok:1,afterok:2", "afterok:1:2"),
        ("singleton,singleton", "singleton,singleton"),
        ("after:1:2_3,afternotok:4", "after:1:2_3,afternotok:4"),
    ];
    for (input, shown) in cases {
        let d = dep(input);
        assert_eq!(d.to_string(), shown, "{input}");
        assert_eq!(dep(shown), d, "{input} round trip");
    }
    let max: Vec<String> = (1..=MAX_DEPENDENCY_TARGETS)
        .map(|i| i.to_string())
        .collect();
    assert_eq!(
        dep(&format!("afterok:{}", max.join(":"))).conds.len(),
        MAX_DEPENDENCY_TARGETS
    );
}

#[test]
fn each_bad_dependency_is_explained() {
    use DependencyError as E;
    let kinds = "after, afterany, afterok, afternotok, singleton";
    let too_many: Vec<String> = (1..=MAX_DEPENDENCY_TARGETS + 1)
        .map(|i| i.to_string())
        .collect();
    let too_many = format!("afterok:{}", too_many.join(":"));
    let cases: Vec<Case<'_, E>> = vec![
        ("", |e| *e == E::Empty, "empty"),
        (
            "afterok:1,,afterok:2",
            |e| matches!(e, E::EmptyPart { .. }),
            "empty part",
        ),
        (
            "afterok:1,",
            |e| matches!(e, E::EmptyPart { .. }),
            "empty part",
        ),
        (
            "?afterok:1",
            |e| matches!(e, E::EmptyPart { .. }),
            "empty part",
        ),
        (
            "afterok:1,afterany:2?afterok:3",
            |e| matches!(e, E::Mixed { .. }),
            "mixes",
        ),
        (
            "afterok:",
            |e| matches!(e, E::MissingTargets { .. }),
            "afterok:12",
        ),
        (
            "afterok",
            |e| matches!(e, E::MissingTargets { .. }),
            "names no job",
        ),
        (
            "afterok:1::2",
            |e| matches!(e, E::MissingTargets { .. }),
            "names no job",
        ),
        (
            "afterok:x",
            |e| {
                matches!(
                    e,
                    E::BadTarget {
                        cause: JobRefError::NotAJobId { .. },
                        ..
                    }
                )
            },
            "\"x\"",
        ),
        (
            "afterok:0",
            |e| {
                matches!(
                    e,
                    E::BadTarget {
                        cause: JobRefError::ZeroJobId { .. },
                        ..
                    }
                )
            },
            "start at 1",
        ),
        (
            "0",
            |e| {
                matches!(
                    e,
                    E::BadTarget {
                        cause: JobRefError::ZeroJobId { .. },
                        ..
                    }
                )
            },
            "start at 1",
        ),
        ("12x", |e| matches!(e, E::BadTarget { .. }), "\"12x\""),
        (
            "afterok:12_x",
            |e| matches!(e, E::BadTarget { .. }),
            "\"12_x\"",
        ),
        (
            "afterok:12_[1-3]",
            |e| matches!(e, E::TaskList { .. }),
            "one task (12_4)",
        ),
        (
            "after:12+5",
            |e| matches!(e, E::Delay { .. }),
            "\"after:12+5\"",
        ),
        (
            "afterok:12+5",
            |e| matches!(e, E::Delay { .. }),
            "not support",
        ),
        (
            "aftercorr:12",
            |e| matches!(e, E::Unsupported { .. }),
            kinds,
        ),
        (
            "afterburstbuffer:12",
            |e| matches!(e, E::Unsupported { .. }),
            "\"afterburstbuffer\"",
        ),
        (
            "expand:12",
            |e| matches!(e, E::Unsupported { .. }),
            "not supported",
        ),
        ("afterfoo:12", |e| matches!(e, E::UnknownKind { .. }), kinds),
        (":12", |e| matches!(e, E::UnknownKind { .. }), "\"\""),
        (
            "singleton:12",
            |e| matches!(e, E::SingletonTarget { .. }),
            "takes no job IDs",
        ),
        (
            "afterok: 12",
            |e| matches!(e, E::Whitespace { .. }),
            "white space",
        ),
        (
            &too_many,
            |e| matches!(e, E::TooManyTargets { count: 257 }),
            "at most 256",
        ),
    ];
    for (input, is, words) in cases {
        let e = parse(input).expect_err(input);
        assert!(is(&e), "{input}: {e:?}");
        assert!(e.to_string().contains(words), "{input}: {e}");
    }
}

#[test]
fn each_kind_on_one_job() {
    use Verdict::*;
    let p = |p| Some(p);
    // (kind, [pending, running, ok, not ok, purged])
    let table = [
        (Kind::After, [Wait, Met, Met, Met, Met]),
        (Kind::AfterAny, [Wait, Wait, Met, Met, Met]),
        (Kind::AfterOk, [Wait, Wait, Met, Never, Never]),
        (Kind::AfterNotOk, [Wait, Wait, Never, Met, Never]),
    ];
    let states = [
        p(Progress::PENDING),
        p(Progress::RUNNING),
        p(Progress::OK),
        p(Progress::NOT_OK),
        None,
    ];
    for (kind, verdicts) in table {
        for (state, want) in states.iter().zip(verdicts) {
            assert_eq!(kind.verdict(*state), want, "{kind} on {state:?}");
        }
    }
}

#[test]
fn each_kind_on_an_array() {
    use Verdict::*;
    let cases = [
        // Some tasks pending: only a failure decides early.
        (Progress::new(3, 1, 2, 0), [Wait, Wait, Wait, Wait]),
        (Progress::new(3, 1, 2, 1), [Wait, Wait, Never, Wait]),
        // All started, some still running.
        (Progress::new(0, 2, 5, 0), [Met, Wait, Wait, Wait]),
        (Progress::new(0, 2, 5, 1), [Met, Wait, Never, Wait]),
        // All ended.
        (Progress::new(0, 0, 9, 0), [Met, Met, Met, Never]),
        (Progress::new(0, 0, 8, 1), [Met, Met, Never, Met]),
        (Progress::new(0, 0, 0, 9), [Met, Met, Never, Met]),
        // An array with no tasks: ended, none failed.
        (Progress::default(), [Met, Met, Met, Never]),
    ];
    for (progress, verdicts) in cases {
        for (kind, want) in Kind::ALL.into_iter().zip(verdicts) {
            assert_eq!(kind.verdict(Some(progress)), want, "{kind} on {progress:?}");
        }
    }
    let tasks = [
        Progress::OK,
        Progress::RUNNING,
        Progress::PENDING,
        Progress::PENDING,
    ];
    assert_eq!(
        tasks.into_iter().sum::<Progress>(),
        Progress::new(2, 1, 1, 0)
    );
}

#[test]
fn conditions_combine_with_all_or_any() {
    use Verdict::*;
    let rows = [
        (Target::Job(1), Progress::OK),
        (Target::Job(2), Progress::RUNNING),
        (Target::Job(3), Progress::NOT_OK),
        (Target::Task(4, 7), Progress::OK),
    ];
    let v = |s: &str| dep(s).verdict(table(&rows), false);
    assert_eq!(v("afterok:1"), Met);
    assert_eq!(v("afterok:1:4_7"), Met);
    assert_eq!(v("afterok:1:2"), Wait);
    assert_eq!(v("afterok:1:2:3"), Never);
    assert_eq!(v("afterok:2?afterok:3"), Wait);
    assert_eq!(v("afterok:2?afterok:1"), Met);
    assert_eq!(v("afterok:3?afternotok:1"), Never);
    assert_eq!(v("afterok:3?afternotok:3"), Met);
    assert_eq!(v("afterany:99,after:2"), Met, "a purged dependee has ended");
    assert_eq!(
        v("afterok:99?afternotok:99"),
        Never,
        "how a purged dependee ended is unknown"
    );
    assert_eq!(v("afterok:4_8"), Never, "an unknown task is purged");
    // Singleton holds exactly when the caller says it is clear.
    let d = dep("afterok:1,singleton");
    assert_eq!(d.verdict(table(&rows), false), Wait);
    assert_eq!(d.verdict(table(&rows), true), Met);
    assert_eq!(dep("afterok:3?singleton").verdict(table(&rows), true), Met);
    assert_eq!(Dependency::default().verdict(table(&rows), false), Met);
}

#[test]
fn targets_singleton_and_what_is_unmet() {
    let d = dep("afterok:12:13_1,afterany:12,singleton,after:5");
    assert_eq!(d.targets().collect::<Vec<_>>(), [5, 12, 13]);
    assert!(d.has_singleton());
    assert!(!dep("afterok:1").has_singleton());
    let rows = [
        (Target::Job(12), Progress::OK),
        (Target::Job(5), Progress::PENDING),
    ];
    assert_eq!(
        d.unmet_display(table(&rows), false),
        "afterok:13_1(failed),singleton(unfulfilled),after:5(unfulfilled)"
    );
    let d = dep("afterok:12?afterok:5");
    assert_eq!(d.unmet_display(table(&rows), false), "");
    assert_eq!(
        dep("afterok:5?afternotok:12").unmet_display(table(&rows), false),
        "afterok:5(unfulfilled)?afternotok:12(failed)"
    );
}

#[test]
fn stored_as_strings() {
    let d = dep("afterok:12:13,afterany:14_2");
    let json = serde_json::to_string(&d).unwrap();
    assert_eq!(json, r#""afterok:12:13,afterany:14_2""#);
    assert_eq!(serde_json::from_str::<Dependency>(&json).unwrap(), d);
    assert_eq!(
        serde_json::to_string(&Kind::AfterNotOk).unwrap(),
        r#""afternotok""#
    );
    assert_eq!(
        serde_json::from_str::<Kind>(r#""afterok""#).unwrap(),
        Kind::AfterOk
    );
    assert_eq!(
        serde_json::to_string(&Target::Task(14, 2)).unwrap(),
        r#""14_2""#
    );
    assert_eq!(
        serde_json::from_str::<Target>(r#""14""#).unwrap(),
        Target::Job(14)
    );
    assert_eq!(
        serde_json::from_str::<Cond>(r#""singleton""#).unwrap(),
        Cond::Singleton
    );
    assert_eq!(serde_json::to_string(&ok(3)).unwrap(), r#""afterok:3""#);
    let e = serde_json::from_str::<Cond>(r#""afterok:1:2""#).unwrap_err();
    assert!(
        e.to_string().contains("not one dependency condition"),
        "{e}"
    );
    assert!(serde_json::from_str::<Kind>(r#""aftersome""#).is_err());
    assert!(serde_json::from_str::<Dependency>(r#""afterok:0""#).is_err());
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        (1u64..6).prop_map(Target::Job),
        (1u64..6, 0u32..4).prop_map(|(j, i)| Target::Task(j, i)),
    ]
}

fn cond() -> impl Strategy<Value = Cond> {
    prop_oneof![
        8 => (0usize..4, target()).prop_map(|(k, target)| on(Kind::ALL[k], target)),
        1 => Just(Cond::Singleton),
    ]
}

fn dependency() -> impl Strategy<Value = Dependency> {
    (proptest::collection::vec(cond(), 1..8), any::<bool>()).prop_map(|(conds, any)| Dependency {
        any: any && conds.len() > 1,
        conds,
    })
}

fn progress() -> impl Strategy<Value = Option<Progress>> {
    proptest::option::weighted(
        0.85,
        (0u32..3, 0u32..3, 0u32..3, 0u32..2).prop_map(|(p, r, o, n)| Progress::new(p, r, o, n)),
    )
}

proptest! {
    /// Every dependency reads back from its text.
    #[test]
    fn text_round_trips(d in dependency()) {
        let text = d.to_string();
        prop_assert_eq!(parse(&text).unwrap(), d.clone());
        prop_assert_eq!(text.parse::<Dependency>().unwrap().to_string(), text);
    }

    /// With `,`, the job never starts while an afterok or afterany dependee
    /// still has tasks pending or running, nor while a singleton is held;
    /// with `?`, it starts only if one condition alone would let it.
    #[test]
    fn met_only_when_every_condition_allows(
        d in dependency(),
        states in proptest::collection::btree_map(target(), progress(), 0..12),
        clear in any::<bool>(),
    ) {
        let states: BTreeMap<Target, Option<Progress>> = states;
        let look = |t: &Target| states.get(t).copied().flatten();
        let verdict = d.verdict(look, clear);
        let alone = |c: &Cond| Dependency { any: false, conds: vec![*c] }.verdict(look, clear);
        if verdict == Verdict::Met && !d.any {
            for c in &d.conds {
                match c {
                    Cond::On { kind: Kind::AfterOk | Kind::AfterAny, target } => {
                        prop_assert!(look(target).is_none_or(|p| p.ended()), "{} met with {:?}", d, look(target));
                    }
                    Cond::Singleton => prop_assert!(clear),
                    _ => {}
                }
                prop_assert_eq!(alone(c), Verdict::Met);
            }
        }
        if d.any {
            let met = d.conds.iter().any(|c| alone(c) == Verdict::Met);
            prop_assert_eq!(verdict == Verdict::Met, met);
        }
        if verdict == Verdict::Never {
            prop_assert!(d.conds.iter().any(|c| alone(c) == Verdict::Never));
        }
    }

    /// Arbitrary text never panics the parser, and what it accepts reads
    /// back the same.
    #[test]
    fn parser_takes_any_text(s in "(after|afterok|singleton|[0-9]|[,?:_+x]){0,10}") {
        if let Ok(d) = parse(&s) {
            prop_assert_eq!(parse(&d.to_string()).unwrap(), d);
        }
    }
}
